// Activation quantisation vs definitions written here from the fixtures README ("Kernel shims"),
// independently of core/dtype.h: scales through frexp, E4M3/E2M1 rounding by a brute-force nearest
// search over the grid (ties to the even code). Every kernel level the CPU supports must match bit for
// bit, including signed zeros.
#include "kernels/quant.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "kernels/dispatch.h"

namespace strata::kernels {
namespace {

// ---- independent definitions ------------------------------------------------------------------
// 2^ceil(log2(t)) for a positive float t.
float pow2_ceil(float t) {
  int e = 0;
  const float f = std::frexp(t, &e);  // t = f * 2^e, f in [0.5, 1)
  return f == 0.5f ? t : std::ldexp(1.0f, e);
}

float def_fp8_scale(float amax) { return pow2_ceil(std::fmax(amax, 1e-4f) * (1.0f / 448.0f)); }

// The non-negative E4M3 grid: e4m3 code c (0..126) -> value, computed from the format definition.
std::vector<double> e4m3_grid() {
  std::vector<double> g;
  for (int c = 0; c < 127; ++c) {
    const int e = c >> 3, m = c & 7;
    g.push_back(e == 0 ? m * std::ldexp(1.0, -9) : (1.0 + m / 8.0) * std::ldexp(1.0, e - 7));
  }
  return g;
}
const std::vector<double> kE4M3 = e4m3_grid();
const std::vector<double> kE2M1 = {0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0};

// Nearest grid value to |v| (v already clamped), ties to the even code; sign back unless zero.
float nearest(const std::vector<double>& grid, float v) {
  const double a = std::fabs(static_cast<double>(v));
  size_t best = 0;
  for (size_t c = 1; c < grid.size(); ++c) {
    const double d = std::fabs(grid[c] - a), db = std::fabs(grid[best] - a);
    if (d < db || (d == db && (c & 1) == 0)) best = c;
  }
  const float r = static_cast<float>(grid[best]);
  return (r != 0.0f && std::signbit(v)) ? -r : r;
}

float clampf(float v, float m) { return v > m ? m : (v < -m ? -m : v); }

void def_act_quant(std::vector<float>& x) {
  for (size_t b = 0; b < x.size(); b += 32) {
    float amax = 0;
    for (size_t j = 0; j < 32; ++j) amax = std::fmax(amax, std::fabs(x[b + j]));
    const float s = def_fp8_scale(amax);
    for (size_t j = 0; j < 32; ++j) x[b + j] = nearest(kE4M3, clampf(x[b + j] / s, 448.0f)) * s;
  }
}

void def_fp4_e8m0(std::vector<float>& x) {
  for (size_t b = 0; b < x.size(); b += 32) {
    float amax = 0;
    for (size_t j = 0; j < 32; ++j) amax = std::fmax(amax, std::fabs(x[b + j]));
    const float s = pow2_ceil(std::fmax(amax, 6.0f * std::ldexp(1.0f, -126)) * (1.0f / 6.0f));
    for (size_t j = 0; j < 32; ++j) x[b + j] = nearest(kE2M1, clampf(x[b + j] / s, 6.0f)) * s;
  }
}

void def_fp4_e4m3(std::vector<float>& x) {
  for (size_t b = 0; b < x.size(); b += 16) {
    float amax = 0;
    for (size_t j = 0; j < 16; ++j) amax = std::fmax(amax, std::fabs(x[b + j]));
    const float s = nearest(kE4M3, std::fmax(amax, 6.0f * std::ldexp(1.0f, -9)) / 6.0f);
    for (size_t j = 0; j < 16; ++j) x[b + j] = nearest(kE2M1, clampf(x[b + j] / s, 6.0f)) * s;
  }
}

// ---- inputs -----------------------------------------------------------------------------------
// Blocks of 32 chosen to hit the edges: random values over many magnitudes, exact midpoints of the
// E4M3 grid (after the block's scale), zeros and -0, an all-zero block, a tiny block (amax clamp),
// huge values, and all-negative blocks.
std::vector<float> edge_inputs(uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::uniform_int_distribution<int> expo(-30, 30);
  std::vector<float> x;
  auto push_block = [&](auto&& gen) {
    for (int j = 0; j < 32; ++j) x.push_back(gen(j));
  };
  for (int b = 0; b < 16; ++b) {  // random, one magnitude per block
    const float m = std::ldexp(1.0f, expo(rng));
    push_block([&](int) { return normal(rng) * m; });
  }
  for (int b = 0; b < 8; ++b) {  // E4M3 midpoints times the block's scale; element 0 sets amax
    const float amax = std::ldexp(448.0f, expo(rng));
    const float s = def_fp8_scale(amax);
    push_block([&](int j) {
      if (j == 0) return amax;
      const size_t c = static_cast<size_t>(rng() % 126);
      const float mid = static_cast<float>((kE4M3[c] + kE4M3[c + 1]) / 2);  // 5 significant bits: exact
      return ((j & 1) ? -mid : mid) * s;
    });
  }
  push_block([](int) { return 0.0f; });
  push_block([](int j) { return (j & 1) ? -0.0f : 0.0f; });
  push_block([&](int) { return normal(rng) * 1e-7f; });           // below the 1e-4 amax clamp
  push_block([&](int j) { return j == 3 ? 1e-4f : normal(rng) * 1e-9f; });
  push_block([&](int) { return normal(rng) * 1e30f; });           // huge
  push_block([&](int) { return -std::fabs(normal(rng)) - 0.1f; });  // negative
  push_block([&](int j) { return j == 0 ? 448.0f : std::ldexp(1.0f, -(j % 20)); });  // subnormal grid
  return x;
}

bool same_bits(float a, float b) { return std::memcmp(&a, &b, sizeof a) == 0; }

// ---- tests ------------------------------------------------------------------------------------
TEST(Quant, Fp8BlockScaleMatchesDefinition) {
  std::vector<float> amaxes = {0.0f, 1e-30f, 1e-4f, 448.0f, 224.0f, 1.0f, 3.0f, 1e30f, 0.5f, 447.99f};
  for (int e = -40; e <= 40; ++e) {
    const float p = std::ldexp(448.0f, e);
    amaxes.push_back(p);
    amaxes.push_back(std::nextafter(p, 0.0f));
    amaxes.push_back(std::nextafter(p, INFINITY));
  }
  for (float a : amaxes) EXPECT_TRUE(same_bits(fp8_block_scale(a), def_fp8_scale(a))) << "amax " << a;
  EXPECT_EQ(fp8_block_scale(448.0f), 1.0f);
  EXPECT_EQ(fp8_block_scale(0.0f), std::ldexp(1.0f, -22));  // 1e-4 / 448 = 2.2e-7 -> 2^-22
}

class QuantLevel : public ::testing::TestWithParam<KernelLevel> {
 protected:
  void SetUp() override {
    if (!kernel_level_supported(GetParam())) GTEST_SKIP() << kernel_level_name(GetParam()) << " not supported here";
  }
};

TEST_P(QuantLevel, ActQuantFp8InplaceMatchesDefinitionBitForBit) {
  for (uint32_t seed = 1; seed <= 4; ++seed) {
    const std::vector<float> x = edge_inputs(seed);
    std::vector<float> want = x, got = x;
    def_act_quant(want);
    act_quant_fp8_inplace(got.data(), static_cast<int64_t>(got.size()), 32, GetParam());
    for (size_t i = 0; i < x.size(); ++i)
      ASSERT_TRUE(same_bits(got[i], want[i])) << "i=" << i << " x=" << x[i] << " got " << got[i] << " want " << want[i];
  }
}

// A NaN in a block stays NaN (std::clamp keeps it in ref::act_quant_fp8_inplace) and does not enter
// the block's amax (std::max(amax, NaN) keeps amax), so the block's other values are the definition's
// bits. The vector levels once clamped it to -448 (VMAXPS returns its second operand on a NaN).
TEST_P(QuantLevel, ActQuantFp8KeepsNaNOutOfTheScale) {
  for (const size_t at : {size_t{0}, size_t{5}, size_t{31}}) {
    std::vector<float> x = edge_inputs(3);
    x[32 + at] = std::numeric_limits<float>::quiet_NaN();
    std::vector<float> want = x, got = x, r = x;
    want[32 + at] = 0.0f;  // the definition's other values: the NaN ignored
    def_act_quant(want);
    ref::act_quant_fp8_inplace(r.data(), static_cast<int64_t>(r.size()), 32);
    act_quant_fp8_inplace(got.data(), static_cast<int64_t>(got.size()), 32, GetParam());
    ASSERT_TRUE(std::isnan(r[32 + at])) << "reference";
    ASSERT_TRUE(std::isnan(got[32 + at])) << kernel_level_name(GetParam()) << " at " << at << " got " << got[32 + at];
    for (size_t i = 0; i < x.size(); ++i) {
      if (i == 32 + at) continue;
      ASSERT_TRUE(same_bits(r[i], want[i])) << "reference i=" << i;
      ASSERT_TRUE(same_bits(got[i], want[i])) << kernel_level_name(GetParam()) << " i=" << i << " x=" << x[i] << " got "
                                              << got[i] << " want " << want[i];
    }
  }
}

TEST_P(QuantLevel, ActQuantFp8InplaceMisalignedAndOffsets) {
  const std::vector<float> base = edge_inputs(7);
  for (size_t off = 1; off < 4; ++off) {
    std::vector<float> buf(base.size() + off);
    std::copy(base.begin(), base.end(), buf.begin() + static_cast<std::ptrdiff_t>(off));
    std::vector<float> want = base;
    def_act_quant(want);
    act_quant_fp8_inplace(buf.data() + off, static_cast<int64_t>(base.size()), 32, GetParam());
    for (size_t i = 0; i < base.size(); ++i) ASSERT_TRUE(same_bits(buf[off + i], want[i])) << "off " << off << " i " << i;
  }
}

INSTANTIATE_TEST_SUITE_P(Levels, QuantLevel, ::testing::ValuesIn(kAllKernelLevels),
                         [](const auto& info) { return std::string(kernel_level_name(info.param)); });

TEST(Quant, ActQuantFp8CodesAgreeWithInplace) {
  const std::vector<float> x = edge_inputs(11);
  const int64_t n = static_cast<int64_t>(x.size());
  std::vector<uint8_t> q(x.size());
  std::vector<float> s(x.size() / 32);
  act_quant_fp8(x.data(), n, q.data(), s.data());
  std::vector<float> want = x;
  def_act_quant(want);
  for (size_t i = 0; i < x.size(); ++i) {
    const int c = q[i];
    const int e = (c >> 3) & 0xF, m = c & 7;
    const double mag = e == 0 ? m * std::ldexp(1.0, -9) : (1.0 + m / 8.0) * std::ldexp(1.0, e - 7);
    const float v = static_cast<float>((c & 0x80) ? -mag : mag) * s[i / 32];
    ASSERT_EQ(v, want[i]) << "i " << i;
    ASSERT_EQ(s[i / 32], def_fp8_scale([&] {
                float a = 0;
                for (size_t j = i / 32 * 32; j < i / 32 * 32 + 32; ++j) a = std::fmax(a, std::fabs(x[j]));
                return a;
              }()));
  }
}

TEST(Quant, ActQuantOtherBlockSizesUseTheReference) {
  std::vector<float> x = edge_inputs(3);
  x.resize(64 * 8);
  std::vector<float> a = x, b = x;
  act_quant_fp8_inplace(a.data(), static_cast<int64_t>(a.size()), 64);
  ref::act_quant_fp8_inplace(b.data(), static_cast<int64_t>(b.size()), 64);
  for (size_t i = 0; i < x.size(); ++i) ASSERT_TRUE(same_bits(a[i], b[i]));
}

// Every level, the dispatched entry point and the reference, on the edge inputs plus E2M1 midpoints
// (amax 6 * 2^k gives s = 2^k) and a NaN inside a normal block (ignored by amax, quantised to +0).
TEST_P(QuantLevel, Fp4E8m0MatchesDefinitionBitForBit) {
  for (uint32_t seed = 1; seed <= 4; ++seed) {
    std::vector<float> x = edge_inputs(seed);
    std::mt19937 rng(seed);
    for (int b = 0; b < 4; ++b) {
      const int k = static_cast<int>(rng() % 20) - 10;
      const double mids[] = {0.25, 0.75, 1.25, 1.75, 2.5, 3.5, 5.0};
      for (int j = 0; j < 32; ++j)
        x.push_back(static_cast<float>(std::ldexp(j == 0 ? 6.0 : ((j & 1) ? -1 : 1) * mids[j % 7], k)));
    }
    for (int j = 0; j < 32; ++j) x.push_back(j == 5 ? std::nanf("") : static_cast<float>(j - 16) * 0.37f);
    std::vector<float> want = x, got = x, dispatched = x, reference = x;
    def_fp4_e8m0(want);
    const int64_t n = static_cast<int64_t>(x.size());
    fp4_quant_e8m0_inplace(got.data(), n, 32, GetParam());
    fp4_quant_e8m0_inplace(dispatched.data(), n);
    ref::fp4_quant_e8m0_inplace(reference.data(), n);
    for (size_t i = 0; i < x.size(); ++i) {
      ASSERT_TRUE(same_bits(got[i], want[i])) << "i=" << i << " x=" << x[i] << " got " << got[i] << " want " << want[i];
      ASSERT_TRUE(same_bits(dispatched[i], want[i])) << "dispatched, i=" << i;
      ASSERT_TRUE(same_bits(reference[i], want[i])) << "reference, i=" << i;
    }
  }
}

TEST(Quant, Fp4E4m3MatchesDefinitionBitForBit) {
  for (uint32_t seed = 1; seed <= 4; ++seed) {
    std::vector<float> x = edge_inputs(seed);
    std::vector<float> want = x, got = x;
    def_fp4_e4m3(want);
    fp4_quant_e4m3_inplace(got.data(), static_cast<int64_t>(got.size()));
    for (size_t i = 0; i < x.size(); ++i)
      ASSERT_TRUE(same_bits(got[i], want[i])) << "i=" << i << " x=" << x[i] << " got " << got[i] << " want " << want[i];
  }
  // amax below 6 * 2^-9 uses the smallest E4M3 scale 2^-9; an all-zero block stays zero.
  std::vector<float> z(16, 0.0f);
  fp4_quant_e4m3_inplace(z.data(), 16);
  for (float v : z) EXPECT_TRUE(same_bits(v, 0.0f));
}

TEST(Quant, KernelLevelBookkeeping) {
  EXPECT_TRUE(kernel_level_supported(KernelLevel::kScalar));
  EXPECT_TRUE(kernel_level_supported(best_kernel_level()));
  for (KernelLevel l : kAllKernelLevels) {
    if (kernel_level_supported(l)) {
      EXPECT_GE(static_cast<int>(best_kernel_level()), static_cast<int>(l));
    }
  }
  EXPECT_STREQ(kernel_level_name(KernelLevel::kAvx512Bf16), "avx512bf16");
}

}  // namespace
}  // namespace strata::kernels
