// ServerOptions: everything `strata serve` can set (cli/cmd_serve.cpp parses the flags; the server
// floor never reads flags or the environment). Defaults are chat-and-api.md's.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/status.h"
#include "runtime/speculation.h"

namespace strata::server {

// Which reasoning-effort names map to which N (chat-and-api.md §3).
enum class EffortTable {
  kOfficial,  // minimal/low 50, medium/high/xhigh 75, max/ultra 100; absent 75 (DECISION §3)
  kVllm,      // low 25, high 50, xhigh 75, max 100; minimal/medium/ultra rejected; absent 50
};

// The response field that carries reasoning (chat-and-api.md §6.2).
enum class ReasoningField { kReasoningContent, kReasoning, kBoth };

struct ServerOptions {
  std::string host = "127.0.0.1";   // --host; loopback unless asked
  int port = 8000;                  // --port; 0 = pick a free port (tests)
  std::string api_key;              // --api-key; "" = no authentication
  int parallel = 1;                 // --parallel: sequences decoded at once in one batch (slots, each its own KV cache)
  int64_t ctx = 0;                  // --ctx: context per slot in tokens; 0 = the model's max_position_embeddings
  int max_queue = 64;               // --max-queue: requests waiting for a slot before 503 overloaded
  int64_t body_limit_bytes = 64ll << 20;  // --body-limit: larger request bodies get 413
  std::string model_id = "deepseek-v4.1-flash";  // served model id
  bool any_model = false;           // --any-model: accept every `model` value
  bool default_thinking = true;     // thinking when the request does not say (§3 rule 5)
  int default_effort = 0;           // --default-effort: N when absent; 0 = the table's default
  EffortTable effort_table = EffortTable::kOfficial;            // --effort-table official|vllm
  ReasoningField reasoning_field = ReasoningField::kReasoningContent;  // --reasoning-field
  double keep_alive_s = 10.0;       // --sse-keepalive: SSE comment interval while queued or prefilling
  int64_t prefill_chunk = 512;      // --prefill-chunk: prompt tokens per chunk (cut at absolute multiples)
  // --batch-tokens: tokens one engine step may run, every slot's decode token and prompt chunks
  // together (runtime::EngineOptions::batch_tokens). Larger: prompts finish in fewer steps, but each
  // step, so every stream's inter-token latency, takes longer. Default 512: one default chunk beside
  // the decode tokens (a prompt chunk always joins a step even past the budget, so 1 still works).
  int64_t batch_tokens = 512;
  int64_t prefix_cache_mib = 1024;  // --prefix-cache-mib: snapshots of earlier turns / prompts; 0 = off
  // --slot-undo: tokens a slot's session can be cut back (Session::set_undo_depth) so that a request
  // changing the tail of the slot's history (a regenerated answer, an edited last message) reuses
  // the rest; -1 = the model's window_size (the most a ring allows), 0 = off. Memory per slot: depth
  // x (n_layers window rows + 2 x head_dim f32 per compressing KV source) (model/kv_undo.h), and
  // each decode step copies one such token's worth before its forward.
  int64_t slot_undo = -1;
  // --spec / --spec-max / --spec-min-conf / --spec-guard (cli/spec_flags.h): every request's
  // sequence; it speculates only while it is the only active one (runtime/engine.h).
  runtime::SpecOptions spec;
  // HTTP limits per connection (server/http_transport.h). Each bounds what one client can hold.
  int max_connections = 512;        // --max-connections: open connections; more get 503 at once
  int64_t header_limit_kib = 64;    // --header-limit-kib: request line + headers; more gets 431
  int max_header_fields = 100;      // --max-header-fields: more header fields get 431
  double header_timeout_s = 10.0;   // --header-timeout-s: the whole head, however slowly sent (408)
  double keepalive_timeout_s = 5.0; // --keepalive-timeout-s: idle time between requests before close
  double body_timeout_s = 60.0;     // --body-timeout-s: the whole body once the head is read (408)
  double write_timeout_s = 30.0;    // --write-timeout-s: one response, or one write of a stream
  int64_t body_memory_mib = 1024;   // --body-memory-mib: request bodies being received, all connections
                                    // together (at least --body-limit); more get 503 before being read
  int http_threads = 0;             // 0 = parallel + max_queue + 8 (every waiting stream holds a thread)
  // TEST ONLY (--test-scripted-output): a request may carry "strata_test_output": TEXT, whose tokens
  // are emitted instead of sampled ones (then EOS), so tool calls and reasoning can be driven end to
  // end with random weights. Never honoured without this flag.
  bool test_scripted_output = false;

  // Errors name the flag: port outside 0..65535, parallel < 1, negative ctx or queue, body limit
  // < 1 KiB, effort outside 0..100, keep-alive <= 0, prefill chunk or batch tokens < 1, HTTP limits out of range.
  [[nodiscard]] Status validate() const;
};

}  // namespace strata::server
