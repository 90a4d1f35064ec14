// KvUndoLog: what a KvCache's recent forwards overwrote, so the cache can be cut back (rewound) to
// an earlier length — the rollback of rejected speculative drafts (issue 17 item 4).
//
// Most of a KvCache only grows and is cut by truncation: compressed KV and index keys (rows of the
// groups completed by position m: m / ratio), the position, the compressor frontier. Two parts are
// overwritten in place and need the bytes they held:
//   - the sliding-window ring (slot = pos % window): a forward of n <= window tokens at s writes
//     slots (s..s+n-1) % window, replacing positions s - window ..;
//   - the compressor's partial group at KV sources with ratio > 1 (slot = pos % ratio, f32).
// record() saves the ring slots before a forward (Model::forward calls it for an entry whose
// ForwardEntry::undo is set); the compressor saves each partial-group slot right before it
// overwrites it (save_compressor: a forward of more than ratio tokens writes a slot several times,
// and every write must be undoable). rewind() restores them newest first, so
// the cache holds what it held when it had m tokens, byte for byte (ring rows and positions,
// compressor states, stored rows). The Engram history is a pure function of the last
// max_ngram - 1 tokens, so the caller rebuilds it (Model::engram_history_of).
//
// A forward of more than window_size tokens writes only its newest window positions, so the ring
// at an earlier length inside it is gone: record() then drops every record (the floor moves to the
// forward's end). The log keeps the newest records covering at least `depth` positions.
// Memory: per recorded token, n_layers window rows (window_row_bytes) + 2 x head_dim f32 per
// compressing KV source.
// Thread safety: one writer, as the KvCache it logs.
#pragma once

#include <cstdint>
#include <deque>
#include <vector>

#include "core/status.h"
#include "model/config.h"
#include "model/kv_cache.h"

namespace strata::model {

class KvUndoLog {
 public:
  // depth: the positions rewind() must reach back at least (0: record nothing).
  explicit KvUndoLog(int64_t depth = 0) : depth_(depth) {}

  int64_t depth() const { return depth_; }
  // Changes the depth; 0 drops every record.
  void set_depth(int64_t depth);

  // Starts the record of a forward of `n` tokens at cache.n_past: saves the ring slots it will
  // overwrite. Called by Model::forward after its checks, before anything changes. A no-op at
  // depth 0. REQUIRES n >= 1 and `cache` shaped for `c`.
  void record(const ModelConfig& c, const KvCache& cache, int64_t n);
  // Saves the partial-group slot of `layer` (a KV source with ratio > 1) that position `pos` of the
  // recorded forward is about to overwrite (model/attention.cpp compress_rows). A no-op when the
  // newest record does not hold `pos` (depth 0, or a forward too long to record).
  void save_compressor(int layer, int64_t pos, const LayerKvCache& lc);
  // Drops every record.
  void clear() { records_.clear(); }

  // The smallest length rewind() can reach for a cache now holding `n_past` tokens.
  int64_t floor(int64_t n_past) const { return records_.empty() ? n_past : records_.front().start; }

  // Cuts `cache` back to `m` tokens: restores the ring slots and compressor states written at
  // positions >= m, truncates compressed KV and index keys to the groups complete at m, sets
  // comp_pos and n_past. The Engram history is left to the caller. Errors (nothing changed):
  // m > cache.n_past (kInvalidArgument), m below floor() (kNotSupported naming the floor: the overwritten bytes are gone).
  [[nodiscard]] Status rewind(const ModelConfig& c, KvCache& cache, int64_t m);

 private:
  // One forward's overwritten slots, in position order start .. start+n-1.
  struct Record {
    int64_t start = 0, n = 0;           // positions start .. start+n-1 still undoable
    int64_t stride = 0;                 // rows per layer in the buffers (n when recorded)
    std::vector<uint8_t> ring;          // [n_layers][stride] window rows as they were before
    std::vector<int64_t> ring_pos;      // [n_layers][stride] positions those slots held
    std::vector<float> kv_state;        // [n_comp][stride][head_dim] compressor kv slots before
    std::vector<float> score_state;     // [n_comp][stride][head_dim]
  };
  int64_t depth_ = 0;
  int64_t head_dim_ = 0;
  std::vector<int> comp_layers_;  // KV sources with compress ratio > 1, in order
  std::vector<int> comp_index_;   // [n_layers] index into comp_layers_, -1 = none
  std::vector<int> comp_ratio_;   // [n_comp] their ratios
  std::deque<Record> records_;  // oldest first, contiguous positions
};

}  // namespace strata::model
