// Generator: one sequence through the generation loop (runtime/engine.h), for `strata run` and
// tests: a thin wrapper that owns a Session and an Engine, adds the sequence and steps until it ends.
// Sampling, stop ids, limits, cancel and timing are the engine's (issue 14 item 1: one loop).
//
// The caller owns tokenisation and text (runtime never includes the tokenizer): it passes token
// ids in and receives each new id through a callback that can stop generation. Prefill runs the
// prompt in chunks of `prefill_chunk` tokens (exact CED prefill by default, what the reference
// computes; --prefill replay runs the bounded replay); decode runs one token per forward through
// the incremental cache path.
// Thread safety: one Generator per sequence; the Model is used one forward at a time.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <vector>

#include "core/status.h"
#include "model/model.h"
#include "runtime/engine.h"
#include "runtime/sampler.h"
#include "runtime/session.h"

namespace strata::runtime {

struct GenerateOptions {
  int max_new_tokens = 256;          // -n
  std::vector<int32_t> stop_ids;     // generation ends after emitting one of these (EOS)
  int64_t max_context = 0;           // 0 = the model's max_position_embeddings
  int64_t prefill_chunk = 2048;      // tokens per prefill forward (bounds activation memory)
  PrefillMode prefill_mode = PrefillMode::kExact;  // --prefill exact|replay (runtime/session.h)
  // Feed the last generated token into the session before returning, so that it ends with the
  // logits for the next one (what a saved session continues from). Costs one decode forward.
  bool consume_last = false;
  SamplerOptions sampler;
  ProgressFn prefill_progress;       // prompt progress per chunk (AppendOptions::progress); may be empty
  // Cancel hook (may be null; not owned): once it reads true, generation stops after the token being
  // emitted, as if -n were reached (consume_last still applies, so the session can be saved), and
  // stats->cancelled is set; during prefill it stops at the next chunk boundary (kCancelled).
  // `strata run` points it at its SIGINT flag (issue #13 item 10).
  const std::atomic<bool>* cancel = nullptr;
  SpecOptions spec;                  // speculative decoding (runtime/speculation.h); default none
  std::shared_ptr<TokenConstraint> constraint;  // constrained decoding (SequenceOptions::constraint); null = none

  [[nodiscard]] Status validate() const;
};

struct GenerateStats {
  int64_t prompt_tokens = 0;
  int64_t prefilled_tokens = 0;  // of prompt_tokens, those prefilled (fewer when cancelled during prefill)
  double prefill_s = 0;          // the prefilled tokens' time
  int64_t generated_tokens = 0;
  double decode_s = 0;
  bool stopped_by_eos = false;
  bool stopped_by_context = false;  // the context limit ended generation before max_new_tokens
  bool cancelled = false;           // GenerateOptions::cancel ended generation (or prefill)
  SpecStats spec;                   // what speculation did (spec.active false: it did not run)
  double prefill_tok_per_s() const { return prefill_s > 0 ? prefilled_tokens / prefill_s : 0; }
  // Decode rate over the decode forwards (the first generated token comes from prefill's logits).
  double decode_tok_per_s() const { return decode_s > 0 ? (generated_tokens > 1 ? generated_tokens - 1 : 0) / decode_s : 0; }
};

// Called with each generated token; return false to stop.
using TokenCallback = std::function<bool(int32_t)>;

class Generator {
 public:
  explicit Generator(model::Model& m);

  // Runs the prompt and generates until max_new_tokens, a stop id, the callback returning false, or
  // the context limit (stats->stopped_by_context). An empty prompt continues a session that holds
  // last-token logits (one restored from a file: session() = load_session(...)). Errors, before
  // any work: empty prompt on a session without logits (kInvalidArgument), a prompt that alone
  // exceeds the context limit (kResourceExhausted); then model errors; kCancelled when `cancel` fired
  // during prefill (the session then ends at a chunk boundary without logits; *stats is filled).
  [[nodiscard]] Status generate(std::span<const int32_t> prompt, const GenerateOptions& opt, const TokenCallback& on_token,
                                GenerateStats* stats);

  Session& session() { return session_; }
  // The forward scratch this generator's appends use (its profile counts their time).
  model::Activations& activations() { return engine_.activations(); }
  model::KvCache& cache() { return session_.cache(); }

 private:
  Session session_;
  Engine engine_;
};

}  // namespace strata::runtime
