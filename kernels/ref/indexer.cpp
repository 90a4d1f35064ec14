// Scalar definitions of kernels/indexer.h (the loops model/attention.cpp ran before the kernels).
#include <algorithm>
#include <cmath>
#include <vector>

#include "kernels/indexer.h"

#include "core/dtype.h"

namespace strata::kernels::ref {

void index_scores(const IndexScoreArgs& a) {
  for (int64_t g = 0; g < a.n_keys; ++g) {
    const float* kg = a.keys + g * a.key_stride;
    float s = 0.0f;
    for (int h = 0; h < a.n_heads; ++h) {
      const float* qh = a.q + h * a.dim;
      float dot = 0.0f;
      for (int64_t d = 0; d < a.dim; ++d) dot += qh[d] * kg[d];
      s += std::max(dot, 0.0f) * a.w[h];
    }
    a.scores[g] = s;
  }
}

void dequant_index_key(const uint8_t* row, int64_t dim, float* out) {
  const uint8_t* sc = row + dim / 2;
  for (int64_t b = 0; b < dim / 32; ++b) {
    const float s = e8m0_to_f32(sc[b]);
    for (int j = 0; j < 32; j += 2) {
      const uint8_t v = row[(b * 32 + j) / 2];
      out[b * 32 + j] = e2m1_to_f32(v & 0xF) * s;
      out[b * 32 + j + 1] = e2m1_to_f32(v >> 4) * s;
    }
  }
}

int topk_ascending(const float* scores, int64_t n, int k, int32_t* out) {
  std::vector<int32_t> idx;
  idx.reserve(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i)
    if (scores[i] != -INFINITY) idx.push_back(static_cast<int32_t>(i));
  const int m = std::min<int>(k, static_cast<int>(idx.size()));
  // Highest score first; an exact tie goes to the lower id (torch.topk leaves ties unspecified).
  auto better = [&](int32_t a, int32_t b) { return scores[a] > scores[b] || (scores[a] == scores[b] && a < b); };
  std::partial_sort(idx.begin(), idx.begin() + m, idx.end(), better);
  std::sort(idx.begin(), idx.begin() + m);
  for (int i = 0; i < k; ++i) out[i] = i < m ? idx[static_cast<size_t>(i)] : -1;
  return m;
}

}  // namespace strata::kernels::ref
