// Model: a loaded V4.1 checkpoint and its forward pass.
//
// load() reads config.json, opens the safetensors shards into a weight store, validates and binds
// every tensor, and builds the Engram hasher from the tokenizer's compressed vocabulary (passed in:
// the model floor never includes the tokenizer). forward() runs n tokens of one sequence through
// every layer, appending to that sequence's KvCache, and writes the requested logits.
// Thread safety: one forward at a time per Model (it owns the thread pool and scratch); several
// KvCaches (sessions) can share one Model sequentially.
// Source: model.py Transformer.forward; ARCHITECTURE.md §Block order.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "core/log.h"
#include "core/progress.h"
#include "core/status.h"
#include "core/thread_pool.h"
#include "model/config.h"
#include "model/dspark.h"
#include "model/activations.h"
#include "model/engram_hash.h"
#include "model/forward_request.h"
#include "model/kv_cache.h"
#include "model/moe.h"
#include "model/observer.h"
#include "model/pipeline_part.h"
#include "model/profile.h"
#include "model/rope.h"
#include "model/weights.h"
#include "store/placement_options.h"
#include "store/weight_store.h"

namespace strata::model {

struct AttentionShared;

struct ModelOptions {
  int n_threads = 0;               // worker threads incl. the caller; 0 = physical cores
  const Logger* logger = nullptr;  // load progress and summaries; null = silent
  ProgressFn progress;             // load progress in layers bound (core/progress.h); may be empty
  store::PlacementOptions placement;  // how load() places the weights (resident, stream, mmap)
  // Expert parallelism (model/expert_peers.h): routed experts of the main layers that peers own
  // are computed there (the DSpark stages' stay here). Not owned; must outlive the model. Null: all here.
  ExpertPeers* expert_peers = nullptr;
  // Pipeline parallelism (model/pipeline_part.h): this process runs only the layers
  // [layer_lo, layer_hi) and binds only their weights; the first process hands its streams to
  // `next`. Not owned; must outlive the model. Null: every layer here.
  const PipelinePart* pipeline = nullptr;
};

// Engram's compressed vocabulary, computed by the tokenizer floor from tokenizer.json.
struct CompressedVocabMap {
  std::vector<uint32_t> map;  // token id -> class
  uint32_t n_classes = 0;
};

// The CED encoder/decoder boundary of `c`: the first layer whose compress ratio is 1. Errors
// (kNotSupported, naming the layer): no such layer, or a KV source after it (bounded replay could
// not build that source's cache). Implemented in model/prefill_replay.cpp.
[[nodiscard]] Result<int> ced_decoder_boundary(const ModelConfig& c);

// A checkpoint's config and weight store, the weights not yet bound (Model::load's first half; an
// expert-parallel peer uses only this: dist/mpi_job.h). Errors: config.json's, the shards', the
// store's (store/open_store.h).
struct OpenedCheckpoint {
  ModelConfig config;
  std::unique_ptr<store::WeightStore> store;
};
[[nodiscard]] Result<OpenedCheckpoint> open_checkpoint(const std::string& dir, const store::PlacementOptions& placement);

class Model {
 public:
  // Loads DIR (config.json + safetensors). `vocab` must have engram_compressed_vocab_size classes
  // (kInvalidArgument naming both numbers otherwise). opt.placement picks the weight store
  // (store::open_store: resident, stream from SSD, or mmap) and its RAM budget.
  [[nodiscard]] static Result<std::unique_ptr<Model>> load(const std::string& dir, const CompressedVocabMap& vocab,
                                                           const ModelOptions& opt);
  // Builds a model over an existing store (tests, tiered stores).
  [[nodiscard]] static Result<std::unique_ptr<Model>> create(const ModelConfig& c, std::unique_ptr<store::WeightStore> s,
                                                             const CompressedVocabMap& vocab, const ModelOptions& opt);

  const ModelConfig& config() const { return c_; }
  const ModelWeights& weights() const { return w_; }
  store::WeightStore& store() const { return *store_; }
  ThreadPool& pool() const { return *pool_; }

  // An empty cache for a new sequence.
  KvCache new_cache() const;

  // Scratch and per-call state for forward() (model/activations.h); one per engine loop.
  Activations new_activations() const { return Activations(c_); }

  // Runs every entry of `req` (model/forward_request.h): entry e's tokens at positions
  // e.cache->n_past.., appended to its cache, its requested logits rows written to e.logits_out.
  // Errors, all checked before any cache changes (nothing changed): no entries, an entry without
  // tokens or cache, a cache in two entries or not made by this model, a token id out of range,
  // a context beyond max_position_embeddings (kResourceExhausted), logits rows outside the entry or
  // before a replayed tail, decoder_tail or an observer in a request of several entries, DSpark
  // features asked of a checkpoint without DSpark stages (kNotSupported), replay on a config with
  // a KV source after the CED boundary (kNotSupported). After that: a store read failure or
  // non-finite logits mid-forward (kIOError / kCorruption; every entry's cache is then left
  // inconsistent: discard those sequences).
  // A pipeline part (ModelOptions::pipeline) runs only its layers: after layer 0 it starts from
  // req.x_in / req.pre_mix_in (kInvalidArgument when their sizes are not the batch's), and it
  // refuses bounded replay and DSpark features (kNotSupported). The first part hands its streams
  // to PipelineNext for the rest and the logits; a middle part leaves them in act.x / act.pre_mix
  // and writes no logits; the last part runs the head.
  [[nodiscard]] Status forward(const ForwardRequest& req, Activations& act) const;

