// Sparse attention of one query position over a list of entries, with a per-head sink (CSA2).
//
// For each head h, with e_j the entries (K = V, the same vector):
//   s_j  = (sum_d q[h, d] * e_j[d]) * scale            (d in order, from 0)
//   mx   = max(-1e30, s_0, s_1, ...)                     (finite start, as the sparse_attn kernel)
//   p_j  = exp_f32(s_j - mx)
//   den  = (p_0 + p_1 + ...) + exp_f32(sink[h] - mx)     (j in order; the sink adds mass, no value)
//   out[h, d] = sum_j (p_j / den) * e_j[d]               (j in order, from 0)
// every product and sum rounded to f32 as written. The output is what the reference computes
// before its inverse RoPE and the grouped output projection (attn.wo_a -> wo_b, an FP8 rounding
// point), so every level reproduces kernels::ref bit for bit: the vector paths put heads in lanes
// for the scores and softmax and head_dim in lanes for the output, never splitting a sum.
// Entries are pointers, so the window ring, the compressed cache or a decoded copy of packed FP8/FP4
// storage can be mixed freely. An empty list gives out = 0 for every head.
// Threading: heads are split over `pool` (may be null; inside a task it runs serially). Allocates
// per call scratch of about (head_dim + n_entries) * n_heads floats. Cannot fail.
// Source: ARCHITECTURE.md §Attention; model.py Attention.forward; fixtures README (sparse_attn shim).
#pragma once

#include <cstdint>

#include "core/thread_pool.h"
#include "kernels/dispatch.h"

namespace strata::kernels {

struct SparseAttentionArgs {
  const float* q = nullptr;              // [n_heads, head_dim]
  int n_heads = 0;
  int64_t head_dim = 0;
  const float* const* entries = nullptr; // n_entries pointers, each to head_dim f32 values
  int64_t n_entries = 0;
  const float* sinks = nullptr;          // [n_heads] sink logits
  float scale = 1.0f;                    // softmax scale (head_dim^-0.5)
  float* out = nullptr;                  // [n_heads, head_dim]
};
void sparse_attention(const SparseAttentionArgs& a, ThreadPool* pool);
void sparse_attention(const SparseAttentionArgs& a, ThreadPool* pool, KernelLevel level);

namespace ref {
void sparse_attention(const SparseAttentionArgs& a);
}  // namespace ref

}  // namespace strata::kernels
