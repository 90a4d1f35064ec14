// act_quant_fp8 and fp4_quant_e8m0 with AVX-512 F/BW/VL/DQ: 32 values (two registers) per block.
//
// Rounding to the E4M3 grid without a table: for |q| in [2^e, 2^(e+1)) the grid step is 2^(e-3)
// (2^-9 below 2^-6, the subnormals), so with M = 2^(max(e, -6) + 20) the f32 sum |q| + M has exactly
// that step as its ulp and the hardware's round-to-nearest-even rounds |q| as RNE_e4m3 does; the
// evenness of the sum's last bit is the evenness of the E4M3 mantissa. Subtracting M is exact.
#include <immintrin.h>

#include <cstdint>

#include "kernels/x86/common.h"
#include "kernels/x86/quant_x86.h"

namespace strata::kernels::x86 {
namespace {

inline __m512 quant16(__m512 v, __m512 inv, __m512 s) {
  // x/s is exact: s is a power of two. VMAXPS/VMINPS return their second operand where one is NaN,
  // so x/s goes second: a NaN stays NaN, as std::clamp keeps it in the reference (act_quant_fp8).
  const __m512 q = _mm512_min_ps(_mm512_set1_ps(448.0f), _mm512_max_ps(_mm512_set1_ps(-448.0f), _mm512_mul_ps(v, inv)));
  const __m512 a = _mm512_abs_ps(q);
  const __m512 e = _mm512_castsi512_ps(_mm512_and_si512(_mm512_castps_si512(a), _mm512_set1_epi32(0x7F800000)));
  const __m512 m = _mm512_mul_ps(_mm512_max_ps(e, _mm512_set1_ps(0x1p-6f)), _mm512_set1_ps(0x1p20f));
  // ROUNDING: RNE to the E4M3 grid (act_quant), see the file comment.
  const __m512 r = _mm512_sub_ps(_mm512_add_ps(a, m), m);
  const __m512 res = _mm512_mul_ps(r, s);
  // Sign back, except on a zero result: f32_to_e4m3 encodes -0 as +0.
  const __mmask16 nz = _mm512_cmp_ps_mask(r, _mm512_setzero_ps(), _CMP_NEQ_UQ);
  const __m512i sign = _mm512_and_si512(_mm512_castps_si512(q), _mm512_set1_epi32(static_cast<int>(0x80000000u)));
  return _mm512_castsi512_ps(_mm512_mask_or_epi32(_mm512_castps_si512(res), nz, _mm512_castps_si512(res), sign));
}

// 16 values of an E2M1 block: RNE_e2m1(clamp(v / s, +-6)) * s as the reference's selects do
// (kernels/ref/quant.cpp e2m1_round_branchless): the same midpoints with the same strictness, so
// ties go to the even code; +0 for a zero code, a -0 input and NaN. The division is IEEE's, as the
// reference's (s is a power of two: exact unless the quotient is subnormal, rounded alike).
inline __m512 e2m1_16(__m512 v, __m512 s) {
  __m512 q = _mm512_div_ps(v, s);
  // std::clamp(q, -6, 6): q < -6 ? -6 : 6 < q ? 6 : q (a NaN stays NaN).
  q = _mm512_mask_blend_ps(_mm512_cmp_ps_mask(q, _mm512_set1_ps(-6.0f), _CMP_LT_OQ), q, _mm512_set1_ps(-6.0f));
  q = _mm512_mask_blend_ps(_mm512_cmp_ps_mask(_mm512_set1_ps(6.0f), q, _CMP_LT_OQ), q, _mm512_set1_ps(6.0f));
  const __m512 a = _mm512_abs_ps(q);
  __m512 r = _mm512_setzero_ps();
  auto pick = [&](float edge, int cmp, float value) __attribute__((always_inline)) {
    const __mmask16 m = cmp == 0 ? _mm512_cmp_ps_mask(a, _mm512_set1_ps(edge), _CMP_GT_OQ)
                                 : _mm512_cmp_ps_mask(a, _mm512_set1_ps(edge), _CMP_GE_OQ);
    r = _mm512_mask_mov_ps(r, m, _mm512_set1_ps(value));
  };
  pick(0.25f, 0, 0.5f);
  pick(0.75f, 1, 1.0f);
  pick(1.25f, 0, 1.5f);
  pick(1.75f, 1, 2.0f);
  pick(2.5f, 0, 3.0f);
  pick(3.5f, 1, 4.0f);
  pick(5.0f, 0, 6.0f);
  // v < 0 && r != 0 ? -r : r
  const __mmask16 neg = _mm512_cmp_ps_mask(q, _mm512_setzero_ps(), _CMP_LT_OQ) &
                        _mm512_cmp_ps_mask(r, _mm512_setzero_ps(), _CMP_NEQ_UQ);
  r = _mm512_mask_sub_ps(r, neg, _mm512_setzero_ps(), r);
  return _mm512_mul_ps(r, s);
}

}  // namespace

void fp4_quant_e8m0_avx512(float* x, int64_t n) {
  for (int64_t b = 0; b < n; b += 32) {
    const __m512 v0 = _mm512_loadu_ps(x + b), v1 = _mm512_loadu_ps(x + b + 16);
    // amax = max(amax, |x_j|) in order: a NaN |x_j| leaves amax (std::max); max is exact and the
    // order of the others does not change it.
    const __m512 m = _mm512_max_ps(_mm512_abs_ps(v1), _mm512_max_ps(_mm512_abs_ps(v0), _mm512_setzero_ps()));
    const __m512 s = _mm512_set1_ps(fp4_e8m0_scale(_mm512_reduce_max_ps(m)));
    _mm512_storeu_ps(x + b, e2m1_16(v0, s));
    _mm512_storeu_ps(x + b + 16, e2m1_16(v1, s));
  }
}

void act_quant_fp8_avx512(float* x, int64_t n) {
  for (int64_t b = 0; b < n; b += 32) {
    const __m512 v0 = _mm512_loadu_ps(x + b), v1 = _mm512_loadu_ps(x + b + 16);
    // A NaN |x_j| leaves amax, as std::max(amax, |x_j|) in the reference (fp4_quant_e8m0_avx512's order).
    const __m512 m = _mm512_max_ps(_mm512_abs_ps(v1), _mm512_max_ps(_mm512_abs_ps(v0), _mm512_setzero_ps()));
    const float scale = fp8_scale(_mm512_reduce_max_ps(m));
    const __m512 s = _mm512_set1_ps(scale), inv = _mm512_set1_ps(1.0f / scale);
    _mm512_storeu_ps(x + b, quant16(v0, inv, s));
    _mm512_storeu_ps(x + b + 16, quant16(v1, inv, s));
  }
}

}  // namespace strata::kernels::x86