  // The layers this model runs, [layer_lo(), layer_hi()): all of them unless it is a pipeline part.
  int layer_lo() const { return layer_lo_; }
  int layer_hi() const { return layer_hi_; }

  // ---- DSpark draft (model/dspark.h; implemented in model/dspark_draft.cpp) ----------------------
  // True when the checkpoint has DSpark stages (dspark_block_size > 0 and n_mtp_layers > 0).
  bool has_dspark() const { return c_.dspark_block_size > 0 && c_.n_mtp_layers > 0 && !w_.mtp.empty(); }
  DSparkState new_dspark_state() const { return model::new_dspark_state(c_); }
  // Seeds every stage's ring with the main model's KV of main_hidden [n, dim * n_targets] at
  // positions start.. (after a prefill chunk; Transformer.forward_spec at start_pos 0; start may
  // skip positions, as after a bounded replay). Errors: no DSpark (kNotSupported), positions before
  // the state's end (kInvalidArgument).
  [[nodiscard]] Status dspark_seed(DSparkState& st, const float* main_hidden, int64_t n, int64_t start,
                                   Activations& act) const;
  // After a decode step at position `pos` whose features are main_hidden_row [dim * n_targets] and
  // whose greedy token is `token`: writes pos into the rings, runs the draft block through the
  // stages and the head (Transformer.forward_spec at start_pos = pos > 0). Errors as dspark_seed,
  // token out of range, a store read failure in a stage's MoE.
  // `stop` may end the draft head early (DSparkStop; speculative decoding).
  [[nodiscard]] Result<DSparkDraft> dspark_draft(DSparkState& st, int32_t token, const float* main_hidden_row,
                                                 int64_t pos, Activations& act, const DSparkStop& stop = {}) const;

  // The CED encoder/decoder boundary: the first layer whose compress ratio is 1 (-1 if none).
  // Bounded replay needs every KV source at or before it (kNotSupported naming the layer otherwise).
  [[nodiscard]] Result<int> decoder_boundary() const;

  // The Engram history a cache holds after `tokens` (the whole token history, or at least its
  // last engram_max_ngram_size - 1 ids): a rewound cache's (model/kv_undo.h). Without Engram layers,
  // the empty history of new_cache().
  EngramHistory engram_history_of(std::span<const int32_t> tokens) const;

  // Engram row ids of `tokens` following `history` (no state change): [n, n_engram_layers, n_cols].
  void engram_rows(const EngramHistory& history, std::span<const int32_t> tokens, std::vector<int64_t>* rows,
                   std::vector<uint32_t>* classes) const;

 private:
  Model(const ModelConfig& c, std::unique_ptr<store::WeightStore> s, const ModelOptions& opt);
  // One block (mHC, attention via `attend(u [n, dim] normed, f [n, dim] out, ride_along)`, MoE) on
  // x [n, hc, dim]. `attend` must run the ride-along jobs (the block's mHC projection, F32) before
  // it returns, in its first pass over the pool (kernels::linear_batch) or on their own.
  // A FunctionRef (no allocation per layer, as a std::function of the caller's lambda was).
  using AttendFn = FunctionRef<void(const float* u, float* f, RideAlong ride_along)>;
  // x [rows.n, hc, dim]; `s` holds the block's buffers.
  [[nodiscard]] Status block_forward(int layer, const BlockWeights& bw, float* x, std::vector<float>& pre_mix, Rows rows,
                                     AttendFn attend, MoeLookahead* ahead, Observer* obs, ForwardProfile* prof,
                                     BlockScratch& s) const;
  // The checks of one entry of a request (forward()'s errors), before anything changes.
  [[nodiscard]] Status check_entry(const ForwardEntry& e, size_t index, bool single) const;
  // x [n, hc, dim] = the embeddings of `tokens`, copied into every hc stream.
  void embed(std::span<const int32_t> tokens, float* x) const;
  // Bounded replay at the boundary layer (model/prefill_replay.cpp): compresses all *n tokens into
  // the cache, then narrows x, pre_mix, the Engram rows and the shared selections to the last
  // `tail` tokens and moves *start / *n to them.
  void replay_narrow(int layer, const BlockWeights& bw, std::vector<float>& x, std::vector<float>& pre_mix,
                     std::vector<int64_t>& engram_rows, AttentionShared& shared, int64_t tail, int64_t* start,
                     int64_t* n, KvCache& cache, Observer* obs, Activations& act) const;

  ModelConfig c_;
  std::unique_ptr<store::WeightStore> store_;
  ModelWeights w_;
  std::unique_ptr<ThreadPool> pool_;
  const Logger* logger_ = nullptr;
  std::vector<uint32_t> class_of_token_;
  uint32_t pad_class_ = 0;
  std::unique_ptr<EngramHasher> hasher_;
  ExpertPeers* peers_ = nullptr;  // ModelOptions::expert_peers
  int layer_lo_ = 0, layer_hi_ = 0;  // ModelOptions::pipeline's layers (all without one)
  PipelineNext* next_ = nullptr;     // ModelOptions::pipeline's next stages (first part only)
};

}  // namespace strata::model
