// The AVX2 level's FP4 (MXFP4) decode matvec on float32: E2M1 codes widened with byte shuffles.
// fp4_int_matvec_avx2.h's integer dot serves decode and hands the rows of x with a non-finite
// value (which integers cannot carry) to this one.
//
// Why a kernel of its own: the f32 engine's E2M1 path (f32_engine.h, fp4_dot) spends two VPERMPS,
// a VPMOVZXBD and six integer ops on every 16 weights, and on an AVX2-only Zen 3 it ran at
// 3.9 GB/s per core against 12.9 GB/s of memory read (bench/kernels_bench BM_LinearFp4, BM_MemRead;
// docs/performance.md): the routed experts, the largest part of a decode token's bytes, were
// bound by arithmetic. Here 64 weights (32 bytes, two 32-weight scale blocks) take 8 shuffles and
// 11 other integer ops, about half as many per weight:
//   - every E2M1 value has a float32 whose low 16 bits are zero, so its top two bytes (b3 = sign and
//     exponent, b2 = exponent bit and mantissa) come from two VPSHUFB lookups of the nibble;
//   - VPUNPCK{L,H}BW(b2, b3) makes those bytes 16-bit words, and each dword of words then holds two
//     weights whose float32 are `dword << 16` and `dword & 0xFFFF0000`.
// The lanes come out in a fixed permutation of K; `prep` lays x out in the same permutation, once
// per row of x, so the weights need no further shuffle.
//
// Exactness: the x values are act_quant_fp8 values (4 significant bits), the weights E2M1 (at most 2),
// so every product is exact; per 32-weight block each lane's partial sum of its 8 products is
// multiplied by the block's power-of-two scale and added to the accumulator in one FMA: a summation
// order close to the reference's (kernels/ref/linear.cpp linear_fp4: per-block partial, then
// scaled), which only the f32 summation order separates from it (tests/kernels/linear_test.cpp, Fp4MatchesReference). A row's bits depend
// on `in` only, never on [r0, r1) or on how many rows of x share the call (batch invariance).
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

struct Fp4WidenAvx2 {
  // One group is 64 weights of a row (32 packed bytes, scale blocks 2g and 2g + 1). Prepared x: per
  // group 8 vectors of 8 floats, vector v lane 4 * L + d holding x[64 g + 32 L + kOffset[v] + 4 d]
  // (L = 128-bit half, d = dword in it), in the order the shuffles below produce the weights:
  // low nibbles (even K) of bytes 0-7 of each half split into even and odd words, then bytes 8-15,
  // then the same for the high nibbles (odd K). A trailing odd block fills half 0 and leaves half 1 zero.
  static constexpr int kOffset[8] = {0, 2, 16, 18, 1, 3, 17, 19};

  static int64_t groups(int64_t in) { return (in + 63) / 64; }
  static size_t act_bytes(int64_t in) { return static_cast<size_t>(groups(in)) * 64 * sizeof(float); }

  // Quantises x[in] (act_quant_fp8, blocks of 32) and lays it out as above into act. Per half of a
  // group, the 32 values are an 8 x 4 matrix q[4 a + b]; the offsets above are its columns b over
  // rows a = 0-3 and 4-7, so two 4 x 4 transposes per 128-bit lane give the eight vectors.
  static void prep(const float* x, int64_t in, void* act) {
    const int64_t padded = groups(in) * 64;
    Scratch tmp(static_cast<size_t>(padded) * sizeof(float));
    float* q = tmp.as<float>();
    std::memcpy(q, x, static_cast<size_t>(in) * sizeof(float));
    act_quant_fp8_avx2(q, in);
    std::memset(q + in, 0, static_cast<size_t>(padded - in) * sizeof(float));  // a trailing odd block's half 1
    float* a = static_cast<float*>(act);
    for (int64_t g = 0; g < padded; g += 64) {
      for (int h = 0; h < 2; ++h) {  // rows a = 0-3 (offsets 0-3), then a = 4-7 (offsets 16-19)
        __m256 r[4];
        for (int i = 0; i < 4; ++i)
          r[i] = _mm256_set_m128(_mm_loadu_ps(q + g + 32 + 16 * h + 4 * i), _mm_loadu_ps(q + g + 16 * h + 4 * i));
        const __m256 t0 = _mm256_unpacklo_ps(r[0], r[1]), t1 = _mm256_unpackhi_ps(r[0], r[1]);
        const __m256 t2 = _mm256_unpacklo_ps(r[2], r[3]), t3 = _mm256_unpackhi_ps(r[2], r[3]);
        float* o = a + g + 16 * h;  // vectors 2h and 2h + 1 (offsets 0 + 16h, 2 + 16h), 4 + 2h and 5 + 2h (odd K)
        _mm256_store_ps(o, _mm256_castpd_ps(_mm256_unpacklo_pd(_mm256_castps_pd(t0), _mm256_castps_pd(t2))));  // b = 0
        _mm256_store_ps(o + 32, _mm256_castpd_ps(_mm256_unpackhi_pd(_mm256_castps_pd(t0), _mm256_castps_pd(t2))));  // b = 1
        _mm256_store_ps(o + 8, _mm256_castpd_ps(_mm256_unpacklo_pd(_mm256_castps_pd(t1), _mm256_castps_pd(t3))));  // b = 2
        _mm256_store_ps(o + 40, _mm256_castpd_ps(_mm256_unpackhi_pd(_mm256_castps_pd(t1), _mm256_castps_pd(t3))));  // b = 3
      }
    }
  }

