// WeightStore: where a checkpoint's tensor bytes live while the model runs.
//
// The model binds every resident tensor (attention, norms, router, shared experts, embeddings,
// head, mHC, DSpark) once at load, and asks for the two kinds of weight that a tiered store keeps
// off the fast tier per use: routed experts (acquire_expert) and Engram table rows
// (read_engram_rows). ResidentStore keeps everything in RAM; the tiered store (SSD / RAM cache /
// prefetch) implements the same interface.
// Layer ids are model layer ids: backbone 0..n_layers-1, DSpark stage s is n_layers + s (its
// tensors are named mtp.s.*).
// Thread safety: implementations document their own; ResidentStore is safe for concurrent reads
// after binding.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>

#include "core/status.h"
#include "core/tensor.h"
#include "io/checkpoint.h"

namespace strata::store {

// One routed expert's weights in stored format (MXFP4: packed e2m1 + e8m0 per 32).
struct ExpertView {
  TensorView w1, w1_scale;  // gate projection [inter, dim/2] I8, [inter, dim/32] E8M0
  TensorView w2, w2_scale;  // down projection [dim, inter/2], [dim, inter/32]
  TensorView w3, w3_scale;  // up projection   [inter, dim/2], [inter, dim/32]
};

// Pins an expert's bytes until destroyed (a tiered store must not evict them meanwhile).
class ExpertLease {
 public:
  ExpertLease() = default;
  explicit ExpertLease(ExpertView v) : view_(v) {}
  virtual ~ExpertLease() = default;
  const ExpertView& view() const { return view_; }

 protected:
  ExpertView view_;
};

class WeightStore {
 public:
  virtual ~WeightStore() = default;

  virtual const io::Checkpoint& checkpoint() const = 0;

  // Bytes of a resident tensor, valid for the store's lifetime. kNotFound names the tensor.
  [[nodiscard]] virtual Result<TensorView> resident(const std::string& name) = 0;

  // Routed expert `expert` of layer `layer`, pinned while the lease lives.
  [[nodiscard]] virtual Result<std::unique_ptr<ExpertLease>> acquire_expert(int layer, int expert) = 0;

  // Copies Engram table rows of `layer` (the model layer id): for each row id, head_dim e4m3 codes
  // into weight_out[i * head_dim ...] and head_dim/32 e8m0 codes into scale_out[i * head_dim/32 ...].
  // Row ids must be < the table's row count (checked: kInvalidArgument).
  [[nodiscard]] virtual Status read_engram_rows(int layer, std::span<const int64_t> rows, uint8_t* weight_out,
                                                uint8_t* scale_out) = 0;
};

// Checkpoint name prefix of a model layer: "layers.L" or "mtp.S".
std::string layer_prefix(int layer, int n_layers);

}  // namespace strata::store
