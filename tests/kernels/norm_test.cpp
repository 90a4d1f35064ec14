// RMSNorm and RoPE: every level equals kernels::ref bit for bit, and kernels::mean_square equals the
// model's PyTorch-order reduction (model/torch_sum.h) for every length, so the norm stays exactly
// what the fixtures were matched with.
#include "kernels/norm.h"

#include <gtest/gtest.h>

#include <cmath>
#include <random>

#include "core/thread_pool.h"
#include "kernels/rope.h"
#include "model/torch_sum.h"
#include "tests/kernels/ops_test_util.h"

namespace strata::kernels {
namespace {

class NormLevel : public testing::OpsLevel {};

// Lengths around every branch of the cascade: < 8 (scalar), tails of 8 and of 32, one level of 16
// rows and several, the V4.1 sizes (512, 1280, 4 * 5120).
const int64_t kLengths[] = {1,   2,   3,    5,    7,    8,    9,    15,   16,   31,   32,   33,    63,   64,
                            100, 127, 128,  129,  255,  511,  512,  513,  520,  1024, 1280, 2047, 2048, 4100,
                            5120, 8193, 20480, 65536 + 40};

TEST(MeanSquare, EqualsTorchOrderReference) {
  std::mt19937 rng(1);
  for (int64_t n : kLengths) {
    std::vector<float> x = testing::random_floats(static_cast<size_t>(n), rng, 3.0f);
    const float a = ref::mean_square(x.data(), n), b = model::torch_mean_square(x.data(), n);
    EXPECT_EQ(std::memcmp(&a, &b, 4), 0) << "n=" << n << " " << a << " vs " << b;
  }
}

TEST_P(NormLevel, MeanSquareMatchesRef) {
  std::mt19937 rng(2);
  for (int64_t n : kLengths) {
    std::vector<float> x = testing::random_floats(static_cast<size_t>(n + 1), rng, 0.01f);
    for (int64_t off : {0, 1}) {  // misaligned too
      const float a = mean_square(x.data() + off, n, level()), b = ref::mean_square(x.data() + off, n);
      EXPECT_EQ(std::memcmp(&a, &b, 4), 0) << "n=" << n << " off=" << off;
    }
  }
}

TEST_P(NormLevel, RmsNormMatchesRef) {
  std::mt19937 rng(3);
  ThreadPool pool(3);
  for (int64_t dim : {1, 7, 16, 33, 128, 512, 1280, 5120}) {
    for (int64_t rows : {1, 3, 17}) {
      std::vector<float> x = testing::random_floats(static_cast<size_t>(rows * dim), rng, 5.0f);
      std::vector<float> w = testing::random_floats(static_cast<size_t>(dim), rng);
      std::vector<float> y(x.size()), r(x.size());
      for (bool weighted : {true, false}) {
        const float* wp = weighted ? w.data() : nullptr;
        rms_norm(x.data(), rows, dim, wp, 1e-6f, y.data(), &pool, level());
        ref::rms_norm(x.data(), rows, dim, wp, 1e-6f, r.data());
        STRATA_EXPECT_BITS_EQ(y.data(), r.data(), rows * dim, "rms_norm dim=" + std::to_string(dim));
      }
      // In place.
      std::vector<float> z = x;
      rms_norm(z.data(), rows, dim, w.data(), 1e-6f, z.data(), nullptr, level());
      ref::rms_norm(x.data(), rows, dim, w.data(), 1e-6f, r.data());
      STRATA_EXPECT_BITS_EQ(z.data(), r.data(), rows * dim, "rms_norm in place");
    }
  }
}

TEST(RmsNorm, Definition) {
  const float x[3] = {1.0f, 2.0f, 2.0f}, w[3] = {1.0f, 0.5f, 2.0f};
  float y[3];
  ref::rms_norm(x, 1, 3, w, 0.0f, y);
  const double r = 1.0 / std::sqrt(3.0);  // mean of squares 3
  EXPECT_NEAR(y[0], r, 1e-7);
  EXPECT_NEAR(y[1], 0.5 * 2 * r, 1e-7);
  EXPECT_NEAR(y[2], 2 * 2 * r, 1e-6);
}

TEST_P(NormLevel, RopeMatchesRef) {
  std::mt19937 rng(4);
  for (int64_t rd : {2, 8, 16, 32, 64, 66, 128}) {
    const int64_t n_vec = 5, stride = rd + 3;
    std::vector<float> x = testing::random_floats(static_cast<size_t>(n_vec * stride), rng, 4.0f);
    std::vector<float> c(static_cast<size_t>(rd / 2)), s(static_cast<size_t>(rd / 2));
    std::uniform_real_distribution<float> ang(-10.0f, 10.0f);
    for (size_t i = 0; i < c.size(); ++i) {
      const float a = ang(rng);
      c[i] = std::cos(a);
      s[i] = std::sin(a);
    }
    for (bool inverse : {false, true}) {
      std::vector<float> y = x, r = x;
      rope_rotate(RopeArgs{y.data(), n_vec, stride, rd, c.data(), s.data(), inverse}, level());
      ref::rope_rotate(RopeArgs{r.data(), n_vec, stride, rd, c.data(), s.data(), inverse});
      STRATA_EXPECT_BITS_EQ(y.data(), r.data(), n_vec * stride, "rope rd=" + std::to_string(rd));
    }
  }
}

TEST(Rope, RotatesAndInverts) {
  const float c[1] = {0.0f}, s[1] = {1.0f};  // 90 degrees
  float x[2] = {1.0f, 2.0f};
  ref::rope_rotate(RopeArgs{x, 1, 2, 2, c, s, false});
  EXPECT_EQ(x[0], -2.0f);
  EXPECT_EQ(x[1], 1.0f);
  ref::rope_rotate(RopeArgs{x, 1, 2, 2, c, s, true});
  EXPECT_EQ(x[0], 1.0f);
  EXPECT_EQ(x[1], 2.0f);
}

INSTANTIATE_TEST_SUITE_P(Levels, NormLevel, ::testing::ValuesIn(kAllKernelLevels), testing::level_param_name);

}  // namespace
}  // namespace strata::kernels
