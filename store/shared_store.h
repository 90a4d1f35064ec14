// SharedStore: a weight store that serves some tensors from another store (issue 17 item 1: a
// self-draft's weights identical to the target's are shared, not loaded twice).
//
// Wraps the draft's own store (`own`, owned) and the target's (`base`, borrowed): resident tensors
// named in `shared` and the Engram rows of the layers in `shared_engram` (whose table tensors are
// in `shared` too) come from `base`;
// everything else (the re-quantised tensors, the routed experts, counters) from `own`, which never
// reads the shared ones (load_resident skips them, preload_layer skips shared Engram tables).
// The caller decides what is identical (runtime::draft_sharing: same name, dtype and shape in a
// GGUF whose recorded source fingerprint is the target's); a wrong decision changes the draft's
// outputs only, never the target's.
// Thread safety: as the two stores (both are read-only after binding).
#pragma once

#include <memory>
#include <set>
#include <string>

#include "store/weight_store.h"

namespace strata::store {

class SharedStore : public WeightStore {
 public:
  // `base` must outlive this store.
  SharedStore(std::unique_ptr<WeightStore> own, WeightStore& base, std::set<std::string> shared,
              std::set<int> shared_engram);

  const io::Checkpoint& checkpoint() const override { return own_->checkpoint(); }
  [[nodiscard]] Result<TensorView> resident(const std::string& name) override;
  // A shared tensor's copy is the target's: both models use one.
  [[nodiscard]] Result<TensorView> resident_relaid(const std::string& name, const std::string& layout,
                                                   const RelayFn& relay) override;
  [[nodiscard]] Result<std::unique_ptr<ExpertLease>> acquire_expert(int layer, int expert) override {
    return own_->acquire_expert(layer, expert);
  }
  [[nodiscard]] Result<std::optional<ExpertView>> held_expert(int layer, int expert) override {
    return own_->held_expert(layer, expert);
  }
  [[nodiscard]] Status read_engram_rows(int layer, std::span<const int64_t> rows, uint8_t* weight_out,
                                        uint8_t* scale_out) override;
  [[nodiscard]] Result<std::unique_ptr<EngramFetch>> start_engram_rows(int layer,
                                                                       std::span<const int64_t> rows) override;
  [[nodiscard]] Status preload_layer(int layer, int n_experts, const std::function<bool(int)>& keep = {},
                                     bool engram_table = true) override;
  [[nodiscard]] Status load_resident(const std::function<bool(const io::TensorInfo&)>& wanted,
                                     const ProgressFn& progress) override;
  void prefetch_experts(int layer, std::span<const int32_t> experts, PrefetchKind kind,
                        std::span<const uint32_t> uses = {}) override {
    own_->prefetch_experts(layer, experts, kind, uses);
  }
  bool wants_prefetch() const override { return own_->wants_prefetch(); }
  void record_prediction(uint64_t n_predicted, uint64_t n_correct) override {
    own_->record_prediction(n_predicted, n_correct);
  }
  PlacementStats stats() const override { return own_->stats(); }
  std::string describe() const override;
  ExpertReads expert_reads() const override { return own_->expert_reads(); }

  // Bytes of the shared tensors (resident and Engram tables), as the draft's checkpoint stores them.
  uint64_t shared_bytes() const { return shared_bytes_; }

 private:
  std::unique_ptr<WeightStore> own_;
  WeightStore& base_;
  std::set<std::string> shared_;
  std::set<int> shared_engram_;
  uint64_t shared_bytes_ = 0;
};

}  // namespace strata::store
