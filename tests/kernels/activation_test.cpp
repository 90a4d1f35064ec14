// exp_f32 and SwiGLU: every level equals kernels::ref bit for bit; exp_f32 equals the C library's
// expf on glibc with FMA (the libm the model's scalar code used before these kernels), over a
// dense sample of all f32 inputs here and over every input in the `slow` test.
#include "kernels/activation.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <memory>
#include <random>

#include "core/cpu_features.h"
#include "core/thread_pool.h"
#include "kernels/detail/exp_table.h"
#include "tests/kernels/exp_check.h"
#include "tests/kernels/ops_test_util.h"

namespace strata::kernels {
namespace {

class ActivationLevel : public testing::OpsLevel {};

TEST(ExpTable, EntriesAreTheNearestDoublesToPowersOfTwo) {
  for (int i = 0; i < 32; ++i) {
    const uint64_t bits = detail::kExpTable[i] + (static_cast<uint64_t>(i) << 47);
    double d;
    std::memcpy(&d, &bits, sizeof d);
    const long double exact = std::exp2l(static_cast<long double>(i) / 32.0L);
    // Nearest: within half an ulp of the double (2^-53 relative in [1, 2)).
    EXPECT_LE(std::fabs(static_cast<long double>(d) - exact), std::ldexp(1.0L, -53)) << i;
  }
}

TEST(Exp, SpecialValues) {
  EXPECT_EQ(exp_f32(0.0f), 1.0f);
  EXPECT_EQ(exp_f32(-0.0f), 1.0f);
  EXPECT_EQ(exp_f32(-INFINITY), 0.0f);
  EXPECT_EQ(exp_f32(INFINITY), INFINITY);
  EXPECT_TRUE(std::isnan(exp_f32(NAN)));
  EXPECT_EQ(exp_f32(89.0f), INFINITY);
  EXPECT_EQ(exp_f32(-104.0f), 0.0f);
  EXPECT_EQ(exp_f32(1.0f), 2.71828182f);
  EXPECT_GT(exp_f32(88.7f), 3e38f);
}


TEST(Exp, AllLevelsAndLibmOnASample) { check_exp_range(12345, 251); }

TEST_P(ActivationLevel, ExpTails) {
  std::mt19937 rng(7);
  for (int64_t n : {0, 1, 3, 7, 8, 15, 16, 17, 31, 33, 100}) {
    std::vector<float> x = testing::random_floats(static_cast<size_t>(n), rng, 30.0f), y(x.size()), r(x.size());
    exp_f32(x.data(), n, y.data(), level());
    ref::exp_f32(x.data(), n, r.data());
    STRATA_EXPECT_BITS_EQ(y.data(), r.data(), n, "exp n=" + std::to_string(n));
  }
}

TEST_P(ActivationLevel, SwigluMatchesRef) {
  std::mt19937 rng(11);
  ThreadPool pool(3);
  struct Case {
    int64_t n, inter;
    float limit;
    bool scaled;
  };
  for (const Case c : {Case{1, 2304, 10.0f, true}, Case{3, 17, 10.0f, false}, Case{5, 100, 0.0f, true},
                       Case{40, 96, 7.0f, true}, Case{2, 1, 10.0f, false}}) {
    const size_t total = static_cast<size_t>(c.n * c.inter);
    std::vector<float> g = testing::random_floats(total, rng, 8.0f), u = testing::random_floats(total, rng, 8.0f);
    std::vector<float> s = testing::random_floats(static_cast<size_t>(c.n), rng);
    if (total > 4) {
      g[0] = 150.0f;  // past the clamp
      g[1] = -120.0f; // exp overflow inside silu
      u[2] = -11.0f;
      u[3] = 10.0f;
    }
    std::vector<float> y(total), r(total);
    SwigluArgs a{g.data(), u.data(), c.scaled ? s.data() : nullptr, c.n, c.inter, c.limit, y.data()};
    swiglu(a, &pool, level());
    a.out = r.data();
    ref::swiglu(a);
    STRATA_EXPECT_BITS_EQ(y.data(), r.data(), static_cast<int64_t>(total),
                          "swiglu n=" + std::to_string(c.n) + " inter=" + std::to_string(c.inter));
  }
}

TEST(Swiglu, Definition) {
  // silu(min(g, 10)) * clamp(u, -10, 10) * scale, checked against double math.
  const float g[4] = {1.0f, -2.0f, 20.0f, 0.0f}, u[4] = {3.0f, 0.5f, 2.0f, -30.0f}, s = 0.5f;
  float y[4];
  ref::swiglu(SwigluArgs{g, u, &s, 1, 4, 10.0f, y});
  auto silu = [](double v) { return v / (1.0 + std::exp(-v)); };
  EXPECT_NEAR(y[0], 0.5 * silu(1.0) * 3.0, 1e-6);
  EXPECT_NEAR(y[1], 0.5 * silu(-2.0) * 0.5, 1e-6);
  EXPECT_NEAR(y[2], 0.5 * silu(10.0) * 2.0, 1e-5);
  EXPECT_EQ(y[3], 0.0f);
}

INSTANTIATE_TEST_SUITE_P(Levels, ActivationLevel, ::testing::ValuesIn(kAllKernelLevels), testing::level_param_name);

}  // namespace
}  // namespace strata::kernels
