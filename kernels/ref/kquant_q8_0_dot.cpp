// The Q8_0-x integer decode dot (kernels/kquant_q8_0_dot.h): exact per-block integer sums with the
// documented f32 combination, block by block.
#include "kernels/kquant_q8_0_dot.h"

#include "core/dtype.h"

namespace strata::kernels::ref {
namespace {

// The weight quant of element e (0..31) of a block.
inline int quant(const BlockQ8_0& b, int e) { return b.qs[e]; }
inline int quant(const BlockIq4Nl& b, int e) {
  return kIq4nlValues[e < 16 ? (b.qs[e] & 0xF) : (b.qs[e - 16] >> 4)];
}

template <class Blk>
float dot(const Blk* w, const BlockQ8_0* x, int64_t nb) {
  float acc = 0.0f;
  for (int64_t b = 0; b < nb; ++b) {
    int32_t s = 0;
    for (int e = 0; e < 32; ++e) s += quant(w[b], e) * x[b].qs[e];
    // ROUNDING: dd = d * xd (exact: two fp16 values), t = dd * float(S) (float(S) exact), acc + t: as
    // ggml_vec_dot_q8_0_q8_0_generic.
    const float dd = f16_to_f32(w[b].d) * f16_to_f32(x[b].d);
    const float t = dd * static_cast<float>(s);
    acc = acc + t;
  }
  return acc;
}

}  // namespace

float dot_q8_0(QuantType t, const uint8_t* w, const BlockQ8_0* x, int64_t nb) {
  if (t == QuantType::kIq4Nl) return dot(reinterpret_cast<const BlockIq4Nl*>(w), x, nb);
  return dot(reinterpret_cast<const BlockQ8_0*>(w), x, nb);
}

}  // namespace strata::kernels::ref
