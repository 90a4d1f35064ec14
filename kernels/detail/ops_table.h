// Internal to kernels/: the per-level vector kernels of the per-token ops (activation, norm, RoPE,
// mHC, attention, indexer), as plain functions over raw pointers. The drivers in kernels/ops.cpp
// (baseline x86-64) own threading, scratch and the split into ranges; the ISA files
// (kernels/x86/ops_avx2.cpp, ops_avx512.cpp) fill one table each from kernels/x86/ops_engine.h.
// Every function equals the corresponding kernels::ref loop bit for bit over its range.
#pragma once

#include <cstddef>
#include <cstdint>

#include "kernels/activation.h"
#include "kernels/mhc.h"
#include "kernels/rope.h"

namespace strata::kernels::detail {

struct OpsKernels {
  int lanes = 1;  // f32 lanes of the level (head blocks of the attention scratch are this wide)

  void (*exp)(const float* x, int64_t n, float* out) = nullptr;
  float (*sum_squares)(const float* x, int64_t n) = nullptr;  // the cascade of ref::mean_square, n >= 8
  // out[i] = w[i] * (x[i] * r) (w null: x[i] * r)
  void (*scale_rows)(const float* x, const float* w, float r, int64_t n, float* out) = nullptr;
  void (*swiglu_rows)(const SwigluArgs& a, int64_t t0, int64_t t1) = nullptr;
  void (*rope)(const RopeArgs& a) = nullptr;

  void (*hc_pre)(const float* x, const float* pre, int64_t t0, int64_t t1, int hc, int64_t dim, float* y) = nullptr;
  void (*hc_post)(float* x, const float* f, const float* post, const float* comb, int64_t t0, int64_t t1, int hc,
                  int64_t dim) = nullptr;
  void (*hc_split)(const float* mixes, int64_t t0, int64_t t1, const HcSplitParams& p, float* pre, float* post,
                   float* comb) = nullptr;

  // Attention, in three passes over a scratch S [n_entries, hp] (hp = n_heads rounded up to lanes,
  // head h in column h) for head vectors [v0, v1) (heads v*lanes ..):
  //   attn_scores: S[j, h] = (q . e_j) * scale from qT [head_dim, hp] (q transposed, zero padded);
  //   attn_softmax: S[j, h] <- p_j / den with the sink of head h (sinks padded to hp);
  //   attn_out: out[h, :] = sum_j S[j, h] * e_j for heads [h0, h1).
  void (*attn_scores)(const float* qt, int64_t hp, int64_t head_dim, const float* const* ent, int64_t m, float scale,
                      int64_t v0, int64_t v1, float* s) = nullptr;
  void (*attn_softmax)(float* s, int64_t m, int64_t hp, const float* sinks, int64_t v0, int64_t v1) = nullptr;
  void (*attn_out)(const float* s, int64_t hp, const float* const* ent, int64_t m, int64_t head_dim, int64_t h0,
                   int64_t h1, float* out) = nullptr;

  // y[r] = x . w[r] for BF16 rows [r0, r1) in any summation order (kernels::linear_bf16_any_order).
  // nx rows of x (ldx floats apart) share each pass over the weight rows; y rows ldy apart.
  void (*bf16_matvec_any)(const float* x, int64_t nx, int64_t ldx, const uint16_t* w, int64_t in, int64_t r0, int64_t r1,
                          float* y, int64_t ldy) = nullptr;
  // The same for a blocked weight (Bf16Weight::blocked; r0 and r1 multiples of kBf16BlockRows): one
  // fused chain per output, k in order; x row i's outputs go to y[i] (its own buffer of `out` floats).
  void (*bf16_blocked_any)(const float* x, int64_t nx, int64_t ldx, const uint16_t* w, int64_t in, int64_t r0, int64_t r1,
                           float* const* y) = nullptr;

  // KernelLevel::kAmx only (null elsewhere): the same matvec on AMX tiles (kernels/x86/bf16_any_amx.cpp).
  // amx_pack writes up to amx_max_rows x rows (in a multiple of amx_chunk) into amx_pack_bytes(nx, in)
  // bytes; amx_matvec computes y rows [r0, r1) from them, each x row's values independent of nx and
  // of the range.
  int64_t amx_max_rows = 0;
  int64_t amx_chunk = 0;
  size_t (*amx_pack_bytes)(int64_t nx, int64_t in) = nullptr;
  void (*amx_pack)(const float* x, int64_t nx, int64_t ldx, int64_t in, uint16_t* b) = nullptr;
  void (*amx_matvec)(const uint16_t* b, int64_t nx, const uint16_t* w, int64_t in, int64_t r0, int64_t r1, float* y,
                     int64_t ldy) = nullptr;

  // One packed FP4 index-key row decoded (kernels/indexer.h dequant_index_key).
  void (*dequant_fp4_e8m0_row)(const uint8_t* row, int64_t dim, float* out) = nullptr;

  // scores[g] for keys [g0, g1) (kernels/indexer.h).
  void (*index_scores)(const float* q, const float* w, int n_heads, int64_t dim, const float* keys, int64_t stride,
                       int64_t g0, int64_t g1, float* scores) = nullptr;
};

const OpsKernels& avx2_ops();
const OpsKernels& avx512_ops();
const OpsKernels& amx_ops();  // avx512_ops() + the amx_* entries

// Asks Linux for the AMX tile state of this process (arch_prctl); false: refused or unknown.
bool amx_request_permission();
// kernels/x86/bf16_any_amx.cpp's split of x into three bf16 parts (bits), for tests.
void split_bf16x3_for_test(float x, uint16_t* parts);

}  // namespace strata::kernels::detail
