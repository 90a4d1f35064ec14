// ExpertCatalog: where each routed expert's six tensors live in the checkpoint and where they land
// in one slot of the expert cache.
//
// Built from tensor names alone ("<prefix>.ffn.experts.<e>.w{1,2,3}.{weight,scale}", prefix
// "layers.L" or "mtp.S"; shapes and dtypes are validated later by model::bind_weights). An
// expert's tensors are merged into as few file spans as possible (the release and `strata synth`
// store them back to back, so one span per expert); each span is one region of the slot. With
// O_DIRECT, spans are widened to 4 KiB boundaries and placed at 4 KiB-aligned slot offsets. A
// GGUF stacks each matrix of all a layer's experts in one tensor, so there an expert is up to six
// spans (three for block formats, whose empty .scale parts get none).
// Also names the Engram tables ("<prefix>.engram.embed.{weight,scale}"), so the store can tell
// the resident tensors (everything else) from the two streamed kinds.
// Thread safety: immutable after build().
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <vector>

#include "core/status.h"
#include "io/checkpoint.h"
#include "store/placement_options.h"

namespace strata::store {

// One contiguous file range of an expert, read into one region of its slot.
struct ExpertSpan {
  int shard = 0;
  uint64_t file_offset = 0;  // start of the read (4 KiB-aligned with O_DIRECT)
  uint64_t length = 0;       // bytes to read (4 KiB multiple with O_DIRECT)
  uint64_t needed = 0;       // bytes from file_offset that hold tensor data (<= length)
  uint64_t slot_offset = 0;  // where the span starts in the slot
};

// Parts of an expert in ExpertView order: w1, w1_scale, w2, w2_scale, w3, w3_scale.
inline constexpr int kExpertParts = 6;

struct ExpertPlan {
  ExpertKey key;
  std::vector<ExpertSpan> spans;
  std::array<const io::TensorInfo*, kExpertParts> tensors{};
  std::array<uint64_t, kExpertParts> slot_offset{};  // where each tensor's first byte lands
  uint64_t slot_bytes = 0;                           // slot space used
  uint64_t read_bytes = 0;                           // sum of span lengths
  uint64_t tensor_bytes = 0;                         // sum of the six tensors' sizes
  // Its matrices come from ggml MXFP4 slices (io::TensorInfo::Packing): the slot holds the file's
  // bytes until unpack_expert_slot regroups them.
  bool ggml_mxfp4 = false;
};

// After the plan's spans were read into `slot` as stored: unpacks each ggml MXFP4 matrix in place
// into the official codes and scales (io/ggml_mxfp4.h); nothing for plain plans. Every path that
// reads an expert's file bytes into memory calls it once per read.
[[nodiscard]] Status unpack_expert_slot(const ExpertPlan& plan, uint8_t* slot);

class ExpertCatalog {
 public:
  // Scans `ck`. `n_layers` backbone layers (mtp.S is layer n_layers + S). Errors: an expert with
  // some but not all six tensors, or a gap in a layer's expert indices (kNotFound naming the
  // missing tensor).
  [[nodiscard]] static Result<ExpertCatalog> build(const io::Checkpoint& ck, int n_layers, bool direct_io);

  // Flat id of (layer, expert), -1 when the checkpoint has no such expert.
  int id(int layer, int expert) const;
  int size() const { return static_cast<int>(plans_.size()); }
  const ExpertPlan& plan(int id) const { return plans_[static_cast<size_t>(id)]; }
  // Model layer ids that have routed experts, ascending; n_experts of one (0 if none).
  const std::vector<int>& layers() const { return layers_; }
  int n_experts(int layer) const;
  // Slot size: the largest plan's slot_bytes rounded up to 4 KiB.
  uint64_t slot_bytes() const { return slot_bytes_; }
  // Bytes of all routed-expert tensors in the checkpoint.
  uint64_t total_tensor_bytes() const { return total_tensor_bytes_; }

  // Name classification.
  static bool is_expert_tensor(const std::string& name);
  static bool is_engram_table(const std::string& name);

 private:
  std::vector<ExpertPlan> plans_;
  std::vector<int> first_id_;   // by model layer id: id of expert 0, -1 if none
  std::vector<int> n_experts_;  // by model layer id
  std::vector<int> layers_;
  uint64_t slot_bytes_ = 0;
  uint64_t total_tensor_bytes_ = 0;
};

}  // namespace strata::store
