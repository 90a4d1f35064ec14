// CSA2 attention sublayer: sliding window + compressed KV chosen by the indexer, with sinks.
//
// One call processes n consecutive tokens at positions [start, start+n) of one sequence — a whole
// prompt (prefill), one token (decode) or any chunk in between, all with the same math: query p sees
// the window positions max(0, p-window+1)..p and the compressed groups its layer's indexer selected
// among those complete at p ((p+1) / ratio of them). KV sources compress their input into the cache;
// other compressed layers read the latest source's cache and reuse the latest index source's
// selection (model.py SharedAttentionRuntime, passed here as AttentionShared). Index-key owners score
// against their own keys on every step (DECISION: ARCHITECTURE.md "Decisions" — the official code's
// stale pointer is treated as a bug; the fixtures' *_fixed decode data).
// Shapes: x [n, dim] (the normed sublayer input), out [n, dim]. f32 throughout; rounding points are
// those of the reference (act_quant on window KV, fp4 on index q/k and compressed KV). The caches
// keep those rounded values as packed FP8/FP4 bytes (model/kv_cache.h), decoded exactly before use:
// the window ring once per call, the compressed entries a chunk selected once each, index keys once
// per indexer call. A ring slot holding another position than the one a query wants (the decoder's
// ring after bounded replay) is left out of that query's window.
// Source: ARCHITECTURE.md §Attention (CSA2); model.py Attention, Compressor, Indexer,
// select_candidate_blocks; fixtures README (sparse_attn shim).
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "core/thread_pool.h"
#include "model/config.h"
#include "model/kv_cache.h"
#include "model/kv_undo.h"
#include "model/observer.h"
#include "model/rope.h"
#include "model/weights.h"

