// act_quant_fp8 and fp4_quant_e8m0 with AVX2: 32 values (four registers) per block. Same rounding
// trick as quant_avx512.cpp (|q| + 2^(max(e,-6)+20) rounds |q| to the E4M3 grid, ties to even), and
// the same E2M1 selects.
#include <immintrin.h>

#include "kernels/x86/common.h"
#include "kernels/x86/quant_x86.h"

namespace strata::kernels::x86 {
namespace {

inline __m256 abs8(__m256 v) { return _mm256_and_ps(v, _mm256_castsi256_ps(_mm256_set1_epi32(0x7FFFFFFF))); }

inline __m256 quant8(__m256 v, __m256 inv, __m256 s) {
  // x/s is exact: s is a power of two. VMAXPS/VMINPS return their second operand where one is NaN,
  // so x/s goes second: a NaN stays NaN, as std::clamp keeps it in the reference (act_quant_fp8).
  const __m256 q = _mm256_min_ps(_mm256_set1_ps(448.0f), _mm256_max_ps(_mm256_set1_ps(-448.0f), _mm256_mul_ps(v, inv)));
  const __m256 a = abs8(q);
  const __m256 e = _mm256_and_ps(a, _mm256_castsi256_ps(_mm256_set1_epi32(0x7F800000)));
  const __m256 m = _mm256_mul_ps(_mm256_max_ps(e, _mm256_set1_ps(0x1p-6f)), _mm256_set1_ps(0x1p20f));
  // ROUNDING: RNE to the E4M3 grid (act_quant), see quant_avx512.cpp.
  const __m256 r = _mm256_sub_ps(_mm256_add_ps(a, m), m);
  const __m256 res = _mm256_mul_ps(r, s);
  // Sign back, except on a zero result: f32_to_e4m3 encodes -0 as +0.
  const __m256 nz = _mm256_cmp_ps(r, _mm256_setzero_ps(), _CMP_NEQ_UQ);
  const __m256 sign = _mm256_and_ps(q, _mm256_castsi256_ps(_mm256_set1_epi32(static_cast<int>(0x80000000u))));
  return _mm256_or_ps(res, _mm256_and_ps(sign, nz));
}

// Eight values of an E2M1 block: RNE_e2m1(clamp(v / s, +-6)) * s with the reference's selects
// (kernels/ref/quant.cpp e2m1_round_branchless), as quant_avx512.cpp's e2m1_16: the same midpoints
// with the same strictness (ties to the even code), +0 for a zero code, a -0 input and NaN. IEEE
// division as the reference's.
inline __m256 e2m1_8(__m256 v, __m256 s) {
  __m256 q = _mm256_div_ps(v, s);
  // std::clamp(q, -6, 6): q < -6 ? -6 : 6 < q ? 6 : q (ordered compares: a NaN stays NaN).
  q = _mm256_blendv_ps(q, _mm256_set1_ps(-6.0f), _mm256_cmp_ps(q, _mm256_set1_ps(-6.0f), _CMP_LT_OQ));
  q = _mm256_blendv_ps(q, _mm256_set1_ps(6.0f), _mm256_cmp_ps(_mm256_set1_ps(6.0f), q, _CMP_LT_OQ));
  const __m256 a = abs8(q);
  __m256 r = _mm256_setzero_ps();
  auto pick = [&](float edge, bool strict, float value) __attribute__((always_inline)) {
    const __m256 m = strict ? _mm256_cmp_ps(a, _mm256_set1_ps(edge), _CMP_GT_OQ)
                            : _mm256_cmp_ps(a, _mm256_set1_ps(edge), _CMP_GE_OQ);
    r = _mm256_blendv_ps(r, _mm256_set1_ps(value), m);
  };
  pick(0.25f, true, 0.5f);
  pick(0.75f, false, 1.0f);
  pick(1.25f, true, 1.5f);
  pick(1.75f, false, 2.0f);
  pick(2.5f, true, 3.0f);
  pick(3.5f, false, 4.0f);
  pick(5.0f, true, 6.0f);
  // v < 0 && r != 0 ? -r : r (the sign bit flipped: r is +0 or a positive grid value here)
  const __m256 neg = _mm256_and_ps(_mm256_cmp_ps(q, _mm256_setzero_ps(), _CMP_LT_OQ),
                                   _mm256_cmp_ps(r, _mm256_setzero_ps(), _CMP_NEQ_UQ));
  r = _mm256_xor_ps(r, _mm256_and_ps(neg, _mm256_set1_ps(-0.0f)));
  return _mm256_mul_ps(r, s);
}

inline float block_amax8x4(const __m256* v) {
  __m256 mx = _mm256_setzero_ps();
  for (int j = 0; j < 4; ++j) mx = _mm256_max_ps(abs8(v[j]), mx);  // a NaN is skipped, as std::max(amax, |x|) skips it
  __m128 m4 = _mm_max_ps(_mm256_castps256_ps128(mx), _mm256_extractf128_ps(mx, 1));
  m4 = _mm_max_ps(m4, _mm_movehl_ps(m4, m4));
  m4 = _mm_max_ss(m4, _mm_shuffle_ps(m4, m4, 1));
  return _mm_cvtss_f32(m4);
}

}  // namespace

void fp4_quant_e8m0_avx2(float* x, int64_t n) {
  for (int64_t b = 0; b < n; b += 32) {
    __m256 v[4];
    for (int j = 0; j < 4; ++j) v[j] = _mm256_loadu_ps(x + b + 8 * j);
    const __m256 s = _mm256_set1_ps(fp4_e8m0_scale(block_amax8x4(v)));
    for (int j = 0; j < 4; ++j) _mm256_storeu_ps(x + b + 8 * j, e2m1_8(v[j], s));
  }
}

void act_quant_fp8_avx2(float* x, int64_t n) {
  for (int64_t b = 0; b < n; b += 32) {
    __m256 v[4];
    for (int j = 0; j < 4; ++j) v[j] = _mm256_loadu_ps(x + b + 8 * j);
    const float scale = fp8_scale(block_amax8x4(v));
    const __m256 s = _mm256_set1_ps(scale), inv = _mm256_set1_ps(1.0f / scale);
    for (int j = 0; j < 4; ++j) _mm256_storeu_ps(x + b + 8 * j, quant8(v[j], inv, s));
  }
}

}  // namespace strata::kernels::x86
