// Exponential, sigmoid, SiLU and the clamped SwiGLU of the routed and shared experts.
//
// exp_f32 is the definition every kernel uses: glibc's expf algorithm (FMA variant) restated, so
// scalar code, the AVX2 and the AVX-512 paths, and std::exp on a glibc x86-64 machine with FMA all
// give the same bits for every input (tests/kernels/activation_test.cpp checks the first three
// against each other and against the C library). That matters because SwiGLU outputs feed an
// FP8/FP4 activation quantisation (the w2 linears), where one ulp can flip an E4M3 step.
// sigmoid(x) = 1 / (1 + exp(-x)) and silu(x) = x / (1 + exp(-x)), rounded as written in f32.
// Source: model.py Expert.forward (SwiGLU with swiglu_limit clamps); ARCHITECTURE.md §MoE.
// Threading: swiglu splits rows over `pool` (may be null). Cannot fail.
#pragma once

#include <cstdint>

#include "core/thread_pool.h"
#include "kernels/dispatch.h"

namespace strata::kernels {

// e^x in f32, bit-identical to glibc's expf (see the file comment).
float exp_f32(float x);
inline float sigmoid_f32(float x) { return 1.0f / (1.0f + exp_f32(-x)); }
inline float silu_f32(float x) { return x / (1.0f + exp_f32(-x)); }

// out[i] = exp_f32(x[i]) for i < n; out may alias x.
void exp_f32(const float* x, int64_t n, float* out);
void exp_f32(const float* x, int64_t n, float* out, KernelLevel level);

// SwiGLU over n rows of `inter` values (rows `inter` apart in every array):
//   g = limit > 0 ? min(gate, limit) : gate;  u = limit > 0 ? clamp(up, -limit, limit) : up
//   out = silu_f32(g) * u, then times row_scale[row] when row_scale is not null (routing weight).
// out may alias gate or up.
struct SwigluArgs {
  const float* gate = nullptr;       // [n, inter]
  const float* up = nullptr;         // [n, inter]
  const float* row_scale = nullptr;  // [n] or null
  int64_t n = 0, inter = 0;
  float limit = 0.0f;                // swiglu_limit; <= 0: no clamp
  float* out = nullptr;              // [n, inter]
};
void swiglu(const SwigluArgs& a, ThreadPool* pool);
void swiglu(const SwigluArgs& a, ThreadPool* pool, KernelLevel level);

namespace ref {
void exp_f32(const float* x, int64_t n, float* out);
void swiglu(const SwigluArgs& a);
}  // namespace ref

}  // namespace strata::kernels
