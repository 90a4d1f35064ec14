// The AVX2 level's FP4 (MXFP4) decode matvec: an exact integer dot with VPMADDUBSW.
//
// Why: fp4_matvec_avx2.h widens E2M1 codes to float32 with 19 integer ops and 8 FMAs per 64 weights,
// and on the AVX2-only Zen 3 VM it still ran at ~7 GB/s per core, bound by those ops, against 12-13
// GB/s of memory read (bench/kernels_bench BM_LinearFp4, BM_MemRead; docs/performance.md). Here the
// weights stay 8-bit integers and one VPMADDUBSW multiplies 32 of them:
//   - a weight code c (bit 3 = sign) is 2 * e2m1(c) in {0, +-1, +-2, +-3, +-4, +-6, +-8, +-12}: one
//     VPSHUFB lookup per 32 codes gives it as a signed byte;
//   - an act_quant_fp8 value q = e4m3 * s_x (s_x a power of two, kernels/ref/quant.cpp) is
//     sign(q) * M * s_x * 2^-9 with M = |e4m3| * 2^9 an integer below 2^18 with at most 4 significant
//     bits (normal: (8 + m) << (e - 1); subnormal: m). So M sits whole in one of three byte planes:
//     plane 0 holds M < 2^8, plane 1 M >> 5 for 2^8 <= M < 2^13 (then M is a multiple of 2^5), plane 2
//     M >> 10 for M >= 2^13 (a multiple of 2^10); the other two planes hold 0 for that element;
//   - x's sign is XORed into the weight code's sign bit (one VPXOR per 64 codes), so the planes are
//     unsigned bytes as VPMADDUBSW wants them: per plane, pairs of products (<= 2 * 255 * 12, no
//     saturation), the even and odd K halves added as int16 (<= 12240), then VPMADDWD by 1, 2^5 or
//     2^10 sums pairs into int32 lanes holding 8 exact products each (|S| <= 8 * 229376 * 12 < 2^25);
//   - per 32-wide block, the four int32 lanes become floats times s_x * 2^-10 (exact: a power of two)
//     and are added times the weight's block scale in one FMA, as the float kernel does.
// Plane 0 (|q| < s_x / 2: below 1/896 to 1/448 of the block's largest |x|) is empty in some 64-wide
// groups (35% of them in decode on the 8 GB checkpoint): prep flags the groups that have a nonzero
// plane-0 value and the row loop skips plane 0 in the others.
//
// Exactness: every product and each lane's integer sum of 8 is exact; each block's four lane sums
// are rounded once each (to f32, where |S| >= 2^24) and added to four accumulator lanes, where the
// reference (kernels/ref/linear.cpp linear_fp4) rounds per addition within a block, so only f32
// summation order separates the two (tests/kernels/linear_test.cpp Fp4MatchesReference,
// Fp4ExactSumsComeOutExact). A row of x whose act_quant values are not all finite (a NaN or inf in
// x, or |x| >= 248 * 2^120, which act_quant's q = e4m3 * s_x overflows) goes to fp4_matvec_avx2.h
// instead: NaN and inf come out NaN as in the reference; the overflowed finite case comes out inf,
// as it did before this kernel, where the reference (which scales the block's partial, never q)
// stays finite. A row's bits depend on `in` and its own x row only, never on [r0, r1) or on the
// other rows of x in the call (batch invariance).
// Included by linear_avx2.cpp only (compiled with -mavx2 -mfma -mf16c).
#pragma once

#include <immintrin.h>

#include <cstddef>
#include <cstdint>
#include <cstring>

#include "kernels/linear.h"
#include "kernels/x86/common.h"
#include "kernels/x86/fp4_matvec_avx2.h"
#include "kernels/x86/quant_x86.h"
#include "kernels/x86/simd.h"

