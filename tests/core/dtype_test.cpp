// Exhaustive (where the domain is small) tests of the dtype codecs against brute-force definitions.
#include "core/dtype.h"

#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <limits>
#include <random>
#include <vector>

namespace strata {
namespace {

// Brute force: the representable value nearest to x; ties go to the even code (lowest mantissa bit 0).
template <typename Decode>
int nearest_code(double x, int n_codes, Decode decode) {
  int best = -1;
  double best_d = INFINITY;
  for (int c = 0; c < n_codes; ++c) {
    double v = decode(c);
    if (std::isnan(v)) continue;
    double d = std::fabs(v - x);
    if (d < best_d || (d == best_d && (c & 1) == 0 && (best & 1) == 1)) {
      best = c;
      best_d = d;
    }
  }
  return best;
}

TEST(DType, Names) {
  for (auto t : {DType::kF32, DType::kBF16, DType::kF8E4M3, DType::kF8E8M0, DType::kI8}) {
    auto parsed = dtype_from_name(dtype_name(t));
    ASSERT_TRUE(parsed.has_value());
    EXPECT_EQ(*parsed, t);
  }
  EXPECT_FALSE(dtype_from_name("F7").has_value());
  EXPECT_EQ(dtype_size(DType::kBF16), 2u);
}

TEST(DType, E4M3DecodeAllCodes) {
  EXPECT_EQ(e4m3_to_f32(0x00), 0.0f);
  EXPECT_EQ(e4m3_to_f32(0x01), std::ldexp(1.0f, -9));   // smallest subnormal
  EXPECT_EQ(e4m3_to_f32(0x08), std::ldexp(1.0f, -6));   // smallest normal
  EXPECT_EQ(e4m3_to_f32(0x7E), 448.0f);
  EXPECT_EQ(e4m3_to_f32(0xFE), -448.0f);
  EXPECT_TRUE(std::isnan(e4m3_to_f32(0x7F)));
  EXPECT_TRUE(std::isnan(e4m3_to_f32(0xFF)));
  // Every finite code round-trips.
  for (int c = 0; c < 256; ++c) {
    if ((c & 0x7F) == 0x7F) continue;
    float v = e4m3_to_f32(static_cast<uint8_t>(c));
    uint8_t back = f32_to_e4m3(v);
    if (c == 0x80) EXPECT_EQ(back, 0x00);  // -0 encodes as +0
    else EXPECT_EQ(back, c) << "code " << c;
  }
}

TEST(DType, E4M3TableMatchesTheFormula) {
  // The decode table against the format's definition, (-1)^s * 2^(e-7) * (1 + m/8) (subnormals
  // 2^-6 * m/8), written independently with ldexp; bit for bit, so -0 stays -0.
  for (int c = 0; c < 256; ++c) {
    const int e = (c >> 3) & 0xF, m = c & 7;
    if (e == 15 && m == 7) continue;
    const double mag = e == 0 ? std::ldexp(m / 8.0, -6) : std::ldexp(1.0 + m / 8.0, e - 7);
    const float want = static_cast<float>((c & 0x80) ? -mag : mag);
    EXPECT_EQ(std::bit_cast<uint32_t>(e4m3_to_f32(static_cast<uint8_t>(c))), std::bit_cast<uint32_t>(want))
        << "code " << c;
  }
}

TEST(DType, E4M3EncodeMatchesBruteForce) {
  // Every midpoint between adjacent codes, its neighbours one ulp away, and random values.
  auto dec = [](int c) { return static_cast<double>(e4m3_to_f32(static_cast<uint8_t>(c))); };
  std::vector<float> xs;
  for (int c = 0; c < 126; ++c) {
    float a = e4m3_to_f32(c), b = e4m3_to_f32(c + 1);
    float mid = (a + b) / 2;
    xs.insert(xs.end(), {mid, std::nextafter(mid, 0.0f), std::nextafter(mid, 1000.0f), a, b});
  }
  std::mt19937 rng(1);
  std::uniform_real_distribution<float> u(-500.0f, 500.0f);
  for (int i = 0; i < 20000; ++i) xs.push_back(u(rng));
  std::uniform_real_distribution<float> small(-0.05f, 0.05f);
  for (int i = 0; i < 20000; ++i) xs.push_back(small(rng));
  for (float x : xs) {
    for (float s : {x, -x}) {
      double clamped = std::max(-448.0, std::min(448.0, static_cast<double>(s)));
      int want = nearest_code(std::fabs(clamped), 127, dec);
      uint8_t got = f32_to_e4m3(s);
      ASSERT_EQ(got & 0x7F, want) << "x=" << s;
      if (want != 0) {
        ASSERT_EQ((got & 0x80) != 0, s < 0) << "x=" << s;
      }
    }
  }
}

TEST(DType, E2M1AllCodesAndTies) {
  for (int c = 0; c < 16; ++c) {
    float v = e2m1_to_f32(static_cast<uint8_t>(c));
    uint8_t back = f32_to_e2m1(v);
    if (c == 8) EXPECT_EQ(back, 0);
    else EXPECT_EQ(back, c);
  }
  // Midpoints go to the even code.
  EXPECT_EQ(e2m1_round(0.25f), 0.0f);
  EXPECT_EQ(e2m1_round(0.75f), 1.0f);
  EXPECT_EQ(e2m1_round(1.25f), 1.0f);
  EXPECT_EQ(e2m1_round(1.75f), 2.0f);
  EXPECT_EQ(e2m1_round(2.5f), 2.0f);
  EXPECT_EQ(e2m1_round(3.5f), 4.0f);
  EXPECT_EQ(e2m1_round(5.0f), 4.0f);
  EXPECT_EQ(e2m1_round(100.0f), 6.0f);
  EXPECT_EQ(e2m1_round(-5.01f), -6.0f);
  auto dec = [](int c) { return static_cast<double>(kE2M1Values[c]); };
  std::mt19937 rng(2);
  std::uniform_real_distribution<float> u(0.0f, 7.0f);
  for (int i = 0; i < 50000; ++i) {
    float x = u(rng);
    int want = nearest_code(std::min(6.0, static_cast<double>(x)), 8, dec);
    ASSERT_EQ(f32_to_e2m1(x), want) << x;
    ASSERT_EQ(f32_to_e2m1(-x), want == 0 ? 0 : want | 8) << -x;
  }
}

TEST(DType, E8M0AllCodes) {
  for (int c = 0; c < 255; ++c) {
    float v = e8m0_to_f32(static_cast<uint8_t>(c));
    EXPECT_EQ(v, std::ldexp(1.0f, c - 127)) << c;
    auto back = f32_to_e8m0_exact(v);
    ASSERT_TRUE(back.has_value()) << c;
    EXPECT_EQ(*back, c);
  }
  EXPECT_TRUE(std::isnan(e8m0_to_f32(255)));
  EXPECT_FALSE(f32_to_e8m0_exact(3.0f).has_value());
  EXPECT_FALSE(f32_to_e8m0_exact(-2.0f).has_value());
}

TEST(DType, Bf16Exhaustive) {
  for (uint32_t b = 0; b < 65536; ++b) {
    float f = bf16_to_f32(static_cast<uint16_t>(b));
    if (std::isnan(f)) {
      EXPECT_TRUE(std::isnan(bf16_to_f32(f32_to_bf16(f))));
      continue;
    }
    ASSERT_EQ(f32_to_bf16(f), b);
  }
  // Ties to even: 1 + 2^-8 is halfway between 1 and 1 + 2^-7.
  EXPECT_EQ(bf16_round(1.0f + std::ldexp(1.0f, -8)), 1.0f);
  EXPECT_EQ(bf16_round(1.0f + 3 * std::ldexp(1.0f, -8)), 1.0f + std::ldexp(1.0f, -6));
}

TEST(DType, F16Decode) {
  EXPECT_EQ(f16_to_f32(0x3C00), 1.0f);
  EXPECT_EQ(f16_to_f32(0xC000), -2.0f);
  EXPECT_EQ(f16_to_f32(0x0001), std::ldexp(1.0f, -24));
  EXPECT_TRUE(std::isinf(f16_to_f32(0x7C00)));
}

TEST(DType, F16EncodeRoundTripsAndTiesToEven) {
  // Every finite half decodes and re-encodes to itself; the midpoint between neighbours (exact in
  // f32) goes to the one with the even code, a hair above it to the upper one; 65520 (half-way past
  // 65504) and above overflow to inf; NaN encodes as 0x7E00 with its sign.
  for (uint32_t h = 0; h < 0x10000u; ++h) {
    if (((h >> 10) & 0x1F) == 0x1F) continue;
    const uint16_t code = static_cast<uint16_t>(h);
    ASSERT_EQ(f32_to_f16(f16_to_f32(code)), code) << h;
    if ((h & 0x7FFF) == 0x7BFF) continue;  // the largest finite: its upper neighbour is inf
    const float lo = f16_to_f32(code), hi = f16_to_f32(static_cast<uint16_t>(h + 1));
    const float mid = (lo + hi) / 2;  // exact: halves have 11 significant bits
    const uint16_t even = (h & 1) ? static_cast<uint16_t>(h + 1) : code;
    ASSERT_EQ(f32_to_f16(mid), even) << h;
    ASSERT_EQ(f32_to_f16(std::nextafter(mid, hi)), static_cast<uint16_t>(h + 1)) << h;
    ASSERT_EQ(f32_to_f16(std::nextafter(mid, lo)), code) << h;
  }
  EXPECT_EQ(f32_to_f16(65519.996f), 0x7BFF);
  EXPECT_EQ(f32_to_f16(65520.0f), 0x7C00);
  EXPECT_EQ(f32_to_f16(-1e30f), 0xFC00);
  EXPECT_EQ(f32_to_f16(std::numeric_limits<float>::infinity()), 0x7C00);
  EXPECT_EQ(f32_to_f16(std::numeric_limits<float>::quiet_NaN()), 0x7E00);
  EXPECT_EQ(f32_to_f16(0x1p-25f), 0x0000);           // half the smallest subnormal: ties to even (0)
  EXPECT_EQ(f32_to_f16(std::nextafter(0x1p-25f, 1.0f)), 0x0001);
  EXPECT_EQ(f32_to_f16(-0.0f), 0x8000);
}

}  // namespace
}  // namespace strata
