// Rotary position embedding on interleaved pairs: (x[2i], x[2i+1]) is rotated as a complex number
// by the angle whose cosine and sine are cos[i], sin[i] (the conjugate when `inverse`):
//   x[2i]   <- x[2i] * c - x[2i+1] * s'
//   x[2i+1] <- x[2i] * s' + x[2i+1] * c,    s' = inverse ? -sin[i] : sin[i]
// each product and sum rounded to f32 as written (every level equals kernels::ref bit for bit).
// Applies the same angles to n_vec vectors of rope_dim values, `stride` floats apart (e.g. the RoPE
// tails of all heads of one token). Source: model.py apply_rotary_emb; model/rope.h (tables).
// Threading: none (callers parallelise over tokens). Cannot fail.
#pragma once

#include <cstdint>

#include "kernels/dispatch.h"

namespace strata::kernels {

struct RopeArgs {
  float* x = nullptr;        // n_vec vectors of rope_dim values, in place
  int64_t n_vec = 1;
  int64_t stride = 0;        // floats between vectors
  int64_t rope_dim = 0;      // even
  const float* cos = nullptr;  // [rope_dim / 2]
  const float* sin = nullptr;  // [rope_dim / 2]
  bool inverse = false;
};
void rope_rotate(const RopeArgs& a);
void rope_rotate(const RopeArgs& a, KernelLevel level);

namespace ref {
void rope_rotate(const RopeArgs& a);
}  // namespace ref

}  // namespace strata::kernels
