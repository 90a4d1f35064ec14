// Fast linear layers vs the scalar references, over a table of shapes (tails in out and in, n from 1
// to prefill sizes), misaligned pointers (gemma.cpp ForeachCountAndMisalign), thread counts, every
// weight format and every kernel level the CPU supports.
//
// FP8/FP4 tolerance: the products are exact (E4M3 x E4M3/E2M1 values), so fast and ref differ only
// in the order of the f32 additions. BF16/F32 must equal ref bit for bit (see that test). Any
// order of m additions errs by at most (m - 1) u sum|terms| (u = 2^-24), and both sides use blocked
// or multi-accumulator sums shorter than in/16 + 64 steps, so we require
//   |fast - ref| <= (in/16 + 64) * 2^-24 * sum_k |x_k w_k|   (+1e-30 for all-zero rows).
// For in = 5120 that is 2.3e-5 of sum|terms|; the observed error is far below (checked loosely by
// the RMS assertion, which catches a wrong-but-within-bound pattern such as a dropped block).
#include "kernels/linear.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstring>
#include <limits>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "core/dtype.h"
#include "core/thread_pool.h"
#include "kernels/detail/ops_table.h"
#include "kernels/dispatch.h"
#include "kernels/quant.h"

namespace strata::kernels {
namespace {

struct Shape {
  int64_t n, out, in;
};

// A vector with its data offset by `misalign` elements from a 64-byte boundary.
template <class T>
struct Buf {
  std::vector<T> storage;
  size_t off;
  Buf(size_t n, size_t misalign) : storage(n + 64), off(misalign) {}
  T* data() { return storage.data() + off; }
  const T* data() const { return storage.data() + off; }
  T& operator[](size_t i) { return storage[off + i]; }
};

// Activations: per row a random magnitude (1e-6 .. 1e3), some all-zero 32-blocks, a few huge entries.
Buf<float> make_x(int64_t n, int64_t in, size_t misalign, std::mt19937& rng) {
  Buf<float> x(static_cast<size_t>(n * in), misalign);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::uniform_int_distribution<int> expo(-20, 10);
  for (int64_t i = 0; i < n; ++i) {
    const float m = std::ldexp(1.0f, expo(rng));
    for (int64_t k = 0; k < in; ++k) x[i * in + k] = normal(rng) * m;
    if (in >= 64 && rng() % 3 == 0)
      for (int64_t k = 32; k < 64; ++k) x[i * in + k] = 0.0f;
    if (rng() % 4 == 0) x[i * in + rng() % in] = 50.0f * m;
  }
  return x;
}

uint8_t random_e4m3(std::mt19937& rng) {
  uint8_t c;
  do c = static_cast<uint8_t>(rng()); while ((c & 0x7F) == 0x7F);  // no NaN codes
  return c;
}

// Scale codes around 2^0 (typical checkpoint scales are 2^-12 .. 2^0), or wide (2^-117 .. 2^72,
// finite products) to hit the BF16 level's fallback.
uint8_t random_scale(std::mt19937& rng, bool wide) {
  return wide ? static_cast<uint8_t>(10 + rng() % 190) : static_cast<uint8_t>(112 + rng() % 24);
}

struct Check {
  double max_ratio = 0;  // max |d| / bound
  double sum_sq = 0;     // sum of (|d| / sum|terms|)^2
  int64_t count = 0;
};

// Compares y against yref with the bound above; `terms(i, r)` returns sum_k |x_k w_k| in double.
template <class Terms>
void compare(const float* y, const float* yref, int64_t n, int64_t out, int64_t in, Terms terms, const std::string& what) {
  Check c;
  const double u = std::ldexp(1.0, -24);
  for (int64_t i = 0; i < n; ++i) {
    for (int64_t r = 0; r < out; ++r) {
      const double t = terms(i, r);
      const double bound = (in / 16.0 + 64.0) * u * t + 1e-30;
      const double d = std::fabs(static_cast<double>(y[i * out + r]) - yref[i * out + r]);
      ASSERT_TRUE(std::isfinite(y[i * out + r])) << what << " i=" << i << " r=" << r;
      ASSERT_LE(d, bound) << what << " i=" << i << " r=" << r << " y=" << y[i * out + r] << " ref=" << yref[i * out + r]
                          << " sum|terms|=" << t;
      if (t > 0) c.sum_sq += (d / t) * (d / t);
      ++c.count;
    }
  }
  // Typical error: a few u per output, far below the worst-case bound.
  EXPECT_LE(std::sqrt(c.sum_sq / static_cast<double>(c.count)), 64 * u) << what;
}

const std::vector<Shape> kQuantShapes = {
    {1, 1, 32},     {1, 5, 64},     {1, 31, 96},    {1, 32, 128},  {1, 33, 160},  {1, 100, 384},
    {1, 130, 1024}, {1, 64, 5120},  {1, 7, 2304},   {2, 47, 64},   {3, 33, 96},   {7, 100, 160},
    {2, 64, 1024},  {16, 49, 384},  {17, 12, 128},  {33, 130, 256}, {70, 97, 384}, {5, 300, 2304},
    {40, 64, 5120}, {300, 50, 64},  {257, 13, 96},
    {1, 70, 448},   {4, 33, 448},  // in % 128 == 64: the 8 GB checkpoint's down projections
    {1, 33, 17408}, {5, 20, 17408},  // in > 16384: scratch moves from the stack to the heap
};

class LinearLevel : public ::testing::TestWithParam<KernelLevel> {
 protected:
  void SetUp() override {
    if (!kernel_level_supported(GetParam())) GTEST_SKIP() << kernel_level_name(GetParam()) << " not supported here";
  }
  KernelLevel level() const { return GetParam(); }
};

void fp8_case(KernelLevel level, Shape s, size_t misalign, ThreadPool* pool, bool wide_scales, uint32_t seed) {
  std::mt19937 rng(seed);
  const int64_t scale_rows = (s.out + 31) / 32, scale_cols = (s.in + 31) / 32;
  Buf<uint8_t> wq(static_cast<size_t>(s.out * s.in), misalign);
  Buf<uint8_t> ws(static_cast<size_t>(scale_rows * scale_cols), misalign);
  for (int64_t i = 0; i < s.out * s.in; ++i) wq[i] = random_e4m3(rng);
  for (int64_t i = 0; i < scale_rows * scale_cols; ++i) ws[i] = random_scale(rng, wide_scales);
  const Fp8Weight w{wq.data(), ws.data(), s.out, s.in};
  Buf<float> x = make_x(s.n, s.in, misalign, rng);
  Buf<float> y(static_cast<size_t>(s.n * s.out), misalign);
  std::vector<float> yref(static_cast<size_t>(s.n * s.out));
  linear_fp8(x.data(), s.n, w, y.data(), pool, level);
  ref::linear_fp8(x.data(), s.n, w, yref.data());

  std::vector<float> xq(x.data(), x.data() + s.n * s.in), wd(static_cast<size_t>(s.out * s.in));
  ref::act_quant_fp8_inplace(xq.data(), s.n * s.in);
  dequant_fp8(w, wd.data());
  auto terms = [&](int64_t i, int64_t r) {
    double t = 0;
    for (int64_t k = 0; k < s.in; ++k) t += std::fabs(static_cast<double>(xq[i * s.in + k]) * wd[r * s.in + k]);
    return t;
  };
  compare(y.data(), yref.data(), s.n, s.out, s.in, terms,
          std::string("fp8 ") + kernel_level_name(level) + " n=" + std::to_string(s.n) + " out=" + std::to_string(s.out) +
              " in=" + std::to_string(s.in) + " misalign=" + std::to_string(misalign));
}

void fp4_case(KernelLevel level, Shape s, size_t misalign, ThreadPool* pool, bool wide_scales, uint32_t seed) {
  std::mt19937 rng(seed);
  Buf<uint8_t> wq(static_cast<size_t>(s.out * s.in / 2), misalign);
  Buf<uint8_t> ws(static_cast<size_t>(s.out * s.in / 32), misalign);
  for (int64_t i = 0; i < s.out * s.in / 2; ++i) wq[i] = static_cast<uint8_t>(rng());
  for (int64_t i = 0; i < s.out * s.in / 32; ++i) ws[i] = random_scale(rng, wide_scales);
  const Fp4Weight w{wq.data(), ws.data(), s.out, s.in};
  Buf<float> x = make_x(s.n, s.in, misalign, rng);
  Buf<float> y(static_cast<size_t>(s.n * s.out), misalign);
  std::vector<float> yref(static_cast<size_t>(s.n * s.out));
  linear_fp4(x.data(), s.n, w, y.data(), pool, level);
  ref::linear_fp4(x.data(), s.n, w, yref.data());

  std::vector<float> xq(x.data(), x.data() + s.n * s.in), wd(static_cast<size_t>(s.out * s.in));
  ref::act_quant_fp8_inplace(xq.data(), s.n * s.in);
  dequant_fp4(w, wd.data());
  auto terms = [&](int64_t i, int64_t r) {
    double t = 0;
    for (int64_t k = 0; k < s.in; ++k) t += std::fabs(static_cast<double>(xq[i * s.in + k]) * wd[r * s.in + k]);
    return t;
  };
  compare(y.data(), yref.data(), s.n, s.out, s.in, terms,
          std::string("fp4 ") + kernel_level_name(level) + " n=" + std::to_string(s.n) + " out=" + std::to_string(s.out) +
              " in=" + std::to_string(s.in) + " misalign=" + std::to_string(misalign));
}

TEST_P(LinearLevel, Fp8MatchesReference) {
  ThreadPool pool(3);
  uint32_t seed = 100;
  for (const Shape& s : kQuantShapes) {
    seed += 2;
    fp8_case(level(), s, 0, nullptr, false, seed);
    fp8_case(level(), s, 1 + seed % 3, &pool, false, seed + 1);
  }
}

TEST_P(LinearLevel, Fp4MatchesReference) {
  ThreadPool pool(3);
  uint32_t seed = 200;
  for (const Shape& s : kQuantShapes) {
    seed += 2;
    fp4_case(level(), s, 0, nullptr, false, seed);
    fp4_case(level(), s, 1 + seed % 3, &pool, false, seed + 1);
  }
}

// Row i of x [n, in] against weight row r of packed E2M1 codes wq [out, in / 2] with E8M0 block
// scales ws [out, in / 32], summed in double (exact for the tests' values).
double fp4_exact_dot(const std::vector<float>& x, int64_t i, const std::vector<uint8_t>& wq,
                     const std::vector<uint8_t>& ws, int64_t r, int64_t in) {
  double exact = 0;
  for (int64_t k = 0; k < in; ++k) {
    const uint8_t code = (wq[static_cast<size_t>(r * in / 2 + k / 2)] >> ((k & 1) * 4)) & 0xF;
    exact += static_cast<double>(x[static_cast<size_t>(i * in + k)]) * e2m1_to_f32(code) *
             e8m0_to_f32(ws[static_cast<size_t>(r * (in / 32) + k / 32)]);
  }
  return exact;
}

// linear_fp4 of x [n, in] at `level`: every output equals fp4_exact_dot rounded once, bit for bit
// (the test's sums must be exact in f32; nonzero: and not 0).
void expect_fp4_exact(KernelLevel level, const std::vector<float>& x, int64_t n, const std::vector<uint8_t>& wq,
                      const std::vector<uint8_t>& ws, int64_t out, int64_t in, bool nonzero, const std::string& what) {
  std::vector<float> y(static_cast<size_t>(n * out));
  linear_fp4(x.data(), n, Fp4Weight{wq.data(), ws.data(), out, in}, y.data(), nullptr, level);
  for (int64_t i = 0; i < n; ++i)
    for (int64_t r = 0; r < out; ++r) {
      const double exact = fp4_exact_dot(x, i, wq, ws, r, in);
      ASSERT_EQ(static_cast<double>(static_cast<float>(exact)), exact) << "the test's sum must be exact in f32";
      if (nonzero) {
        ASSERT_NE(exact, 0.0) << "the test needs a nonzero sum";
      }
      ASSERT_EQ(std::bit_cast<uint32_t>(y[static_cast<size_t>(i * out + r)]),
                std::bit_cast<uint32_t>(static_cast<float>(exact)))
          << kernel_level_name(level) << " " << what << " n=" << n << " i=" << i << " r=" << r
          << " y=" << y[static_cast<size_t>(i * out + r)] << " exact=" << exact;
    }
}

// Rows whose sums are exact in f32 come out exact at every level, bit for bit. The AVX2 level's
// integer dot (kernels/x86/fp4_int_matvec_avx2.h) keeps each act_quant value |q| / s_x * 2^9 whole
// in one of three byte planes (below 2^8, 2^8 .. 2^13, 2^13 .. 2^18) and skips plane 0 in the groups
// flagged empty: each row here draws its x values from one plane's range (every E4M3 code there,
// both signs, the boundaries included), so a value put in the wrong plane, at the wrong shift or
// with the wrong sign, or a flag that skips a nonempty plane 0 changes the bits. A 448 * 2^t anchor
// in each block fixes s_x = 2^t (kernels/ref/quant.cpp fp8_block_scale), its weight code 0 or 8
// (+-0). Shapes: one block (a lone half group), two, and ten blocks (the four-group loop, a tail
// group), at n = 1 to 3 (the decode kernels) and 5 (prefill tiles).
TEST_P(LinearLevel, Fp4ExactSumsComeOutExact) {
  std::mt19937 rng(601);
  // E4M3 magnitudes (codes 1-126) by plane of |v| * 2^9: [1, 2^8), [2^8, 2^13), [2^13, 2^18).
  std::vector<float> plane_values[3];
  for (int c = 1; c < 127; ++c) {
    const float v = e4m3_to_f32(static_cast<uint8_t>(c));
    const float m = v * 512.0f;
    plane_values[m < 256.0f ? 0 : m < 8192.0f ? 1 : 2].push_back(v);
  }
  ASSERT_EQ(plane_values[0].front() * 512.0f, 1.0f);  // the smallest subnormal
  ASSERT_EQ(plane_values[2].back(), 448.0f);
  for (const int64_t in : {int64_t{32}, int64_t{64}, int64_t{320}}) {
    const int64_t nkb = in / 32;
    for (const int64_t n : {int64_t{1}, int64_t{2}, int64_t{3}, int64_t{5}}) {
      for (int plane = 0; plane < 3; ++plane) {
        for (const int t : {-20, 0, 30}) {
          const int64_t out = 9;
          std::vector<uint8_t> wq(static_cast<size_t>(out * in / 2)), ws(static_cast<size_t>(out * nkb));
          for (auto& c : wq) c = static_cast<uint8_t>(rng());
          // One block: any scale near 1; several: all 1, so the sum of the blocks stays exact.
          for (auto& c : ws) c = nkb == 1 ? static_cast<uint8_t>(124 + rng() % 7) : 127;
          std::vector<float> x(static_cast<size_t>(n * in));
          const std::vector<float>& vals = plane_values[plane];
          for (int64_t i = 0; i < n; ++i)
            for (int64_t k = 0; k < in; ++k) {
              const float v = vals[(static_cast<size_t>(i * in + k) * 7 + rng() % 3) % vals.size()];
              x[static_cast<size_t>(i * in + k)] = std::ldexp(rng() % 2 ? -v : v, t);
            }
          // The anchor: element 5 of each block of row i is +-448 2^t, times a zero weight.
          for (int64_t i = 0; i < n; ++i)
            for (int64_t b = 0; b < nkb; ++b)
              x[static_cast<size_t>(i * in + 32 * b + 5)] = std::ldexp(i % 2 ? -448.0f : 448.0f, t);
          for (int64_t r = 0; r < out; ++r)
            for (int64_t b = 0; b < nkb; ++b) {
              uint8_t& byte = wq[static_cast<size_t>(r * in / 2 + 16 * b + 2)];  // element 5: high nibble
              byte = static_cast<uint8_t>((byte & 0x0F) | (r % 2 ? 0x80 : 0x00));
            }
          expect_fp4_exact(level(), x, n, wq, ws, out, in, false,
                           "in=" + std::to_string(in) + " plane " + std::to_string(plane) + " t=" + std::to_string(t));
        }
      }
    }
  }
}

// The same exactness where plane 0 is nonempty in some groups of a row and empty in the others (so
// a flag stored for the wrong group skips values), each block with its own s_x (2^0, 2^1, 2^2) and
// its own weight scale, over the four-group loop followed by a lone group and a trailing odd block
// (in = 352: 11 blocks) or by the odd block alone (in = 288). Only plane-0 values are nonzero, so
// every sum stays exact in f32.
TEST_P(LinearLevel, Fp4PlaneZeroFlagsFollowTheirGroups) {
  std::mt19937 rng(603);
  std::vector<float> tiny;  // E4M3 values with |v| * 2^9 < 2^8
  for (int c = 1; c < 127; ++c)
    if (e4m3_to_f32(static_cast<uint8_t>(c)) * 512.0f < 256.0f) tiny.push_back(e4m3_to_f32(static_cast<uint8_t>(c)));
  for (const int64_t in : {int64_t{288}, int64_t{352}}) {
    const int64_t nkb = in / 32, out = 11;
    for (int pattern = 0; pattern < 4; ++pattern) {
      std::vector<uint8_t> wq(static_cast<size_t>(out * in / 2)), ws(static_cast<size_t>(out * nkb));
      for (auto& c : wq) c = static_cast<uint8_t>(rng());
      for (int64_t r = 0; r < out; ++r)
        for (int64_t b = 0; b < nkb; ++b) {
          ws[static_cast<size_t>(r * nkb + b)] = static_cast<uint8_t>(126 + (b + r) % 3);
          uint8_t& byte = wq[static_cast<size_t>(r * in / 2 + 16 * b + 2)];  // the anchor's weight: 0
          byte &= 0x0F;
        }
      std::vector<float> x(static_cast<size_t>(in), 0.0f);
      for (int64_t b = 0; b < nkb; ++b) {
        const int t = static_cast<int>(b % 3);
        x[static_cast<size_t>(32 * b + 5)] = std::ldexp(448.0f, t);
        if (((b + pattern) % 3 == 0) == (pattern != 3))  // which blocks hold tiny values
          for (int64_t j = 0; j < 32; ++j)
            if (j != 5 && rng() % 2) {
              const float v = tiny[rng() % tiny.size()];
              x[static_cast<size_t>(32 * b + j)] = std::ldexp(rng() % 2 ? -v : v, t);
            }
      }
      for (const int64_t n : {int64_t{1}, int64_t{2}}) {
        std::vector<float> xs(static_cast<size_t>(n * in));
        for (int64_t i = 0; i < n; ++i) std::copy(x.begin(), x.end(), xs.begin() + i * in);
        std::vector<float> y(static_cast<size_t>(n * out));
        linear_fp4(xs.data(), n, Fp4Weight{wq.data(), ws.data(), out, in}, y.data(), nullptr, level());
        for (int64_t r = 0; r < out; ++r) {
          const double exact = fp4_exact_dot(x, 0, wq, ws, r, in);
          ASSERT_EQ(static_cast<double>(static_cast<float>(exact)), exact) << "the test's sum must be exact in f32";
          for (int64_t i = 0; i < n; ++i)
            ASSERT_EQ(std::bit_cast<uint32_t>(y[static_cast<size_t>(i * out + r)]),
                      std::bit_cast<uint32_t>(static_cast<float>(exact)))
                << kernel_level_name(level()) << " in=" << in << " pattern " << pattern << " i=" << i << " r=" << r
                << " y=" << y[static_cast<size_t>(i * out + r)] << " exact=" << exact;
        }
      }
    }
  }
}

// The AVX2 integer dot multiplies each block's two factors (s_x 2^-10 and the weight's scale, powers
// of two) once per four groups; where that product leaves the floats it must take the two steps,
// or a tiny factor flushes a representable sum to 0 and an infinite one turns a zero sum into NaN.
// Case 0: s_x = 2^-22 (act_quant's floor) and scale codes 1-5 (factors 2^-158 .. 2^-154), sums of
// plane-2 values that stay exact among the subnormals. Case 1: block 0 of the row has s_x = 2^30,
// scale code 254 (factor 2^147) and only zero weights, the other blocks s_x = 1 and scale 1. The
// exact sum, rounded once, is every level's answer. in = 320: the four-group loop and a lone group.
// Case 2: where the two steps' first product overflows (x = 448 * 2^119 everywhere, s_x 2^-10 =
// 2^109, weights +6, scale 2^-40) the result is +inf as in the reference and the two steps, not the
// finite exact sum the fused factor would give (a new-user trial found that). Case 3 below.
TEST_P(LinearLevel, Fp4FactorsOutsideTheFloats) {
  std::mt19937 rng(605);
  std::vector<float> top;  // E4M3 magnitudes with |v| * 2^9 >= 2^13 (plane 2: multiples of 2^10)
  for (int c = 1; c < 127; ++c)
    if (e4m3_to_f32(static_cast<uint8_t>(c)) * 512.0f >= 8192.0f) top.push_back(e4m3_to_f32(static_cast<uint8_t>(c)));
  const int64_t in = 320, nkb = in / 32, out = 6;
  for (int kase = 0; kase < 2; ++kase) {
    for (const int64_t n : {int64_t{1}, int64_t{2}}) {
      std::vector<uint8_t> wq(static_cast<size_t>(out * in / 2)), ws(static_cast<size_t>(out * nkb));
      for (auto& c : wq) c = static_cast<uint8_t>(rng());
      for (int64_t r = 0; r < out; ++r)
        for (int64_t b = 0; b < nkb; ++b) {
          uint8_t& sc = ws[static_cast<size_t>(r * nkb + b)];
          sc = kase == 0 ? static_cast<uint8_t>(1 + rng() % 5) : b == 0 ? 254 : 127;
          if (kase == 1 && b == 0)
            for (int64_t k = 0; k < 16; ++k) wq[static_cast<size_t>(r * in / 2 + k)] = 0;
        }
      std::vector<float> x(static_cast<size_t>(n * in));
      for (int64_t i = 0; i < n; ++i)
        for (int64_t k = 0; k < in; ++k) {
          const int t = kase == 0 ? -22 : k < 32 ? 30 : 0;
          const float v = top[rng() % top.size()];
          // The anchor (element 5 of each block, +-448 2^t) fixes s_x = 2^t.
          x[static_cast<size_t>(i * in + k)] = std::ldexp(k % 32 == 5 ? 448.0f : rng() % 2 ? -v : v, t);
        }
      expect_fp4_exact(level(), x, n, wq, ws, out, in, true, "case " + std::to_string(kase));
    }
  }
  for (const int64_t in2 : {int64_t{256}, int64_t{512}}) {
    std::vector<float> x(static_cast<size_t>(in2), std::ldexp(448.0f, 119));
    std::vector<uint8_t> wq(static_cast<size_t>(in2 / 2), 0x77), ws(static_cast<size_t>(in2 / 32), 87);
    const Fp4Weight w{wq.data(), ws.data(), 1, in2};
    float y = 0, yref = 0;
    linear_fp4(x.data(), 1, w, &y, nullptr, level());
    ref::linear_fp4(x.data(), 1, w, &yref);
    ASSERT_EQ(yref, std::numeric_limits<float>::infinity()) << "the reference's partial sums overflow here";
    EXPECT_EQ(y, yref) << kernel_level_name(level()) << " case 2 in=" << in2;
  }
  // Case 3: x = +-2^124 cancelling inside one block (weights +6): the reference sums q e2m1 to 0; a
  // sum of x e2m1 overflows halfway (the AVX-512 f32 rows' late-scaled sum once gave inf here; a
  // new-user trial found it).
  for (const int64_t in3 : {int64_t{32}, int64_t{64}}) {
    std::vector<float> x(static_cast<size_t>(in3), 0.0f);
    for (int k = 0; k < 6; ++k) x[static_cast<size_t>(k)] = std::ldexp(k < 3 ? 1.0f : -1.0f, 124);
    std::vector<uint8_t> wq(static_cast<size_t>(in3 / 2), 0), ws(static_cast<size_t>(in3 / 32), 100);
    for (int k = 0; k < 3; ++k) wq[static_cast<size_t>(k)] = 0x77;
    const Fp4Weight w{wq.data(), ws.data(), 1, in3};
    float y = 1, yref = 1;
    linear_fp4(x.data(), 1, w, &y, nullptr, level());
    ref::linear_fp4(x.data(), 1, w, &yref);
    ASSERT_EQ(yref, 0.0f) << "the reference's block sum cancels";
    EXPECT_EQ(y, yref) << kernel_level_name(level()) << " case 3 in=" << in3;
  }
}

// Weight scale codes up to 254 (2^127): from code 253 an E2M1 value times the scale (4 * 2^126)
// leaves the floats, so a kernel that folds the scale into f32 weights (the f32 engine's tables and
// GEMM tiles) cannot hold the weight, while the reference scales each block's partial sum, s_x then
// s_w, and is finite wherever that product is. The prompt GEMM once gave NaN or inf for finite
// reference outputs there (a new-user trial found it), as did the AVX-512 f32 decode rows. Each
// row's codes lie in [hi - 12, hi] with hi anywhere in 200 .. 254. Where sum |x w| fits the floats
// the output must be finite and within the usual bound; where the reference overflowed, not finite.
// In between (the terms, not the result, past the floats) a reordered sum may overflow: unchecked.
TEST_P(LinearLevel, Fp4HighScaleCodesMatchReference) {
  ThreadPool pool(2);
  std::mt19937 rng(607);
  const int64_t out = 48, in = 256, nkb = in / 32;
  int64_t checked_top = 0;  // checked outputs of rows with a code of 253 or 254
  for (const int64_t n : {int64_t{1}, int64_t{3}, int64_t{9}, int64_t{17}}) {
    std::vector<uint8_t> wq(static_cast<size_t>(out * in / 2)), ws(static_cast<size_t>(out * nkb));
    for (auto& c : wq) c = static_cast<uint8_t>(rng());
    for (int64_t r = 0; r < out; ++r) {
      const int hi = 200 + static_cast<int>(rng() % 55);
      for (int64_t b = 0; b < nkb; ++b) ws[static_cast<size_t>(r * nkb + b)] = static_cast<uint8_t>(hi - rng() % 13);
    }
    Buf<float> x = make_x(n, in, 0, rng);
    const Fp4Weight w{wq.data(), ws.data(), out, in};
    std::vector<float> y(static_cast<size_t>(n * out)), yref(y.size());
    linear_fp4(x.data(), n, w, y.data(), &pool, level());
    ref::linear_fp4(x.data(), n, w, yref.data());
    std::vector<float> xq(x.data(), x.data() + n * in);
    ref::act_quant_fp8_inplace(xq.data(), n * in);
    for (int64_t i = 0; i < n; ++i)
      for (int64_t r = 0; r < out; ++r) {
        const float got = y[static_cast<size_t>(i * out + r)], want = yref[static_cast<size_t>(i * out + r)];
        const std::string what = std::string(kernel_level_name(level())) + " n=" + std::to_string(n) +
                                 " i=" + std::to_string(i) + " r=" + std::to_string(r);
        if (!std::isfinite(want)) {  // overflowed: which of inf and NaN depends on the order of the sums
          EXPECT_FALSE(std::isfinite(got)) << what << " y=" << got << " ref=" << want;
          continue;
        }
        double terms = 0;  // sum |xq w| in double: w = e2m1 * 2^(code - 127) can exceed the floats
        int top = 0;
        for (int64_t k = 0; k < in; ++k) {
          const int code = ws[static_cast<size_t>(r * nkb + k / 32)];
          const uint8_t nib = (wq[static_cast<size_t>(r * in / 2 + k / 2)] >> ((k & 1) * 4)) & 0xF;
          terms += std::fabs(static_cast<double>(xq[static_cast<size_t>(i * in + k)]) * e2m1_to_f32(nib)) *
                   std::ldexp(1.0, code - 127);
          top = std::max(top, code);
        }
        if (terms >= std::numeric_limits<float>::max()) continue;
        if (top >= 253) ++checked_top;
        EXPECT_TRUE(std::isfinite(got)) << what << " y=" << got << " ref=" << want << " top code " << top;
        EXPECT_LE(std::fabs(static_cast<double>(got) - want), (in / 16.0 + 64.0) * std::ldexp(1.0, -24) * terms)
            << what << " y=" << got << " ref=" << want;
      }
  }
  EXPECT_GT(checked_top, 20) << "the test must check outputs of rows with codes 253 and 254";
}

// A NaN or an infinity in a row of x makes that row's outputs NaN, as in the reference (act_quant
// turns its values into NaN: std::clamp keeps a NaN, and an infinite amax makes s_x infinite). The
// AVX2 and AVX-512 act_quant once clamped a NaN to -448; the AVX2 level's FP4 integer dot cannot
// carry a NaN and hands such rows to its float kernel.
TEST_P(LinearLevel, NonFiniteInputGivesNaNAsReference) {
  std::mt19937 rng(602);
  const int64_t out = 7;
  for (const int64_t in : {int64_t{64}, int64_t{96}, int64_t{1024}}) {
    std::vector<uint8_t> w4(static_cast<size_t>(out * in / 2)), s4(static_cast<size_t>(out * in / 32));
    std::vector<uint8_t> w8(static_cast<size_t>(out * in)), s8(static_cast<size_t>(in / 32));
    for (auto& c : w4) c = static_cast<uint8_t>(rng());
    for (auto& c : s4) c = random_scale(rng, false);
    for (auto& c : w8) c = random_e4m3(rng);
    for (auto& c : s8) c = random_scale(rng, false);
    const Fp4Weight f4{w4.data(), s4.data(), out, in};
    const Fp8Weight f8{w8.data(), s8.data(), out, in};
    for (const float bad : {std::numeric_limits<float>::quiet_NaN(), std::numeric_limits<float>::infinity(),
                            -std::numeric_limits<float>::infinity()}) {
      for (const int64_t n : {int64_t{1}, int64_t{3}, int64_t{6}}) {
        Buf<float> x = make_x(n, in, 0, rng);
        x[static_cast<size_t>((n - 1) * in + in / 2 + 3)] = bad;  // the last row only
        for (const bool fp4 : {true, false}) {
          std::vector<float> y(static_cast<size_t>(n * out)), yref(y.size());
          if (fp4) {
            linear_fp4(x.data(), n, f4, y.data(), nullptr, level());
            ref::linear_fp4(x.data(), n, f4, yref.data());
          } else {
            linear_fp8(x.data(), n, f8, y.data(), nullptr, level());
            ref::linear_fp8(x.data(), n, f8, yref.data());
          }
          for (int64_t i = 0; i < n; ++i)
            for (int64_t r = 0; r < out; ++r) {
              const size_t at = static_cast<size_t>(i * out + r);
              ASSERT_EQ(std::isnan(yref[at]), i == n - 1) << "reference: the NaN stays in its row of x";
              ASSERT_EQ(std::isnan(y[at]), std::isnan(yref[at]))
                  << (fp4 ? "fp4 " : "fp8 ") << kernel_level_name(level()) << " in=" << in << " n=" << n
                  << " bad=" << bad << " i=" << i << " r=" << r;
            }
        }
      }
    }
  }
}

// Scale codes far from 1 (2^-117 .. 2^72): the AVX-512 BF16 level must hand these to the f32 level.
TEST_P(LinearLevel, ExtremeScalesMatchReference) {
  ThreadPool pool(2);
  for (const Shape& s : {Shape{1, 70, 256}, Shape{9, 70, 256}}) {
    fp8_case(level(), s, 0, &pool, true, 300);
    fp4_case(level(), s, 0, &pool, true, 301);
  }
}

// Scale codes 24 higher with x 2^24 smaller: the same exact products, so the same bits at every
// level. On the AVX2 level the weights then take the path for x * s_w * 2^120 overflowing (codes
// above 134, kernels/x86/fp8_matvec_avx2.h), and this checks it sums the same products in the same
// order as the usual path. x keeps every 32-block's amax above 1e-4 after the shift, so
// act_quant_fp8's scale moves by exactly 2^-24 too.
TEST_P(LinearLevel, Fp8ScaleOverflowPathKeepsTheBits) {
  ThreadPool pool(2);
  std::mt19937 rng(500);
  for (const Shape& s : {Shape{1, 64, 256}, Shape{3, 70, 160}, Shape{1, 33, 5120}}) {
    const int64_t nsc = (s.out + 31) / 32 * (s.in / 32);
    std::vector<uint8_t> wq(static_cast<size_t>(s.out * s.in)), lo(static_cast<size_t>(nsc)), hi(lo.size());
    for (uint8_t& c : wq) c = random_e4m3(rng);
    for (size_t i = 0; i < lo.size(); ++i) {
      // 2^-15 .. 2^-5: |xq * s_w| <= 2^12 * 2^-5 < 2^8 (the 4000 below quantises to 2^12).
      lo[i] = static_cast<uint8_t>(112 + rng() % 11);
      hi[i] = static_cast<uint8_t>(lo[i] + 24);  // 136 .. 146: s_w * 2^120 overflows
    }
    std::normal_distribution<float> normal(0.0f, 30.0f);
    std::vector<float> x(static_cast<size_t>(s.n * s.in)), xs(x.size());
    for (size_t k = 0; k < x.size(); ++k) x[k] = k % 32 == 5 ? 4000.0f : normal(rng);
    for (size_t k = 0; k < x.size(); ++k) xs[k] = std::ldexp(x[k], -24);
    std::vector<float> a(static_cast<size_t>(s.n * s.out)), b(a.size());
    linear_fp8(x.data(), s.n, Fp8Weight{wq.data(), lo.data(), s.out, s.in}, a.data(), &pool, level());
    linear_fp8(xs.data(), s.n, Fp8Weight{wq.data(), hi.data(), s.out, s.in}, b.data(), &pool, level());
    for (size_t i = 0; i < a.size(); ++i)
      ASSERT_EQ(std::bit_cast<uint32_t>(a[i]), std::bit_cast<uint32_t>(b[i]))
          << kernel_level_name(level()) << " n=" << s.n << " out=" << s.out << " in=" << s.in << " element " << i
          << ": " << a[i] << " vs " << b[i];
  }
}

// BF16/F32 products are not exact, so the order is part of the result; every level reproduces the
// reference (k in order, product and sum rounded separately) bit for bit. The model depends on it:
// attn.wo_a (BF16) feeds act_quant_fp8, where one ulp can flip a whole E4M3 step.
TEST_P(LinearLevel, Bf16AndF32EqualReferenceBitForBit) {
  const std::vector<Shape> shapes = {{1, 8, 64},    {1, 1, 1},      {1, 3, 7},       {1, 17, 33},   {1, 129, 100},
                                     {1, 40, 4096}, {2, 5, 17},     {3, 33, 129},    {7, 8, 64},    {33, 49, 100},
                                     {64, 31, 95},  {100, 129, 64}, {20, 40, 1023},  {1, 9, 17001}, {9, 5, 17001},
                                     {197, 32, 128}, {1, 32, 128},  {5, 48, 300}};
  ThreadPool pool(3);
  std::mt19937 rng(400);
  for (const Shape& s : shapes) {
    for (size_t misalign : {size_t{0}, size_t{1}, size_t{3}}) {
      Buf<uint16_t> wb(static_cast<size_t>(s.out * s.in), misalign);
      Buf<float> wf(static_cast<size_t>(s.out * s.in), misalign);
      std::normal_distribution<float> normal(0.0f, 0.05f);
      for (int64_t i = 0; i < s.out * s.in; ++i) {
        wf[i] = normal(rng);
        wb[i] = f32_to_bf16(wf[i]);
      }
      Buf<float> x = make_x(s.n, s.in, misalign, rng);
      Buf<float> y(static_cast<size_t>(s.n * s.out), misalign);
      std::vector<float> yref(static_cast<size_t>(s.n * s.out));
      ThreadPool* p = misalign == 1 ? nullptr : &pool;
      const std::string tag = std::string(kernel_level_name(level())) + " n=" + std::to_string(s.n) +
                              " out=" + std::to_string(s.out) + " in=" + std::to_string(s.in) +
                              " misalign=" + std::to_string(misalign);
      const size_t bytes = yref.size() * sizeof(float);

      const Bf16Weight w16{wb.data(), s.out, s.in};
      linear_bf16(x.data(), s.n, w16, y.data(), p, level());
      ref::linear_bf16(x.data(), s.n, w16, yref.data());
      ASSERT_EQ(0, std::memcmp(y.data(), yref.data(), bytes)) << "bf16 " << tag;

      const F32Weight w32{wf.data(), s.out, s.in};
      linear_f32(x.data(), s.n, w32, y.data(), p, level());
      ref::linear_f32(x.data(), s.n, w32, yref.data());
      ASSERT_EQ(0, std::memcmp(y.data(), yref.data(), bytes)) << "f32 " << tag;
    }
  }
}

// The any-order BF16 path (LM head): the FP8/FP4 bound against the reference, every level, decode
// and prefill sizes, tails in out and in; forced decode rows up to 17 (the AMX level's one to three
// packed column tiles and a second group of x rows).
TEST_P(LinearLevel, Bf16AnyOrderWithinBound) {
  ThreadPool pool(3);
  std::mt19937 rng(450);
  for (const Shape& s : std::vector<Shape>{{1, 1, 1}, {1, 17, 33}, {1, 129, 1024}, {3, 40, 4096}, {1, 300, 5120},
                                           {7, 9, 17001}, {8, 33, 96}, {20, 40, 1023}, {11, 77, 512}, {16, 50, 64},
                                           {17, 49, 128}, {6, 100, 32}, {1, 16, 1}, {3, 48, 4096}, {8, 32, 96},
                                           {9, 160, 17001}, {17, 64, 128}, {11, 80, 512}, {2, 1024, 5120}}) {
    for (const RowPath path : {RowPath::kAuto, RowPath::kDecode}) {
      Buf<uint16_t> wb(static_cast<size_t>(s.out * s.in), 1);
      std::normal_distribution<float> normal(0.0f, 0.05f);
      for (int64_t i = 0; i < s.out * s.in; ++i) wb[i] = f32_to_bf16(normal(rng));
      Buf<float> x = make_x(s.n, s.in, 2, rng);
      std::vector<float> y(static_cast<size_t>(s.n * s.out)), yref(y.size());
      const Bf16Weight w{wb.data(), s.out, s.in};
      linear_bf16_any_order(x.data(), s.n, w, y.data(), &pool, level(), path);
      ref::linear_bf16(x.data(), s.n, w, yref.data());
      auto terms = [&](int64_t i, int64_t r) {
        double t = 0;
        for (int64_t k = 0; k < s.in; ++k)
          t += std::fabs(static_cast<double>(x[i * s.in + k]) * bf16_to_f32(wb[r * s.in + k]));
        return t;
      };
      const std::string tag = std::string(kernel_level_name(level())) + " n=" + std::to_string(s.n) +
                              " out=" + std::to_string(s.out) + " in=" + std::to_string(s.in) +
                              (path == RowPath::kDecode ? " decode" : " auto");
      compare(y.data(), yref.data(), s.n, s.out, s.in, terms, "bf16 any-order " + tag);
      // The blocked layout (the LM head's): one fused chain per output, the same bound.
      if (s.out % kBf16BlockRows == 0) {
        Buf<uint16_t> blocked(static_cast<size_t>(s.out * s.in), 0);
        block_bf16_rows(wb.data(), s.out, s.in, blocked.data());
        std::fill(y.begin(), y.end(), -1.0f);
        linear_bf16_any_order(x.data(), s.n, Bf16Weight{blocked.data(), s.out, s.in, true}, y.data(), &pool, level(),
                              path);
        compare(y.data(), yref.data(), s.n, s.out, s.in, terms, "bf16 any-order blocked " + tag);
      }
    }
  }
}

// linear_bf16_any_order_rows (the LM head writing each entry's logits into its own buffer) gives the
// bits of linear_bf16_any_order, rows in any order of buffers, wherever any_order_writes_rows says it
// may run (a blocked weight's decode rows on a vector level).
TEST_P(LinearLevel, Bf16AnyOrderRowsEqualBlock) {
  ThreadPool pool(3);
  std::mt19937 rng(460);
  int ran = 0;
  for (const Shape& s : std::vector<Shape>{{1, 16, 33}, {3, 48, 512}, {8, 160, 512}, {7, 64, 1000}, {12, 32, 96}}) {
    for (const RowPath path : {RowPath::kAuto, RowPath::kDecode}) {
      Buf<uint16_t> wb(static_cast<size_t>(s.out * s.in), 1), blocked(static_cast<size_t>(s.out * s.in), 0);
      std::normal_distribution<float> normal(0.0f, 0.05f);
      for (int64_t i = 0; i < s.out * s.in; ++i) wb[i] = f32_to_bf16(normal(rng));
      block_bf16_rows(wb.data(), s.out, s.in, blocked.data());
      const Bf16Weight w{blocked.data(), s.out, s.in, true};
      if (!any_order_writes_rows(w, s.n, path, level())) continue;
      ++ran;
      Buf<float> x = make_x(s.n, s.in, 2, rng);
      std::vector<float> block(static_cast<size_t>(s.n * s.out));
      linear_bf16_any_order(x.data(), s.n, w, block.data(), &pool, level(), path);
      // Row i into buffer n - 1 - i, each its own allocation.
      std::vector<std::vector<float>> bufs(static_cast<size_t>(s.n), std::vector<float>(static_cast<size_t>(s.out), -1.0f));
      std::vector<float*> rows(static_cast<size_t>(s.n));
      for (int64_t i = 0; i < s.n; ++i) rows[static_cast<size_t>(i)] = bufs[static_cast<size_t>(s.n - 1 - i)].data();
      linear_bf16_any_order_rows(x.data(), s.n, w, rows.data(), &pool, level(), path);
      for (int64_t i = 0; i < s.n; ++i)
        EXPECT_EQ(0, std::memcmp(rows[static_cast<size_t>(i)], block.data() + i * s.out, static_cast<size_t>(s.out) * sizeof(float)))
            << kernel_level_name(level()) << " n=" << s.n << " out=" << s.out << " in=" << s.in << " row " << i;
    }
  }
  if (ran == 0) GTEST_SKIP() << kernel_level_name(level()) << " runs no row-writing any-order kernel";
}

// The any-order path is scale-free like an f32 dot product: x rows of 2^-60 and 2^60 times the usual
// magnitude (and weights of 2^-40 times it) stay within the bound; the AMX level scales each x row
// to a largest |value| in [1, 2) before splitting it, since its tile unit flushes products below
// 2^-126 (found by a break test: 1e-18-scaled rows were off by 1e-3 before). An infinite x value
// gives an infinite logit at every level, not NaN (the AMX split once made inf - inf).
TEST_P(LinearLevel, Bf16AnyOrderScaleFreeAndInfinite) {
  ThreadPool pool(2);
  std::mt19937 rng(470);
  for (const Shape& s : std::vector<Shape>{{1, 70, 512}, {5, 33, 96}, {9, 40, 1024}}) {
    for (const double xs : {std::ldexp(1.0, -60), std::ldexp(1.0, 60)}) {
      for (const double ws : {1.0, std::ldexp(1.0, -40)}) {
        Buf<uint16_t> wb(static_cast<size_t>(s.out * s.in), 0);
        std::normal_distribution<float> normal(0.0f, 0.05f);
        for (int64_t i = 0; i < s.out * s.in; ++i) wb[i] = f32_to_bf16(static_cast<float>(normal(rng) * ws));
        Buf<float> x = make_x(s.n, s.in, 0, rng);
        for (int64_t i = 0; i < s.n * s.in; ++i) x[i] = static_cast<float>(x[i] * xs);
        std::vector<float> y(static_cast<size_t>(s.n * s.out)), yref(y.size());
        const Bf16Weight w{wb.data(), s.out, s.in};
        linear_bf16_any_order(x.data(), s.n, w, y.data(), &pool, level(), RowPath::kDecode);
        ref::linear_bf16(x.data(), s.n, w, yref.data());
        auto terms = [&](int64_t i, int64_t r) {
          double t = 0;
          for (int64_t k = 0; k < s.in; ++k)
            t += std::fabs(static_cast<double>(x[i * s.in + k]) * bf16_to_f32(wb[r * s.in + k]));
          return t;
        };
        compare(y.data(), yref.data(), s.n, s.out, s.in, terms,
                std::string("bf16 any-order scaled ") + kernel_level_name(level()) + " n=" + std::to_string(s.n) +
                    " in=" + std::to_string(s.in) + " x*" + std::to_string(std::ilogb(xs)) + " w*" +
                    std::to_string(std::ilogb(ws)));
      }
    }
  }
  // One infinite value in a row of ones, positive weights: +inf (not NaN) for that row only.
  const int64_t in = 64, out = 3;
  std::vector<uint16_t> wb(static_cast<size_t>(out * in), f32_to_bf16(0.5f));
  std::vector<float> x(static_cast<size_t>(2 * in), 1.0f), y(static_cast<size_t>(2 * out));
  x[5] = std::numeric_limits<float>::infinity();
  linear_bf16_any_order(x.data(), 2, Bf16Weight{wb.data(), out, in}, y.data(), nullptr, level(), RowPath::kDecode);
  for (int64_t r = 0; r < out; ++r) {
    EXPECT_EQ(y[r], std::numeric_limits<float>::infinity()) << kernel_level_name(level()) << " r=" << r;
    EXPECT_EQ(y[out + r], 32.0f) << kernel_level_name(level()) << " r=" << r;
  }
}

// Results do not depend on the thread count (each output is computed by one thread, same order).
TEST_P(LinearLevel, ThreadCountDoesNotChangeResults) {
  std::mt19937 rng(500);
  const Shape s{9, 200, 512};
  std::vector<uint8_t> wq(static_cast<size_t>(s.out * s.in)), ws(static_cast<size_t>(7 * 16));
  for (auto& c : wq) c = random_e4m3(rng);
  for (auto& c : ws) c = random_scale(rng, false);
  const Fp8Weight w{wq.data(), ws.data(), s.out, s.in};
  Buf<float> x = make_x(s.n, s.in, 0, rng);
  std::vector<float> y1(static_cast<size_t>(s.n * s.out)), y4(y1.size());
  ThreadPool pool(4);
  for (int64_t n : {int64_t{1}, s.n}) {
    linear_fp8(x.data(), n, w, y1.data(), nullptr, level());
    linear_fp8(x.data(), n, w, y4.data(), &pool, level());
    EXPECT_EQ(0, std::memcmp(y1.data(), y4.data(), static_cast<size_t>(n * s.out) * sizeof(float))) << "n=" << n;
  }
}

// A decode row's bits do not depend on its neighbours: pool passes cut rows anywhere (kernels/detail
// kernel_table.h, FormatKernels::matvec's contract) and the kernels sum rows in groups (the BF16
// level 16 at a time), so each row of a whole-matrix call must equal that row alone, bit for bit.
// 37 rows leave a partial group; in = 96 ends in a half chunk (FP8), 448 in a partial one (FP4).
TEST_P(LinearLevel, DecodeRowEqualsTheRowAlone) {
  std::mt19937 rng(501);
  for (int64_t in : {int64_t{64}, int64_t{96}, int64_t{256}, int64_t{448}, int64_t{1024}, int64_t{2080}}) {
    const int64_t out = 37, nkb = in / 32;
    std::vector<uint8_t> w8(static_cast<size_t>(out * in)), s8(static_cast<size_t>((out + 31) / 32 * nkb));
    std::vector<uint8_t> w4(static_cast<size_t>(out * in / 2)), s4(static_cast<size_t>(out * nkb));
    for (auto& c : w8) c = random_e4m3(rng);
    for (auto& c : s8) c = random_scale(rng, false);
    for (auto& c : w4) c = static_cast<uint8_t>(rng());
    for (auto& c : s4) c = random_scale(rng, false);
    const Fp8Weight f8{w8.data(), s8.data(), out, in};
    const Fp4Weight f4{w4.data(), s4.data(), out, in};
    for (int64_t n : {int64_t{1}, int64_t{2}, int64_t{3}}) {
      Buf<float> x = make_x(n, in, 0, rng);
      std::vector<float> all8(static_cast<size_t>(n * out)), all4(all8.size()), one(static_cast<size_t>(n));
      linear_fp8(x.data(), n, f8, all8.data(), nullptr, level());
      linear_fp4(x.data(), n, f4, all4.data(), nullptr, level());
      for (int64_t r = 0; r < out; ++r) {
        // One row of FP8 keeps its [32, 32] scale block's row of scales; one row of MXFP4 its own.
        linear_fp8(x.data(), n, Fp8Weight{w8.data() + r * in, s8.data() + (r / 32) * nkb, 1, in}, one.data(), nullptr,
                   level());
        for (int64_t i = 0; i < n; ++i)
          ASSERT_EQ(std::bit_cast<uint32_t>(one[i]), std::bit_cast<uint32_t>(all8[i * out + r]))
              << "fp8 in=" << in << " n=" << n << " row " << r;
        linear_fp4(x.data(), n, Fp4Weight{w4.data() + r * in / 2, s4.data() + r * nkb, 1, in}, one.data(), nullptr,
                   level());
        for (int64_t i = 0; i < n; ++i)
          ASSERT_EQ(std::bit_cast<uint32_t>(one[i]), std::bit_cast<uint32_t>(all4[i * out + r]))
              << "fp4 in=" << in << " n=" << n << " row " << r;
      }
    }
  }
}

// A weight with its scale range known (with_scale_range: the BF16 level then skips reading the
// scales per call) computes the same bits as without, scales in the level's range or not (wide
// ones send it to its fallback either way), and the range is the scales' min and max.
TEST_P(LinearLevel, Fp8ScaleRangeKeepsTheBits) {
  std::mt19937 rng(502);
  const Shape s{9, 70, 256};
  for (bool wide : {false, true}) {
    std::vector<uint8_t> wq(static_cast<size_t>(s.out * s.in)), ws(static_cast<size_t>(3 * 8));
    for (auto& c : wq) c = random_e4m3(rng);
    for (auto& c : ws) c = random_scale(rng, wide);
    if (wide) ws[5] = 1;  // below the BF16 level's smallest scale
    const Fp8Weight w{wq.data(), ws.data(), s.out, s.in};
    const Fp8Weight ranged = with_scale_range(w);
    EXPECT_EQ(ranged.scale_lo, *std::min_element(ws.begin(), ws.end()));
    EXPECT_EQ(ranged.scale_hi, *std::max_element(ws.begin(), ws.end()));
    Buf<float> x = make_x(s.n, s.in, 0, rng);
    std::vector<float> a(static_cast<size_t>(s.n * s.out)), b(a.size());
    ThreadPool pool(2);
    for (int64_t n : {int64_t{1}, int64_t{3}, s.n}) {
      linear_fp8(x.data(), n, w, a.data(), &pool, level());
      linear_fp8(x.data(), n, ranged, b.data(), &pool, level());
      EXPECT_EQ(0, std::memcmp(a.data(), b.data(), static_cast<size_t>(n * s.out) * sizeof(float)))
          << kernel_level_name(level()) << " n=" << n << (wide ? " wide scales" : "");
    }
  }
}

// A batch computes every job exactly as its own call would: shared activations (two jobs on one x),
// mixed shapes, a job over the GEMM threshold, an empty job, and wide scales that send the BF16
// level's jobs to its fallback.
TEST_P(LinearLevel, BatchEqualsSeparateCalls) {
  std::mt19937 rng(700);
  ThreadPool pool(3);
  struct Spec {
    int64_t n, out, in;
    int x;  // which activation
    bool wide;
  };
  const std::vector<Spec> specs = {{1, 256, 512, 0, false}, {1, 256, 512, 0, false}, {1, 5, 512, 0, true},
                                   {3, 100, 256, 1, false}, {1, 1024, 256, 2, false}, {40, 64, 256, 3, false},
                                   {0, 64, 256, 2, false},  {1, 33, 512, 0, false}};
  std::vector<Buf<float>> xs;
  xs.push_back(make_x(1, 512, 0, rng));
  xs.push_back(make_x(3, 256, 0, rng));
  xs.push_back(make_x(1, 256, 0, rng));
  xs.push_back(make_x(40, 256, 0, rng));
  std::vector<std::vector<uint8_t>> wq, ws;
  std::vector<LinearJob<Fp8Weight>> j8;
  std::vector<LinearJob<Fp4Weight>> j4;
  std::vector<std::vector<float>> y8, y4, want8, want4;
  for (const Spec& sp : specs) {
    wq.emplace_back(static_cast<size_t>(sp.out * sp.in));
    ws.emplace_back(static_cast<size_t>(sp.out * sp.in / 32));
    for (auto& c : wq.back()) c = random_e4m3(rng);
    for (auto& c : ws.back()) c = random_scale(rng, sp.wide);
    const size_t ny = static_cast<size_t>(std::max<int64_t>(sp.n, 1) * sp.out);
    y8.emplace_back(ny, -1.0f), y4.emplace_back(ny, -1.0f), want8.emplace_back(ny, -1.0f), want4.emplace_back(ny, -1.0f);
  }
  for (size_t i = 0; i < specs.size(); ++i) {
    const Spec& sp = specs[i];
    const float* x = xs[static_cast<size_t>(sp.x)].data();
    const Fp8Weight w8{wq[i].data(), ws[i].data(), sp.out, sp.in};
    const Fp4Weight w4{wq[i].data(), ws[i].data(), sp.out, sp.in};
    j8.push_back({x, sp.n, w8, y8[i].data()});
    j4.push_back({x, sp.n, w4, y4[i].data()});
    linear_fp8(x, sp.n, w8, want8[i].data(), &pool, level());
    linear_fp4(x, sp.n, w4, want4[i].data(), &pool, level());
  }
  linear_fp8_batch(j8, &pool, level());
  linear_fp4_batch(j4, &pool, level());
  for (size_t i = 0; i < specs.size(); ++i) {
    EXPECT_EQ(0, std::memcmp(y8[i].data(), want8[i].data(), y8[i].size() * sizeof(float))) << "fp8 job " << i;
    EXPECT_EQ(0, std::memcmp(y4[i].data(), want4[i].data(), y4[i].size() * sizeof(float))) << "fp4 job " << i;
  }
  // Serial (no pool) gives the same bits too.
  linear_fp4_batch(j4, nullptr, level());
  for (size_t i = 0; i < specs.size(); ++i)
    EXPECT_EQ(0, std::memcmp(y4[i].data(), want4[i].data(), y4[i].size() * sizeof(float))) << "fp4 serial job " << i;

  // FP8 and FP4 jobs in one pass (a decode step's shared expert beside its routed experts): the
  // same bits as each format's own calls, with the pool, serially and with either list empty.
  for (ThreadPool* p : {static_cast<ThreadPool*>(&pool), static_cast<ThreadPool*>(nullptr)}) {
    for (int empty = 0; empty < 3; ++empty) {
      for (auto& y : y8) std::fill(y.begin(), y.end(), -1.0f);
      for (auto& y : y4) std::fill(y.begin(), y.end(), -1.0f);
      const std::span<const LinearJob<Fp8Weight>> a = empty == 1 ? std::span<const LinearJob<Fp8Weight>>() : j8;
      const std::span<const LinearJob<Fp4Weight>> b = empty == 2 ? std::span<const LinearJob<Fp4Weight>>() : j4;
      linear_batch(LinearBatch{a, b, {}, {}}, p, level());
      for (size_t i = 0; i < specs.size(); ++i) {
        if (empty != 1) {
          EXPECT_EQ(0, std::memcmp(y8[i].data(), want8[i].data(), y8[i].size() * sizeof(float)))
              << "mixed pass, fp8 job " << i << (p ? "" : " serial") << " empty " << empty;
        }
        if (empty != 2) {
          EXPECT_EQ(0, std::memcmp(y4[i].data(), want4[i].data(), y4[i].size() * sizeof(float)))
              << "mixed pass, fp4 job " << i << (p ? "" : " serial") << " empty " << empty;
        }
      }
    }
  }

  // BF16 (bit-exact order, x read in place): the wo_a groups of a decode step, slices of one x.
  const int64_t groups = 8, rank = 40, gin = 96;
  Buf<float> xo = make_x(1, groups * gin, 0, rng);
  std::vector<uint16_t> wb(static_cast<size_t>(groups * rank * gin));
  for (auto& b : wb) b = f32_to_bf16(std::normal_distribution<float>(0.0f, 1.0f)(rng));
  std::vector<float> yb(static_cast<size_t>(groups * rank), -1.0f), wantb(yb.size(), -1.0f);
  std::vector<LinearJob<Bf16Weight>> jb;
  for (int64_t g = 0; g < groups; ++g) {
    const Bf16Weight part{wb.data() + g * rank * gin, rank, gin};
    jb.push_back({xo.data() + g * gin, 1, part, yb.data() + g * rank});
    linear_bf16(xo.data() + g * gin, 1, part, wantb.data() + g * rank, &pool, level());
  }
  linear_bf16_batch(jb, &pool, level());
  EXPECT_EQ(0, std::memcmp(yb.data(), wantb.data(), yb.size() * sizeof(float))) << "bf16 batch";

  // Every format in one pass, with an F32 job (an mHC projection: 24 rows, x read in place) and the
  // prompt-sized jobs above (run through their GEMMs before the pass): each job's bits as alone.
  const int64_t mix = 24, width = 512;
  std::vector<float> wf(static_cast<size_t>(mix * width));
  for (float& v : wf) v = std::normal_distribution<float>(0.0f, 0.1f)(rng);
  Buf<float> xf = make_x(1, width, 0, rng);
  std::vector<float> yf(static_cast<size_t>(mix), -1.0f), wantf(yf.size(), -1.0f);
  const F32Weight fw{wf.data(), mix, width};
  linear_f32(xf.data(), 1, fw, wantf.data(), &pool, level());
  const std::vector<LinearJob<F32Weight>> jf = {{xf.data(), 1, fw, yf.data(), RowPath::kDecode}};
  for (ThreadPool* p : {static_cast<ThreadPool*>(&pool), static_cast<ThreadPool*>(nullptr)}) {
    for (auto& y : y8) std::fill(y.begin(), y.end(), -1.0f);
    for (auto& y : y4) std::fill(y.begin(), y.end(), -1.0f);
    std::fill(yb.begin(), yb.end(), -1.0f);
    std::fill(yf.begin(), yf.end(), -1.0f);
    linear_batch(LinearBatch{j8, j4, jb, jf}, p, level());
    for (size_t i = 0; i < specs.size(); ++i) {
      EXPECT_EQ(0, std::memcmp(y8[i].data(), want8[i].data(), y8[i].size() * sizeof(float))) << "all formats, fp8 job " << i;
      EXPECT_EQ(0, std::memcmp(y4[i].data(), want4[i].data(), y4[i].size() * sizeof(float))) << "all formats, fp4 job " << i;
    }
    EXPECT_EQ(0, std::memcmp(yb.data(), wantb.data(), yb.size() * sizeof(float))) << "all formats, bf16 jobs";
    EXPECT_EQ(0, std::memcmp(yf.data(), wantf.data(), yf.size() * sizeof(float))) << "all formats, f32 job";
  }
}

// The blocked BF16 layout (attn.wo_a) gives the row-major layout's bits at every level: decode rows
// (split over a pool at unit boundaries), the GEMM path, the batch, and the scalar reference.
TEST_P(LinearLevel, Bf16BlockedEqualsRowMajor) {
  std::mt19937 rng(800);
  ThreadPool pool(3);
  // 2-7 rows: several decode rows share the blocked weights (bf16_blocked_rows_nx), with tails of
  // weight rows (out not a multiple of 64) and of x rows (n not a multiple of 4).
  for (const Shape s : {Shape{1, 16, 40}, Shape{1, 64, 768}, Shape{3, 48, 96}, Shape{1, 192, 128}, Shape{20, 32, 64},
                        Shape{300, 80, 48}, Shape{4, 192, 768}, Shape{7, 80, 40}, Shape{2, 144, 64}, Shape{5, 64, 33}}) {
    std::vector<uint16_t> wr(static_cast<size_t>(s.out * s.in)), wb(wr.size());
    for (auto& b : wr) b = f32_to_bf16(std::normal_distribution<float>(0.0f, 1.0f)(rng));
    block_bf16_rows(wr.data(), s.out, s.in, wb.data());
    const Bf16Weight row_major{wr.data(), s.out, s.in}, blocked{wb.data(), s.out, s.in, true};
    for (int64_t r = 0; r < s.out; ++r)
      for (int64_t k = 0; k < s.in; k += 7) ASSERT_EQ(blocked.at(r, k), row_major.at(r, k));
    Buf<float> x = make_x(s.n, s.in, 0, rng);
    std::vector<float> want(static_cast<size_t>(s.n * s.out)), got(want.size()), ref_b(want.size());
    linear_bf16(x.data(), s.n, row_major, want.data(), &pool, level());
    linear_bf16(x.data(), s.n, blocked, got.data(), &pool, level());
    const std::string what = "n=" + std::to_string(s.n) + " out=" + std::to_string(s.out) + " in=" + std::to_string(s.in);
    EXPECT_EQ(0, std::memcmp(got.data(), want.data(), want.size() * sizeof(float))) << what;
    linear_bf16(x.data(), s.n, blocked, got.data(), nullptr, level());
    EXPECT_EQ(0, std::memcmp(got.data(), want.data(), want.size() * sizeof(float))) << what << " serial";
    ref::linear_bf16(x.data(), s.n, blocked, ref_b.data());
    EXPECT_EQ(0, std::memcmp(ref_b.data(), want.data(), want.size() * sizeof(float))) << what << " ref";
    const LinearJob<Bf16Weight> job{x.data(), s.n, blocked, got.data()};
    std::fill(got.begin(), got.end(), -1.0f);
    linear_bf16_batch(std::span<const LinearJob<Bf16Weight>>(&job, 1), &pool, level());
    EXPECT_EQ(0, std::memcmp(got.data(), want.data(), want.size() * sizeof(float))) << what << " batch";
  }
}

// E4M3 storage of a blocked BF16 weight (the release's FP8 attn.wo_a kept at one byte a weight):
// the same bits as the widened blocked bf16 copy at every level, on every path (decode rows over a
// pool and serial, the GEMM, the batch, the reference), for row groups taken with rows() too. Scale
// codes cover the loader's whole range (2^-60 .. 2^60); in need not be a multiple of 32.
TEST_P(LinearLevel, Bf16E4m3StorageEqualsWidenedCopy) {
  std::mt19937 rng(810);
  ThreadPool pool(3);
  for (const Shape s : {Shape{1, 16, 40}, Shape{1, 64, 768}, Shape{3, 48, 96}, Shape{4, 192, 768}, Shape{20, 32, 64},
                        Shape{300, 96, 64}, Shape{7, 80, 40}, Shape{2, 128, 33}, Shape{9, 64, 256}}) {
    const int64_t nkb = (s.in + 31) / 32, n_scales = (s.out + 31) / 32 * nkb;
    std::vector<uint8_t> codes(static_cast<size_t>(s.out * s.in)), blocked_codes(codes.size()), scales(static_cast<size_t>(n_scales));
    std::uniform_int_distribution<int> code(0, 253), scale(127 - 60, 127 + 60);
    for (auto& c : codes) {  // every code but the NaNs 0x7F and 0xFF
      const int v = code(rng);
      c = static_cast<uint8_t>(v < 0x7F ? v : v + 1);
    }
    for (auto& c : scales) c = static_cast<uint8_t>(scale(rng));
    scales.front() = 127 - 60;
    scales.back() = 127 + 60;
    // The widened copy as the loader made it before: dequant_fp8 of the row-major FP8 weight, to bf16.
    std::vector<float> dq(codes.size());
    dequant_fp8(Fp8Weight{codes.data(), scales.data(), s.out, s.in}, dq.data());
    std::vector<uint16_t> widened(codes.size()), wb(codes.size());
    for (size_t i = 0; i < dq.size(); ++i) widened[i] = f32_to_bf16(dq[i]);
    block_bf16_rows(widened.data(), s.out, s.in, wb.data());
    block_e4m3_rows(codes.data(), s.out, s.in, blocked_codes.data());
    const Bf16Weight bf16{wb.data(), s.out, s.in, true};
    const Bf16Weight e4m3{nullptr, s.out, s.in, true, blocked_codes.data(), scales.data()};
    for (int64_t r = 0; r < s.out; ++r)
      for (int64_t k = 0; k < s.in; k += 5) ASSERT_EQ(e4m3.at(r, k), bf16.at(r, k)) << r << "," << k;
    Buf<float> x = make_x(s.n, s.in, 0, rng);
    std::vector<float> want(static_cast<size_t>(s.n * s.out)), got(want.size());
    const std::string what = "n=" + std::to_string(s.n) + " out=" + std::to_string(s.out) + " in=" + std::to_string(s.in);
    // Every path equals the reference on the widened copy (BF16 linears are bit-exact in both regimes).
    std::vector<float> ref_w(want.size());
    ref::linear_bf16(x.data(), s.n, Bf16Weight{widened.data(), s.out, s.in}, ref_w.data());
    for (const RowPath path : {RowPath::kAuto, RowPath::kDecode, RowPath::kPrompt}) {
      linear_bf16(x.data(), s.n, bf16, want.data(), &pool, level(), path);
      EXPECT_EQ(0, std::memcmp(ref_w.data(), want.data(), want.size() * sizeof(float))) << what << " bf16 " << int(path);
      linear_bf16(x.data(), s.n, e4m3, got.data(), &pool, level(), path);
      EXPECT_EQ(0, std::memcmp(got.data(), want.data(), want.size() * sizeof(float))) << what << " path " << int(path);
      linear_bf16(x.data(), s.n, e4m3, got.data(), nullptr, level(), path);
      EXPECT_EQ(0, std::memcmp(got.data(), want.data(), want.size() * sizeof(float))) << what << " serial " << int(path);
    }
    linear_bf16(x.data(), s.n, bf16, want.data(), &pool, level());
    ref::linear_bf16(x.data(), s.n, e4m3, got.data());
    EXPECT_EQ(0, std::memcmp(got.data(), want.data(), want.size() * sizeof(float))) << what << " ref";
    // Groups of 32 rows as wo_a's o_groups parts, in one batch.
    if (s.out % 32 == 0 && s.out > 32) {
      std::vector<LinearJob<Bf16Weight>> jobs;
      std::vector<float> part(static_cast<size_t>(s.n * s.out), -1.0f);
      for (int64_t g = 0; g < s.out / 32; ++g) jobs.push_back({x.data(), s.n, e4m3.rows(g * 32, 32), part.data() + g * s.n * 32});
      linear_bf16_batch(jobs, &pool, level());
      for (int64_t g = 0; g < s.out / 32; ++g)
        for (int64_t i = 0; i < s.n; ++i)
          EXPECT_EQ(0, std::memcmp(part.data() + (g * s.n + i) * 32, want.data() + i * s.out + g * 32, 32 * sizeof(float)))
              << what << " group " << g << " row " << i;
    }
  }
}

TEST_P(LinearLevel, EmptyInputsAreNoOps) {
  float y = 7.0f;
  const uint8_t wq[32] = {}, ws[1] = {127};
  linear_fp8(nullptr, 0, Fp8Weight{wq, ws, 1, 32}, &y, nullptr, level());
  EXPECT_EQ(y, 7.0f);
}

INSTANTIATE_TEST_SUITE_P(Levels, LinearLevel, ::testing::ValuesIn(kAllKernelLevels),
                         [](const auto& info) { return std::string(kernel_level_name(info.param)); });

// The dispatched entry points are the best level.
TEST(Linear, DispatchedEqualsBestLevel) {
  std::mt19937 rng(600);
  const Shape s{3, 40, 256};
  std::vector<uint8_t> wq(static_cast<size_t>(s.out * s.in / 2)), ws(static_cast<size_t>(s.out * s.in / 32));
  for (auto& c : wq) c = static_cast<uint8_t>(rng());
  for (auto& c : ws) c = random_scale(rng, false);
  const Fp4Weight w{wq.data(), ws.data(), s.out, s.in};
  Buf<float> x = make_x(s.n, s.in, 0, rng);
  std::vector<float> a(static_cast<size_t>(s.n * s.out)), b(a.size());
  linear_fp4(x.data(), s.n, w, a.data(), nullptr);
  linear_fp4(x.data(), s.n, w, b.data(), nullptr, best_kernel_level());
  EXPECT_EQ(0, std::memcmp(a.data(), b.data(), a.size() * sizeof(float)));
}

// Dequantisation is exact: compare with the format definitions (values times power-of-two scales).
TEST(Linear, DequantIsExact) {
  std::mt19937 rng(700);
  const int64_t out = 45, in = 96;
  std::vector<uint8_t> wq(static_cast<size_t>(out * in)), ws(static_cast<size_t>(2 * 3));
  for (auto& c : wq) c = random_e4m3(rng);
  for (auto& c : ws) c = random_scale(rng, false);
  std::vector<float> d(static_cast<size_t>(out * in));
  dequant_fp8(Fp8Weight{wq.data(), ws.data(), out, in}, d.data());
  for (int64_t r = 0; r < out; ++r)
    for (int64_t k = 0; k < in; ++k) {
      const int c = wq[r * in + k], e = (c >> 3) & 0xF, m = c & 7;
      const double mag = e == 0 ? m * std::ldexp(1.0, -9) : (1.0 + m / 8.0) * std::ldexp(1.0, e - 7);
      const double want = ((c & 0x80) ? -mag : mag) * std::ldexp(1.0, ws[(r / 32) * 3 + k / 32] - 127);
      ASSERT_EQ(d[r * in + k], want) << r << "," << k;
    }

  std::vector<uint8_t> pq(static_cast<size_t>(out * in / 2)), ps(static_cast<size_t>(out * in / 32));
  for (auto& c : pq) c = static_cast<uint8_t>(rng());
  for (auto& c : ps) c = random_scale(rng, false);
  dequant_fp4(Fp4Weight{pq.data(), ps.data(), out, in}, d.data());
  const double e2m1[8] = {0, 0.5, 1, 1.5, 2, 3, 4, 6};
  for (int64_t r = 0; r < out; ++r)
    for (int64_t k = 0; k < in; ++k) {
      const int code = (pq[(r * in + k) / 2] >> ((k & 1) * 4)) & 0xF;
      const double want = ((code & 8) ? -1 : 1) * e2m1[code & 7] * std::ldexp(1.0, ps[r * (in / 32) + k / 32] - 127);
      ASSERT_EQ(d[r * in + k], want) << r << "," << k;
    }

  const uint16_t b[4] = {0x3F80, 0xC000, 0x0001, 0x7F7F};
  float f[4];
  dequant_bf16(b, 4, f);
  EXPECT_EQ(f[0], 1.0f);
  EXPECT_EQ(f[1], -2.0f);
  EXPECT_EQ(f[2], std::ldexp(1.0f, -133));
  EXPECT_EQ(f[3], std::ldexp(255.0f / 128.0f, 127));
}

#if defined(__x86_64__)
// The AMX level's exactness rests on x = x1 + x2 + x3 with each part a bf16 (kernels/x86/bf16_any_amx.cpp):
// every f32 of normal range splits without loss and the parts shrink (the kernel scales each x row
// to a largest |value| in [1, 2) first, so its parts are far from the subnormals the tile unit
// flushes); an infinite value goes in whole.
TEST(AmxSplit, ThreePartsSumToTheValueExactly) {
  // The split is compiled with the AMX file's flags: run it only where that level runs.
  if (!kernel_level_supported(KernelLevel::kAmx)) GTEST_SKIP() << "amx not supported here (1 test skipped)";
  std::mt19937 rng(7);
  std::uniform_int_distribution<uint32_t> bits(0, 0xFFFFFFFFu);
  int64_t checked = 0;
  for (int i = 0; i < 2000000; ++i) {
    const uint32_t u = bits(rng);
    const uint32_t e = (u >> 23) & 0xFF;
    if (e == 0xFF || e < 40) continue;  // inf/NaN, and values whose third part would be subnormal
    float x;
    std::memcpy(&x, &u, sizeof x);
    uint16_t p[3];
    detail::split_bf16x3_for_test(x, p);
    const double a = bf16_to_f32(p[0]), b = bf16_to_f32(p[1]), c = bf16_to_f32(p[2]);
    ASSERT_EQ(a + b + c, static_cast<double>(x)) << "x bits " << std::hex << u;
    ASSERT_LE(std::fabs(b), std::fabs(a)) << std::hex << u;
    ASSERT_LE(std::fabs(c), std::fabs(b)) << std::hex << u;
    ++checked;
  }
  EXPECT_GT(checked, 1500000);
  for (const float x : {std::numeric_limits<float>::infinity(), -std::numeric_limits<float>::infinity()}) {
    uint16_t p[3];
    detail::split_bf16x3_for_test(x, p);
    EXPECT_EQ(bf16_to_f32(p[0]), x);
    EXPECT_EQ(p[1], 0);
    EXPECT_EQ(p[2], 0);
  }
  for (float x : {0.0f, -0.0f, 1.0f, -1.0f, 3.14159265f, 1e-20f, 3.4e38f, -3.4e38f}) {
    uint16_t p[3];
    detail::split_bf16x3_for_test(x, p);
    EXPECT_EQ(static_cast<double>(bf16_to_f32(p[0])) + bf16_to_f32(p[1]) + bf16_to_f32(p[2]), static_cast<double>(x)) << x;
  }
}
#endif

}  // namespace
}  // namespace strata::kernels
