#include "model/mhc.h"

#include <vector>

#include "kernels/linear.h"
#include "kernels/mhc.h"
#include "kernels/norm.h"

namespace strata::model {

kernels::LinearJob<kernels::F32Weight> hc_mixes_job(const ModelConfig& c, const HcWeights& w, const float* x, int64_t n,
                                                    HcMix* out, kernels::RowPath path) {
  const int hc = c.hc_mult;
  const int64_t width = hc * c.dim;
  const int mix = (2 + hc) * hc;
  out->pre.resize(static_cast<size_t>(n * hc));
  out->post.resize(static_cast<size_t>(n * hc));
  out->comb.resize(static_cast<size_t>(n * hc * hc));
  out->mixes.resize(static_cast<size_t>(n * mix));
  out->rsqrt.resize(static_cast<size_t>(n));
  // mixes = (fn . x) * rsqrt(mean(x^2) + eps): one RMS over all hc*dim values, applied after the
  // projection (model.py hc_mixes). The projection is an f32 linear that adds k in order at every
  // kernel level (bit-exact with the scalar loop), so the pre weights that collapse the next
  // sublayer's input do not move by an ulp.
  for (int64_t t = 0; t < n; ++t)
    out->rsqrt[static_cast<size_t>(t)] = kernels::rms_rsqrt(x + t * width, width, static_cast<float>(c.norm_eps));
  return {x, n, kernels::F32Weight{w.fn.data(), mix, width}, out->mixes.data(), path};
}

void hc_mixes_finish(const ModelConfig& c, const HcWeights& w, int64_t n, HcMix* out, ThreadPool* pool) {
  const int hc = c.hc_mult;
  const int mix = (2 + hc) * hc;
  std::vector<float>& m = out->mixes;
  for (int64_t t = 0; t < n; ++t)
    for (int k = 0; k < mix; ++k) m[static_cast<size_t>(t * mix + k)] *= out->rsqrt[static_cast<size_t>(t)];
  // pre/post sigmoids; comb by row softmax + eps, column normalise, then (iters - 1) rounds of
  // rows-then-columns (kernels/mhc.h, the hc_split_sinkhorn shim).
  const kernels::HcSplitParams p{hc, c.hc_sinkhorn_iters, static_cast<float>(c.hc_eps), w.scale.data(), w.base.data()};
  kernels::hc_split_sinkhorn(m.data(), n, p, out->pre.data(), out->post.data(), out->comb.data(), pool);
}

void hc_pre(const ModelConfig& c, const float* x, const float* pre, int64_t n, float* y, ThreadPool* pool) {
  kernels::hc_pre(x, pre, n, c.hc_mult, c.dim, y, pool);
}

void hc_post(const ModelConfig& c, const float* f, const HcMix& mix, int64_t n, float* x, ThreadPool* pool) {
  kernels::hc_post(x, f, mix.post.data(), mix.comb.data(), n, c.hc_mult, c.dim, pool);
}

}  // namespace strata::model
