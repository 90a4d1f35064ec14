// DSpark: the draft head that proposes dspark_block_size tokens after each main-model step, from
// features of the main model's target layers (ARCHITECTURE.md §DSpark; model.py DSparkBlock,
// DSparkAttention, DSparkMarkovHead, DSparkConfidenceHead, Transformer.forward_spec).
//
// Data flow, per sequence:
// - main_hidden: the main forward's residual stream at the input of each target layer (after its
//   Engram, before the block), averaged over the hc_mult copies and concatenated over the targets:
//   [n, dim * n_targets] (Model::forward's `main_hidden` output).
// - main_x = main_norm(main_proj(main_hidden)) [n, dim]: the same for every stage.
// - Each stage keeps a sliding-window ring of main-model KV only: kv_norm(wkv(main_x)), RoPE at the
//   main token's position, FP8 (E4M3, ue8m0 per 32) like the backbone's window ring. After a prefill
//   the ring is seeded (dspark_seed); after a decode step at position p the draft writes p's entry
//   and then runs the block.
// - The draft block: the new token then (block - 1) noise tokens, at positions p+1 .. p+block,
//   through every stage (mHC, DSpark attention, MoE with the stages' own experts). A block query
//   sees every ring slot holding a position in (p - window, p] and every block key (no causal mask
//   inside the block). The drafts' own KV is never stored.
// - Head: hc_pre with the last stage's FFN pre-mix, the last stage's norm, the main LM head; then
//   left to right, the Markov head adds a logit bias from the previous token (the new token, then
//   each greedy draft) and the confidence head scores [hidden (before the norm), markov_embed].
// f32 throughout; rounding points as the reference (FP8 activation quantisation before FP8 linears,
// FP8 on the KV).
#pragma once

#include <cstdint>
#include <vector>

#include "core/thread_pool.h"
#include "model/config.h"
#include "model/kv_cache.h"
#include "model/rope.h"
#include "model/weights.h"

namespace strata::model {

// Per-sequence draft state: one window ring of main-model KV per stage.
struct DSparkState {
  std::vector<LayerKvCache> stages;
  int64_t n_seen = 0;  // main-model positions written into the rings (0..n_seen-1)
};

// One draft after a main-model step. With a DSparkStop (dspark_head) the head stops early: then
// ids holds 1 + k entries (the k drafts kept), logits k rows, confidence the k kept drafts' plus
// the first one below the threshold (when it stopped there).
struct DSparkDraft {
  std::vector<int32_t> ids;        // [block + 1]: ids[0] = the main model's token, then the greedy drafts
  std::vector<float> logits;       // [block, vocab_size] draft logits including the Markov bias
  std::vector<float> confidence;   // [block] confidence logits (model.py DSparkConfidenceHead)
};

// Where the draft head may stop (speculative decoding, runtime/speculation.h): after max_drafts
// drafts, or before the first draft whose confidence (sigmoid of its logit) is below min_conf. A
// draft's confidence needs only its hidden row and the previous draft, so the head then computes
// the logits row by row and skips the rows it would drop (the LM head dominates a draft's cost).
struct DSparkStop {
  int64_t max_drafts = -1;  // -1: the whole block
  float min_conf = 0.0f;    // in [0, 1]; 0: no confidence stop
};

// Collects main_hidden during a main forward: at each target layer's input (after its Engram,
// before the block), the mean over the hc_mult streams of x [n, hc, dim] (Transformer.forward).
class DSparkFeatures {
 public:
  explicit DSparkFeatures(const ModelConfig& c) : c_(c), per_target_(c.dspark_target_layer_ids.size()) {}
  // Records x [n, hc, dim] if `layer` is a target; no-op otherwise.
  void capture(int layer, const float* x, int64_t n);
  // out = [rows, dim * n_targets]: the last `rows` captured tokens of each target, concatenated in
  // target order. Errors (kInternal): a target captured fewer rows (it did not run).
  [[nodiscard]] Status assemble(int64_t rows, std::vector<float>* out) const;

 private:
  const ModelConfig& c_;
  std::vector<std::vector<float>> per_target_;  // [captured rows, dim] each
};

// An empty state for `c` (rings of window_size slots per stage; no stages when c has no DSpark).
DSparkState new_dspark_state(const ModelConfig& c);

// main_x [n, dim] = main_norm(main_proj(main_hidden [n, dim * n_targets])) (DSparkBlock.forward_embed).
void dspark_main_x(const ModelConfig& c, const DSparkWeights& w, const float* main_hidden, int64_t n, float* main_x,
                   ThreadPool* pool);

// Writes the main-model KV of main_x [n, dim] at positions start.. into `ring` (slot = pos % window).
// Source: DSparkAttention.forward (main_kv; the start_pos == 0 branch seeds, decode writes one slot).
void dspark_write_ring(const ModelConfig& c, const AttentionWeights& w, const RopeTable& rope, const float* main_x,
                       int64_t n, int64_t start, LayerKvCache& ring, ThreadPool* pool);

// DSpark attention of the draft block x [block, dim] (normed sublayer input) at positions
// pos+1 .. pos+block over `ring` (entries for positions <= pos) and the block's own KV; out
// [block, dim]. Source: DSparkAttention.forward (decode branch), get_dspark_topk_idxs.
void dspark_attention(const ModelConfig& c, const AttentionWeights& w, const RopeTable& rope, const float* x,
                      int64_t block, int64_t pos, const LayerKvCache& ring, ThreadPool* pool, float* out);

// The draft head: h [block, dim] is the last stage's output collapsed by its FFN pre-mix (before the
// final norm); `first` the main model's token. Fills d->ids, d->logits, d->confidence (greedy drafts:
// argmax, lowest id on ties). Source: DSparkBlock.forward_head, DSparkMarkovHead, DSparkConfidenceHead.
// `stop` (DSparkStop) may end the head early; the default computes every row at once.
void dspark_head(const ModelConfig& c, const ModelWeights& w, const float* h, int32_t first, ThreadPool* pool,
                 DSparkDraft* d, const DSparkStop& stop = {});

}  // namespace strata::model
