// f32 vector traits for the per-token ops (kernels/x86/ops_engine.h): VF8 (AVX2, 8 lanes) and
// VF16 (AVX-512, 16 lanes, only where the including file is compiled with -mavx512f).
//
// Every operation here is one IEEE operation per lane (no FMA on f32 values), so a loop written
// over these traits rounds exactly as the same loop written over scalars in kernels/ref; the few
// marked "any-order" (fmadd, hsum) serve only kernels whose contract leaves the order free. The one
// composite is exp(), which reproduces kernels::exp_f32 (kernels/activation.h) bit for bit: it runs
// the same double-precision steps, with FMA exactly where that definition has one.
// Everything sits in an anonymous namespace (see common.h): each ISA file gets its own copy.
#pragma once

#include <immintrin.h>

#include <cstdint>

#include "kernels/detail/exp_table.h"

namespace strata::kernels::x86 {
namespace {

struct VF8 {
  using F = __m256;
  static constexpr int kW = 8;
  static F zero() { return _mm256_setzero_ps(); }
  static F set1(float f) { return _mm256_set1_ps(f); }
  static F loadu(const float* p) { return _mm256_loadu_ps(p); }
  static void storeu(float* p, F v) { _mm256_storeu_ps(p, v); }
  static F add(F a, F b) { return _mm256_add_ps(a, b); }
  static F sub(F a, F b) { return _mm256_sub_ps(a, b); }
  static F mul(F a, F b) { return _mm256_mul_ps(a, b); }
  static F div(F a, F b) { return _mm256_div_ps(a, b); }
  // (a < b) ? a : b and (a > b) ? a : b, lane by lane (MINPS / MAXPS return b when unordered).
  static F min(F a, F b) { return _mm256_min_ps(a, b); }
  static F max(F a, F b) { return _mm256_max_ps(a, b); }
  // [x1 x0 x3 x2 ...]: swaps the two lanes of every pair.
  static F swap_pairs(F x) { return _mm256_permute_ps(x, 0xB1); }
  // The 8 E2M1 values packed in p[0..4) (element 2i in the low nibble of p[i]), exactly.
  static F e2m1(const uint8_t* p) {
    int32_t word;
    __builtin_memcpy(&word, p, 4);
    const __m128i b = _mm_cvtsi32_si128(word);
    __m256i v = _mm256_cvtepu8_epi32(_mm_unpacklo_epi8(b, b));  // byte i in lanes 2i and 2i+1
    v = _mm256_and_si256(_mm256_srlv_epi32(v, _mm256_setr_epi32(0, 4, 0, 4, 0, 4, 0, 4)), _mm256_set1_epi32(0xF));
    const __m256 mag = _mm256_permutevar8x32_ps(_mm256_setr_ps(0.0f, 0.5f, 1.0f, 1.5f, 2.0f, 3.0f, 4.0f, 6.0f), v);
    const __m256i sign = _mm256_slli_epi32(_mm256_and_si256(v, _mm256_set1_epi32(8)), 28);
    return _mm256_or_ps(mag, _mm256_castsi256_ps(sign));
  }
  // For the any-order kernels only (never on an exact path): fused a*b+c, bf16 widening, lane sum.
  static F fmadd(F a, F b, F c) { return _mm256_fmadd_ps(a, b, c); }
  static F bf16(const uint16_t* p) {
    const __m256i v = _mm256_cvtepu16_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
    return _mm256_castsi256_ps(_mm256_slli_epi32(v, 16));
  }
  static float hsum(F v) {
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_shuffle_ps(s, s, 1));
    return _mm_cvtss_f32(s);
  }

  // 8 x 8 transpose in place: r[i] lane c <- r[c] lane i.
  static void transpose(F* r) {
    F t[8], u[8];
    for (int i = 0; i < 4; ++i) {
      t[2 * i] = _mm256_unpacklo_ps(r[2 * i], r[2 * i + 1]);
      t[2 * i + 1] = _mm256_unpackhi_ps(r[2 * i], r[2 * i + 1]);
    }
    for (int g = 0; g < 2; ++g) {
      u[4 * g + 0] = _mm256_shuffle_ps(t[4 * g], t[4 * g + 2], 0x44);
      u[4 * g + 1] = _mm256_shuffle_ps(t[4 * g], t[4 * g + 2], 0xEE);
      u[4 * g + 2] = _mm256_shuffle_ps(t[4 * g + 1], t[4 * g + 3], 0x44);
      u[4 * g + 3] = _mm256_shuffle_ps(t[4 * g + 1], t[4 * g + 3], 0xEE);
    }
    for (int j = 0; j < 4; ++j) {
      r[j] = _mm256_permute2f128_ps(u[j], u[4 + j], 0x20);
      r[4 + j] = _mm256_permute2f128_ps(u[j], u[4 + j], 0x31);
    }
  }

