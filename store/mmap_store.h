// MmapStore: every shard mapped read-only and paged in by the kernel (`--load-mode mmap`).
//
// The naive baseline the tiered store is measured against (docs/performance.md): no budget, no
// prefetch, no control over what stays in RAM; a page fault per 4 KiB miss (plus the kernel's
// readahead) instead of reads at queue depth. Routed experts and Engram rows are views into the
// mappings; resident tensors are copied once into aligned memory at bind time (safetensors aligns
// offsets only to the data section, so a view could be misaligned for its dtype, and a view into a
// shard truncated after load would fault with SIGBUS instead of failing with an error).
// A shard that shrinks under a mapping would raise SIGBUS on access, so acquire_expert and
// read_engram_rows compare each shard's size with its size at load first (kCorruption).
// Thread safety: safe for concurrent use after construction.
#pragma once

#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "store/resident_tensors.h"
#include "store/weight_store.h"

namespace strata::store {

class MmapStore final : public WeightStore {
 public:
  // Maps every shard. Errors: open/mmap failures naming the file.
  [[nodiscard]] static Result<std::unique_ptr<MmapStore>> open(std::unique_ptr<io::Checkpoint> ck, int n_layers);
  ~MmapStore() override;

  const io::Checkpoint& checkpoint() const override { return *ck_; }
  Result<TensorView> resident(const std::string& name) override;
  Result<TensorView> resident_relaid(const std::string& name, const std::string& layout, const RelayFn& relay) override;
  Status load_resident(const std::function<bool(const io::TensorInfo&)>& wanted, const ProgressFn& progress) override;
  Result<std::unique_ptr<ExpertLease>> acquire_expert(int layer, int expert) override;
  Status read_engram_rows(int layer, std::span<const int64_t> rows, uint8_t* weight_out, uint8_t* scale_out) override;
  std::string describe() const override;

 private:
  MmapStore(std::unique_ptr<io::Checkpoint> ck, int n_layers) : ck_(std::move(ck)), n_layers_(n_layers) {}
  Status check_shard(int shard) const;
  // The tensor as a view into its mapping (no alignment fix-up).
  Result<TensorView> mapped(const std::string& name) const;

  std::unique_ptr<io::Checkpoint> ck_;
  int n_layers_;
  struct Map {
    void* base = nullptr;
    size_t size = 0;
  };
  std::vector<Map> maps_;
  std::mutex tensors_mu_;    // guards tensors_
  ResidentTensors tensors_;  // resident tensors, read once into aligned RAM
};

}  // namespace strata::store
