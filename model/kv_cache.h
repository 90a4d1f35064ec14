// KvCache: everything one sequence carries from token to token.
//
// Per layer: the sliding-window ring of KV (slot = pos % window_size), and at KV source layers the
// compressed KV (one entry per completed group of compress_ratio tokens), the index keys (when the
// layer owns an indexer) and the compressor's partial-group state. The values are stored as f32
// holding exactly what the reference's caches hold: the window KV fake-quantised to E4M3 (ue8m0 per
// 32), compressed KV to E2M1 with an E4M3 scale per 16, index keys to E2M1 with ue8m0 per 32.
// TODO(#4): store the real FP8/FP4 bytes (890 B/token at full size) instead of f32.
// Plus the Engram history (compressed ids of the last max_ngram-1 tokens) and the position.
// Source: ARCHITECTURE.md §Attention "Caches"; model.py Attention / Compressor / Indexer buffers.
// Thread safety: one sequence, one thread at a time.
#pragma once

#include <cstdint>
#include <vector>

#include "model/config.h"
#include "model/engram_hash.h"

namespace strata::model {

struct LayerKvCache {
  std::vector<float> window;       // [window_size, head_dim] ring, E4M3-rounded post-RoPE KV
  std::vector<float> compressed;   // [n_groups, head_dim] (KV sources) E2M1/E4M3-16-rounded, RoPE'd
  std::vector<float> index_keys;   // [n_groups, index_head_dim] (index-key owners) E2M1/ue8m0-32-rounded
  std::vector<float> kv_state;     // [ratio, head_dim] compressor partial group (ratio > 1), f32
  std::vector<float> score_state;  // [ratio, head_dim]
};

struct KvCache {
  int64_t n_past = 0;                       // tokens already in the cache
  std::vector<LayerKvCache> layers;         // one per backbone layer
  EngramHistory engram_history{0, 0};      // compressed ids of the last max_ngram-1 tokens, oldest first
  // Bytes held (f32 storage as it is today).
  uint64_t bytes() const {
    uint64_t b = 0;
    for (const auto& l : layers)
      b += (l.window.size() + l.compressed.size() + l.index_keys.size() + l.kv_state.size() + l.score_state.size()) *
           sizeof(float);
    return b;
  }
};

}  // namespace strata::model
