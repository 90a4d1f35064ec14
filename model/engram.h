// Engram: gated n-gram memory added into every mHC stream at the Engram layers.
//
// For each token the (max_ngram-1) * n_heads table rows (row ids from EngramHasher, computed from
// token ids before the forward) are read from the store — engram_start names every Engram layer's
// rows of a chunk before layer 0 runs, so a tiered store reads them (sorted, deduplicated, at queue
// depth) while the earlier layers compute; engram_forward waits for them — dequantised (e4m3 * e8m0 per 32, exact in
// bf16; a table re-quantised by `strata quantize --engram T` by ggml's reference dequantiser of its
// block format, kernels/kquant.h), concatenated and projected by wkv into one key per stream and one shared value. Stream c of
// token t gets  h += sigmoid(sign(d) * sqrt(max(|d|, 1e-6))) * value  with
// d = sum(h * q_weight*k_weight * key_c) * rsqrt(mean(h^2)+eps) * rsqrt(mean(key_c^2)+eps) / sqrt(dim).
// Shapes: rows [n, n_cols] int64; x [n, hc, dim] f32 updated in place.
// Errors: a row the store cannot read (kIOError / kInvalidArgument from the store).
// Source: ARCHITECTURE.md §Engram; model.py Engram.forward, ParallelEngramEmbedding.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "core/status.h"
#include "core/thread_pool.h"
#include "model/config.h"
#include "model/observer.h"
#include "model/profile.h"
#include "model/weights.h"
#include "store/weight_store.h"

namespace strata::model {

// Starts the row reads of every Engram layer in `layers` for a chunk of n tokens. `rows` is
// [n, n_engram_layers, n_cols] (Model::engram_rows); (*out)[i] becomes the fetch of Engram layer
// index i. Errors: row ids out of range, a shard that changed size (from the store).
// `layer_rows` is scratch (one layer's row ids at a time).
[[nodiscard]] Status engram_start(const ModelConfig& c, std::span<const BlockWeights> layers, store::WeightStore& store,
                                  std::span<const int64_t> rows, int64_t n,
                                  std::vector<std::unique_ptr<store::EngramFetch>>* out,
                                  std::vector<int64_t>* layer_rows);

// Reused buffers of engram_forward (owned by model::Activations): the fetched codes and scales,
// the dequantised rows, the projection, one product row.
struct EngramScratch {
  std::vector<uint8_t> codes, scales;
  std::vector<float> emb, kv, prod;
};

// Waits for `fetch` (the rows of n_fetched tokens from engram_start) and applies the last rows.n
// of them to x [rows.n, hc, dim] (fewer than n_fetched after bounded replay dropped the chunk's
// first tokens); the projection runs each part of the batch in its regime (Rows).
// `prof` (may be null) gets the time, waiting included.
// `scratch` (may be null) holds the buffers between calls.
[[nodiscard]] Status engram_forward(const ModelConfig& c, const EngramWeights& w, int layer, store::EngramFetch& fetch,
                                    int64_t n_fetched, Rows rows, float* x, ThreadPool* pool, Observer* obs,
                                    ForwardProfile* prof = nullptr, EngramScratch* scratch = nullptr);

// The same for rows given directly ([n, n_cols]): reads them through the store now.
[[nodiscard]] Status engram_forward(const ModelConfig& c, const EngramWeights& w, int layer, store::WeightStore& store,
                                    const int64_t* rows, int64_t n, float* x, ThreadPool* pool, Observer* obs);

}  // namespace strata::model
