// Model weights bound from a WeightStore, validated against the config before the first token.
//
// bind_weights checks every tensor the V4.1 graph reads — name, dtype and shape — and fails on the
// first mismatch with a message naming the tensor, what was found and what the config implies
// (ds4's weights_validate_layout discipline; llama.cpp's check_tensor_dims). After binding, model
// code uses these typed fields, never name lookups. Small parameters (norms, sinks, mHC, router
// bias) are widened to f32 copies owned here; large ones stay views into the store. Routed experts
// and Engram tables are validated here (every expert, both tables) but read through the store per use.
// Source: ARCHITECTURE.md §Checkpoint format; make_tiny_v41.py (names, dtypes); model.py modules.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "core/progress.h"
#include "core/status.h"
#include "core/thread_pool.h"
#include "kernels/kquant_linear.h"
#include "kernels/linear.h"
#include "model/config.h"
#include "model/expert_peers.h"
#include "store/weight_store.h"

namespace strata::model {

// The rows of a batched call (model/forward_request.h): rows [0, n_decode) belong to decode
// entries and take the decode matvec, rows [n_decode, n) to prompt entries and take the prefill GEMM
// (kernels::RowPath), so each row gets the bits it would get in a batch of its own.
// n_decode < 0 leaves the regime to the kernels (RowPath::kAuto, by size), for callers outside a
// batch (the DSpark draft block).
struct Rows {
  int64_t n = 0, n_decode = 0;
  bool by_size() const { return n_decode < 0; }
  int64_t n_prompt() const { return by_size() ? 0 : n - n_decode; }
};

// Adds the jobs of y[r.n, out] = x[r.n, in] . W^T to a kernels batch: one per non-empty regime.
template <class W>
void add_linear_jobs(std::vector<kernels::LinearJob<W>>* jobs, const float* x, Rows r, const W& w, float* y) {
  if (r.by_size()) {
    jobs->push_back({x, r.n, w, y, kernels::RowPath::kAuto});
    return;
  }
  if (r.n_decode > 0) jobs->push_back({x, r.n_decode, w, y, kernels::RowPath::kDecode});
  if (r.n_prompt() > 0)
    jobs->push_back({x + r.n_decode * w.in, r.n_prompt(), w, y + r.n_decode * w.out, kernels::RowPath::kPrompt});
}

// Independent F32 jobs a sublayer runs in its first pass over the pool (kernels::linear_batch):
// the block's mHC projection (model.cpp block_forward, mhc.h hc_mixes_job).
using RideAlong = std::span<const kernels::LinearJob<kernels::F32Weight>>;

// The jobs of one pass over the pool, by format (kernels::linear_batch); scratch that only grows.
struct LinearJobs {
  std::vector<kernels::LinearJob<kernels::Fp8Weight>> fp8;
  std::vector<kernels::LinearJob<kernels::Fp4Weight>> fp4;
  std::vector<kernels::LinearJob<kernels::Bf16Weight>> bf16;
  std::vector<kernels::LinearJob<kernels::F32Weight>> f32;
  void clear() {
    fp8.clear();
    fp4.clear();
    bf16.clear();
    f32.clear();
  }
  kernels::LinearBatch batch() const { return kernels::LinearBatch{fp8, fp4, bf16, f32}; }
};

// The kernels' block format of a ggml block dtype (core/dtype.h kQ8_0..kIQ4_NL); false otherwise.
bool quant_type_of(DType d, kernels::QuantType* out);

// A linear layer in its stored format. FP8 linears quantise their input (model.py `linear`); BF16
// and F32 ones do not; nor do the ggml block formats of a quantised GGUF (kQuant,
// kernels/kquant_linear.h: x stays f32, each row computed the same whatever the batch, so both
// regimes of a batch give the same bits; a multi-row call loops the matvec kernel over rows).
struct Linear {
  enum class Kind { kNone, kFp8, kBf16, kF32, kQuant };
  // y[n, out] = act_quant_fp8(x) . dequant(W)^T for a block-format W (the official numerics of an
  // FP8/MXFP4 linear with its weights re-quantised); a multi-row x loops the matvec kernel.
  static void apply_quant_fp8_act(const float* x, int64_t n, const kernels::QuantWeight& w, float* y, ThreadPool* pool);
  Kind kind = Kind::kNone;
  int64_t out = 0, in = 0;
  kernels::Fp8Weight fp8;
  kernels::Bf16Weight bf16;
  kernels::F32Weight f32;
  kernels::QuantWeight quant;  // kQuant: [out] rows of quant_row_bytes(type, in) bytes
  // kQuant whose source was FP8/MXFP4, or kF32 widened from an F16 copy of an FP8 weight (GGUFs from
  // ds4 / ik_llama.cpp: Engram wkv, indexer wq_b): x is rounded to E4M3 per 32
  // (act_quant_fp8_inplace on a copy) first, as the official FP8 linear does, so the variant differs
  // from the official model by its weights alone. The copy is a per-call allocation of n * in floats.
  bool act_fp8 = false;

