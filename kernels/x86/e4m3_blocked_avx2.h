// The AVX2 level's decode matvec for a blocked BF16 weight stored as E4M3 codes (Bf16Weight::e4m3:
// the release's FP8 attn.wo_a), bit for bit the reference's ordered sum.
//
// Why: the f32 engine (f32_engine.h, e4m3_blocked_rows_nx) spends on every 8 weights a VPMOVSXBW,
// two integer ops, a VCVTPH2PS and a multiply by the block scale before the product and the add; on
// an AVX2-only Zen 3 that read 6.7 GB/s per core (bench/kernels_bench BM_LinearWoA decode_e4m3).
// Here the codes widen with byte shuffles as in fp8_matvec_avx2.h (float32 bits s | eeee << 23 |
// mmm << 20, the code's value times 2^-120, subnormal codes included), and the block scale times
// 2^120 goes into x instead: x' = x * 2^(code - 7), once per 32-wide K block of each 32-row scale
// block. Then x' * bits is the same real number as x * w(r, k), so the rounded product is the
// reference's, and each row keeps its own chain acc + product, k in order: the reference's bits.
// x' must itself be exact (a normal float, or zero where x is zero, and finite); where any x' of a
// 32-row block is not, those rows take the f32 engine's path, which gives the same bits.
//
// Layout: the blocked weight holds 16 rows' codes at one k contiguously. 32 bytes are k and k + 1;
// a VPERMQ puts k's rows 0-7 and k + 1's rows 0-7 in the low half and rows 8-15 in the high half,
// so after the byte lookups and VPUNPCK{L,H}BW the even words of one register are rows 0 2 4 6 |
// 8 10 12 14 at k and the odd words rows 1 3 5 7 | 9 11 13 15, the other register the same at k + 1.
// Included by linear_avx2.cpp only (compiled with -mavx2 -mfma -mf16c).
#pragma once

#include <immintrin.h>

#include <cstddef>
#include <cstdint>

#include "kernels/linear.h"
#include "kernels/x86/common.h"
#include "kernels/x86/fp8_matvec_avx2.h"

namespace strata::kernels::x86 {
namespace {

struct E4m3BlockedAvx2 {
  static constexpr int64_t kBr = kBf16BlockRows;  // 16

  // x'[k] = x[k] * 2^(sc[k / 32] - 7) (the scale 2^(code - 127) times 2^120) for k < in (in a
  // multiple of 32); false where one of them is not exact (subnormal from a non-zero x, infinite,
  // NaN) or a scale code is above 134 (the factor itself infinite; the model's scales are 2^-60 ..
  // 2^60, codes 67 .. 187, and typical ones far below 2^7).
  static bool scaled_x(const float* x, const uint8_t* sc, int64_t in, float* xs) {
    __m256 bad = _mm256_setzero_ps();
    const __m256 abs_mask = _mm256_castsi256_ps(_mm256_set1_epi32(0x7FFFFFFF));
    const __m256 min_normal = _mm256_set1_ps(0x1p-126f), inf = _mm256_set1_ps(__builtin_inff());
    for (int64_t b = 0; b < in / 32; ++b) {
      if (sc[b] > 134) return false;
      const __m256 f = _mm256_castsi256_ps(_mm256_set1_epi32((static_cast<int>(sc[b]) + 120) << 23));  // 2^(c - 7)
      for (int j = 0; j < 32; j += 8) {
        const __m256 xv = _mm256_loadu_ps(x + b * 32 + j);
        const __m256 v = _mm256_mul_ps(xv, f);
        const __m256 a = _mm256_and_ps(v, abs_mask);
        const __m256 tiny = _mm256_and_ps(_mm256_cmp_ps(a, min_normal, _CMP_LT_OQ),
                                          _mm256_cmp_ps(xv, _mm256_setzero_ps(), _CMP_NEQ_UQ));
        bad = _mm256_or_ps(bad, _mm256_or_ps(tiny, _mm256_cmp_ps(a, inf, _CMP_NLT_UQ)));
        _mm256_store_ps(xs + b * 32 + j, v);
      }
    }
    return _mm256_movemask_ps(bad) == 0;
  }

