// mHC kernels: every level equals kernels::ref bit for bit; the Sinkhorn result is doubly
// stochastic; hc_pre/hc_post match their definitions.
#include "kernels/mhc.h"

#include <gtest/gtest.h>

#include <cmath>
#include <random>

#include "core/thread_pool.h"
#include "tests/kernels/ops_test_util.h"

namespace strata::kernels {
namespace {

class MhcLevel : public testing::OpsLevel {};

TEST_P(MhcLevel, PrePostMatchRef) {
  std::mt19937 rng(5);
  ThreadPool pool(2);
  for (int hc : {1, 3, 4, 8}) {
    for (int64_t dim : {1, 17, 64, 5120}) {
      for (int64_t n : {1, 2, 9}) {
        const size_t xs = static_cast<size_t>(n * hc * dim);
        std::vector<float> x = testing::random_floats(xs, rng, 2.0f);
        std::vector<float> pre = testing::random_floats(static_cast<size_t>(n * hc), rng);
        std::vector<float> post = testing::random_floats(static_cast<size_t>(n * hc), rng);
        std::vector<float> comb = testing::random_floats(static_cast<size_t>(n * hc * hc), rng);
        std::vector<float> f = testing::random_floats(static_cast<size_t>(n * dim), rng);
        std::vector<float> y(static_cast<size_t>(n * dim)), yr(y.size());
        const std::string tag = "hc=" + std::to_string(hc) + " dim=" + std::to_string(dim) + " n=" + std::to_string(n);
        hc_pre(x.data(), pre.data(), n, hc, dim, y.data(), &pool, level());
        ref::hc_pre(x.data(), pre.data(), n, hc, dim, yr.data());
        STRATA_EXPECT_BITS_EQ(y.data(), yr.data(), n * dim, "hc_pre " + tag);
        std::vector<float> a = x, b = x;
        hc_post(a.data(), f.data(), post.data(), comb.data(), n, hc, dim, &pool, level());
        ref::hc_post(b.data(), f.data(), post.data(), comb.data(), n, hc, dim);
        STRATA_EXPECT_BITS_EQ(a.data(), b.data(), static_cast<int64_t>(xs), "hc_post " + tag);
      }
    }
  }
}

TEST(Mhc, PrePostDefinition) {
  // hc 2, dim 1: y = 0.5*x0 + 2*x1; x'k = post_k f + sum_j comb[j][k] x_j.
  const float x[2] = {4.0f, 1.0f}, pre[2] = {0.5f, 2.0f}, post[2] = {1.0f, 3.0f};
  const float comb[4] = {0.25f, 0.75f, 0.5f, 0.5f}, f[1] = {2.0f};
  float y[1];
  ref::hc_pre(x, pre, 1, 2, 1, y);
  EXPECT_EQ(y[0], 4.0f);
  float z[2] = {4.0f, 1.0f};
  ref::hc_post(z, f, post, comb, 1, 2, 1);
  EXPECT_EQ(z[0], 1.0f * 2.0f + (0.25f * 4.0f + 0.5f * 1.0f));
  EXPECT_EQ(z[1], 3.0f * 2.0f + (0.75f * 4.0f + 0.5f * 1.0f));
}

TEST_P(MhcLevel, SinkhornMatchesRef) {
  std::mt19937 rng(6);
  ThreadPool pool(2);
  for (int hc : {1, 2, 4, 8, 12}) {
    const int mix = (2 + hc) * hc;
    for (int64_t n : {1, 5, 16, 17, 70}) {
      std::vector<float> m = testing::random_floats(static_cast<size_t>(n * mix), rng, 3.0f);
      std::vector<float> base = testing::random_floats(static_cast<size_t>(mix), rng);
      const float scale[3] = {0.7f, 1.3f, 2.0f};
      HcSplitParams p{hc, 20, 1e-6f, scale, base.data()};
      std::vector<float> pre(static_cast<size_t>(n * hc)), post(pre.size()), comb(static_cast<size_t>(n * hc * hc));
      std::vector<float> pre_r(pre.size()), post_r(pre.size()), comb_r(comb.size());
      hc_split_sinkhorn(m.data(), n, p, pre.data(), post.data(), comb.data(), &pool, level());
      ref::hc_split_sinkhorn(m.data(), n, p, pre_r.data(), post_r.data(), comb_r.data());
      const std::string tag = "hc=" + std::to_string(hc) + " n=" + std::to_string(n);
      STRATA_EXPECT_BITS_EQ(pre.data(), pre_r.data(), n * hc, "pre " + tag);
      STRATA_EXPECT_BITS_EQ(post.data(), post_r.data(), n * hc, "post " + tag);
      STRATA_EXPECT_BITS_EQ(comb.data(), comb_r.data(), n * hc * hc, "comb " + tag);
      // Doubly stochastic after 20 iterations (columns exactly normalised last, rows nearly).
      for (int64_t t = 0; t < n; ++t) {
        for (int k = 0; k < hc; ++k) {
          double cs = 0, rs = 0;
          for (int j = 0; j < hc; ++j) {
            cs += comb[static_cast<size_t>(t * hc * hc + j * hc + k)];
            rs += comb[static_cast<size_t>(t * hc * hc + k * hc + j)];
          }
          EXPECT_NEAR(cs, 1.0, 1e-4) << tag;
          EXPECT_NEAR(rs, 1.0, 0.1) << tag;  // rows converge slowly for peaked mixes (20 rounds)
        }
        for (int j = 0; j < hc; ++j) {
          EXPECT_GT(pre[static_cast<size_t>(t * hc + j)], 0.0f);
          EXPECT_LT(post[static_cast<size_t>(t * hc + j)], 2.0f);
        }
      }
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Levels, MhcLevel, ::testing::ValuesIn(kAllKernelLevels), testing::level_param_name);

}  // namespace
}  // namespace strata::kernels
