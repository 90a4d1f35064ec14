// Scalar definition of kernels/attention.h (the loop model/attention.cpp ran before the kernels).
#include <algorithm>
#include <vector>

#include "kernels/activation.h"
#include "kernels/attention.h"

namespace strata::kernels::ref {

void sparse_attention(const SparseAttentionArgs& a) {
  const int64_t D = a.head_dim, m = a.n_entries;
  std::vector<float> sc(static_cast<size_t>(m));
  for (int h = 0; h < a.n_heads; ++h) {
    const float* qh = a.q + h * D;
    float mx = -1e30f;  // finite initial max, as the kernel
    for (int64_t j = 0; j < m; ++j) {
      const float* e = a.entries[j];
      float dot = 0.0f;
      for (int64_t d = 0; d < D; ++d) dot += qh[d] * e[d];
      sc[static_cast<size_t>(j)] = dot * a.scale;
      mx = std::max(mx, sc[static_cast<size_t>(j)]);
    }
    float den = 0.0f;
    for (int64_t j = 0; j < m; ++j) {
      sc[static_cast<size_t>(j)] = kernels::exp_f32(sc[static_cast<size_t>(j)] - mx);
      den += sc[static_cast<size_t>(j)];
    }
    den += kernels::exp_f32(a.sinks[h] - mx);  // the sink takes mass but adds no value
    float* oh = a.out + h * D;
    std::fill(oh, oh + D, 0.0f);
    for (int64_t j = 0; j < m; ++j) {
      const float pj = sc[static_cast<size_t>(j)] / den;
      const float* e = a.entries[j];
      for (int64_t d = 0; d < D; ++d) oh[d] += pj * e[d];
    }
  }
}

}  // namespace strata::kernels::ref