  // The float32 of every E2M1 code c (bit 3 = sign), split: kB3[c] its top byte, kB2[c] the next.
  // 0.5 = 0x3F00'0000, 1 = 0x3F80'.., 1.5 = 0x3FC0'.., 2 = 0x4000'.., 3 = 0x4040'.., 4 = 0x4080'..,
  // 6 = 0x40C0'..; code 8 is -0.0 (0x8000'0000).
  static __m256i b3_table() {
    return _mm256_setr_epi8(0x00, 0x3F, 0x3F, 0x3F, 0x40, 0x40, 0x40, 0x40, -0x80, -0x41, -0x41, -0x41, -0x40, -0x40,
                            -0x40, -0x40, 0x00, 0x3F, 0x3F, 0x3F, 0x40, 0x40, 0x40, 0x40, -0x80, -0x41, -0x41, -0x41,
                            -0x40, -0x40, -0x40, -0x40);
  }
  static __m256i b2_table() {
    return _mm256_setr_epi8(0x00, 0x00, -0x80, -0x40, 0x00, 0x40, -0x80, -0x40, 0x00, 0x00, -0x80, -0x40, 0x00, 0x40,
                            -0x80, -0x40, 0x00, 0x00, -0x80, -0x40, 0x00, 0x40, -0x80, -0x40, 0x00, 0x00, -0x80, -0x40,
                            0x00, 0x40, -0x80, -0x40);
  }

