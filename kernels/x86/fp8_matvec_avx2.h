// The AVX2 level's FP8 (E4M3, [32, 32] block scales) decode matvec: codes widened with byte shuffles.
//
// Why a kernel of its own: the f32 engine's path (f32_engine.h, fp8_dot) widens 8 codes with a
// VPMOVSXBW, two integer ops and a VCVTPH2PS; on an AVX2-only Zen 3 that ran at about 10 GB/s per
// core, short of the memory's rate on two cores (bench/kernels_bench BM_LinearFp8, BM_MemRead;
// docs/performance.md). Here 32 codes take 11 integer ops (3.75 a vector with the FMA instead of 5-6):
//   - an E4M3 code s eeee mmm becomes the float32 s | eeee << 23 | mmm << 20, which is the code's
//     value times 2^-120 exactly, subnormal codes (eeee = 0) included: its top byte s000 0eee is a
//     VPSHUFB lookup of the high nibble and its next byte emmm 0000 one of the low nibble;
//   - VPUNPCK{L,H}BW makes those bytes 16-bit words, and each dword of words holds two weights whose
//     float32 are `dword << 16` and `dword & 0xFFFF0000` (as fp4_matvec_avx2.h).
// The 2^120 goes into x with the weight scale: x' = xq * s_w * 2^120, built once per 32-row block and
// 32-wide K block as the f32 engine builds xq * s_w * 2^8. Where that overflows (|xq * s_w| >= 2^8,
// or a scale code above 134) the block takes x' = xq and widens each weight vector times 2^120 * s_w
// instead. Both are the same exact products in the same order, so the bits do not depend on which.
// The weights come out in a fixed permutation of K per 32-wide block, and `prep` lays x out in it.
//
// Exactness: xq are act_quant_fp8 values and the weights E4M3 values, 4 significant bits each, so
// every product is exact and only the f32 summation order differs from kernels/ref
// (tests/kernels/linear_test.cpp, Fp8MatchesReference). A row's bits depend on `in` and its own
// x row only, never on [r0, r1) or on the other rows of x in the call (batch invariance).
// Included by linear_avx2.cpp only (compiled with -mavx2 -mfma -mf16c).
#pragma once

#include <immintrin.h>

#include <cstddef>
#include <cstdint>
#include <cstring>

#include "kernels/linear.h"
#include "kernels/x86/common.h"
#include "kernels/x86/quant_x86.h"
#include "kernels/x86/simd.h"

namespace strata::kernels::x86 {
namespace {

struct Fp8MatvecAvx2 {
  // Prepared x: per 32-wide block 4 vectors, vector v lane 4 * L + d holding x[32 b + 16 L + kOffset[v]
  // + 2 d] (L = 128-bit half, d = dword in it): the even and the odd words of bytes 0-7 of each half,
  // then those of bytes 8-15.
  static constexpr int kOffset[4] = {0, 1, 8, 9};

  static size_t act_bytes(int64_t in) { return static_cast<size_t>(in) * sizeof(float); }

  // Quantises x[in] (act_quant_fp8, blocks of 32) and lays it out as above into act: per half, the
  // even and odd elements of 8 (SHUFPS of two 4-element loads from each half).
  static void prep(const float* x, int64_t in, void* act) {
    Scratch tmp(static_cast<size_t>(in) * sizeof(float));
    float* q = tmp.as<float>();
    std::memcpy(q, x, static_cast<size_t>(in) * sizeof(float));
    act_quant_fp8_avx2(q, in);
    float* a = static_cast<float*>(act);
    for (int64_t b = 0; b < in; b += 32) {
      for (int h = 0; h < 2; ++h) {  // elements 0-7 of each half (vectors 0, 1), then 8-15 (2, 3)
        const __m256 lo = _mm256_set_m128(_mm_loadu_ps(q + b + 16 + 8 * h), _mm_loadu_ps(q + b + 8 * h));
        const __m256 hi = _mm256_set_m128(_mm_loadu_ps(q + b + 20 + 8 * h), _mm_loadu_ps(q + b + 4 + 8 * h));
        _mm256_store_ps(a + b + 16 * h, _mm256_shuffle_ps(lo, hi, _MM_SHUFFLE(2, 0, 2, 0)));
        _mm256_store_ps(a + b + 16 * h + 8, _mm256_shuffle_ps(lo, hi, _MM_SHUFFLE(3, 1, 3, 1)));
      }
    }
  }

