// The reference linear over ggml block formats (kernels/kquant_linear.h): dequantise a row exactly
// (kernels/ref/kquant.cpp), then the 16-lane fused sum that defines the result; for the K-quants
// the Q8_K integer dot of kernels/kquant_q8k.h, for Q8_0 and IQ4_NL the Q8_0 one of
// kernels/kquant_q8_0_dot.h instead (so today every type takes an integer path).
#include "kernels/kquant_linear.h"

#include <cmath>
#include <vector>

#include "kernels/kquant_q8_0_dot.h"
#include "kernels/kquant_q8k.h"

namespace strata::kernels::ref {

namespace {

// x rounded to XBlock (x_block_elems per block) token by token, then the integer dot of every row.
template <class XBlock, class Quantize, class Dot>
void linear_integer(const float* x, int64_t n, const QuantWeight& w, float* y, int64_t x_block_elems,
                    Quantize quantize, Dot dot) {
  const int64_t nb = w.in / x_block_elems;
  std::vector<XBlock> xq(static_cast<size_t>(nb));
  for (int64_t i = 0; i < n; ++i) {
    quantize(x + i * w.in, xq.data(), w.in);
    for (int64_t r = 0; r < w.out; ++r) y[i * w.out + r] = dot(w.type, quant_weight_row(w, r), xq.data(), nb);
  }
}

}  // namespace

void linear_quant(const float* x, int64_t n, const QuantWeight& w, float* y) {
  // x -> Q8_K or Q8_0, integer block sums (kernels/kquant_q8k.h, kernels/kquant_q8_0_dot.h)
  if (q8k_dot_supported(w.type)) return linear_integer<BlockQ8_K>(x, n, w, y, 256, quantize_row_q8_K, dot_q8k);
  if (q8_0_dot_supported(w.type))
    return linear_integer<BlockQ8_0>(x, n, w, y, 32, quantize_row_q8_0_ref, dot_q8_0);
  std::vector<float> row(static_cast<size_t>(w.in));
  for (int64_t r = 0; r < w.out; ++r) {
    dequantize_row(w.type, quant_weight_row(w, r), row.data(), w.in);
    for (int64_t i = 0; i < n; ++i) {
      const float* xi = x + i * w.in;
      float acc[16] = {};
      // ROUNDING: one rounding per fused multiply-add, lane k % 16, k in order (kquant_linear.h).
      for (int64_t k = 0; k < w.in; ++k) acc[k % 16] = std::fma(row[static_cast<size_t>(k)], xi[k], acc[k % 16]);
      for (int h = 8; h >= 1; h /= 2)
        for (int j = 0; j < h; ++j) acc[j] += acc[j + h];
      y[i * w.out + r] = acc[0];
    }
  }
}

}  // namespace strata::kernels::ref
