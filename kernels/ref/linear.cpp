// Scalar linear layers and exact dequantisation: the definitions of kernels/linear.h.
//
// FP8/FP4: each row of x is quantised with act_quant_fp8 (E4M3 codes + ue8m0 scale per 32), then
//   y[i, r] = sum_b ((sum_{k in b} xq[i, k] * wq[r, k]) * s_x[i, b]) * s_w[r, b]
// with the inner sum an f32 partial per 32-wide K block and the blocks added in K order, as the
// fp8_gemm / fp4_gemm shims accumulate (fixtures README "Kernel shims"). Every product of two E4M3
// values (or E4M3 x E2M1) is exact in f32, so only the summation rounds.
// BF16/F32: y[i, r] = sum_k x[i, k] * w[r, k], each product rounded to f32 and added in K order.
#include <algorithm>
#include <cstdint>
#include <vector>

#include "core/dtype.h"
#include "core/status.h"
#include "kernels/linear.h"
#include "kernels/quant.h"

namespace strata::kernels {
namespace {

// Decode tables (exact): the references run over big test shapes, so avoid ldexp per element.
struct Tables {
  float e4m3[256];
  float e8m0[256];
  Tables() {
    for (int c = 0; c < 256; ++c) {
      e4m3[c] = e4m3_to_f32(static_cast<uint8_t>(c));
      e8m0[c] = e8m0_to_f32(static_cast<uint8_t>(c));
    }
  }
};
const Tables& tables() {
  static const Tables t;  // immutable after the thread-safe first call
  return t;
}

}  // namespace

namespace ref {

void linear_fp8(const float* x, int64_t n, const Fp8Weight& w, float* y) {
  STRATA_DCHECK(w.in % 32 == 0, "linear_fp8: in must be a multiple of 32");
  const Tables& t = tables();
  const int64_t in = w.in, nkb = in / 32, scale_cols = (in + 31) / 32;
  std::vector<uint8_t> q(static_cast<size_t>(in));
  std::vector<float> sx(static_cast<size_t>(nkb));
  for (int64_t i = 0; i < n; ++i) {
    act_quant_fp8(x + i * in, in, q.data(), sx.data(), 32);
    for (int64_t r = 0; r < w.out; ++r) {
      const uint8_t* wr = w.w + r * in;
      const uint8_t* sr = w.scale + (r / 32) * scale_cols;
      float acc = 0.0f;
      for (int64_t b = 0; b < nkb; ++b) {
        float partial = 0.0f;
        for (int64_t k = b * 32; k < b * 32 + 32; ++k) partial += t.e4m3[q[k]] * t.e4m3[wr[k]];  // exact products
        // ROUNDING: per-block f32 partial, scaled by s_x then s_w, added in K order (fp8_gemm shim).
        acc += partial * sx[b] * t.e8m0[sr[b]];
      }
      y[i * w.out + r] = acc;
    }
  }
}

void linear_fp4(const float* x, int64_t n, const Fp4Weight& w, float* y) {
  STRATA_DCHECK(w.in % 32 == 0, "linear_fp4: in must be a multiple of 32");
  const Tables& t = tables();
  const int64_t in = w.in, nkb = in / 32;
  std::vector<uint8_t> q(static_cast<size_t>(in));
  std::vector<float> sx(static_cast<size_t>(nkb));
  for (int64_t i = 0; i < n; ++i) {
    act_quant_fp8(x + i * in, in, q.data(), sx.data(), 32);
    for (int64_t r = 0; r < w.out; ++r) {
      const uint8_t* wr = w.w + r * (in / 2);
      const uint8_t* sr = w.scale + r * nkb;
      float acc = 0.0f;
      for (int64_t b = 0; b < nkb; ++b) {
        float partial = 0.0f;
        for (int64_t k = b * 32; k < b * 32 + 32; ++k) {
          const uint8_t code = (wr[k / 2] >> ((k & 1) * 4)) & 0xF;  // even element in the low nibble
          partial += t.e4m3[q[k]] * e2m1_to_f32(code);                 // exact product
        }
        // ROUNDING: per-block f32 partial, scaled by s_x then s_w, added in K order (fp4_gemm shim).
        acc += partial * sx[b] * t.e8m0[sr[b]];
      }
      y[i * w.out + r] = acc;
    }
  }
}

void linear_bf16(const float* x, int64_t n, const Bf16Weight& w, float* y) {
  for (int64_t i = 0; i < n; ++i) {
    const float* xi = x + i * w.in;
    for (int64_t r = 0; r < w.out; ++r) {
      float acc = 0.0f;
      for (int64_t k = 0; k < w.in; ++k) acc += xi[k] * bf16_to_f32(w.at(r, k));
      y[i * w.out + r] = acc;
    }
  }
}

void linear_f32(const float* x, int64_t n, const F32Weight& w, float* y) {
  for (int64_t i = 0; i < n; ++i) {
    const float* xi = x + i * w.in;
    for (int64_t r = 0; r < w.out; ++r) {
      const float* wr = w.w + r * w.in;
      float acc = 0.0f;
      for (int64_t k = 0; k < w.in; ++k) acc += xi[k] * wr[k];
      y[i * w.out + r] = acc;
    }
  }
}

}  // namespace ref

void dequant_fp8(const Fp8Weight& w, float* out) {
  const Tables& t = tables();
  const int64_t scale_cols = (w.in + 31) / 32;
  for (int64_t r = 0; r < w.out; ++r) {
    const uint8_t* sr = w.scale + (r / 32) * scale_cols;
    for (int64_t k = 0; k < w.in; ++k) out[r * w.in + k] = t.e4m3[w.w[r * w.in + k]] * t.e8m0[sr[k / 32]];
  }
}

void dequant_fp4(const Fp4Weight& w, float* out) {
  const Tables& t = tables();
  const int64_t nkb = w.in / 32;
  for (int64_t r = 0; r < w.out; ++r) {
    const uint8_t* wr = w.w + r * (w.in / 2);
    for (int64_t k = 0; k < w.in; ++k) {
      const uint8_t code = (wr[k / 2] >> ((k & 1) * 4)) & 0xF;
      out[r * w.in + k] = e2m1_to_f32(code) * t.e8m0[w.scale[r * nkb + k / 32]];
    }
  }
}

namespace {
// dst = the blocked layout of row-major [out, in] elements (kernels/linear.h Bf16Weight::blocked).
template <class T>
void block_rows(const T* src, int64_t out, int64_t in, T* dst) {
  STRATA_CHECK(out % kBf16BlockRows == 0, "block_bf16_rows / block_e4m3_rows: out must be a multiple of 16");
  for (int64_t r = 0; r < out; ++r)
    for (int64_t k = 0; k < in; ++k)
      dst[(r / kBf16BlockRows) * kBf16BlockRows * in + k * kBf16BlockRows + r % kBf16BlockRows] = src[r * in + k];
}
}  // namespace

void block_bf16_rows(const uint16_t* src, int64_t out, int64_t in, uint16_t* dst) {
  block_rows(src, out, in, dst);
}

uint16_t Bf16Weight::at(int64_t r, int64_t k) const {
  const int64_t i = (r / kBf16BlockRows) * kBf16BlockRows * in + k * kBf16BlockRows + r % kBf16BlockRows;
  if (e4m3 != nullptr)  // exact: e4m3 * 2^k is a bf16 value (the Bf16Weight contract)
    return f32_to_bf16(e4m3_to_f32(e4m3[i]) * e8m0_to_f32(e4m3_scale[(r / 32) * ((in + 31) / 32) + k / 32]));
  return blocked ? w[i] : w[r * in + k];
}

Fp8Weight with_scale_range(Fp8Weight w) {
  const int64_t n = ((w.out + 31) / 32) * ((w.in + 31) / 32);
  if (n <= 0) return w;  // no scales: the range stays unknown
  uint8_t lo = 255, hi = 0;
  for (int64_t i = 0; i < n; ++i) {
    lo = std::min(lo, w.scale[i]);
    hi = std::max(hi, w.scale[i]);
  }
  w.scale_lo = lo;
  w.scale_hi = hi;
  return w;
}

Bf16Weight Bf16Weight::rows(int64_t r0, int64_t n) const {
  STRATA_CHECK(r0 >= 0 && n >= 0 && r0 + n <= out, "Bf16Weight::rows: rows outside the weight");
  STRATA_CHECK(!blocked || r0 % kBf16BlockRows == 0, "Bf16Weight::rows: a blocked weight splits at 16 rows");
  STRATA_CHECK(e4m3 == nullptr || r0 % 32 == 0, "Bf16Weight::rows: E4M3 storage splits at its 32-row scale blocks");
  Bf16Weight s = *this;
  s.out = n;
  if (e4m3 != nullptr) {
    s.e4m3 = e4m3 + r0 * in;
    s.e4m3_scale = e4m3_scale + (r0 / 32) * ((in + 31) / 32);
  } else {
    s.w = w + r0 * in;
  }
  return s;
}

void block_e4m3_rows(const uint8_t* src, int64_t out, int64_t in, uint8_t* dst) {
  block_rows(src, out, in, dst);
}

void dequant_bf16(const uint16_t* w, int64_t n, float* out) {
  for (int64_t i = 0; i < n; ++i) out[i] = bf16_to_f32(w[i]);
}

}  // namespace strata::kernels
