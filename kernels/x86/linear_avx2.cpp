// AVX2 + FMA + F16C linear kernels: the f32 engine (f32_engine.h) with 8 lanes, and for decode FP8's
// byte-shuffle kernel (fp8_matvec_avx2.h), which widens codes in fewer operations than the engine's
// paths below (those still dequantise the prefill's tiles), and FP4's integer dot
// (fp4_int_matvec_avx2.h).
//
// E4M3 widens through the fp16 trick and VCVTPH2PS (exact, subnormals included). E2M1: VPERMPS
// only sees 3 index bits on ymm, so the table holds the 8 magnitudes (times the block scale) and the
// sign bit of each nibble is moved to bit 31 and XORed in.
// GEMM micro-kernel: 6 weight rows x 16 x rows = 12 ymm accumulators (16 registers in all).
#include <immintrin.h>

#include "kernels/detail/kernel_table.h"
#include "kernels/x86/common.h"
#include "kernels/x86/e4m3_blocked_avx2.h"
#include "kernels/x86/f32_engine.h"
#include "kernels/x86/fp4_int_matvec_avx2.h"
#include "kernels/x86/fp8_matvec_avx2.h"
#include "kernels/x86/quant_x86.h"

namespace strata::kernels::x86 {
namespace {

alignas(32) constexpr float kE2M1Magnitude[8] = {0.0f, 0.5f, 1.0f, 1.5f, 2.0f, 3.0f, 4.0f, 6.0f};

struct V256 {
  using F = __m256;
  using T = __m256;
  static constexpr int kW = 8;
  static constexpr int kXg = 16;
  static constexpr int kRw = 6;
  static constexpr int kTileRows = 48;
  static constexpr int64_t kKc = 256;

  static void act_quant(float* x, int64_t n) { act_quant_fp8_avx2(x, n); }
  static F zero() { return _mm256_setzero_ps(); }
  static F set1(float f) { return _mm256_set1_ps(f); }
  static F load(const float* p) { return _mm256_load_ps(p); }
  static F loadu(const float* p) { return _mm256_loadu_ps(p); }
  static void store(float* p, F v) { _mm256_store_ps(p, v); }
  static void storeu(float* p, F v) { _mm256_storeu_ps(p, v); }
  static F add(F a, F b) { return _mm256_add_ps(a, b); }
  static F mul(F a, F b) { return _mm256_mul_ps(a, b); }
  static F fmadd(F a, F b, F c) { return _mm256_fmadd_ps(a, b, c); }
  static float hsum(F v) {
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_shuffle_ps(s, s, 1));
    return _mm_cvtss_f32(s);
  }

  static F e4m3x(const uint8_t* p) {
    // s eeee mmm -> fp16 s 0eeee mmm0000000: the same value times 2^-8 (bias 15 vs 7), exact.
    __m128i h = _mm_cvtepi8_epi16(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(p)));
    h = _mm_and_si128(_mm_slli_epi16(h, 7), _mm_set1_epi16(static_cast<short>(0xBF80)));
    return _mm256_cvtph_ps(h);
  }
  static F bf16(const uint16_t* p) {
    const __m256i v = _mm256_cvtepu16_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
    return _mm256_castsi256_ps(_mm256_slli_epi32(v, 16));
  }
  static void split_pairs(F v, F* even, F* odd) {
    *even = _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_castps_si256(v), 16));
    *odd = _mm256_castsi256_ps(_mm256_and_si256(_mm256_castps_si256(v), _mm256_set1_epi32(static_cast<int>(0xFFFF0000u))));
  }
  static T e2m1_table(float s) { return _mm256_mul_ps(_mm256_load_ps(kE2M1Magnitude), _mm256_set1_ps(s)); }
  static void e2m1(const uint8_t* p, T t, F* lo, F* hi) {
    const __m256i b = _mm256_cvtepu8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(p)));
    const __m256i sign = _mm256_set1_epi32(static_cast<int>(0x80000000u));
    const __m256i sign_lo = _mm256_and_si256(_mm256_slli_epi32(b, 28), sign);  // nibble bit 3 -> bit 31
    const __m256i sign_hi = _mm256_and_si256(_mm256_slli_epi32(b, 24), sign);  // byte bit 7 -> bit 31
    *lo = _mm256_xor_ps(_mm256_permutevar8x32_ps(t, b), _mm256_castsi256_ps(sign_lo));
    *hi = _mm256_xor_ps(_mm256_permutevar8x32_ps(t, _mm256_srli_epi32(b, 4)), _mm256_castsi256_ps(sign_hi));
  }
  // In-place 8 x 8 transpose: r[i] lane c <- r[c] lane i (24 shuffles).
  static void transpose(F* r) {
    F t[8];
    for (int i = 0; i < 4; ++i) {
      t[2 * i] = _mm256_unpacklo_ps(r[2 * i], r[2 * i + 1]);
      t[2 * i + 1] = _mm256_unpackhi_ps(r[2 * i], r[2 * i + 1]);
    }
    F u[8];  // u[4g + j], 128-bit lane L: column 4L + j of rows 4g .. 4g + 3
    for (int g = 0; g < 2; ++g) {
      const __m256d a = _mm256_castps_pd(t[4 * g]), b = _mm256_castps_pd(t[4 * g + 2]);
      const __m256d c = _mm256_castps_pd(t[4 * g + 1]), d = _mm256_castps_pd(t[4 * g + 3]);
      u[4 * g + 0] = _mm256_castpd_ps(_mm256_unpacklo_pd(a, b));
      u[4 * g + 1] = _mm256_castpd_ps(_mm256_unpackhi_pd(a, b));
      u[4 * g + 2] = _mm256_castpd_ps(_mm256_unpacklo_pd(c, d));
      u[4 * g + 3] = _mm256_castpd_ps(_mm256_unpackhi_pd(c, d));
    }
    for (int j = 0; j < 4; ++j) {
      r[j] = _mm256_permute2f128_ps(u[j], u[4 + j], 0x20);
      r[4 + j] = _mm256_permute2f128_ps(u[j], u[4 + j], 0x31);
    }
  }
  static void interleave(F lo, F hi, F* a, F* b) {
    const __m256 u0 = _mm256_unpacklo_ps(lo, hi);  // l0 h0 l1 h1 | l4 h4 l5 h5
    const __m256 u1 = _mm256_unpackhi_ps(lo, hi);  // l2 h2 l3 h3 | l6 h6 l7 h7
    *a = _mm256_permute2f128_ps(u0, u1, 0x20);
    *b = _mm256_permute2f128_ps(u0, u1, 0x31);
  }
};

