#include "model/mhc.h"

#include <cmath>

#include "model/ops.h"

namespace strata::model {

void hc_mixes(const ModelConfig& c, const HcWeights& w, const float* x, int64_t n, HcMix* out, ThreadPool* pool) {
  const int hc = c.hc_mult;
  const int64_t width = hc * c.dim;
  const int mix = (2 + hc) * hc;
  out->pre.resize(static_cast<size_t>(n * hc));
  out->post.resize(static_cast<size_t>(n * hc));
  out->comb.resize(static_cast<size_t>(n * hc * hc));
  const float eps = static_cast<float>(c.hc_eps);
  auto body = [&](int64_t t0, int64_t t1) {
    std::vector<float> m(static_cast<size_t>(mix));
    std::vector<float> cm(static_cast<size_t>(hc * hc));
    for (int64_t t = t0; t < t1; ++t) {
      const float* xt = x + t * width;
      // mixes = (fn . x) * rsqrt(mean(x^2) + eps): one RMS over all hc*dim values, applied after the
      // projection (model.py hc_mixes).
      const float r = rms_rsqrt(xt, width, c.norm_eps);
      for (int k = 0; k < mix; ++k) {
        const float* f = w.fn.data() + static_cast<int64_t>(k) * width;
        float acc = 0.0f;
        for (int64_t i = 0; i < width; ++i) acc += f[i] * xt[i];
        m[static_cast<size_t>(k)] = acc * r;
      }
      float* pre = out->pre.data() + t * hc;
      float* post = out->post.data() + t * hc;
      for (int j = 0; j < hc; ++j) {
        pre[j] = sigmoid(m[static_cast<size_t>(j)] * w.scale[0] + w.base[static_cast<size_t>(j)]) + eps;
        post[j] = 2.0f * sigmoid(m[static_cast<size_t>(hc + j)] * w.scale[1] + w.base[static_cast<size_t>(hc + j)]);
      }
      // comb: row softmax + eps, column normalise, then (iters - 1) rounds of rows-then-columns.
      for (int j = 0; j < hc; ++j) {
        float* row = cm.data() + j * hc;
        float mx = -INFINITY;
        for (int k = 0; k < hc; ++k) {
          const size_t idx = static_cast<size_t>(2 * hc + j * hc + k);
          row[k] = m[idx] * w.scale[2] + w.base[idx];
          mx = std::max(mx, row[k]);
        }
        float sum = 0.0f;
        for (int k = 0; k < hc; ++k) {
          row[k] = std::exp(row[k] - mx);
          sum += row[k];
        }
        for (int k = 0; k < hc; ++k) row[k] = row[k] / sum + eps;
      }
      auto norm_cols = [&] {
        for (int k = 0; k < hc; ++k) {
          float s = 0.0f;
          for (int j = 0; j < hc; ++j) s += cm[static_cast<size_t>(j * hc + k)];
          for (int j = 0; j < hc; ++j) cm[static_cast<size_t>(j * hc + k)] /= (s + eps);
        }
      };
      auto norm_rows = [&] {
        for (int j = 0; j < hc; ++j) {
          float s = 0.0f;
          for (int k = 0; k < hc; ++k) s += cm[static_cast<size_t>(j * hc + k)];
          for (int k = 0; k < hc; ++k) cm[static_cast<size_t>(j * hc + k)] /= (s + eps);
        }
      };
      norm_cols();
      for (int it = 1; it < c.hc_sinkhorn_iters; ++it) {
        norm_rows();
        norm_cols();
      }
      std::copy(cm.begin(), cm.end(), out->comb.begin() + t * hc * hc);
    }
  };
  if (pool) pool->parallel_for(n, body, 4);
  else body(0, n);
}

void hc_pre(const ModelConfig& c, const float* x, const float* pre, int64_t n, float* y) {
  const int hc = c.hc_mult;
  const int64_t dim = c.dim;
  for (int64_t t = 0; t < n; ++t) {
    float* yt = y + t * dim;
    const float* xt = x + t * hc * dim;
    for (int64_t i = 0; i < dim; ++i) {
      float acc = 0.0f;
      for (int j = 0; j < hc; ++j) acc += pre[t * hc + j] * xt[j * dim + i];
      yt[i] = acc;
    }
  }
}

void hc_post(const ModelConfig& c, const float* f, const HcMix& mix, int64_t n, float* x) {
  const int hc = c.hc_mult;
  const int64_t dim = c.dim;
  std::vector<float> old(static_cast<size_t>(hc * dim));
  for (int64_t t = 0; t < n; ++t) {
    float* xt = x + t * hc * dim;
    std::copy(xt, xt + hc * dim, old.begin());
    const float* post = mix.post.data() + t * hc;
    const float* comb = mix.comb.data() + t * hc * hc;
    const float* ft = f + t * dim;
    for (int k = 0; k < hc; ++k) {
      float* out = xt + k * dim;
      for (int64_t i = 0; i < dim; ++i) {
        float acc = 0.0f;
        for (int j = 0; j < hc; ++j) acc += comb[j * hc + k] * old[static_cast<size_t>(j * dim + i)];
        out[i] = post[k] * ft[i] + acc;
      }
    }
  }
}

}  // namespace strata::model
