// MoE sublayer: router (sqrt-softplus scores, biased top-k selection, normalised weights) over the
// routed experts (MXFP4 SwiGLU, clamped) plus the shared expert (FP8).
//
// Prefill groups tokens by expert so each expert's weights are read once per chunk. Experts are
// acquired from the WeightStore per use (the hook a tiered store implements).
// Shapes: x [n, dim] normed input, out [n, dim]. Errors: only from the store (an expert that cannot
// be read), reported with the layer and expert.
// Source: ARCHITECTURE.md §MoE; model.py Gate, Expert, MoE.
#pragma once

#include <cstdint>
#include <vector>

#include "core/status.h"
#include "core/thread_pool.h"
#include "model/config.h"
#include "model/observer.h"
#include "model/weights.h"
#include "store/weight_store.h"

namespace strata::model {

struct RouterOutput {
  std::vector<int32_t> ids;     // [n, top_k] by biased score, descending
  std::vector<float> weights;   // [n, top_k] normalised * route_scale
};

// Router only (exposed for tests and for layer-ahead prefetch later).
void route(const ModelConfig& c, const MoeWeights& w, const float* x, int64_t n, RouterOutput* out, ThreadPool* pool);

[[nodiscard]] Status moe_forward(const ModelConfig& c, const MoeWeights& w, store::WeightStore& store, const float* x,
                                 int64_t n, float* out, ThreadPool* pool, Observer* obs);

}  // namespace strata::model