  // exp of 4 doubles holding f32 inputs, then rounded to f32 (the core of kernels::exp_f32).
  static __m128 exp_core(__m256d xd) {
    const __m256d shift = _mm256_set1_pd(detail::kExpShift), inv = _mm256_set1_pd(detail::kExpInvLn2N);
    __m256d kd = _mm256_fmadd_pd(inv, xd, shift);
    const __m256i ki = _mm256_castpd_si256(kd);
    kd = _mm256_sub_pd(kd, shift);
    const __m256d r = _mm256_fmsub_pd(inv, xd, kd);
    const __m256i idx = _mm256_and_si256(ki, _mm256_set1_epi64x(31));
    __m256i t = _mm256_i64gather_epi64(reinterpret_cast<const long long*>(detail::kExpTable), idx, 8);
    t = _mm256_add_epi64(t, _mm256_slli_epi64(ki, 47));
    const __m256d z = _mm256_fmadd_pd(_mm256_set1_pd(detail::kExpC0), r, _mm256_set1_pd(detail::kExpC1));
    const __m256d r2 = _mm256_mul_pd(r, r);
    __m256d y = _mm256_fmadd_pd(_mm256_set1_pd(detail::kExpC2), r, _mm256_set1_pd(1.0));
    y = _mm256_fmadd_pd(z, r2, y);
    y = _mm256_mul_pd(y, _mm256_castsi256_pd(t));
    return _mm256_cvtpd_ps(y);
  }
  static F exp(F x) {
    const __m128 lo = exp_core(_mm256_cvtps_pd(_mm256_castps256_ps128(x)));
    const __m128 hi = exp_core(_mm256_cvtps_pd(_mm256_extractf128_ps(x, 1)));
    F y = _mm256_set_m128(hi, lo);
    // The |x| >= 88 cases of kernels::exp_f32, later ones taking precedence as there.
    y = _mm256_blendv_ps(y, _mm256_set1_ps(detail::kExpMayUnderflowValue),
                         _mm256_cmp_ps(x, _mm256_set1_ps(detail::kExpMayUnderflowBelow), _CMP_LT_OQ));
    y = _mm256_blendv_ps(y, _mm256_setzero_ps(), _mm256_cmp_ps(x, _mm256_set1_ps(detail::kExpUnderflowBelow), _CMP_LT_OQ));
    y = _mm256_blendv_ps(y, _mm256_set1_ps(__builtin_inff()),
                         _mm256_cmp_ps(x, _mm256_set1_ps(detail::kExpOverflowAbove), _CMP_GT_OQ));
    return _mm256_blendv_ps(y, _mm256_add_ps(x, x), _mm256_cmp_ps(x, x, _CMP_UNORD_Q));
  }
};

#if defined(__AVX512F__)
struct VF16 {
  using F = __m512;
  static constexpr int kW = 16;
  static F zero() { return _mm512_setzero_ps(); }
  static F set1(float f) { return _mm512_set1_ps(f); }
  static F loadu(const float* p) { return _mm512_loadu_ps(p); }
  static void storeu(float* p, F v) { _mm512_storeu_ps(p, v); }
  static F add(F a, F b) { return _mm512_add_ps(a, b); }
  static F sub(F a, F b) { return _mm512_sub_ps(a, b); }
  static F mul(F a, F b) { return _mm512_mul_ps(a, b); }
  static F div(F a, F b) { return _mm512_div_ps(a, b); }
  static F min(F a, F b) { return _mm512_min_ps(a, b); }
  static F max(F a, F b) { return _mm512_max_ps(a, b); }
  static F swap_pairs(F x) { return _mm512_permute_ps(x, 0xB1); }
  // Lane l of the result is lane idx[l] of x (idx: 16 lanes, 64-byte aligned).
  static F permute(const int32_t* idx, F x) { return _mm512_permutexvar_ps(_mm512_load_si512(idx), x); }
  // The 16 E2M1 values packed in p[0..8) (element 2i in the low nibble of p[i]), exactly.
  static F e2m1(const uint8_t* p) {
    const __m128i b = _mm_loadl_epi64(reinterpret_cast<const __m128i*>(p));
    __m512i v = _mm512_cvtepu8_epi32(_mm_unpacklo_epi8(b, b));  // byte i in lanes 2i and 2i+1
    v = _mm512_and_si512(_mm512_srlv_epi32(v, _mm512_set4_epi32(4, 0, 4, 0)), _mm512_set1_epi32(0xF));
    const __m512 table = _mm512_setr_ps(0.0f, 0.5f, 1.0f, 1.5f, 2.0f, 3.0f, 4.0f, 6.0f, -0.0f, -0.5f, -1.0f, -1.5f,
                                        -2.0f, -3.0f, -4.0f, -6.0f);
    return _mm512_permutexvar_ps(v, table);
  }
  static F fmadd(F a, F b, F c) { return _mm512_fmadd_ps(a, b, c); }
  static F bf16(const uint16_t* p) {
    const __m512i v = _mm512_cvtepu16_epi32(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)));
    return _mm512_castsi512_ps(_mm512_slli_epi32(v, 16));
  }
  static float hsum(F v) { return _mm512_reduce_add_ps(v); }

  // 16 x 16 transpose in place: r[i] lane c <- r[c] lane i.
  static void transpose(F* r) {
    F t[16], u[16];
    for (int i = 0; i < 8; ++i) {
      t[2 * i] = _mm512_unpacklo_ps(r[2 * i], r[2 * i + 1]);
      t[2 * i + 1] = _mm512_unpackhi_ps(r[2 * i], r[2 * i + 1]);
    }
    for (int g = 0; g < 4; ++g) {
      const __m512d a = _mm512_castps_pd(t[4 * g]), b = _mm512_castps_pd(t[4 * g + 2]);
      const __m512d c = _mm512_castps_pd(t[4 * g + 1]), d = _mm512_castps_pd(t[4 * g + 3]);
      u[4 * g + 0] = _mm512_castpd_ps(_mm512_unpacklo_pd(a, b));
      u[4 * g + 1] = _mm512_castpd_ps(_mm512_unpackhi_pd(a, b));
      u[4 * g + 2] = _mm512_castpd_ps(_mm512_unpacklo_pd(c, d));
      u[4 * g + 3] = _mm512_castpd_ps(_mm512_unpackhi_pd(c, d));
    }
    for (int j = 0; j < 4; ++j) {
      const F s0 = _mm512_shuffle_f32x4(u[j], u[4 + j], 0x44), s1 = _mm512_shuffle_f32x4(u[j], u[4 + j], 0xEE);
      const F s2 = _mm512_shuffle_f32x4(u[8 + j], u[12 + j], 0x44), s3 = _mm512_shuffle_f32x4(u[8 + j], u[12 + j], 0xEE);
      r[j] = _mm512_shuffle_f32x4(s0, s2, 0x88);
      r[4 + j] = _mm512_shuffle_f32x4(s0, s2, 0xDD);
      r[8 + j] = _mm512_shuffle_f32x4(s1, s3, 0x88);
      r[12 + j] = _mm512_shuffle_f32x4(s1, s3, 0xDD);
    }
  }

  static __m256 exp_core(__m512d xd) {
    const __m512d shift = _mm512_set1_pd(detail::kExpShift), inv = _mm512_set1_pd(detail::kExpInvLn2N);
    __m512d kd = _mm512_fmadd_pd(inv, xd, shift);
    const __m512i ki = _mm512_castpd_si512(kd);
    kd = _mm512_sub_pd(kd, shift);
    const __m512d r = _mm512_fmsub_pd(inv, xd, kd);
    // 32-entry table: VPERMT2Q picks among 16 by bits 0..3; bit 4 selects the upper half.
    const __m512i t0 = _mm512_loadu_si512(detail::kExpTable), t1 = _mm512_loadu_si512(detail::kExpTable + 8);
    const __m512i t2 = _mm512_loadu_si512(detail::kExpTable + 16), t3 = _mm512_loadu_si512(detail::kExpTable + 24);
    const __m512i lo = _mm512_permutex2var_epi64(t0, ki, t1), hi = _mm512_permutex2var_epi64(t2, ki, t3);
    const __mmask8 upper = _mm512_test_epi64_mask(ki, _mm512_set1_epi64(16));
    __m512i t = _mm512_mask_blend_epi64(upper, lo, hi);
    t = _mm512_add_epi64(t, _mm512_slli_epi64(ki, 47));
    const __m512d z = _mm512_fmadd_pd(_mm512_set1_pd(detail::kExpC0), r, _mm512_set1_pd(detail::kExpC1));
    const __m512d r2 = _mm512_mul_pd(r, r);
    __m512d y = _mm512_fmadd_pd(_mm512_set1_pd(detail::kExpC2), r, _mm512_set1_pd(1.0));
    y = _mm512_fmadd_pd(z, r2, y);
    y = _mm512_mul_pd(y, _mm512_castsi512_pd(t));
    return _mm512_cvtpd_ps(y);
  }
  static F exp(F x) {
    const __m256 lo = exp_core(_mm512_cvtps_pd(_mm512_castps512_ps256(x)));
    const __m256 hi = exp_core(_mm512_cvtps_pd(_mm512_extractf32x8_ps(x, 1)));
    F y = _mm512_insertf32x8(_mm512_castps256_ps512(lo), hi, 1);
    y = _mm512_mask_blend_ps(_mm512_cmp_ps_mask(x, _mm512_set1_ps(detail::kExpMayUnderflowBelow), _CMP_LT_OQ), y,
                             _mm512_set1_ps(detail::kExpMayUnderflowValue));
    y = _mm512_mask_blend_ps(_mm512_cmp_ps_mask(x, _mm512_set1_ps(detail::kExpUnderflowBelow), _CMP_LT_OQ), y,
                             _mm512_setzero_ps());
    y = _mm512_mask_blend_ps(_mm512_cmp_ps_mask(x, _mm512_set1_ps(detail::kExpOverflowAbove), _CMP_GT_OQ), y,
                             _mm512_set1_ps(__builtin_inff()));
    return _mm512_mask_blend_ps(_mm512_cmp_ps_mask(x, x, _CMP_UNORD_Q), y, _mm512_add_ps(x, x));
  }
};
#endif

}  // namespace
}  // namespace strata::kernels::x86