  // Top byte of the float32 by the code's high nibble s eee (s000 0eee), next byte by its low nibble
  // e mmm (emmm 0000).
  static __m256i top_table() {
    return _mm256_setr_epi8(0, 1, 2, 3, 4, 5, 6, 7, -0x80, -0x7F, -0x7E, -0x7D, -0x7C, -0x7B, -0x7A, -0x79, 0, 1, 2, 3,
                            4, 5, 6, 7, -0x80, -0x7F, -0x7E, -0x7D, -0x7C, -0x7B, -0x7A, -0x79);
  }
  static __m256i next_table() {
    return _mm256_setr_epi8(0x00, 0x10, 0x20, 0x30, 0x40, 0x50, 0x60, 0x70, -0x80, -0x70, -0x60, -0x50, -0x40, -0x30,
                            -0x20, -0x10, 0x00, 0x10, 0x20, 0x30, 0x40, 0x50, 0x60, 0x70, -0x80, -0x70, -0x60, -0x50,
                            -0x40, -0x30, -0x20, -0x10);
  }

  // The 32 codes at p as float32 values * 2^-120, in the order of kOffset: out[0 .. 4).
  static void widen(const uint8_t* p, __m256 out[4]) {
    const __m256i nib = _mm256_set1_epi8(0x0F), top = _mm256_set1_epi32(static_cast<int>(0xFFFF0000u));
    const __m256i v = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p));
    const __m256i b3 = _mm256_shuffle_epi8(top_table(), _mm256_and_si256(_mm256_srli_epi16(v, 4), nib));
    const __m256i b2 = _mm256_shuffle_epi8(next_table(), _mm256_and_si256(v, nib));
    const __m256i wa = _mm256_unpacklo_epi8(b2, b3), wb = _mm256_unpackhi_epi8(b2, b3);
    out[0] = _mm256_castsi256_ps(_mm256_slli_epi32(wa, 16));
    out[1] = _mm256_castsi256_ps(_mm256_and_si256(wa, top));
    out[2] = _mm256_castsi256_ps(_mm256_slli_epi32(wb, 16));
    out[3] = _mm256_castsi256_ps(_mm256_and_si256(wb, top));
  }

  // R rows (in bytes apart) against x' xs; kScaled: xs holds xq * s_w * 2^120; otherwise xs holds xq
  // and each weight vector is multiplied by ws[k / 32] (= 2^120 * s_w, split so neither overflows).
  template <int R, bool kScaled>
  static void dot(const float* xs, const uint8_t* w, int64_t in, const __m256* ws, float* y, bool once) {
    __m256 acc[R][2];
    for (int i = 0; i < R; ++i) acc[i][0] = acc[i][1] = _mm256_setzero_ps();
    for (int64_t k = 0; k < in; k += 32) {
      // The same bytes of the next R rows, once per 64 bytes (as fp8_dot in f32_engine.h).
      if ((k & 63) == 0)
        for (int i = 0; i < R; ++i) prefetch_weights(w + (i + R) * in + k, once);
      const __m256 x0 = _mm256_load_ps(xs + k), x1 = _mm256_load_ps(xs + k + 8);
      const __m256 x2 = _mm256_load_ps(xs + k + 16), x3 = _mm256_load_ps(xs + k + 24);
      for (int i = 0; i < R; ++i) {
        __m256 wv[4];
        widen(w + i * in + k, wv);
        if constexpr (!kScaled) {
          for (__m256& u : wv) u = _mm256_mul_ps(_mm256_mul_ps(u, ws[0]), ws[1 + k / 32]);
        }
        acc[i][0] = _mm256_fmadd_ps(wv[0], x0, acc[i][0]);
        acc[i][1] = _mm256_fmadd_ps(wv[1], x1, acc[i][1]);
        acc[i][0] = _mm256_fmadd_ps(wv[2], x2, acc[i][0]);
        acc[i][1] = _mm256_fmadd_ps(wv[3], x3, acc[i][1]);
      }
    }
    for (int i = 0; i < R; ++i) {
      y[i] = VF8::hsum(_mm256_add_ps(acc[i][0], acc[i][1]));
    }
  }

