// The Q8_K integer decode dot (kernels/kquant_q8k.h): x -> Q8_K as ggml rounds it, and the exact
// per-super-block integer sums with the documented f32 combination, element by element.
#include "kernels/kquant_q8k.h"

#include <cmath>
#include <cstring>

#include "core/dtype.h"
#include "kernels/kquant_unpack.h"

namespace strata::kernels {
namespace {

// ggml's nearest_int: round to nearest, ties to even, by adding 1.5 * 2^23 and reading the mantissa
// (exact for |v| < 2^22; here |v| <= 127 + 2^-17). Same value as nearbyint, without a libm call.
inline int nearest_int(float v) {
  const float f = v + 12582912.0f;
  int32_t i;
  std::memcpy(&i, &f, 4);
  return (i & 0x007fffff) - 0x00400000;
}

}  // namespace

void quantize_row_q8_K(const float* x, BlockQ8_K* y, int64_t k) {
  for (int64_t b = 0; b < k / 256; ++b, x += 256) {
    BlockQ8_K& out = y[b];
    float max = 0.0f, amax = 0.0f;  // the value of largest magnitude (the first one on ties), as ggml
    for (int j = 0; j < 256; ++j) {
      const float ax = std::fabs(x[j]);
      if (ax > amax) {
        amax = ax;
        max = x[j];
      }
    }
    if (amax == 0.0f) {
      std::memset(&out, 0, sizeof(out));
      continue;
    }
    // ROUNDING: as ggml: iscale = -127 / max (one rounding), q = nearest_int(iscale * x) (ties to
    // even), d = 1 / iscale. The sign flip makes max map to -127.
    const float iscale = -127.0f / max;
    for (int j = 0; j < 256; ++j) {
      const int v = nearest_int(iscale * x[j]);
      out.qs[j] = static_cast<int8_t>(v < 127 ? v : 127);
    }
    for (int i = 0; i < 16; ++i) {
      int sum = 0;
      for (int l = 0; l < 16; ++l) sum += out.qs[16 * i + l];
      out.bsums[i] = static_cast<int16_t>(sum);
    }
    out.d = 1.0f / iscale;
  }
}

namespace ref {
namespace {

// The f32 combination of kquant_q8k.h for one block.
float combine(float acc, uint16_t d16, uint16_t dmin16, float xd, int32_t s, int32_t m) {
  const float dd = f16_to_f32(d16) * xd;
  const float dm = f16_to_f32(dmin16) * xd;
  const float t = dd * static_cast<float>(s);
  const float u = dm * static_cast<float>(m);
  return acc + (t - u);
}

// The same for the types without mins: acc + dd * S.
float combine_no_min(float acc, uint16_t d16, float xd, int32_t s) {
  const float dd = f16_to_f32(d16) * xd;
  const float t = dd * static_cast<float>(s);
  return acc + t;
}

float dot_q4_K(const BlockQ4_K* w, const BlockQ8_K* x, int64_t nb) {
  float acc = 0.0f;
  for (int64_t b = 0; b < nb; ++b) {
    const BlockQ4_K& wb = w[b];
    const BlockQ8_K& xb = x[b];
    int32_t s = 0, m = 0;
    for (int j = 0; j < 8; ++j) {  // sub-block j: elements 32 j .. 32 j + 31
      uint8_t sc, mn;
      kquant::q4_K_scale_min(wb.scales, j, &sc, &mn);
      int32_t dot = 0;
      for (int l = 0; l < 32; ++l) {
        // element 64 g + 32 h + l sits in nibble h of qs[32 g + l] (g = j / 2, h = j % 2)
        const int q = (wb.qs[32 * (j / 2) + l] >> (4 * (j % 2))) & 0xF;
        dot += q * xb.qs[32 * j + l];
      }
      s += sc * dot;
      m += mn * (xb.bsums[2 * j] + xb.bsums[2 * j + 1]);
    }
    acc = combine(acc, wb.d, wb.dmin, xb.d, s, m);
  }
  return acc;
}

float dot_q2_K(const BlockQ2_K* w, const BlockQ8_K* x, int64_t nb) {
  float acc = 0.0f;
  for (int64_t b = 0; b < nb; ++b) {
    const BlockQ2_K& wb = w[b];
    const BlockQ8_K& xb = x[b];
    int32_t s = 0, m = 0;
    for (int i = 0; i < 16; ++i) {  // sub-block i: elements 16 i .. 16 i + 15
      int32_t dot = 0;
      for (int l = 0; l < 16; ++l) dot += kquant::k_low2(wb.qs, 16 * i + l) * xb.qs[16 * i + l];
      s += (wb.scales[i] & 0xF) * dot;
      m += (wb.scales[i] >> 4) * xb.bsums[i];
    }
    acc = combine(acc, wb.d, wb.dmin, xb.d, s, m);
  }
  return acc;
}

// Q6_K and Q3_K: signed quants, a signed scale per 16 (Blk::quant / scale read the fields).
template <class Blk, class Quant, class Scale>
float dot_signed(const Blk* w, const BlockQ8_K* x, int64_t nb, Quant quant, Scale scale) {
  float acc = 0.0f;
  for (int64_t b = 0; b < nb; ++b) {
    const Blk& wb = w[b];
    const BlockQ8_K& xb = x[b];
    int32_t s = 0;
    for (int i = 0; i < 16; ++i) {  // sub-block i: elements 16 i .. 16 i + 15
      int32_t dot = 0;
      for (int l = 0; l < 16; ++l) dot += quant(wb, 16 * i + l) * xb.qs[16 * i + l];
      s += scale(wb, i) * dot;
    }
    acc = combine_no_min(acc, wb.d, xb.d, s);
  }
  return acc;
}

}  // namespace

float dot_q8k(QuantType t, const uint8_t* w, const BlockQ8_K* x, int64_t nb) {
  switch (t) {
    case QuantType::kQ4_K: return dot_q4_K(reinterpret_cast<const BlockQ4_K*>(w), x, nb);
    case QuantType::kQ6_K:
      return dot_signed(reinterpret_cast<const BlockQ6_K*>(w), x, nb, kquant::q6_K_quant,
                        [](const BlockQ6_K& b, int i) { return static_cast<int>(b.scales[i]); });
    case QuantType::kQ3_K:
      return dot_signed(reinterpret_cast<const BlockQ3_K*>(w), x, nb, kquant::q3_K_quant,
                        [](const BlockQ3_K& b, int i) { return kquant::q3_K_scale(b.scales, i) - 32; });
    default: return dot_q2_K(reinterpret_cast<const BlockQ2_K*>(w), x, nb);
  }
}

}  // namespace ref
}  // namespace strata::kernels
