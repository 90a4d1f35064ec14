// Activations: the scratch and per-call state of Model::forward, in one object (llama2.c's RunState,
// gemma.cpp's Activations), so that the Model holds only config, weights and store and is const
// during a forward.
//
// Holds the residual streams and sublayer buffers, sized for the largest batch seen and reused (a
// decode step allocates nothing once the object has served one step of that size), the RoPE tables
// (grown to the longest position seen), the layer-ahead expert prediction carried across layers,
// and the profile counters of the forwards that used it.
// Thread safety: one forward at a time per Activations. One engine loop owns one.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "model/attention.h"
#include "model/config.h"
#include "model/engram.h"
#include "model/forward_request.h"
#include "model/mhc.h"
#include "model/moe.h"
#include "model/profile.h"
#include "model/rope.h"

namespace strata::model {

// The buffers of one block (model::Model::block_forward): u/f [rows, dim] sublayer input/output,
// the two mHC sites' coefficients, the MoE's buffers.
struct BlockScratch {
  std::vector<float> u, f;
  HcMix attn_mix, ffn_mix;
  MoeScratch moe;
};

// Model::forward's per-step bookkeeping, reused: with it a decode step allocates nothing per layer
// and, beyond the store's Engram fetch handles (one per Engram layer), nothing per step.
struct ForwardScratch {
  struct Span {
    ForwardEntry* e;
    int64_t row0, n, start;  // rows in the batch; position of the first
  };
  std::vector<Span> spans;                    // the batch's entries, decode entries first
  std::vector<int64_t> erows, erows_part, engram_layer_rows;  // Engram row ids
  std::vector<std::vector<uint32_t>> classes;  // [entry] Engram token classes to append
  std::vector<std::unique_ptr<store::EngramFetch>> efetch;
  std::vector<AttentionShared> shared;         // [entry] index selections down the stack
  std::vector<AttentionEntry> aentries;
  std::vector<int> first_nonfinite;
  std::vector<int64_t> want, first_want;       // head rows, entry by entry
  std::vector<char> finite;
};

class Activations {
 public:
  // Empty buffers shaped for `c` (they grow on first use).
  explicit Activations(const ModelConfig& c);
  ~Activations();
  Activations(Activations&&) noexcept;
  Activations& operator=(Activations&&) noexcept;

  // Where the forwards that used this object spent their time (snapshot and subtract per phase).
  ForwardProfile profile;

  // ---- used by the forward pass (model/) ----
  RopeTable rope_window;      // window-only layers: rope_theta, no YaRN
  RopeTable rope_compressed;  // compressed layers: compress_rope_theta with YaRN
  MoeLookahead lookahead;     // layer-ahead expert prediction, carried across layers
  // Per-row buffers of the batch: x [rows, hc, dim] residual streams, pre_mix [rows, hc]; the
  // head's normed rows h [rows, dim] and logits [rows, vocab] (when several entries want logits).
  std::vector<float> x, pre_mix, head_x, head_pm, h, logits;
  BlockScratch block;
  std::unique_ptr<AttentionScratch> attn;
  EngramScratch engram;
  ForwardScratch fwd;
};

}  // namespace strata::model