  template <bool kScaled>
  static void rows(const float* xs, const Fp8Weight& w, int64_t r, int64_t hi, const __m256* ws, float* y,
                   bool once) {
    const int64_t in = w.in;
    for (; r + 4 <= hi; r += 4) dot<4, kScaled>(xs, w.w + r * in, in, ws, y + r, once);
    for (; r < hi; ++r) dot<1, kScaled>(xs, w.w + r * in, in, ws, y + r, once);
  }

  // One prepared row of x, weight rows [r0, r1) (r0 a multiple of 32).
  static void matvec1(const float* xq, const Fp8Weight& w, int64_t r0, int64_t r1, float* y, bool once) {
    const int64_t in = w.in, nkb = in / 32;
    Scratch buf(static_cast<size_t>(in) * sizeof(float) + static_cast<size_t>(nkb + 1) * sizeof(__m256));
    float* xs = buf.as<float>();
    __m256* ws = reinterpret_cast<__m256*>(xs + in);  // in is a multiple of 32: 64-byte aligned
    const __m256 two120 = _mm256_set1_ps(0x1p120f);
    for (int64_t rb = r0 / 32; rb * 32 < r1; ++rb) {
      const uint8_t* sc = w.scale + rb * nkb;
      __m256 inf = _mm256_setzero_ps();
      for (int64_t b = 0; b < nkb; ++b) {
        const __m256 s = _mm256_mul_ps(_mm256_set1_ps(e8m0_value(sc[b])), two120);
        for (int j = 0; j < 32; j += 8) {
          const __m256 v = _mm256_mul_ps(_mm256_load_ps(xq + b * 32 + j), s);
          // Not below infinity: an overflow, or NaN from 0 * inf where the scale alone overflowed.
          inf = _mm256_or_ps(inf, _mm256_cmp_ps(_mm256_andnot_ps(_mm256_set1_ps(-0.0f), v),
                                                _mm256_set1_ps(__builtin_inff()), _CMP_NLT_UQ));
          _mm256_store_ps(xs + b * 32 + j, v);
        }
      }
      const int64_t hi = imin(r1, rb * 32 + 32);
      if (_mm256_movemask_ps(inf) == 0) {
        rows<true>(xs, w, imax(r0, rb * 32), hi, ws, y, once);
      } else {
        ws[0] = two120;
        for (int64_t b = 0; b < nkb; ++b) ws[1 + b] = _mm256_set1_ps(e8m0_value(sc[b]));
        rows<false>(xq, w, imax(r0, rb * 32), hi, ws, y, once);
      }
    }
  }

  // FormatKernels::matvec: rows [r0, r1) for each of the nx prepared rows of x.
  static void matvec(const void* act, int64_t nx, size_t stride, const Fp8Weight& w, int64_t r0, int64_t r1, float* y,
                     int64_t ldy, bool once) {
    for (int64_t i = 0; i < nx; ++i)
      matvec1(reinterpret_cast<const float*>(static_cast<const unsigned char*>(act) + i * stride), w, r0, r1,
              y + i * ldy, once && nx == 1);
  }
};

}  // namespace
}  // namespace strata::kernels::x86
