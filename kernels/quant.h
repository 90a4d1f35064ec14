// Activation quantisation: the fake-quantisation points of the official model, bit for bit.
//
// These round activations exactly where DeepSeek's act_quant / fp4_act_quant kernels do
// (fixtures README, "Kernel shims"; model.py `linear`, `Attention._window_kv`, `_compress_kv`,
// `Indexer.forward`). Every function works on contiguous rows; `n` must be a multiple of the block.
// Threading: none (callers parallelise over rows). Cannot fail.
#pragma once

#include <cstddef>
#include <cstdint>

namespace strata::kernels {

// ue8m0 scale of an FP8 block: 2^ceil(log2(fp32(max(amax, 1e-4) * fp32(1/448)))), computed from the
// float's exponent and mantissa bits as the official fast_round_scale does.
float fp8_block_scale(float amax);

// FP8 E4M3 fake quantisation, in place, per block of `block` (32) values with a ue8m0 scale:
//   x <- RNE_e4m3(clamp(x / s, +-448)) * s.
// ROUNDING: model.py act_quant(..., inplace=True) on the window KV and before every FP8 linear.
void act_quant_fp8_inplace(float* x, int64_t n, int block = 32);

// FP8 quantisation to codes: for each block of 32 of x[n], writes e4m3 codes q[n] and the scale
// per block s[n/32] (as float, a power of two). Same rounding as act_quant_fp8_inplace.
void act_quant_fp8(const float* x, int64_t n, uint8_t* q, float* s, int block = 32);

// FP4 E2M1 fake quantisation with a ue8m0 (power of two) scale per block of 32:
//   s = 2^ceil(log2(max(amax, 6*2^-126) * fp32(1/6))),  x <- RNE_e2m1(clamp(x/s, +-6)) * s.
// ROUNDING: model.py Indexer.forward, fp4_act_quant on index queries and index keys.
// Dispatched to the best kernel level (AVX2 and AVX-512: bit for bit the reference; blocks other
// than 32 and the scalar level run the reference).
void fp4_quant_e8m0_inplace(float* x, int64_t n, int block = 32);

// FP4 E2M1 fake quantisation with an E4M3 scale per block of 16:
//   s = RNE_e4m3(max(amax, 6*2^-9) / 6),  x <- RNE_e2m1(clamp(x/s, +-6)) * s.
// ROUNDING: model.py Attention._compress_kv, fp4_act_quant on the compressed KV latent.
void fp4_quant_e4m3_inplace(float* x, int64_t n, int block = 16);

namespace ref {
// Scalar definitions of the functions above (the dispatched act_quant_fp8_inplace and
// fp4_quant_e8m0_inplace must match them bit for bit; fp4_quant_e4m3_inplace has no vector version
// yet and is its own definition).
void act_quant_fp8_inplace(float* x, int64_t n, int block = 32);
void fp4_quant_e8m0_inplace(float* x, int64_t n, int block = 32);
}  // namespace ref

}  // namespace strata::kernels
