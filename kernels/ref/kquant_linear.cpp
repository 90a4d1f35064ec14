// The reference linear over ggml block formats (kernels/kquant_linear.h): x rounded per token, then
// for the K-quants the Q8_K integer dot of kernels/kquant_q8k.h, for Q8_0 and IQ4_NL the Q8_0 one of
// kernels/kquant_q8_0_dot.h, row by row.
#include "kernels/kquant_linear.h"

#include <vector>

#include "core/status.h"
#include "kernels/kquant_q8_0_dot.h"
#include "kernels/kquant_q8k.h"

namespace strata::kernels::ref {

namespace {

// x rounded to XBlock (x_block_elems per block) token by token, then the integer dot of every row.
template <class XBlock, class Quantize, class Dot>
void linear_integer(const float* x, int64_t n, const QuantWeight& w, float* y, int64_t x_block_elems, Quantize quantize,
                    Dot dot) {
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
  STRATA_CHECK(q8_0_dot_supported(w.type), "ref::linear_quant: no integer path for this type");
  linear_integer<BlockQ8_0>(x, n, w, y, 32, quantize_row_q8_0_ref, dot_q8_0);
}

}  // namespace strata::kernels::ref