  bool empty() const { return kind == Kind::kNone; }
  // y[n, out] = x[n, in] . W^T (with FP8 activation quantisation for kFp8).
  void apply(const float* x, int64_t n, float* y, ThreadPool* pool,
             kernels::RowPath path = kernels::RowPath::kAuto) const;
  // The same over the rows of a batch, each part in its regime (Rows).
  void apply(const float* x, Rows r, float* y, ThreadPool* pool) const;
  // Adds apply(x, r, y) to `jobs` for one pass with other linears (kernels::linear_batch gives the
  // same bits as apply) and returns true; false, adding nothing, for what a batch cannot take (the
  // ggml block formats, an F32 copy of an FP8 weight): the caller applies those itself.
  bool add_jobs(LinearJobs* jobs, const float* x, Rows r, float* y) const;
  // Weight bytes read per application (for bandwidth stats).
  uint64_t weight_bytes() const;
};

struct HcWeights {          // one mHC mixing site (attention or FFN)
  std::vector<float> fn;    // [mix_hc, hc_mult * dim], mix_hc = (2 + hc_mult) * hc_mult
  std::vector<float> base;  // [mix_hc]
  std::vector<float> scale; // [3]
};

struct AttentionWeights {
  std::vector<float> attn_sink;  // [n_heads] per-head sink logit
  Linear wq_a;                   // [q_lora_rank, dim] FP8
  std::vector<float> q_norm;     // [q_lora_rank]
  Linear wq_b;                   // [n_heads * head_dim, q_lora_rank] FP8
  Linear wkv;                    // [head_dim, dim] FP8
  std::vector<float> kv_norm;    // [head_dim]
  Linear wo_a;                   // [o_groups * o_lora_rank, n_heads * head_dim / o_groups] stored FP8, used as
                                 // bf16 (convert.py); grouped: rows g*o_lora_rank.. belong to group g
  std::vector<uint16_t> wo_a_bf16;  // owned bf16 copy backing wo_a (blocked layout when o_lora_rank % 16 == 0)
  std::vector<uint8_t> wo_a_e4m3;   // or its E4M3 codes, blocked (here only where the store cannot
                                    // relay them: WeightStore::resident_relaid), and their scales
  std::vector<uint8_t> wo_a_scale;
  Linear wo_b;                   // [dim, o_groups * o_lora_rank] FP8
  // Compressor (kv source layers only).
  Linear comp_wkv;               // [head_dim, dim] BF16 (F32 math)
  Linear comp_wgate;             // [head_dim, dim] BF16, ratio > 1 only
  std::vector<float> comp_norm;  // [head_dim]
  // Indexer (index source layers only).
  Linear idx_wq_b;               // [index_n_heads * index_head_dim, q_lora_rank] FP8
  Linear idx_weights_proj;       // [index_n_heads, dim] BF16
  Linear idx_wk;                 // [index_head_dim, head_dim] BF16 (key owners only)
  std::vector<float> idx_k_norm; // [index_head_dim] (key owners only)
};

struct MoeWeights {
  int layer = 0;                  // model layer id (for store::acquire_expert)
  int n_experts = 0, n_active = 0;
  Linear gate;                    // [n_experts, dim] router, BF16 (F32 math)
  std::vector<float> gate_bias;   // [n_experts] selection-only bias
  Linear shared_w1, shared_w2, shared_w3;  // shared expert, FP8
};

struct EngramWeights {
  int index = 0;                 // position in engram_layer_ids
  int64_t n_rows = 0;            // table rows
  DType table_dtype = DType::kF8E4M3;  // F8_E4M3 + E8M0 scales (official) or a block format (--engram T)
  int64_t row_bytes = 0;         // stored bytes of one row's codes: head_dim (FP8) or dtype_nbytes(type, head_dim)
  int64_t scale_bytes = 0;       // E8M0 scale bytes per row: head_dim / 32 (FP8), 0 for a block format
  Linear wkv;                    // [dim * (hc_mult + 1), n_cols * head_dim] FP8
  std::vector<float> qk_weight;  // [hc_mult, dim] = q_weight * k_weight (only the product is used)
};

struct BlockWeights {
  int layer = 0;
  std::vector<float> attn_norm, ffn_norm;  // [dim]
  HcWeights hc_attn, hc_ffn;
  AttentionWeights attn;
  MoeWeights ffn;
  bool has_engram = false;
  EngramWeights engram;
};

struct DSparkWeights {           // shared pieces of the DSpark stages (mtp.0 / mtp.last)
  Linear main_proj;              // [dim, dim * n_targets] FP8 (stage 0)
  std::vector<float> main_norm;  // [dim] (stage 0)
  std::vector<float> norm;       // [dim] (last stage)
  TensorView markov_embed;       // [vocab, markov_rank] BF16
  Linear markov_head;            // [vocab, markov_rank] BF16
  std::vector<float> confidence_proj;  // [dim + markov_rank]
};

struct PipelinePart;  // model/pipeline_part.h

struct ModelWeights {
  TensorView embed;              // [vocab, dim] BF16 (or F32)
  Linear head;                   // [vocab, dim] BF16 (F32 math), blocked where the store relays it (weights.cpp)
  std::vector<float> norm;       // [dim] final norm
  std::vector<BlockWeights> layers;  // n_layers backbone blocks
  std::vector<BlockWeights> mtp;     // DSpark stages
  DSparkWeights dspark;
  uint64_t resident_bytes = 0;   // bytes of bound resident tensors
  // F16 tensors (GGUFs from ds4 / ik_llama.cpp: token_embd, hc_*_fn, compressor, indexer and
  // Engram projections) widened to f32 at load, exactly (every f16 is an f32); views above point here.
  std::vector<std::vector<float>> widened;
};

// Binds and validates every tensor (see file comment). Errors name the tensor, e.g.
//   "tensor 'layers.3.attn.wq_a.weight': shape [1024, 64], expected [64, 64] (q_lora_rank, dim)".
// `progress` (may be empty) gets task "load" in layers (backbone + DSpark stages) as each binds.
// `peers` (may be null; model/expert_peers.h): the main layers' routed experts other processes own
// are neither read nor preloaded here.
// `part` (may be null: every layer; model/pipeline_part.h): a pipeline stage binds only the layers
// [layer_lo, layer_hi), the embedding only when layer_lo is 0, the final norm and head only when
// layer_hi is n_layers, and no DSpark stage; the other layers' BlockWeights stay default (unbound).
[[nodiscard]] Result<ModelWeights> bind_weights(const ModelConfig& cfg, store::WeightStore& store,
                                                const ProgressFn& progress = {}, const ExpertPeers* peers = nullptr,
                                                const PipelinePart* part = nullptr);

}  // namespace strata::model
