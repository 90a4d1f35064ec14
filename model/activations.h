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

#include "model/config.h"
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

struct AttentionScratch;  // model/attention.h
struct EngramScratch;     // model/engram.h
struct ForwardScratch;    // model/forward_scratch.h

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
  // Behind pointers so that this header stays narrow (their headers: see the declarations above).
  std::unique_ptr<AttentionScratch> attn;
  std::unique_ptr<EngramScratch> engram;
  std::unique_ptr<ForwardScratch> fwd;
};

}  // namespace strata::model
