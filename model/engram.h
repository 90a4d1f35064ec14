// Engram: gated n-gram memory added into every mHC stream at the Engram layers.
//
// For each token the (max_ngram-1) * n_heads table rows (row ids from EngramHasher, computed from
// token ids before the forward) are read from the store, dequantised (e4m3 * e8m0 per 32, exact in
// bf16), concatenated and projected by wkv into one key per stream and one shared value. Stream c of
// token t gets  h += sigmoid(sign(d) * sqrt(max(|d|, 1e-6))) * value  with
// d = sum(h * q_weight*k_weight * key_c) * rsqrt(mean(h^2)+eps) * rsqrt(mean(key_c^2)+eps) / sqrt(dim).
// Shapes: rows [n, n_cols] int64; x [n, hc, dim] f32 updated in place.
// Errors: a row the store cannot read (kIOError / kInvalidArgument from the store).
// Source: ARCHITECTURE.md §Engram; model.py Engram.forward, ParallelEngramEmbedding.
#pragma once

#include <cstdint>

#include "core/status.h"
#include "core/thread_pool.h"
#include "model/config.h"
#include "model/observer.h"
#include "model/weights.h"
#include "store/weight_store.h"

namespace strata::model {

[[nodiscard]] Status engram_forward(const ModelConfig& c, const EngramWeights& w, int layer, store::WeightStore& store,
                                    const int64_t* rows, int64_t n, float* x, ThreadPool* pool, Observer* obs);

}  // namespace strata::model
