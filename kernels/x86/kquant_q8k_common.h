// What the AVX2 and AVX-512 Q8_K decode dots (x86/kquant_q8k_avx2.cpp, x86/kquant_q8k_avx512.cpp)
// share: the block layout constants, the group loop over four rows, and the f32 combination of a
// block's exact integer sums S and M with the scales (the reference's IEEE operations per row).
// Only the integer part (the weights times x's quants, summed to S and M) differs between the two.
//
// Like common.h, everything sits in an anonymous namespace: each ISA file gets its own internal copy
// compiled with its own -m flags, so the linker cannot hand an AVX-512 build of it to the AVX2 path.
// It uses only SSE / AVX / AVX2 / F16C intrinsics, which both files' flags enable; with
// -ffp-contract=off (kernels/CMakeLists.txt) both builds round the same way, so the results stay
// bit-identical to kernels::ref::dot_q8k.
#pragma once

#include <immintrin.h>

#include <cstdint>
#include <cstring>

namespace strata::kernels::x86 {
namespace {

// Must match kernels::QuantType (kernels/kquant.h) and the BlockQ8_K layout (kernels/kquant_q8k.h).
enum : int { kQ6_K = 1, kQ4_K = 2, kQ3_K = 3, kQ2_K = 4 };
constexpr int kQ8KBytes = 292, kQ8KQs = 4, kQ8KBsums = 260;
// How far ahead the prefetch reaches: the next group of four rows (8 measured the same on AVX-512).
constexpr int64_t kPrefetchRows = 4;

inline short ld16(const uint8_t* p) {
  short h;
  std::memcpy(&h, p, 2);
  return h;
}
// [d0..d3, dmin0..dmin3] of the four rows' blocks at the given offsets, as f32 (exact).
inline __m256 f16x8(const uint8_t* const p[4], int64_t off_d, int64_t off_dmin) {
  return _mm256_cvtph_ps(_mm_setr_epi16(ld16(p[0] + off_d), ld16(p[1] + off_d), ld16(p[2] + off_d), ld16(p[3] + off_d),
                                        ld16(p[0] + off_dmin), ld16(p[1] + off_dmin), ld16(p[2] + off_dmin),
                                        ld16(p[3] + off_dmin)));
}

// acc (the four rows' sums) plus one block: sm = [S0..S3, M0..M3] of the block at offset off of rows
// p[0..3], xd = x's block scale. B gives kD, kDmin (offsets of the fp16 d, dmin) and kBias.
template <class B>
inline __m128 add_block(__m128 acc, __m256i sm, const uint8_t* const p[4], int64_t off, float xd) {
  if constexpr (B::kBias == 0) {
    // ROUNDING: the definition's dd = d * xd, dm = dmin * xd, t = dd * S, u = dm * M, acc += t - u,
    // lane-wise for the four rows (one f32 rounding each, no FMA: -ffp-contract=off).
    const __m256 ddm = _mm256_mul_ps(f16x8(p, off + B::kD, off + B::kDmin), _mm256_set1_ps(xd));
    const __m256 tu = _mm256_mul_ps(ddm, _mm256_cvtepi32_ps(sm));
    const __m128 t = _mm256_castps256_ps128(tu), u = _mm256_extractf128_ps(tu, 1);
    return _mm_add_ps(acc, _mm_sub_ps(t, u));
  } else {
    // S = S' - bias * M (exact), then the definition's dd = d * xd, t = dd * S, acc += t.
    const __m128i s = _mm_sub_epi32(_mm256_castsi256_si128(sm),
                                    _mm_mullo_epi32(_mm256_extracti128_si256(sm, 1), _mm_set1_epi32(B::kBias)));
    const __m128i d16 = _mm_setr_epi16(ld16(p[0] + off + B::kD), ld16(p[1] + off + B::kD), ld16(p[2] + off + B::kD),
                                       ld16(p[3] + off + B::kD), 0, 0, 0, 0);
    const __m128 dd = _mm_mul_ps(_mm_cvtph_ps(d16), _mm_set1_ps(xd));
    return _mm_add_ps(acc, _mm_mul_ps(dd, _mm_cvtepi32_ps(s)));
  }
}

// Rows [r0, r1) of one token, four at a time (a tail group repeats its last row and drops the
// copies); block ib of each group adds block_sums(p, xb, off) (sm as add_block takes it; xb: x's
// block ib, off: the weight block's offset in each row) after prefetching the same block of the
// next group of rows into L1.
template <class B, class BlockSums>
inline void rows4(const uint8_t* xq, int64_t nb, const uint8_t* w, int64_t row_bytes, int64_t r0, int64_t r1, float* y,
                  const BlockSums& block_sums) {
  for (int64_t r = r0; r < r1; r += 4) {
    const uint8_t* p[4];
    for (int j = 0; j < 4; ++j) p[j] = w + (r + j < r1 ? r + j : r1 - 1) * row_bytes;
    __m128 acc = _mm_setzero_ps();
    for (int64_t ib = 0; ib < nb; ++ib) {
      const uint8_t* xb = xq + ib * kQ8KBytes;
      const int64_t off = ib * B::kBytes;
      for (int j = 0; j < 4; ++j)
        for (int c = 0; c < B::kBytes; c += 64)
          _mm_prefetch(reinterpret_cast<const char*>(p[j] + kPrefetchRows * row_bytes + off + c), _MM_HINT_T0);
      const __m256i sm = block_sums(p, xb, off);
      float xd;
      std::memcpy(&xd, xb, 4);
      acc = add_block<B>(acc, sm, p, off, xd);
    }
    float o[4];
    _mm_storeu_ps(o, acc);
    for (int j = 0; j < 4 && r + j < r1; ++j) y[r + j] = o[j];
  }
}

}  // namespace
}  // namespace strata::kernels::x86