  // e8m0_value of 8 scale codes (common.h: code 0 is 2^-127, 255 is NaN).
  static __m256 scales8(const uint8_t* sc) {
    const __m256i c = _mm256_cvtepu8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(sc)));
    __m256i bits = _mm256_slli_epi32(c, 23);
    bits = _mm256_blendv_epi8(bits, _mm256_set1_epi32(0x00400000), _mm256_cmpeq_epi32(c, _mm256_setzero_si256()));
    bits = _mm256_blendv_epi8(bits, _mm256_set1_epi32(0x7FC00000), _mm256_cmpeq_epi32(c, _mm256_set1_epi32(255)));
    return _mm256_castsi256_ps(bits);
  }

  // acc += (sum of the group's 64 products, per half) * (the half's block scale s).
  static __m256 group(__m256i v, const float* xg, __m256 s, __m256 acc) {
    const __m256i nib = _mm256_set1_epi8(0x0F), top = _mm256_set1_epi32(static_cast<int>(0xFFFF0000u));
    const __m256i t3 = b3_table(), t2 = b2_table();
    const __m256i lo = _mm256_and_si256(v, nib), hi = _mm256_and_si256(_mm256_srli_epi16(v, 4), nib);
    const __m256i l3 = _mm256_shuffle_epi8(t3, lo), l2 = _mm256_shuffle_epi8(t2, lo);
    const __m256i h3 = _mm256_shuffle_epi8(t3, hi), h2 = _mm256_shuffle_epi8(t2, hi);
    const __m256i la = _mm256_unpacklo_epi8(l2, l3), lb = _mm256_unpackhi_epi8(l2, l3);
    const __m256i ha = _mm256_unpacklo_epi8(h2, h3), hb = _mm256_unpackhi_epi8(h2, h3);
    auto even = [](__m256i w) { return _mm256_castsi256_ps(_mm256_slli_epi32(w, 16)); };
    auto odd = [&](__m256i w) { return _mm256_castsi256_ps(_mm256_and_si256(w, top)); };
    __m256 p = _mm256_mul_ps(even(la), _mm256_load_ps(xg));
    __m256 q = _mm256_mul_ps(even(ha), _mm256_load_ps(xg + 32));
    p = _mm256_fmadd_ps(odd(la), _mm256_load_ps(xg + 8), p);
    q = _mm256_fmadd_ps(odd(ha), _mm256_load_ps(xg + 40), q);
    p = _mm256_fmadd_ps(even(lb), _mm256_load_ps(xg + 16), p);
    q = _mm256_fmadd_ps(even(hb), _mm256_load_ps(xg + 48), q);
    p = _mm256_fmadd_ps(odd(lb), _mm256_load_ps(xg + 24), p);
    q = _mm256_fmadd_ps(odd(hb), _mm256_load_ps(xg + 56), q);
    return _mm256_fmadd_ps(_mm256_add_ps(p, q), s, acc);
  }

  // One output: row w (in / 2 bytes), its in / 32 scale codes sc, prepared x xa.
  static float row(const float* xa, const uint8_t* w, const uint8_t* sc, int64_t in, bool once) {
    const int64_t nkb = in / 32, full = nkb / 2;
    __m256 acc[2] = {_mm256_setzero_ps(), _mm256_setzero_ps()};
    int64_t g = 0;
    // Four groups (eight scale codes) at a time: one scale load, a lane permute per group.
    for (; g + 4 <= full; g += 4) {
      const __m256 s8 = scales8(sc + 2 * g);
      for (int j = 0; j < 4; ++j) {
        // One prefetch per 64 bytes, 1 KiB ahead (as fp4_dot in f32_engine.h).
        if ((j & 1) == 0) prefetch_weights(w + 32 * (g + j) + 1024, once);
        const __m256i v = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(w + 32 * (g + j)));
        const __m256 s = _mm256_permutevar8x32_ps(s8, _mm256_setr_epi32(2 * j, 2 * j, 2 * j, 2 * j, 2 * j + 1,
                                                                        2 * j + 1, 2 * j + 1, 2 * j + 1));
        acc[j & 1] = group(v, xa + 64 * (g + j), s, acc[j & 1]);
      }
    }
    for (; g < full; ++g) {
      const __m256i v = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(w + 32 * g));
      const __m256 s = _mm256_set_m128(_mm_set1_ps(e8m0_value(sc[2 * g + 1])), _mm_set1_ps(e8m0_value(sc[2 * g])));
      acc[g & 1] = group(v, xa + 64 * g, s, acc[g & 1]);
    }
    if (nkb & 1) {  // the last block alone in half 0; half 1's weights, x and scale are zero
      const __m256i v = _mm256_zextsi128_si256(_mm_loadu_si128(reinterpret_cast<const __m128i*>(w + 32 * g)));
      const __m256 s = _mm256_set_m128(_mm_setzero_ps(), _mm_set1_ps(e8m0_value(sc[2 * g])));
      acc[0] = group(v, xa + 64 * g, s, acc[0]);
    }
    return VF8::hsum(_mm256_add_ps(acc[0], acc[1]));
  }

  // FormatKernels::matvec: rows [r0, r1) for each of the nx prepared rows of x.
  static void matvec(const void* act, int64_t nx, size_t stride, const Fp4Weight& w, int64_t r0, int64_t r1, float* y,
                     int64_t ldy, bool once) {
    const int64_t in = w.in, row_bytes = in / 2, nkb = in / 32;
    for (int64_t i = 0; i < nx; ++i) {
      const float* xa = reinterpret_cast<const float*>(static_cast<const unsigned char*>(act) + i * stride);
      for (int64_t r = r0; r < r1; ++r)
        y[i * ldy + r] = row(xa, w.w + r * row_bytes, w.scale + r * nkb, in, once && nx == 1);
    }
  }
};

}  // namespace
}  // namespace strata::kernels::x86
