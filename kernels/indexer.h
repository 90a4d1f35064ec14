// CSA2 indexer: scores of one query against the compressed index keys, and the top-k selection.
//
// index_scores: for each key g,
//   score[g] = sum_h w[h] * max(q[h] . k_g, 0)     (h in order, the dot over d in order, from 0)
// with every product and sum rounded to f32 as written: the scores decide a top-k selection, so
// every level equals kernels::ref bit for bit (keys in vector lanes; no sum is split or reordered).
// Keys are rows `key_stride` floats apart (the f32 cache, or a decoded block of packed FP4 keys).
// topk_ascending: the k highest scores (ties to the lower id), entries equal to -inf never chosen,
// returned as ascending ids with -1 padding. REQUIRES: no NaN scores.
// Threading: index_scores splits keys over `pool` (may be null). Cannot fail.
// Source: ARCHITECTURE.md §Attention (Indexer); model.py Indexer.forward.
#pragma once

#include <cstdint>

#include "core/thread_pool.h"
#include "kernels/dispatch.h"

namespace strata::kernels {

struct IndexScoreArgs {
  const float* q = nullptr;     // [n_heads, dim] (RoPE'd, FP4-rounded index queries)
  const float* w = nullptr;     // [n_heads] head weights (weights_proj output times its scale)
  int n_heads = 0;
  int64_t dim = 0;              // index_head_dim
  const float* keys = nullptr;  // n_keys rows of dim values
  int64_t key_stride = 0;       // floats between key rows (>= dim)
  int64_t n_keys = 0;
  float* scores = nullptr;      // [n_keys]
};
void index_scores(const IndexScoreArgs& a, ThreadPool* pool);
void index_scores(const IndexScoreArgs& a, ThreadPool* pool, KernelLevel level);

// Decodes one index key stored packed (model/kv_cache.h): dim/2 bytes of E2M1 codes (element 2i in
// the low nibble of byte i), then dim/32 E8M0 scales; out[d] = e2m1 * scale, exact (power-of-two
// scales; E8M0 code 0 is 2^-127). dim is a multiple of 32. Decode runs it over every visible key of
// every index layer each step, so it is vectorised (a permute of the 16-entry code table).
void dequant_index_key(const uint8_t* row, int64_t dim, float* out);
void dequant_index_key(const uint8_t* row, int64_t dim, float* out, KernelLevel level);

// Writes the ids of the k best of scores[0..n) in ascending order to out[0..k) (-1 after the last
// one) and returns how many were chosen. O(n) (radix select); equal to ref::topk_ascending.
int topk_ascending(const float* scores, int64_t n, int k, int32_t* out);

namespace ref {
void index_scores(const IndexScoreArgs& a);
void dequant_index_key(const uint8_t* row, int64_t dim, float* out);
// The definition: sort by (score descending, id ascending), keep k, sort the ids.
int topk_ascending(const float* scores, int64_t n, int k, int32_t* out);
}  // namespace ref

}  // namespace strata::kernels