namespace strata::kernels::x86 {
namespace {

struct Fp4IntMatvecAvx2 {
  // Prepared x: a 64-byte header (int at 0: 1 where the row went to the float kernel's layout), then
  // per group g of 64 K (blocks 2g and 2g + 1; lane L of each 32-byte vector is block 2g + L) 256 bytes:
  //   [0, 32)               xs: byte j, bit 3 = sign of x[2j] of the block, bit 7 = sign of x[2j + 1]
  //   [32 + 64p, 64 + 64p)  plane p of the even K (byte j: x[2j]), the weights' low nibbles
  //   [64 + 64p, 96 + 64p)  plane p of the odd K (byte j: x[2j + 1]), the high nibbles
  //   [224, 256)            8 floats: the block's s_x * 2^-10 in the lane's four int32 lanes
  // then one byte per group: 1 where plane 0 holds a nonzero value; then, 32-byte aligned, per four
  // whole groups (eight blocks b .. b + 7) 8 floats: the blocks' s_x * 2^-10 in the order b, b + 2,
  // b + 4, b + 6, b + 1, b + 3, b + 5, b + 7 (see row). A trailing odd block leaves lane 1 of its
  // group zero (planes, signs and factor), so its products are 0.
  static constexpr size_t kHeader = 64;
  static constexpr size_t kGroupBytes = 256;

  static int64_t groups(int64_t in) { return (in + 63) / 64; }
  // Offset of the per-four-group factors from the start of the groups.
  static size_t quad_offset(int64_t in) {
    return (static_cast<size_t>(groups(in)) * (kGroupBytes + 1) + 31) / 32 * 32;
  }
  static size_t act_bytes(int64_t in) {
    return kHeader + quad_offset(in) + static_cast<size_t>(groups(in) / 4) * 8 * sizeof(float);
  }

