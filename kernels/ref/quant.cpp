// Scalar activation quantisation: the definitions of kernels/quant.h.
//
// Everything here is element by element with the exact codecs of core/dtype.h, so it can be read
// against the fixtures README ("Kernel shims": act_quant, fp4_act_quant) line by line. The vector
// act_quant in kernels/x86 is tested bit for bit against ref::act_quant_fp8_inplace.
#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>

#include "core/dtype.h"
#include "core/status.h"
#include "kernels/quant.h"

namespace strata::kernels {
namespace {

// 2^ceil(log2(t)) for a positive finite f32 t, read from its bits as fast_round_scale does:
// exponent + (mantissa != 0). A subnormal t gives 2^-126 (the exponent field 0 counts as -127 + 1).
float pow2_ceil_bits(float t) {
  const uint32_t u = std::bit_cast<uint32_t>(t);
  const uint32_t e = (u >> 23) & 0xFFu;
  const uint32_t m = u & 0x7FFFFFu;
  return std::bit_cast<float>((e + (m != 0 ? 1u : 0u)) << 23);
}

float block_amax(const float* x, int block) {
  float amax = 0.0f;
  for (int j = 0; j < block; ++j) amax = std::max(amax, std::fabs(x[j]));
  return amax;
}

// ue8m0 scale of an E2M1 block: 2^ceil(log2(max(amax, 6*2^-126) * fp32(1/6))).
float fp4_e8m0_block_scale(float amax) {
  constexpr float kMinAmax = 6.0f * 0x1p-126f;
  // ROUNDING: fp32 product with fp32(1/6), then the exponent/mantissa ceil (fp4_act_quant, E8M0 path).
  return pow2_ceil_bits(std::max(amax, kMinAmax) * (1.0f / 6.0f));
}

}  // namespace

float fp8_block_scale(float amax) {
  // ROUNDING: fp32(max(amax, 1e-4) * fp32(1/448)), then fast_round_scale (act_quant, ue8m0).
  return pow2_ceil_bits(std::max(amax, 1e-4f) * (1.0f / 448.0f));
}

void act_quant_fp8(const float* x, int64_t n, uint8_t* q, float* s, int block) {
  STRATA_DCHECK(block > 0 && n % block == 0, "act_quant_fp8: n must be a multiple of block");
  for (int64_t b = 0; b < n / block; ++b) {
    const float* xb = x + b * block;
    const float scale = fp8_block_scale(block_amax(xb, block));
    s[b] = scale;
    for (int j = 0; j < block; ++j) {
      // ROUNDING: RNE to E4M3 after clamping x/s to +-448 (act_quant).
      q[b * block + j] = f32_to_e4m3(std::clamp(xb[j] / scale, -kE4M3Max, kE4M3Max));
    }
  }
}

namespace ref {
void act_quant_fp8_inplace(float* x, int64_t n, int block) {
  STRATA_DCHECK(block > 0 && n % block == 0, "act_quant_fp8_inplace: n must be a multiple of block");
  for (int64_t b = 0; b < n / block; ++b) {
    float* xb = x + b * block;
    const float scale = fp8_block_scale(block_amax(xb, block));
    for (int j = 0; j < block; ++j) {
      // ROUNDING: x <- RNE_e4m3(clamp(x/s, +-448)) * s, act_quant(inplace=True).
      xb[j] = e4m3_to_f32(f32_to_e4m3(std::clamp(xb[j] / scale, -kE4M3Max, kE4M3Max))) * scale;
    }
  }
}
}  // namespace ref

namespace {
// e2m1_to_f32(f32_to_e2m1(v)) as selects (the branchy calls were 1.8% of the main thread's decode
// samples on the 8 GB scaled checkpoint: 4096 index-query values per index layer and token,
// serial). The compiler kept even the selects scalar (2.2% of a four-row decode step's samples), so
// kernels/x86/quant_avx512.cpp restates them in vectors; this stays the definition:
// the same midpoints (ties to the even code), +0 for code 0 and for NaN. Checked bit for bit by
// tests/kernels/quant_test.cpp Fp4E8m0MatchesDefinitionBitForBit (midpoints, signed zeros).
inline float e2m1_round_branchless(float v) {
  const float a = std::fabs(v);
  float r = 0.0f;
  r = a > 0.25f ? 0.5f : r;
  r = a >= 0.75f ? 1.0f : r;
  r = a > 1.25f ? 1.5f : r;
  r = a >= 1.75f ? 2.0f : r;
  r = a > 2.5f ? 3.0f : r;
  r = a >= 3.5f ? 4.0f : r;
  r = a > 5.0f ? 6.0f : r;
  return v < 0.0f && r != 0.0f ? -r : r;  // a zero code is +0 whatever the sign of v
}
}  // namespace

namespace ref {
void fp4_quant_e8m0_inplace(float* x, int64_t n, int block) {
  STRATA_DCHECK(block > 0 && n % block == 0, "fp4_quant_e8m0_inplace: n must be a multiple of block");
  for (int64_t b = 0; b < n / block; ++b) {
    float* xb = x + b * block;
    const float scale = fp4_e8m0_block_scale(block_amax(xb, block));
    for (int j = 0; j < block; ++j) {
      // ROUNDING: x <- RNE_e2m1(clamp(x/s, +-6)) * s, fp4_act_quant E8M0 path (indexer q/k).
      xb[j] = e2m1_round_branchless(std::clamp(xb[j] / scale, -kE2M1Max, kE2M1Max)) * scale;
    }
  }
}

}  // namespace ref

void fp4_quant_e4m3_inplace(float* x, int64_t n, int block) {
  STRATA_DCHECK(block > 0 && n % block == 0, "fp4_quant_e4m3_inplace: n must be a multiple of block");
  constexpr float kMinAmax = 6.0f * 0x1p-9f;
  for (int64_t b = 0; b < n / block; ++b) {
    float* xb = x + b * block;
    // ROUNDING: s = RNE_e4m3(max(amax, 6*2^-9) / 6) with a true f32 division (fp4_act_quant, E4M3 path).
    const float scale = e4m3_round(std::max(block_amax(xb, block), kMinAmax) / 6.0f);
    for (int j = 0; j < block; ++j) {
      // ROUNDING: x/s is an f32 division; the product e2m1 * e4m3 is exact.
      xb[j] = e2m1_to_f32(f32_to_e2m1(std::clamp(xb[j] / scale, -kE2M1Max, kE2M1Max))) * scale;
    }
  }
}

}  // namespace strata::kernels
