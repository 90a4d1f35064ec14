// TieredStore: a checkpoint larger than RAM, run from SSD (`--load-mode stream`).
//
//   resident tensors  everything except routed experts and Engram tables: read into RAM once
//                     (pread), like ResidentStore;
//   routed experts    store::ExpertCache: fixed RAM budget of aligned slots, misses read through
//                     io_uring (optionally O_DIRECT), LRU/LFU eviction, hot set and pinned layers
//                     kept for the whole run, demand and layer-ahead prefetch hints;
//   Engram rows       store::EngramRowStore: never loaded whole; each chunk's rows fetched sorted,
//                     deduplicated and coalesced at queue depth, with a small row cache.
// Built by store::open_store (store/open_store.h), which sizes the tiers from the RAM budget.
// Thread safety: resident() loads lazily and must be called from one thread during binding (as
// ResidentStore); acquire_expert, prefetch_experts and the Engram calls are safe from any thread.
#pragma once

#include <atomic>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "core/aligned_buffer.h"
#include "io/uring_reader.h"
#include "store/engram_rows.h"
#include "store/expert_cache.h"
#include "store/expert_catalog.h"
#include "store/resident_tensors.h"
#include "store/weight_store.h"

namespace strata::store {

// What open_store decided for a TieredStore.
struct TieredConfig {
  int n_layers = 0;                  // backbone layers (DSpark stage s is n_layers + s)
  bool direct_io = false;
  int queue_depth = 64;
  bool prefetch = true;
  ExpertCacheOptions cache;
  EngramRowStoreOptions engram;
  std::vector<int> pinned_ids;       // catalog ids kept for the whole run (pin-layers, then hot)
  std::string budget_note;           // how the budget was chosen, for describe()
  uint64_t budget_bytes = 0;
};

class TieredStore final : public WeightStore {
 public:
  // Opens the reader, the expert cache (allocating its slots and loading pinned experts) and the
  // Engram row store. Errors: io_uring unavailable, O_DIRECT refused, allocation, pinned reads.
  [[nodiscard]] static Result<std::unique_ptr<TieredStore>> open(std::unique_ptr<io::Checkpoint> ck,
                                                                 ExpertCatalog catalog, const TieredConfig& config);
  ~TieredStore() override;

  const io::Checkpoint& checkpoint() const override { return *ck_; }
  io::Checkpoint& mutable_checkpoint() { return *ck_; }
  Result<TensorView> resident(const std::string& name) override;
  Result<TensorView> resident_relaid(const std::string& name, const std::string& layout, const RelayFn& relay) override;
  Status load_resident(const std::function<bool(const io::TensorInfo&)>& wanted, const ProgressFn& progress) override;
  Result<std::unique_ptr<ExpertLease>> acquire_expert(int layer, int expert) override;
  Status read_engram_rows(int layer, std::span<const int64_t> rows, uint8_t* weight_out, uint8_t* scale_out) override;
  Result<std::unique_ptr<EngramFetch>> start_engram_rows(int layer, std::span<const int64_t> rows) override;
  void prefetch_experts(int layer, std::span<const int32_t> experts, PrefetchKind kind,
                        std::span<const uint32_t> uses = {}) override;
  bool wants_prefetch() const override { return cfg_.prefetch; }
  void record_prediction(uint64_t n_predicted, uint64_t n_correct) override;
  PlacementStats stats() const override;
  std::string describe() const override;
  ExpertReads expert_reads() const override { return cfg_.direct_io ? ExpertReads::kDirect : ExpertReads::kBuffered; }

  const ExpertCatalog& catalog() const { return catalog_; }
  uint64_t resident_bytes() const { return tensors_.bytes(); }

 private:
  TieredStore(std::unique_ptr<io::Checkpoint> ck, ExpertCatalog catalog, const TieredConfig& config);

  std::unique_ptr<io::Checkpoint> ck_;
  ExpertCatalog catalog_;
  TieredConfig cfg_;
  std::unique_ptr<io::UringReader> reader_;
  std::vector<io::FdHandle> direct_fds_;  // per shard, with direct_io
  std::unique_ptr<ExpertCache> cache_;
  std::unique_ptr<EngramRowStore> engram_;
  ResidentTensors tensors_;
  std::vector<int> ids_scratch_;
  std::vector<uint32_t> uses_scratch_;
  std::atomic<uint64_t> predicted_{0}, predicted_correct_{0};
};

}  // namespace strata::store
