// exp_f32 checked over a set of f32 bit patterns: every kernel level against kernels::ref, and the
// reference against the C library's expf where that is glibc's FMA variant.
#pragma once

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <vector>

#include "core/cpu_features.h"
#include "kernels/activation.h"
#include "tests/kernels/ops_test_util.h"

namespace strata::kernels {

// Compares exp_f32 (every level and, with glibc + FMA, std::exp) over inputs u = start, start +
// stride, ... < end (f32 bit patterns, end <= 2^32). Used by activation_test.cpp (a sample) and
// exp_exhaustive_test.cpp (every input that neither saturates nor rounds to 1).
inline void check_exp_range(uint64_t start, uint64_t stride, uint64_t end = uint64_t{1} << 32) {
  const bool libm = CpuFeatures::detect().avx2;  // glibc picks its FMA expf there
  constexpr size_t kBatch = 1 << 16;
  std::vector<float> x(kBatch), ref_y(kBatch), y(kBatch);
  uint64_t u = start;
  while (u < end) {
    size_t n = 0;
    for (; n < kBatch && u < end; ++n, u += stride) {
      const uint32_t b = static_cast<uint32_t>(u);
      std::memcpy(&x[n], &b, sizeof b);
    }
    ref::exp_f32(x.data(), static_cast<int64_t>(n), ref_y.data());
#if defined(__GLIBC__)
    if (libm) {
      for (size_t i = 0; i < n; ++i) {
        const float l = std::exp(x[i]);
        ASSERT_TRUE(std::memcmp(&l, &ref_y[i], 4) == 0 || (std::isnan(l) && std::isnan(ref_y[i])))
            << "x=" << x[i] << " libm=" << l << " exp_f32=" << ref_y[i];
      }
    }
#endif
    for (KernelLevel level : kAllKernelLevels) {
      if (level == KernelLevel::kScalar || !kernel_level_supported(level)) continue;
      exp_f32(x.data(), static_cast<int64_t>(n), y.data(), level);
      const int64_t at = testing::first_bit_difference(y.data(), ref_y.data(), static_cast<int64_t>(n));
      ASSERT_EQ(at, -1) << kernel_level_name(level) << " x=" << x[at] << " got " << y[at] << " ref " << ref_y[at];
    }
  }
  (void)libm;
}

}  // namespace strata::kernels