  // Four vectors of 8 int32 in [0, 255], elements 0-31 of a block in order -> bytes [evens | odds]:
  // the low 16 bytes are elements 0, 2, .., 30, the high 16 elements 1, 3, .., 31.
  static __m256i evens_odds(const __m256i* v) {
    // The packs interleave 128-bit lanes: dword d of the result holds elements 8 (d % 4) + 4 (d / 4)
    // onwards; the permute restores K order, the shuffle splits each lane into its evens and odds,
    // and the qword permute puts both lanes' evens first.
    const __m256i p = _mm256_packus_epi16(_mm256_packus_epi32(v[0], v[1]), _mm256_packus_epi32(v[2], v[3]));
    const __m256i k = _mm256_permutevar8x32_epi32(p, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
    const __m256i eo = _mm256_shuffle_epi8(k, _mm256_setr_epi8(0, 2, 4, 6, 8, 10, 12, 14, 1, 3, 5, 7, 9, 11, 13, 15, 0,
                                                               2, 4, 6, 8, 10, 12, 14, 1, 3, 5, 7, 9, 11, 13, 15));
    return _mm256_permute4x64_epi64(eo, 0xD8);
  }

  // Quantises x[in] (act_quant_fp8, blocks of 32) and lays it out as above into act.
  static void prep(const float* x, int64_t in, void* act) {
    const int64_t ng = groups(in), nkb = in / 32;
    Scratch tmp(static_cast<size_t>(in) * sizeof(float));
    float* q = tmp.as<float>();
    std::memcpy(q, x, static_cast<size_t>(in) * sizeof(float));
    act_quant_fp8_avx2(q, in);
    unsigned char* base = static_cast<unsigned char*>(act);
    unsigned char* a = base + kHeader;
    unsigned char* flags = a + ng * kGroupBytes;
    std::memset(a, 0, static_cast<size_t>(ng) * (kGroupBytes + 1));
    const __m256 abs_mask = _mm256_castsi256_ps(_mm256_set1_epi32(0x7FFFFFFF));
    const __m256i exp_mask = _mm256_set1_epi32(0x7F800000);
    __m256i non_finite = _mm256_setzero_si256();
    for (int64_t b = 0; b < nkb; ++b) {
      // s_x as act_quant computes it (the max of |x| does not depend on the order; a row with a NaN
      // goes to the float kernel below, whatever its s_x here).
      __m256 m = _mm256_and_ps(_mm256_loadu_ps(x + 32 * b), abs_mask);
      for (int i = 1; i < 4; ++i) m = _mm256_max_ps(_mm256_and_ps(_mm256_loadu_ps(x + 32 * b + 8 * i), abs_mask), m);
      __m128 h = _mm_max_ps(_mm256_castps256_ps128(m), _mm256_extractf128_ps(m, 1));
      h = _mm_max_ps(h, _mm_movehl_ps(h, h));
      h = _mm_max_ss(h, _mm_shuffle_ps(h, h, 1));
      const float sx = fp8_scale(_mm_cvtss_f32(h));
      const __m256 to_m = _mm256_set1_ps(512.0f / sx);  // exact: sx is a power of two in [2^-22, 2^120]
      __m256i plane[3][4], sign[4];
      for (int i = 0; i < 4; ++i) {
        const __m256 qi = _mm256_loadu_ps(q + 32 * b + 8 * i);
        const __m256i bits = _mm256_castps_si256(qi);
        non_finite = _mm256_or_si256(non_finite, _mm256_cmpeq_epi32(_mm256_and_si256(bits, exp_mask), exp_mask));
        const __m256i M = _mm256_cvttps_epi32(_mm256_mul_ps(_mm256_and_ps(qi, abs_mask), to_m));  // exact integer
        const __m256i ge_p1 = _mm256_cmpgt_epi32(M, _mm256_set1_epi32(255));
        const __m256i ge_p2 = _mm256_cmpgt_epi32(M, _mm256_set1_epi32(8191));
        plane[0][i] = _mm256_andnot_si256(ge_p1, M);
        plane[1][i] = _mm256_and_si256(_mm256_andnot_si256(ge_p2, ge_p1), _mm256_srli_epi32(M, 5));
        plane[2][i] = _mm256_and_si256(ge_p2, _mm256_srli_epi32(M, 10));
        sign[i] = _mm256_and_si256(_mm256_srai_epi32(bits, 31), _mm256_set1_epi32(8));
      }
      unsigned char* ag = a + (b / 2) * kGroupBytes;
      const int L = static_cast<int>(b & 1);
      const __m256i s = evens_odds(sign);
      const __m128i xs = _mm_or_si128(_mm256_castsi256_si128(s), _mm_slli_epi16(_mm256_extracti128_si256(s, 1), 4));
      _mm_storeu_si128(reinterpret_cast<__m128i*>(ag + 16 * L), xs);
      for (int p = 0; p < 3; ++p) {
        const __m256i e = evens_odds(plane[p]);
        _mm_storeu_si128(reinterpret_cast<__m128i*>(ag + 32 + 64 * p + 16 * L), _mm256_castsi256_si128(e));
        _mm_storeu_si128(reinterpret_cast<__m128i*>(ag + 64 + 64 * p + 16 * L), _mm256_extracti128_si256(e, 1));
      }
      const __m256i any0 =
          _mm256_or_si256(_mm256_or_si256(plane[0][0], plane[0][1]), _mm256_or_si256(plane[0][2], plane[0][3]));
      if (!_mm256_testz_si256(any0, any0)) flags[b / 2] = 1;
      _mm_storeu_ps(reinterpret_cast<float*>(ag + 224) + 4 * L, _mm_set1_ps(sx * 0x1p-10f));
      if (b / 8 < ng / 4) {
        float* quad = reinterpret_cast<float*>(a + quad_offset(in)) + b / 8 * 8;
        quad[4 * L + (b % 8) / 2] = sx * 0x1p-10f;
      }
    }
    const int to_float = _mm256_testz_si256(non_finite, non_finite) ? 0 : 1;
    std::memcpy(base, &to_float, sizeof(int));
    if (to_float) Fp4WidenAvx2::prep(x, in, a);  // needs groups * 256 bytes: fits
  }

  // 2 * e2m1(c) for each code c as a signed byte (code 8 is -0: 0).
  static __m256i w2_table() {
    return _mm256_setr_epi8(0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12, 0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2,
                            -3, -4, -6, -8, -12);
  }

  // The group's two blocks' exact sums, four int32 lanes each (block 2g in lanes 0-3). ag: the
  // group's prepared x; plane0: whether plane 0 has a nonzero value.
  static __m256i group_sums(__m256i v, const unsigned char* ag, bool plane0) {
    const __m256i nib = _mm256_set1_epi8(0x0F), t = w2_table();
    v = _mm256_xor_si256(v, _mm256_load_si256(reinterpret_cast<const __m256i*>(ag)));  // sign(w x)
    const __m256i we = _mm256_shuffle_epi8(t, _mm256_and_si256(v, nib));
    const __m256i wo = _mm256_shuffle_epi8(t, _mm256_and_si256(_mm256_srli_epi16(v, 4), nib));
    auto plane = [&](int p, int16_t weight) {
      const __m256i e = _mm256_load_si256(reinterpret_cast<const __m256i*>(ag + 32 + 64 * p));
      const __m256i o = _mm256_load_si256(reinterpret_cast<const __m256i*>(ag + 64 + 64 * p));
      const __m256i pairs = _mm256_add_epi16(_mm256_maddubs_epi16(e, we), _mm256_maddubs_epi16(o, wo));
      return _mm256_madd_epi16(pairs, _mm256_set1_epi16(weight));
    };
    __m256i sum = _mm256_add_epi32(plane(1, 32), plane(2, 1024));
    if (plane0) sum = _mm256_add_epi32(sum, plane(0, 1));
    return sum;
  }
  // acc += the group's sums * s_x 2^-10 * s (the lane's block scale).
  static __m256 group(__m256i v, const unsigned char* ag, bool plane0, __m256 s, __m256 acc) {
    const __m256 part = _mm256_mul_ps(_mm256_cvtepi32_ps(group_sums(v, ag, plane0)),
                                      _mm256_load_ps(reinterpret_cast<const float*>(ag + 224)));
    return _mm256_fmadd_ps(part, s, acc);
  }

  // One output: row w (in / 2 bytes), its in / 32 scale codes sc, prepared x a (past the header).
  static float row(const unsigned char* a, const uint8_t* w, const uint8_t* sc, int64_t in, bool once) {
    const int64_t nkb = in / 32, full = nkb / 2;
    const unsigned char* flags = a + groups(in) * kGroupBytes;
    auto weights = [&](int64_t g) { return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(w + 32 * g)); };
    const float* quads = reinterpret_cast<const float*>(a + quad_offset(in));
    const __m256 zero = _mm256_setzero_ps(), inf = _mm256_set1_ps(__builtin_inff());
    __m256 acc0 = zero, acc1 = zero;
    int64_t g = 0;
    // Four groups (eight scale codes) at a time; one prefetch per 64 bytes, 1 KiB ahead. Each block's
    // two factors, s_x 2^-10 and the weight's s (both powers of two), are multiplied once per four
    // groups, in the order [b, b+2, b+4, b+6 | b+1, b+3, b+5, b+7], so that an in-lane VPERMILPS
    // gives each group its pair (not a lane-crossing VPERMPS: one per cycle on Zen 3) and one FMA
    // takes the group. sum * (s_x 2^-10 s) is the same real number, rounded once at the same add, as
    // the two steps' (sum * s_x 2^-10) * s, so the bits are the same, unless the factor leaves the
    // floats (below 2^-149 or infinite) or the two steps' first product can overflow (s_x 2^-10 >=
    // 2^103, as |sum| < 2^25): those quads take the two steps.
    for (; g + 4 <= full; g += 4) {
      const __m256 s8 = _mm256_permutevar8x32_ps(Fp4WidenAvx2::scales8(sc + 2 * g),
                                                 _mm256_setr_epi32(0, 2, 4, 6, 1, 3, 5, 7));
      const __m256 x8 = _mm256_load_ps(quads + 2 * g), f8 = _mm256_mul_ps(s8, x8);
      prefetch_weights(w + 32 * g + 1024, once);
      prefetch_weights(w + 32 * g + 1088, once);
      const unsigned char* ag = a + g * kGroupBytes;
      const __m256 leaves = _mm256_or_ps(_mm256_cmp_ps(f8, zero, _CMP_EQ_OQ), _mm256_cmp_ps(f8, inf, _CMP_EQ_OQ));
      const __m256 out = _mm256_or_ps(leaves, _mm256_cmp_ps(x8, _mm256_set1_ps(0x1p103f), _CMP_GE_OQ));
      if (_mm256_movemask_ps(out) == 0) {
        auto sums = [&](int j) {
          return _mm256_cvtepi32_ps(group_sums(weights(g + j), ag + j * kGroupBytes, flags[g + j] != 0));
        };
        acc0 = _mm256_fmadd_ps(sums(0), _mm256_permute_ps(f8, 0x00), acc0);
        acc1 = _mm256_fmadd_ps(sums(1), _mm256_permute_ps(f8, 0x55), acc1);
        acc0 = _mm256_fmadd_ps(sums(2), _mm256_permute_ps(f8, 0xAA), acc0);
        acc1 = _mm256_fmadd_ps(sums(3), _mm256_permute_ps(f8, 0xFF), acc1);
      } else {
        acc0 = group(weights(g), ag, flags[g] != 0, _mm256_permute_ps(s8, 0x00), acc0);
        acc1 = group(weights(g + 1), ag + kGroupBytes, flags[g + 1] != 0, _mm256_permute_ps(s8, 0x55), acc1);
        acc0 = group(weights(g + 2), ag + 2 * kGroupBytes, flags[g + 2] != 0, _mm256_permute_ps(s8, 0xAA), acc0);
        acc1 = group(weights(g + 3), ag + 3 * kGroupBytes, flags[g + 3] != 0, _mm256_permute_ps(s8, 0xFF), acc1);
      }
    }
    for (; g < full; ++g) {
      const __m256 s = _mm256_set_m128(_mm_set1_ps(e8m0_value(sc[2 * g + 1])), _mm_set1_ps(e8m0_value(sc[2 * g])));
      acc0 = group(weights(g), a + g * kGroupBytes, flags[g] != 0, s, acc0);
    }
    if (nkb & 1) {  // the last block alone in lane 0; lane 1's weights, planes and scale are zero
      const __m256i v = _mm256_zextsi128_si256(_mm_loadu_si128(reinterpret_cast<const __m128i*>(w + 32 * g)));
      const __m256 s = _mm256_set_m128(_mm_setzero_ps(), _mm_set1_ps(e8m0_value(sc[2 * g])));
      acc1 = group(v, a + g * kGroupBytes, flags[g] != 0, s, acc1);
    }
    return VF8::hsum(_mm256_add_ps(acc0, acc1));
  }

  // FormatKernels::matvec: rows [r0, r1) for each of the nx prepared rows of x.
  static void matvec(const void* act, int64_t nx, size_t stride, const Fp4Weight& w, int64_t r0, int64_t r1, float* y,
                     int64_t ldy, bool once) {
    const int64_t in = w.in, row_bytes = in / 2, nkb = in / 32;
    for (int64_t i = 0; i < nx; ++i) {
      const unsigned char* base = static_cast<const unsigned char*>(act) + i * stride;
      int to_float;
      std::memcpy(&to_float, base, sizeof(int));
      const unsigned char* a = base + kHeader;
      const bool o = once && nx == 1;
      if (to_float) {
        for (int64_t r = r0; r < r1; ++r)
          y[i * ldy + r] =
              Fp4WidenAvx2::row(reinterpret_cast<const float*>(a), w.w + r * row_bytes, w.scale + r * nkb, in, o);
      } else {
        for (int64_t r = r0; r < r1; ++r) y[i * ldy + r] = row(a, w.w + r * row_bytes, w.scale + r * nkb, in, o);
      }
    }
  }
};

}  // namespace
}  // namespace strata::kernels::x86
