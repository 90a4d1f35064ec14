// Session: one sequence's state over time — the token history, the model caches that go with it
// and the logits after its last token.
//
// A session grows by append() (prefill a chunk, or decode one token); it never shrinks (the
// sliding-window ring and the compressor state cannot be rolled back). Copies are cheap snapshots:
// the compressed KV pages are shared copy-on-write (model/kv_cache.h), so the prefix cache
// (runtime/prefix_cache.h) keeps copies taken at chunk and turn boundaries, and session files
// (runtime/session_file.h) save and restore one exactly.
//
// Prefill modes (ARCHITECTURE.md "CED prefill"): kExact runs every prompt token through every
// layer (what the reference computes); kReplay runs the encoder over every token and the decoder
// over the last window_size tokens of the append (official serving's bounded replay; the decoder's
// view of those tail tokens lacks the window positions before them).
// Chunks are aligned to absolute positions (multiples of AppendOptions::chunk), so a run restored
// from a snapshot at a chunk boundary computes exactly the same chunks as a run from scratch.
// Thread safety: one thread at a time per session; sessions share one Model, which runs one
// forward at a time. A const Session may be copied while no thread writes it.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <span>
#include <string_view>
#include <vector>

#include "core/progress.h"
#include "core/status.h"
#include "model/model.h"

namespace strata::runtime {

enum class PrefillMode { kExact, kReplay };
// "exact" / "replay".
std::string_view prefill_mode_name(PrefillMode m);
// Parses "exact" or "replay" (kInvalidArgument naming the accepted values otherwise).
[[nodiscard]] Result<PrefillMode> parse_prefill_mode(std::string_view s);

class Session;

struct AppendOptions {
  // Tokens per forward (bounds activation memory). Chunk boundaries sit at absolute positions that
  // are multiples of `chunk`. In replay mode the last chunk is widened to hold at least
  // window_size tokens, so the decoder tail lies inside it.
  int64_t chunk = 2048;
  PrefillMode mode = PrefillMode::kExact;
  // May be null; when it becomes true between chunks the append returns kCancelled with the
  // session valid at a chunk boundary (the tokens appended so far stay).
  const std::atomic<bool>* cancel = nullptr;
  // Called after each chunk that ends at a multiple of `chunk` and is not the append's last (the
  // prefix cache snapshots there). May be empty.
  std::function<void(const Session&)> on_boundary;
  // Progress of this append ("prefill", tokens done of the append's total) after each chunk, and a
  // final event with `finished` set. May be empty (core/progress.h).
  ProgressFn progress;
  // The forward's scratch (model/activations.h; not owned). Null: a temporary one per append, which
  // rebuilds the RoPE tables, so the engine loop always passes its own.
  model::Activations* activations = nullptr;
  // kDecode: the rows take the decode arithmetic (model/forward_request.h), as the generation loop's
  // sampled tokens do; kPrompt: the prefill arithmetic.
  model::RowKind kind = model::RowKind::kPrompt;

  [[nodiscard]] Status validate() const;
};

class Session {
 public:
  explicit Session(model::Model& m) : m_(&m), cache_(m.new_cache()) {}
  // A session rebuilt from saved parts (session files). REQUIRES the parts to come from `m`'s
  // config (runtime/session_file.cpp checks every size before it calls this).
  Session(model::Model& m, std::vector<int32_t> tokens, model::KvCache cache, std::vector<float> last_logits,
          bool replayed);

  // Runs `tokens` through the model after the current history (exact prefill) in chunks of
  // `chunk` tokens and, if `last_logits` is non-null, writes the logits of the last token
  // (vocab_size floats). Same as the overload below with AppendOptions{chunk, kExact, cancel}.
  [[nodiscard]] Status append(std::span<const int32_t> tokens, float* last_logits, int64_t chunk = 2048,
                              const std::atomic<bool>* cancel = nullptr);
  // Runs `tokens` after the current history with `o`; afterwards last_logits() holds the logits of
  // the last token, also copied to `last_logits` when non-null.
  // Errors: bad options, token ids out of range, a context beyond the model's (nothing changed);
  // kCancelled (see AppendOptions::cancel); a model failure (the session must then be discarded:
  // valid() turns false).
  [[nodiscard]] Status append(std::span<const int32_t> tokens, const AppendOptions& o, float* last_logits = nullptr);

  const std::vector<int32_t>& tokens() const { return tokens_; }
  int64_t n_past() const { return cache_.n_past; }
  bool valid() const { return valid_; }
  // Logits after the last token ([vocab_size] f32), empty when the last append computed none (a
  // cancelled append, or a fresh session).
  std::span<const float> last_logits() const { return logits_; }
  // True once any append ran a bounded replay (the caches then differ from an exact prefill's).
  bool replayed() const { return replayed_; }
  model::Model& model() const { return *m_; }
  model::KvCache& cache() { return cache_; }
  const model::KvCache& cache() const { return cache_; }

 private:
  model::Model* m_;
  model::KvCache cache_;
  std::vector<int32_t> tokens_;
  std::vector<float> logits_;
  bool replayed_ = false;
  bool valid_ = true;
};

}  // namespace strata::runtime
