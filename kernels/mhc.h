// mHC (manifold-constrained hyper-connections) mixing kernels: collapse the hc_mult residual
// streams into a sublayer input (hc_pre), expand a sublayer output back into them (hc_post), and
// turn the projected mixes into pre/post weights and the doubly stochastic comb matrix (sigmoids
// and Sinkhorn normalisation, hc_split_sinkhorn). The projection itself (fn . x, an f32 linear
// that must add k in order) is kernels::linear_f32, which is bit-exact with its reference.
//
// Every value here feeds an FP8 activation quantisation downstream (the sublayer input's RMSNorm,
// then an FP8 linear), so every level reproduces kernels::ref bit for bit: the same operations in
// the same order per element, vectorised across elements (hc_pre/hc_post) or tokens (Sinkhorn).
// Shapes: x [n, hc, dim] f32; pre/post [n, hc]; comb [n, hc, hc] with comb[t, j, k] the weight
// from stream j into stream k; mixes [n, (2 + hc) * hc]. Threading: over tokens on `pool` (may be
// null). Cannot fail. Source: ARCHITECTURE.md §mHC; model.py Block.hc_pre / hc_post / hc_mixes;
// fixtures README (hc_split_sinkhorn shim).
#pragma once

#include <cstdint>

#include "core/thread_pool.h"
#include "kernels/dispatch.h"

namespace strata::kernels {

// y[t, i] = sum_j pre[t, j] * x[t, j, i], j = 0 .. hc-1 added in order from 0.
void hc_pre(const float* x, const float* pre, int64_t n, int hc, int64_t dim, float* y, ThreadPool* pool);
void hc_pre(const float* x, const float* pre, int64_t n, int hc, int64_t dim, float* y, ThreadPool* pool,
            KernelLevel level);

// x[t, k, i] <- post[t, k] * f[t, i] + (sum_j comb[t, j, k] * x[t, j, i]), the sum over the old
// x in order from 0; in place on x.
void hc_post(float* x, const float* f, const float* post, const float* comb, int64_t n, int hc, int64_t dim,
             ThreadPool* pool);
void hc_post(float* x, const float* f, const float* post, const float* comb, int64_t n, int hc, int64_t dim,
             ThreadPool* pool, KernelLevel level);

// The constants of one mixing site.
struct HcSplitParams {
  int hc = 4;                    // hc_mult
  int sinkhorn_iters = 20;       // hc_sinkhorn_iters (0 acts as 1: one column normalisation)
  float eps = 1e-6f;             // hc_eps
  const float* scale = nullptr;  // [3]: pre, post, comb
  const float* base = nullptr;   // [(2 + hc) * hc]
};
// From mixes m (the projection times the RMS factor) for n tokens:
//   pre[j]  = sigmoid(m[j] * scale[0] + base[j]) + eps
//   post[j] = 2 * sigmoid(m[hc + j] * scale[1] + base[hc + j])
//   comb    = rows of softmax(m[2hc + j*hc + k] * scale[2] + base[...]) + eps, then columns divided
//             by (column sum + eps), then (sinkhorn_iters - 1) rounds of rows then columns.
// REQUIRES: 1 <= hc <= 16.
void hc_split_sinkhorn(const float* mixes, int64_t n, const HcSplitParams& p, float* pre, float* post, float* comb,
                       ThreadPool* pool);
void hc_split_sinkhorn(const float* mixes, int64_t n, const HcSplitParams& p, float* pre, float* post, float* comb,
                       ThreadPool* pool, KernelLevel level);

namespace ref {
void hc_pre(const float* x, const float* pre, int64_t n, int hc, int64_t dim, float* y);
void hc_post(float* x, const float* f, const float* post, const float* comb, int64_t n, int hc, int64_t dim);
void hc_split_sinkhorn(const float* mixes, int64_t n, const HcSplitParams& p, float* pre, float* post, float* comb);
}  // namespace ref

}  // namespace strata::kernels