namespace strata::model {

// What the layers of one forward hand down the stack.
struct AttentionShared {
  std::vector<int32_t> topk;        // [n, index_topk] selected group ids, ascending, -1 padded
  std::vector<uint8_t> candidates;  // [n, cand_width] candidate-block mask (1 = kept)
  int64_t cand_width = 0;
  bool have_topk = false, have_candidates = false;
  // Bumped whenever topk is written or dropped: names one selection, so the layers after an index
  // source that read the same compressed cache reuse its decoded rows (AttentionEntryScratch).
  uint64_t topk_gen = 0;
};

struct AttentionContext {
  const ModelConfig& c;
  const RopeTable& rope;     // this layer's table (compressed layers: YaRN / compress_rope_theta)
  KvCache& cache;
  AttentionShared& shared;
  ThreadPool* pool;
  Observer* obs;
};

// One entry of a batched attention call: its rows [row0, row0 + n) of the batch, at positions
// start.. of its sequence, against its cache; `shared` carries its index selection down the stack.
struct AttentionEntry {
  KvCache* cache = nullptr;
  AttentionShared* shared = nullptr;
  int64_t row0 = 0, n = 0, start = 0;
  kernels::RowPath path = kernels::RowPath::kAuto;  // its rows' regime (per-entry linears)
  KvUndoLog* undo = nullptr;  // saves the compressor slots this entry overwrites (may be null)
};

// Reused buffers of the attention sublayer (owned by model::Activations).
// One entry's buffers: decode entries run side by side over the pool, so each has its own. They
// grow to the largest use and never shrink (vectors are filled only where they grow), so a decode
// step allocates nothing once one step of its size has run (issue: "no allocation per layer").
struct AttentionEntryScratch {
  std::vector<float> ring;        // [n_ring, head_dim] decoded window positions before the entry
  std::vector<float> comp_rows;   // [index_topk or groups, head_dim] selected compressed rows, decoded
  // What comp_rows holds for a lone decode query: the selection (AttentionShared::topk_gen) of
  // `comp_cache`'s KV source layer `comp_src`. Layers that share both read the same rows.
  const KvCache* comp_cache = nullptr;
  int comp_src = -1;
  uint64_t comp_gen = 0;
  std::vector<float> query_rows;  // [index_topk, head_dim] one query's selection (very long contexts)
  std::vector<int32_t> slot, groups;  // a chunk's union: group -> row, rows -> group
  std::vector<const float*> ent;  // one query's attention entries
  std::vector<float> latents, index_k, keys, score;  // compressor and indexer
  std::vector<float> block_max;                      // candidate blocks (select_candidate_blocks)
  std::vector<int32_t> block_order;
};

struct AttentionScratch {
  std::vector<float> qr, kv, q, o, ocat, comp_kv, comp_score, idx_q, idx_w, og, yg;
  std::vector<uint8_t> kvq;
  std::vector<int64_t> pos;
  std::vector<const AttentionEntry*> one_row, singles;
  LinearJobs jobs;  // one pass's projections (attention_forward)
  std::vector<kernels::LinearJob<kernels::Bf16Weight>> bf16_jobs;
  std::vector<AttentionEntryScratch> entries;  // [batch entries]
};

// A batch through one attention sublayer (model/forward_request.h). The projections (wq_a, wkv,
// wq_b, the compressor's and the indexer's linears, wo_a, wo_b) run over every row of the batch
// at once, each part in its regime (Rows); the compressor state, the indexer selection and the
// attention itself run per entry against its cache.
struct AttentionBatch {
  const ModelConfig& c;
  const RopeTable& rope;  // this layer's table (compressed layers: YaRN / compress_rope_theta)
  std::span<AttentionEntry> entries;
  Rows rows;              // all rows, decode entries' first
  ThreadPool* pool;
  Observer* obs;          // only with one entry
  AttentionScratch& scratch;
};

// Runs layer `layer`'s attention for x [rows.n, dim] (the normed sublayer input of every entry's
// rows) and writes out [rows.n, dim]; updates each entry's caches (window ring; at a KV source its
// compressor, unless attention_compress already consumed these positions).
// The projections run in two passes over the pool (kernels::linear_batch): those of x (wq_a, wkv,
// the compressor's wkv and wgate, the indexer's weights_proj) with `ride_along`, independent F32
// jobs (the block's mHC projection); then those of the normed q_lora (wq_b, the indexer's wq_b).
void attention_forward(const AttentionBatch& b, int layer, const AttentionWeights& w, const float* x, float* out,
                       RideAlong ride_along = {});

// Only the KV-source part of layer `layer` for x [n, dim] at positions start..: its compressor,
// compressed KV and index keys (no queries, no window, no output). Bounded replay runs this at the
// first decoder layer over every prompt token, then attention_forward over the last window_size
// tokens only. No-op for a layer that is not a KV source. REQUIRES the compressor frontier at start.
void attention_compress(const AttentionContext& ctx, int layer, const AttentionWeights& w, const float* x, int64_t n,
                        int64_t start);

// The output projection of attention heads o [n, n_heads * head_dim] (RoPE tails already
// un-rotated): group g's heads through wo_a[g] (bf16, no activation quantisation), the groups
// concatenated, then wo_b (FP8) into out [n, dim]. Shared by the backbone and DSpark attention.
// Source: model.py Attention.forward (the einsum over o_groups, wo_b).
void attention_output(const ModelConfig& c, const AttentionWeights& w, const float* o, int64_t n, float* out,
                      ThreadPool* pool);
// The same over the rows of a batch, wo_b in each part's regime; sc.ocat holds the concatenated
// groups (the observer reads them), sc.og/yg/bf16_jobs are scratch.
void attention_output(const ModelConfig& c, const AttentionWeights& w, const float* o, Rows rows, float* out,
                      ThreadPool* pool, AttentionScratch& sc);

// ---- pieces (exposed for tests) -----------------------------------------------------------------

// Compressor: appends the latents (normed, before RoPE/quantisation) of every group that completes
// in this chunk to `latents` ([n_new, head_dim]) and returns the id of the first new group.
int64_t compress_chunk(const ModelConfig& c, int layer, const AttentionWeights& w, const float* x, int64_t n,
                       int64_t start, LayerKvCache& lc, std::vector<float>* latents, ThreadPool* pool);
// The same from the compressor's projections kv = comp_wkv(x), score = comp_wgate(x) ([n, head_dim]
// each; score unused at ratio 1), computed by the caller (for a whole batch at once). `undo` (may
// be null) saves each partial-group slot before it is overwritten (model/kv_undo.h).
int64_t compress_rows(const ModelConfig& c, int layer, const AttentionWeights& w, const float* kv, const float* score,
                      int64_t n, int64_t start, LayerKvCache& lc, std::vector<float>* latents,
                      KvUndoLog* undo = nullptr);

// Candidate blocks for one query (select_candidate_blocks): scores [n_visible] (reachable compressed
// positions), keeps the top `topk_blocks` blocks of `block_size` by their max, the newest block
// always; writes keep[0..width) (width >= n_visible; whole kept blocks are marked, as the reference's
// mask is).
// `block_max`, `order` (may be null) are scratch.
void select_candidate_blocks(const float* scores, int64_t n_visible, int64_t width, int topk_blocks, int block_size,
                             uint8_t* keep, std::vector<float>* block_max = nullptr,
                             std::vector<int32_t>* order = nullptr);

}  // namespace strata::model
