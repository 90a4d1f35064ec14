// MoE sublayer: router (sqrt-softplus scores, biased top-k selection, normalised weights) over the
// routed experts (MXFP4 SwiGLU, clamped) plus the shared expert (FP8).
//
// Prefill groups tokens by expert so each expert's weights are read once per chunk. Experts are
// acquired from the WeightStore per use (the hook a tiered store implements): first the layer's
// whole expert set is named (PrefetchKind::kDemand) so every miss is in flight at once, then, with
// a MoeLookahead, the next layer's router is applied to this layer's input and its top-k are named
// as kPredict, so those reads overlap this layer's expert compute and the next attention. Experts
// still run in ascending id order, so the sum into `out` (and the logits) is the same for every
// store. Shapes: x [n, dim] normed input, out [n, dim]. Errors: only from the store (an expert that
// cannot be read), reported with the layer and expert.
// Source: ARCHITECTURE.md §MoE; model.py Gate, Expert, MoE.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "core/status.h"
#include "core/thread_pool.h"
#include "model/config.h"
#include "model/expert_peers.h"
#include "model/observer.h"
#include "model/profile.h"
#include "model/weights.h"
#include "store/weight_store.h"

namespace strata::model {

struct RouterOutput {
  std::vector<int32_t> ids;     // [n, top_k] by biased score, descending
  std::vector<float> weights;   // [n, top_k] normalised * route_scale
  // route()'s working buffers, kept so that a reused RouterOutput allocates nothing.
  std::vector<float> logits, score, biased;
  std::vector<int32_t> order;
};

// Router only (exposed for tests and for the layer-ahead prediction).
// `path`: the gate's regime (BF16/F32 in the reference order: the same bits in both).
void route(const ModelConfig& c, const MoeWeights& w, const float* x, int64_t n, RouterOutput* out, ThreadPool* pool,
           kernels::RowPath path = kernels::RowPath::kAuto);

// Layer-ahead prediction state carried from one MoE sublayer to the next during a forward pass.
struct MoeLookahead {
  std::span<const BlockWeights> layers;  // the backbone blocks (whose .ffn routers predict)
  int layer = -1;                        // layer the stored prediction is for (-1: none)
  int64_t n = 0;                         // tokens it was made for
  std::vector<int32_t> ids;              // [n, top_k] predicted expert ids

  // Starts a forward pass over `blocks`.
  void begin(std::span<const BlockWeights> blocks) {
    layers = blocks;
    layer = -1;
  }
};

// One peer's message of one layer (model/expert_peers.h): its tasks, their rows and routing
// weights, and its answer.
struct PeerBuffers {
  std::vector<ExpertTask> tasks;
  std::vector<float> x, scale, y;
  int64_t rows = 0;
  bool collected = false;
  void clear() {
    tasks.clear();
    x.clear();
    scale.clear();
    rows = 0;
    collected = false;
  }
};

// One expert of a batch of routed experts: its lease, its rows (gathered, or the sublayer input
// itself when they are all its tokens in order), where they sit in the batch buffers.
struct BatchedExpert {
  int e;
  store::ExpertView view;                     // its matrices
  std::unique_ptr<store::ExpertLease> lease;  // pins them (null where the store holds them for good)
  const float* x;  // the expert's token rows
  int64_t row, m;  // first row in the batch buffers, rows
  Rows regime;     // its rows' regimes: the decode rows come first (slots are in token order)
};

// Reused buffers of the MoE sublayer (owned by model::Activations): a decode step allocates
// nothing in them once a step of its size has run (beyond the store's expert leases).
struct MoeScratch {
  std::vector<float> xs, g, u, act, y, scale;
  std::vector<float> shared_g, shared_u, shared_act, shared_y;  // the shared expert's rows
  std::vector<int64_t> slots;       // (token, slot) pairs grouped by expert, tokens ascending
  std::vector<int32_t> slot_first;  // [n_experts + 1]: expert e's pairs are slots[slot_first[e] ..)
  std::vector<int32_t> slot_fill;   // [n_experts] the counting sort's cursors
  std::vector<PeerBuffers> peers;  // [peer]: expert parallelism only (index 0 unused)
  RouterOutput router;
  std::vector<int32_t> used, mine;    // the layer's experts (ascending), those this process computes
  std::vector<uint32_t> uses, mine_uses;  // their token counts
  std::vector<int> owner;             // [used] the process computing each (0: this one)
  std::vector<int64_t> remote_row;    // [used] its first row in its peer's answer
  std::vector<BatchedExpert> batch;
  std::vector<kernels::LinearJob<kernels::Fp4Weight>> fp4_jobs;
  std::vector<kernels::LinearJob<kernels::Fp8Weight>> fp8_jobs;
};

// `ahead` (may be null) enables the layer-ahead prefetch when the store wants it and scores the
// previous prediction (store::WeightStore::record_prediction). `prof` (may be null) gets the time.
// Batches: `rows` gives each row's regime (model/weights.h Rows): an expert's decode rows and its
// prompt rows run as separate jobs, so a row's result does not depend on which other rows picked
// the same expert. `scratch` (may be null) holds the buffers between calls. `peers` (may be null):
// the routed experts other processes own are computed there (model/expert_peers.h); errors then
// include the transport's, naming the peer. `ride_along`: independent F32 jobs (the block's mHC
// projection) run in the first routed pass over the pool (kernels::linear_batch), else before return.
[[nodiscard]] Status moe_forward(const ModelConfig& c, const MoeWeights& w, store::WeightStore& store, const float* x,
                                 Rows rows, float* out, ThreadPool* pool, Observer* obs, MoeLookahead* ahead = nullptr,
                                 ForwardProfile* prof = nullptr, MoeScratch* scratch = nullptr,
                                 ExpertPeers* peers = nullptr, RideAlong ride_along = {});

// A peer's half of expert parallelism: runs routed experts of layer `layer` over given rows with
// the arithmetic moe_forward uses. tasks: ascending expert ids (model/expert_peers.h); x [sum m,
// dim] float32 rows in task order; scale [sum m] routing weights; y [sum m, dim] the outputs (the
// routing weight applied before w2, as model.py Expert.forward). Errors: a malformed task
// (kInvalidArgument naming layer and expert), a store read failure (naming layer and expert).
[[nodiscard]] Status run_expert_tasks(const ModelConfig& c, int layer, store::WeightStore& store,
                                      std::span<const ExpertTask> tasks, const float* x, const float* scale, float* y,
                                      ThreadPool* pool, MoeScratch* scratch = nullptr);

}  // namespace strata::model