  // NB consecutive 16-row blocks (codes at p, the first block's) of one 32-row scale block: y[0 ..
  // 16 NB) = the reference's ordered sums against x' xs.
  template <int NB>
  static void blocks(const float* xs, const uint8_t* p, int64_t in, float* y, bool once) {
    const __m256i nib = _mm256_set1_epi8(0x0F), top = _mm256_set1_epi32(static_cast<int>(0xFFFF0000u));
    const __m256i t3 = Fp8MatvecAvx2::top_table(), t2 = Fp8MatvecAvx2::next_table();
    __m256 even[NB], odd[NB];
    for (int j = 0; j < NB; ++j) even[j] = odd[j] = _mm256_setzero_ps();
    for (int64_t k = 0; k < in; k += 2) {
      const __m256 x0 = _mm256_set1_ps(xs[k]), x1 = _mm256_set1_ps(xs[k + 1]);
      for (int j = 0; j < NB; ++j) {
        const uint8_t* q = p + j * kBr * in + k * kBr;
        if ((k & 3) == 0) prefetch_weights(q + 1024, once);
        __m256i v = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(q));
        v = _mm256_permute4x64_epi64(v, _MM_SHUFFLE(3, 1, 2, 0));
        const __m256i b3 = _mm256_shuffle_epi8(t3, _mm256_and_si256(_mm256_srli_epi16(v, 4), nib));
        const __m256i b2 = _mm256_shuffle_epi8(t2, _mm256_and_si256(v, nib));
        const __m256i wa = _mm256_unpacklo_epi8(b2, b3), wb = _mm256_unpackhi_epi8(b2, b3);
        // Product, then add: the reference's two roundings (the library builds with -ffp-contract=off).
        // The product as an FMA with +0: the same rounded value (a zero product's sign cannot show,
        // the chains start at +0), and Zen 3 takes subnormal operands (the codes with eeee = 0) in
        // an FMA at full speed but not in VMULPS (perf annotate: 33% of the samples on two VMULPS).
        const __m256 z = _mm256_setzero_ps();
        even[j] = _mm256_add_ps(even[j], _mm256_fmadd_ps(_mm256_castsi256_ps(_mm256_slli_epi32(wa, 16)), x0, z));
        odd[j] = _mm256_add_ps(odd[j], _mm256_fmadd_ps(_mm256_castsi256_ps(_mm256_and_si256(wa, top)), x0, z));
        even[j] = _mm256_add_ps(even[j], _mm256_fmadd_ps(_mm256_castsi256_ps(_mm256_slli_epi32(wb, 16)), x1, z));
        odd[j] = _mm256_add_ps(odd[j], _mm256_fmadd_ps(_mm256_castsi256_ps(_mm256_and_si256(wb, top)), x1, z));
      }
    }
    for (int j = 0; j < NB; ++j) {
      const __m256 lo = _mm256_unpacklo_ps(even[j], odd[j]);  // rows 0-3 | 8-11
      const __m256 hi = _mm256_unpackhi_ps(even[j], odd[j]);  // rows 4-7 | 12-15
      _mm256_storeu_ps(y + j * kBr, _mm256_permute2f128_ps(lo, hi, 0x20));
      _mm256_storeu_ps(y + j * kBr + 8, _mm256_permute2f128_ps(lo, hi, 0x31));
    }
  }

  // Rows [r0, r1) of w (blocked, E4M3 storage, in a multiple of 32) for one row of x; the rows this
  // kernel cannot take (parts of a 16-row block, inexact x') go to `fallback` (the f32 engine's
  // matvec over [a, b) with a a multiple of 8), which computes the same bits.
  template <class Fallback>
  static void matvec1(const float* x, const Bf16Weight& w, int64_t r0, int64_t r1, float* y, bool once,
                      Fallback&& fallback) {
    const int64_t in = w.in, nkb = in / 32;
    Scratch buf(static_cast<size_t>(in) * sizeof(float));
    float* xs = buf.as<float>();
    for (int64_t rb = r0 / 32 * 32; rb < r1; rb += 32) {
      const int64_t a = imax(r0, rb), b = imin(r1, rb + 32);
      const int64_t a16 = round_up(a, kBr), b16 = b / kBr * kBr;
      if (a16 >= b16 || !scaled_x(x, w.e4m3_scale + (rb / 32) * nkb, in, xs)) {
        fallback(a, b);
        continue;
      }
      if (a < a16) fallback(a, a16);
      const uint8_t* p = w.e4m3 + a16 * in;  // blocks of 16 rows, each 16 * in codes
      if (b16 - a16 == 2 * kBr) blocks<2>(xs, p, in, y + a16, once);
      else blocks<1>(xs, p, in, y + a16, once);
      if (b16 < b) fallback(b16, b);
    }
  }
};

}  // namespace
}  // namespace strata::kernels::x86
