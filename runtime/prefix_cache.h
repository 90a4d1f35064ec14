// PrefixCache: snapshots of sessions, so a request that starts with tokens some session already ran
// reuses that work instead of recomputing it.
//
// A snapshot is resumed only at its own length: snapshots are taken at chunk boundaries of a
// prefill (AppendOptions::on_boundary) and at the end of each append (a turn boundary; the server
// inserts live sessions there). They carry no undo records (Session::rewind; insert drops them), so
// one longer than the common prefix with a request is passed over: records reaching window_size
// tokens back would cost about as much as the snapshot's own rings again (n_layers window rows plus
// compressor slots per token, model/kv_undo.h), for every snapshot. The changed-tail case (a
// regenerated answer, an edited last message) is the slot's live session, which keeps such a log
// and is rewound to the common prefix (server/scheduler.h select_slot); snapshots cover the rest:
// a conversation whose slot another one took, resumed at a turn or chunk boundary or where the
// last assistant prefix began. A snapshot is a Session copy: rings, compressor states, the Engram
// history, the last logits and the compressed-KV pages, which it shares with the session and with
// other snapshots of the same history (model/kv_cache.h PagedRows), so ten snapshots of one growing
// conversation cost about one conversation of pages plus ten rings.
//
// Lookup returns the longest snapshot whose tokens are a prefix of the request and whose prefill
// mode matches (an exact request never resumes a replayed state). A snapshot that covers the whole
// request is used only when it holds last-token logits. Memory: the bytes of all snapshots (each
// shared page once) stay within `budget_bytes`; the least recently used snapshots go first.
//
// Exactness: a resumed session computes the remaining tokens with the same code as a cold one, and
// a prompt row's bits do not depend on how the prompt is cut into chunks (prompt rows always take
// the prefill GEMM, at any row count: model/forward_request.h, kernels::RowPath), so its logits
// equal the cold run's bit for bit from any snapshot, however few tokens remain (tested).
// Thread safety: all methods are safe to call concurrently (one mutex).
#pragma once

#include <cstdint>
#include <list>
#include <mutex>
#include <span>
#include <unordered_map>
#include <vector>

#include "core/status.h"
#include "runtime/session.h"

namespace strata::runtime {

struct PrefixCacheOptions {
  // Bytes the snapshots may hold (pages counted once however many snapshots share them, plus each
  // snapshot's rings, compressor states, logits and tokens). Default 1 GiB: ~1.2M tokens of global
  // KV at the full config. 0 disables the cache.
  uint64_t budget_bytes = 1ull << 30;
  // A snapshot that leaves fewer than this many tokens to compute (but more than 0) is passed over
  // for a shorter one. 0: none is (a remainder's bits do not depend on its length, see above); kept
  // for kernels that would make them depend on it.
  int64_t min_recompute = 0;

  [[nodiscard]] Status validate() const;
};

struct PrefixCacheStats {
  int64_t lookups = 0, hits = 0;
  int64_t tokens_reused = 0;  // prompt tokens not recomputed thanks to hits
  int64_t inserts = 0, evictions = 0;
  int64_t entries = 0;
  uint64_t bytes = 0;
};

class PrefixCache {
 public:
  explicit PrefixCache(PrefixCacheOptions o = {}) : o_(o) {}

  // Stores a snapshot of `s` at its current length (replacing one with the same tokens and mode).
  // An invalid or empty session is ignored; so is one larger than the whole budget.
  void insert(const Session& s);

  // Finds the longest usable snapshot for `tokens` with prefill mode `mode` (see the file comment)
  // and, if there is one, replaces `*s` with a copy of it. Returns the number of tokens it covers
  // (0: none, *s untouched). Only snapshots longer than `longer_than` tokens count (a caller that
  // already holds a live session covering that many passes it; a miss leaves *s untouched).
  // REQUIRES s->model() is the model the snapshots were taken with.
  int64_t restore(std::span<const int32_t> tokens, PrefillMode mode, Session* s, int64_t longer_than = 0);

  PrefixCacheStats stats() const;
  const PrefixCacheOptions& options() const { return o_; }

 private:
  struct Entry {
    Session snap;
    uint64_t hash = 0;      // of snap.tokens()
    uint64_t own_bytes = 0; // rings, states, logits, tokens
    uint64_t tick = 0;      // last use
  };
  void charge(const Session& s, int sign);   // page references and bytes
  void evict_to(uint64_t budget);
  void erase(std::list<Entry>::iterator it);

  PrefixCacheOptions o_;
  mutable std::mutex mu_;
  std::list<Entry> entries_;
  std::unordered_map<const uint8_t*, std::pair<int64_t, uint64_t>> pages_;  // page -> (refs, bytes)
  uint64_t bytes_ = 0;
  uint64_t tick_ = 0;
  PrefixCacheStats stats_;
};

// Prefills `tokens` into the empty session `*s`: resumes from the longest cached prefix, appends the
// rest with `o` (snapshots at its chunk boundaries and at the end go into `cache`), so that
// s->last_logits() hold the last token's logits. `*reused` (may be null) gets the tokens taken from
// the cache. Errors: a non-empty session (kInvalidArgument); those of Session::append.
[[nodiscard]] Status prefill_with_cache(PrefixCache& cache, Session* s, std::span<const int32_t> tokens,
                                        const AppendOptions& o, int64_t* reused = nullptr);

}  // namespace strata::runtime
