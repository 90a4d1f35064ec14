// Scalar definitions of kernels/mhc.h (the order of model/mhc.cpp before the kernels existed).
#include <algorithm>
#include <cmath>
#include <vector>

#include "kernels/activation.h"
#include "kernels/mhc.h"

namespace strata::kernels::ref {

void hc_pre(const float* x, const float* pre, int64_t n, int hc, int64_t dim, float* y) {
  for (int64_t t = 0; t < n; ++t) {
    const float* xt = x + t * hc * dim;
    const float* pt = pre + t * hc;
    for (int64_t i = 0; i < dim; ++i) {
      float acc = 0.0f;
      for (int j = 0; j < hc; ++j) acc += pt[j] * xt[j * dim + i];
      y[t * dim + i] = acc;
    }
  }
}

void hc_post(float* x, const float* f, const float* post, const float* comb, int64_t n, int hc, int64_t dim) {
  std::vector<float> old(static_cast<size_t>(hc));
  for (int64_t t = 0; t < n; ++t) {
    float* xt = x + t * hc * dim;
    const float* ct = comb + t * hc * hc;
    for (int64_t i = 0; i < dim; ++i) {
      for (int j = 0; j < hc; ++j) old[static_cast<size_t>(j)] = xt[j * dim + i];
      for (int k = 0; k < hc; ++k) {
        float acc = 0.0f;
        for (int j = 0; j < hc; ++j) acc += ct[j * hc + k] * old[static_cast<size_t>(j)];
        xt[k * dim + i] = post[t * hc + k] * f[t * dim + i] + acc;
      }
    }
  }
}

void hc_split_sinkhorn(const float* mixes, int64_t n, const HcSplitParams& p, float* pre, float* post, float* comb) {
  const int hc = p.hc, mix = (2 + hc) * hc;
  const float eps = p.eps;
  std::vector<float> cm(static_cast<size_t>(hc * hc));
  for (int64_t t = 0; t < n; ++t) {
    const float* m = mixes + t * mix;
    for (int j = 0; j < hc; ++j) {
      pre[t * hc + j] = sigmoid_f32(m[j] * p.scale[0] + p.base[j]) + eps;
      post[t * hc + j] = 2.0f * sigmoid_f32(m[hc + j] * p.scale[1] + p.base[hc + j]);
    }
    // Row softmax, + eps.
    for (int j = 0; j < hc; ++j) {
      float* row = cm.data() + j * hc;
      float mx = -INFINITY;
      for (int k = 0; k < hc; ++k) {
        const int idx = 2 * hc + j * hc + k;
        row[k] = m[idx] * p.scale[2] + p.base[idx];
        mx = std::max(mx, row[k]);
      }
      float sum = 0.0f;
      for (int k = 0; k < hc; ++k) {
        row[k] = kernels::exp_f32(row[k] - mx);
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
    for (int it = 1; it < p.sinkhorn_iters; ++it) {
      norm_rows();
      norm_cols();
    }
    std::copy(cm.begin(), cm.end(), comb + t * hc * hc);
  }
}

}  // namespace strata::kernels::ref
