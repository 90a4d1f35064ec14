// Session: one sequence's state over time — the token history, the model caches that go with it
// and the logits after its last token.
//
// A session grows by append() (prefill a chunk, or decode tokens) and can be cut back by rewind()
// to any length its undo log reaches (set_undo_depth; model/kv_undo.h): speculative decoding runs
// drafted tokens and rewinds the rejected ones. Copies are cheap snapshots:
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
// A session also takes part in a batched forward (runtime/engine.h): begin_forward() builds its
// model::ForwardEntry, end_forward() settles it after the one Model::forward of the step.
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
#include "model/kv_undo.h"
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

  // ---- taking part in a batch (runtime/engine.h) ----------------------------------------------
  // Input checks, once for every caller (issue 14 item 1): `tokens` non-empty, every id in
  // [0, vocab_size), and n_past() + tokens.size() <= context_limit (0 = max_position_embeddings;
  // larger values are clipped to it). Errors: kInvalidArgument (an unusable session, no tokens, an
  // id out of range, naming it and its position), kResourceExhausted (the context).
  [[nodiscard]] Status check_append(std::span<const int32_t> tokens, int64_t context_limit = 0) const;
  // Builds the forward entry that runs `tokens` after the history (REQUIRES check_append passed and
  // no other entry of this session is pending). With `want_logits` the last row's logits go to this
  // session's buffer (last_logits() after end_forward); otherwise the last logits are dropped.
  // `decoder_tail` as model::ForwardEntry (-1 = exact). `tokens` must outlive end_forward().
  model::ForwardEntry begin_forward(std::span<const int32_t> tokens, model::RowKind kind, bool want_logits,
                                    int64_t decoder_tail = -1);
  // Builds a verification entry (runtime/engine.h speculation): `tokens` as RowKind::kDecode rows
  // (the arithmetic of plain decode steps, so every row's logits and cache bytes equal those of
  // decoding the tokens one by one), logits for every row into row_logits [n, vocab_size] f32
  // (caller-owned, must outlive end_forward), DSpark features of every row into `features` when
  // non-null. last_logits() is empty afterwards until rewind() supplies a row. REQUIRES as
  // begin_forward.
  model::ForwardEntry begin_verify(std::span<const int32_t> tokens, float* row_logits, std::vector<float>* features);
  // Settles the entry built by begin_forward after Model::forward returned `s`: on success the
  // tokens join the history; on failure the logits are dropped and the session turns invalid when
  // its cache moved or the error was a storage one (the forward may have written part of it:
  // model/model.h Model::forward), so every session of a failed batch is settled by this one call.
  void end_forward(const Status& s);

  // ---- rewind (issue 17 item 4) ----------------------------------------------------------------
  // Keeps undo records (model/kv_undo.h) of the forwards that follow so that rewind() reaches at
  // least `depth` tokens back; 0 (the default) records nothing and drops the records. Costs per
  // recorded token n_layers ring rows + 2 x head_dim f32 per compressing KV source, copied before
  // each forward of at most window_size tokens (a longer one clears the log).
  void set_undo_depth(int64_t depth) { undo_.set_depth(depth); }
  // The depth set last (0: nothing recorded). The engine raises it for speculation and puts this
  // back afterwards, so a depth kept by the session's owner (the server's slots) survives.
  int64_t undo_depth() const { return undo_.depth(); }
  // The shortest length rewind() can reach now (n_past() when nothing is recorded).
  int64_t rewind_floor() const { return undo_.floor(cache_.n_past); }
  // Cuts the session back to its first `n` tokens: tokens, caches (window rings, compressor partial
  // groups and frontiers, compressed KV, index keys), Engram history and position become byte for
  // byte what the session held when it had n tokens, so what follows computes exactly what it
  // would have then. The last logits: `logits` ([vocab_size] f32, the logits after token n - 1,
  // e.g. a verification row) when given, else absent (last_logits() empty: append a token before
  // sampling). n == n_past() with no logits changes nothing. Errors (nothing changed): an entry
  // pending, n > n_past() or a wrong logits size (kInvalidArgument), n < rewind_floor()
  // (kNotSupported: the overwritten ring rows are gone; re-prefill tokens()[0, n) instead).
  [[nodiscard]] Status rewind(int64_t n, std::span<const float> logits = {});

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
  // The entry between begin_forward and end_forward.
  std::span<const int32_t> pending_;
  int64_t pending_before_ = -1;  // n_past when it began; -1 = none pending
  bool pending_replays_ = false;
  model::KvUndoLog undo_;  // rewind records (depth 0: none)
};

// Where the prefill chunk that starts at absolute position `pos` ends, for an append of the
// positions [start, end) cut at absolute multiples of `chunk` (runtime/session.h file comment). In
// replay mode the last chunk is widened to hold at least min(end - start, window_size) tokens (the
// decoder tail must lie inside it). REQUIRES start <= pos < end, chunk > 0.
int64_t prefill_chunk_end(int64_t pos, int64_t start, int64_t end, int64_t chunk, PrefillMode mode, int64_t window_size);

}  // namespace strata::runtime
