#include "model/torch_sum.h"

#include <algorithm>
#include <array>
#include <vector>

namespace strata::model {

namespace {

constexpr int kLanes = 8;    // Vectorized<float>::size() under AVX2
constexpr int kIlp = 4;      // row_sum's ilp_factor
constexpr int kLevels = 4;   // multi_row_sum's num_levels

int64_t ceil_log2(int64_t x) {
  if (x <= 1) return 0;
  int64_t r = 0;
  uint64_t v = static_cast<uint64_t>(x - 1);
  while (v) {
    ++r;
    v >>= 1;
  }
  return r;
}

// multi_row_sum over `size` steps of `nrows` accumulators, each a vector of W lanes; load(i, k, lane).
template <int W, int NROWS, typename Load>
std::array<std::array<float, W>, NROWS> multi_row_sum(int64_t size, Load load) {
  const int64_t level_power = std::max<int64_t>(4, ceil_log2(size) / kLevels);
  const int64_t level_step = int64_t{1} << level_power;
  const int64_t level_mask = level_step - 1;
  std::array<std::array<std::array<float, W>, NROWS>, kLevels> acc{};
  int64_t i = 0;
  for (; i + level_step <= size;) {
    for (int64_t j = 0; j < level_step; ++j, ++i)
      for (int k = 0; k < NROWS; ++k)
        for (int l = 0; l < W; ++l) acc[0][k][l] += load(i, k, l);
    for (int j = 1; j < kLevels; ++j) {
      for (int k = 0; k < NROWS; ++k)
        for (int l = 0; l < W; ++l) {
          acc[j][k][l] += acc[j - 1][k][l];
          acc[j - 1][k][l] = 0.0f;
        }
      const int64_t mask = level_mask << (j * level_power);
      if ((i & mask) != 0) break;
    }
  }
  for (; i < size; ++i)
    for (int k = 0; k < NROWS; ++k)
      for (int l = 0; l < W; ++l) acc[0][k][l] += load(i, k, l);
  for (int j = 1; j < kLevels; ++j)
    for (int k = 0; k < NROWS; ++k)
      for (int l = 0; l < W; ++l) acc[0][k][l] += acc[j][k][l];
  return acc[0];
}

// row_sum: a (-1, 4) view of `size` elements, multi_row_sum over it, leftovers into column 0,
// then the 4 partials folded left to right.
template <int W, typename Load>
std::array<float, W> row_sum(int64_t size, Load load) {
  const int64_t size_ilp = size / kIlp;
  auto p = multi_row_sum<W, kIlp>(size_ilp, [&](int64_t i, int k, int l) { return load(i * kIlp + k, l); });
  for (int64_t i = size_ilp * kIlp; i < size; ++i)
    for (int l = 0; l < W; ++l) p[0][l] += load(i, l);
  for (int k = 1; k < kIlp; ++k)
    for (int l = 0; l < W; ++l) p[0][l] += p[k][l];
  return p[0];
}

}  // namespace

float torch_inner_sum(const float* x, int64_t n) {
  if (n < kLanes) {
    // scalar_inner_sum: row_sum over single values.
    auto r = row_sum<1>(n, [&](int64_t i, int) { return x[i]; });
    return 0.0f + r[0];
  }
  const int64_t vec_size = n / kLanes;
  auto v = row_sum<kLanes>(vec_size, [&](int64_t i, int l) { return x[i * kLanes + l]; });
  float acc = 0.0f;
  for (int64_t k = vec_size * kLanes; k < n; ++k) acc += x[k];
  for (int l = 0; l < kLanes; ++l) acc += v[static_cast<size_t>(l)];
  return acc;
}

float torch_outer_sum(const float* x, int64_t n, int64_t stride) {
  auto r = multi_row_sum<1, 1>(n, [&](int64_t i, int, int) { return x[i * stride]; });
  return 0.0f + r[0][0];
}

float torch_mean_square(const float* x, int64_t n) {
  std::vector<float> sq(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) sq[static_cast<size_t>(i)] = x[i] * x[i];
  return torch_inner_sum(sq.data(), n) / static_cast<float>(n);
}

}  // namespace strata::model
