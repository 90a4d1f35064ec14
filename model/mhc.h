// mHC (manifold-constrained hyper-connections): the residual stream is hc_mult parallel copies.
//
// Each sublayer computes, from the whole stream, pre weights (collapse the copies into the next
// sublayer's input), post weights (expand the sublayer output back) and a doubly stochastic comb
// matrix (mix the copies), the last by Sinkhorn normalisation. V4.1 is single-pass: the pre weights a
// sublayer computes are used by the *next* sublayer (attention uses the previous FFN's, the FFN uses
// this attention's, the head uses the last FFN's; one-hot copy 0 before layer 0).
// Shapes: X [n_tokens, hc, dim] f32; pre/post [n_tokens, hc]; comb [n_tokens, hc, hc] (comb[j][k]:
// from copy j into copy k). Threading: over tokens on `pool`. Cannot fail.
// Source: ARCHITECTURE.md §mHC; model.py Block.hc_mixes / hc_pre / hc_post; fixtures README
// (hc_split_sinkhorn shim).
#pragma once

#include <cstdint>
#include <vector>

#include "core/thread_pool.h"
#include "model/config.h"
#include "model/weights.h"

namespace strata::model {

struct HcMix {
  std::vector<float> pre;   // [n, hc]
  std::vector<float> post;  // [n, hc]
  std::vector<float> comb;  // [n, hc, hc]
  std::vector<float> mixes;  // [n, (2 + hc) * hc] the projection (hc_mixes_job), then the mixes
  std::vector<float> rsqrt;  // [n] rsqrt(mean(X^2) + eps) of each token's streams (hc_mixes_job)
};

// The mixing coefficients of one site for every token of X [n, hc, dim], in two halves: the
// projection (an f32 linear) runs in a pass the caller runs (kernels::linear_batch, beside a
// sublayer's first linears: on its own it was a small pass, 80 a decode token on the 8 GB scaled
// checkpoint). hc_mixes_job sizes out's buffers, takes each token's RMS of X now (X may change
// before the second half) and returns the projection job (x = X, y = out->mixes; `path`: its
// regime, f32 in the reference order, the same bits in both); once it has run, hc_mixes_finish
// does the rest.
kernels::LinearJob<kernels::F32Weight> hc_mixes_job(const ModelConfig& c, const HcWeights& w, const float* x, int64_t n,
                                                    HcMix* out, kernels::RowPath path = kernels::RowPath::kAuto);
void hc_mixes_finish(const ModelConfig& c, const HcWeights& w, int64_t n, HcMix* out, ThreadPool* pool);

// y[t] = sum_j pre[t, j] * X[t, j]   ([n, dim]); rows split over `pool` (may be null; the same bits).
void hc_pre(const ModelConfig& c, const float* x, const float* pre, int64_t n, float* y, ThreadPool* pool = nullptr);

// X'[t, k] = post[t, k] * f[t] + sum_j comb[t, j, k] * X[t, j], in place on x; rows over `pool`.
void hc_post(const ModelConfig& c, const float* f, const HcMix& mix, int64_t n, float* x, ThreadPool* pool = nullptr);

}  // namespace strata::model
