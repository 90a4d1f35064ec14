// Decoding of ggml's block formats (kernels/kquant.h): the definition every fast path matches.
//
// ROUNDING: each element is formed with exactly the f32 operations of ggml's dequantize_row_<type>
// (ggml-quants.c), in the same order and without fused multiply-adds, so the values are bit-identical:
//   Q8_0:   q * d                     Q6_K: (d * sc) * q
//   Q4_K:   (d * sc) * q - dmin * m   Q3_K: (d * (sc - 32)) * q
//   Q2_K:   (d * sc) * q - dmin * m   IQ4_NL: d * kIq4nlValues[q]
// (int to float conversions are exact: every integer involved is below 2^24).
#include "kernels/kquant.h"

#include <cstring>

#include "core/dtype.h"
#include "core/status.h"
#include "kernels/kquant_unpack.h"

namespace strata::kernels {

const char* quant_type_name(QuantType t) {
  switch (t) {
    case QuantType::kQ8_0:
      return "q8_0";
    case QuantType::kQ6_K:
      return "q6_K";
    case QuantType::kQ4_K:
      return "q4_K";
    case QuantType::kQ3_K:
      return "q3_K";
    case QuantType::kQ2_K:
      return "q2_K";
    case QuantType::kIq4Nl:
      return "iq4_nl";
  }
  return "?";
}

int quant_block_elems(QuantType t) { return (t == QuantType::kQ8_0 || t == QuantType::kIq4Nl) ? 32 : kQkK; }

int quant_block_bytes(QuantType t) {
  switch (t) {
    case QuantType::kQ8_0:
      return sizeof(BlockQ8_0);
    case QuantType::kQ6_K:
      return sizeof(BlockQ6_K);
    case QuantType::kQ4_K:
      return sizeof(BlockQ4_K);
    case QuantType::kQ3_K:
      return sizeof(BlockQ3_K);
    case QuantType::kQ2_K:
      return sizeof(BlockQ2_K);
    case QuantType::kIq4Nl:
      return sizeof(BlockIq4Nl);
  }
  return 0;
}

void dequantize_row_q8_0(const BlockQ8_0* x, float* y, int64_t k) {
  for (int64_t i = 0; i < k / kQk8_0; ++i, y += kQk8_0) {
    const float d = f16_to_f32(x[i].d);
    for (int j = 0; j < kQk8_0; ++j) y[j] = static_cast<float>(x[i].qs[j]) * d;
  }
}

void dequantize_row_q6_K(const BlockQ6_K* x, float* y, int64_t k) {
  for (int64_t i = 0; i < k / kQkK; ++i) {
    const float d = f16_to_f32(x[i].d);
    for (int j = 0; j < kQkK; ++j) {
      const float ds = d * static_cast<float>(x[i].scales[j / 16]);
      *y++ = ds * static_cast<float>(kquant::q6_K_quant(x[i], j));
    }
  }
}

void dequantize_row_q4_K(const BlockQ4_K* x, float* y, int64_t k) {
  for (int64_t i = 0; i < k / kQkK; ++i) {
    const float d = f16_to_f32(x[i].d), dmin = f16_to_f32(x[i].dmin);
    for (int sub = 0; sub < 8; ++sub) {
      uint8_t sc, m;
      kquant::q4_K_scale_min(x[i].scales, sub, &sc, &m);
      const float d1 = d * static_cast<float>(sc), m1 = dmin * static_cast<float>(m);
      const uint8_t* q = x[i].qs + (sub / 2) * 32;
      const int shift = (sub % 2) * 4;
      for (int l = 0; l < 32; ++l) *y++ = d1 * static_cast<float>((q[l] >> shift) & 0xF) - m1;
    }
  }
}

void dequantize_row_q3_K(const BlockQ3_K* x, float* y, int64_t k) {
  for (int64_t i = 0; i < k / kQkK; ++i) {
    const float d = f16_to_f32(x[i].d);
    for (int sub = 0; sub < 16; ++sub) {
      const float dl = d * static_cast<float>(kquant::q3_K_scale(x[i].scales, sub) - 32);
      for (int l = 0; l < 16; ++l) *y++ = dl * static_cast<float>(kquant::q3_K_quant(x[i], sub * 16 + l));
    }
  }
}

void dequantize_row_q2_K(const BlockQ2_K* x, float* y, int64_t k) {
  for (int64_t i = 0; i < k / kQkK; ++i) {
    const float d = f16_to_f32(x[i].d), dmin = f16_to_f32(x[i].dmin);
    for (int sub = 0; sub < 16; ++sub) {
      const uint8_t sc = x[i].scales[sub];
      const float dl = d * static_cast<float>(sc & 0xF), ml = dmin * static_cast<float>(sc >> 4);
      for (int l = 0; l < 16; ++l) *y++ = dl * static_cast<float>(kquant::q2_K_quant(x[i], sub * 16 + l)) - ml;
    }
  }
}

void dequantize_row_iq4_nl(const BlockIq4Nl* x, float* y, int64_t k) {
  for (int64_t i = 0; i < k / kQk4Nl; ++i, y += kQk4Nl) {
    const float d = f16_to_f32(x[i].d);
    for (int j = 0; j < 16; ++j) {
      y[j] = d * static_cast<float>(kIq4nlValues[x[i].qs[j] & 0xF]);
      y[j + 16] = d * static_cast<float>(kIq4nlValues[x[i].qs[j] >> 4]);
    }
  }
}

void dequantize_row(QuantType t, const void* x, float* y, int64_t k) {
  switch (t) {
    case QuantType::kQ8_0:
      return dequantize_row_q8_0(static_cast<const BlockQ8_0*>(x), y, k);
    case QuantType::kQ6_K:
      return dequantize_row_q6_K(static_cast<const BlockQ6_K*>(x), y, k);
    case QuantType::kQ4_K:
      return dequantize_row_q4_K(static_cast<const BlockQ4_K*>(x), y, k);
    case QuantType::kQ3_K:
      return dequantize_row_q3_K(static_cast<const BlockQ3_K*>(x), y, k);
    case QuantType::kQ2_K:
      return dequantize_row_q2_K(static_cast<const BlockQ2_K*>(x), y, k);
    case QuantType::kIq4Nl:
      return dequantize_row_iq4_nl(static_cast<const BlockIq4Nl*>(x), y, k);
  }
  STRATA_CHECK(false, "dequantize_row: unknown QuantType");
}

}  // namespace strata::kernels
