// Helpers of the per-token op tests: level parameterisation, random data with awkward values, and
// bit-for-bit comparison (every level of these kernels must equal kernels::ref exactly).
#pragma once

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "kernels/dispatch.h"

namespace strata::kernels::testing {

class OpsLevel : public ::testing::TestWithParam<KernelLevel> {
 protected:
  void SetUp() override {
    if (!kernel_level_supported(GetParam())) GTEST_SKIP() << kernel_level_name(GetParam()) << " not supported here";
  }
  KernelLevel level() const { return GetParam(); }
};

inline std::string level_param_name(const ::testing::TestParamInfo<KernelLevel>& info) {
  return kernel_level_name(info.param);
}

// Normal values of magnitude ~scale, with some exact zeros (both signs) and repeated values.
inline std::vector<float> random_floats(size_t n, std::mt19937& rng, float scale = 1.0f) {
  std::normal_distribution<float> normal(0.0f, scale);
  std::vector<float> v(n);
  for (auto& x : v) {
    const uint32_t r = rng() % 64;
    x = r == 0 ? 0.0f : r == 1 ? -0.0f : normal(rng);
  }
  return v;
}

// Index of the first element whose bits differ, or -1.
inline int64_t first_bit_difference(const float* a, const float* b, int64_t n) {
  for (int64_t i = 0; i < n; ++i)
    if (std::memcmp(a + i, b + i, sizeof(float)) != 0) return i;
  return -1;
}

#define STRATA_EXPECT_BITS_EQ(a, b, n, what)                                                                \
  do {                                                                                                      \
    const int64_t at_ = ::strata::kernels::testing::first_bit_difference((a), (b), (n));                    \
    EXPECT_EQ(at_, -1) << (what) << ": first difference at " << at_ << ": " << (at_ >= 0 ? (a)[at_] : 0.0f) \
                       << " vs ref " << (at_ >= 0 ? (b)[at_] : 0.0f);                                       \
  } while (0)

}  // namespace strata::kernels::testing