using E = F32Engine<V256>;

// FP8/FP4 tiles (exact products: FMA) and BF16/F32 tiles (reference rounding: multiply, then add).
const detail::GemmEngine kEngine = {V256::kXg, V256::kTileRows, 4, 1, &E::x_panel_bytes, &E::pack_x, &E::gemm<true>};
const detail::GemmEngine kEngineOrdered = {V256::kXg, V256::kTileRows, 4, 1, &E::x_panel_bytes, &E::pack_x,
                                           &E::gemm<false>};

// BF16 decode: a blocked weight stored as E4M3 codes goes through e4m3_blocked_avx2.h (the same
// bits); everything else, and the rows that kernel hands back, through the f32 engine.
void bf16_matvec(const void* act, int64_t nx, size_t stride, const Bf16Weight& w, int64_t r0, int64_t r1, float* y,
                 int64_t ldy, bool once) {
  if (w.e4m3 == nullptr || w.in % 32 != 0) return E::bf16_matvec(act, nx, stride, w, r0, r1, y, ldy, once);
  for (int64_t i = 0; i < nx; ++i) {
    const float* x = reinterpret_cast<const float*>(static_cast<const unsigned char*>(act) + i * stride);
    float* yi = y + i * ldy;
    const bool o = once && nx == 1;
    E4m3BlockedAvx2::matvec1(x, w, r0, r1, yi, o, [&](int64_t a, int64_t b) { E::bf16_matvec1(x, w, a, b, yi, o); });
  }
}

detail::LevelKernels make_table() {
  detail::LevelKernels t;
  t.act_quant_fp8 = &act_quant_fp8_avx2;
  t.fp4_quant_e8m0 = &fp4_quant_e8m0_avx2;
  // FP8 (and below, BF16 and F32): decode kernels serve n < 4; the GEMM's smallest tile is 8 x rows,
  // slower below 4 (Zen4).
  t.fp8 = {&Fp8MatvecAvx2::act_bytes, &Fp8MatvecAvx2::prep, &Fp8MatvecAvx2::matvec, 32, 4, 4, &kEngine, true,
           &E::fp8_pack_w, nullptr};
  // FP4 decode: the integer dot (fp4_int_matvec_avx2.h); prefill: the f32 engine's tiles from 8 rows.
  // Below 8 the GEMM fills half of its 8-row tile: on the Zen 3 VM, 2 threads, the integer matvec
  // ran 40 GF/s on 448 x 1024 at 4-7 rows against the GEMM's 19-37 (58-62 vs 30-46 on 2048 x 2048;
  // 1024 x 448 even, 26-34 vs 23-35), and from 8 rows the GEMM wins (docs/performance.md).
  t.fp4 = {&Fp4IntMatvecAvx2::act_bytes, &Fp4IntMatvecAvx2::prep, &Fp4IntMatvecAvx2::matvec, 4, 4, E::kGemmMinRowsFp4,
           &kEngine, true, &E::fp4_pack_w, &E::fp4_supports};
  t.bf16 = {nullptr, nullptr, &bf16_matvec, 8, 4, 4, &kEngineOrdered, false, &E::bf16_pack_w, nullptr};
  t.f32 = {nullptr, nullptr, E::f32_matvec, 8, 4, 4, &kEngineOrdered, false, nullptr, nullptr};
  return t;
}

}  // namespace
}  // namespace strata::kernels::x86

namespace strata::kernels::detail {
const LevelKernels& avx2_kernels() {
  static const LevelKernels t = x86::make_table();
  return t;
}
}  // namespace strata::kernels::detail
