// ExpertCache: routed experts in a fixed RAM budget of equal, aligned slots, filled from SSD.
//
// Each slot holds one expert laid out by its ExpertPlan (store/expert_catalog.h). A miss takes a
// free slot or evicts the least valuable unpinned expert (policy: LRU, or LFU with use counts that
// halve every `halflife` acquires) and reads the expert's spans through io::UringReader, in
// requests of read_chunk_bytes, so a layer's misses are all in flight at once. Entry states:
// absent -> loading -> [unpacking] -> ready -> (evicted) absent. An ended read of ggml MXFP4
// experts is regrouped (unpack_expert_slot) by the thread that finds it ended, outside the mutex,
// as `unpacking`; acquirers of it wait for that thread. An entry is never evicted while a lease pins it,
// while its read is in flight, while it is `permanent` (hot set, pinned layers) or while it is
// `wanted` (named by a kDemand hint for the layer running now and not acquired yet). Demand hints
// that find no slot wait in a FIFO and start as leases are released, keeping the disk busy.
// A failed read is retried once tensor by tensor (pread), so a transient error heals and a
// persistent one is reported with the tensor and byte offset; the entry then goes back to absent
// and the cache stays usable.
// Thread safety: all methods may be called from any thread (one mutex; waits happen outside it).
// Leases must not outlive the cache.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <span>
#include <vector>

#include "core/status.h"
#include "io/checkpoint.h"
#include "io/uring_reader.h"
#include "store/expert_catalog.h"
#include "store/placement_options.h"
#include "store/placement_stats.h"
#include "store/weight_store.h"

namespace strata::store {

struct ExpertCacheOptions {
  int64_t n_slots = 0;                 // slots of catalog.slot_bytes() each (>= 1)
  CachePolicy policy = CachePolicy::kLfu;
  double halflife_acquires = 4096;     // kLfu: acquires after which a use counts half
  uint64_t read_chunk_bytes = 1 << 20; // bytes per read request
};

class ExpertCache {
 public:
  // `direct_fds`: one O_DIRECT descriptor per shard (empty: buffered reads through the shard's
  // File). The checkpoint, catalog and reader must outlive the cache.
  ExpertCache(const io::Checkpoint& ck, const ExpertCatalog& catalog, io::UringReader& reader,
              const std::vector<io::FdHandle>* direct_fds, const ExpertCacheOptions& options);
  ~ExpertCache();
  ExpertCache(const ExpertCache&) = delete;
  ExpertCache& operator=(const ExpertCache&) = delete;

  // Reserves the slot memory (kResourceExhausted when the allocation fails).
  [[nodiscard]] Status allocate();

  // Loads `ids` (catalog ids) now and keeps them for the cache's lifetime. REQUIRES enough slots:
  // the caller checks ids.size() + working set <= n_slots. Errors: the first failed read.
  [[nodiscard]] Status pin_permanently(std::span<const int> ids);

  // The expert's bytes, read first if needed; pinned until the lease is destroyed. Errors: a
  // failed read (tensor and offset named), a shard that changed size, every slot pinned.
  [[nodiscard]] Result<std::unique_ptr<ExpertLease>> acquire(int id);

  // Starts reads for `ids` (see the class comment for kDemand / kPredict). Never blocks on I/O.
  // `uses` (kDemand; empty = 1 each): tokens each expert serves, added to its LFU count when it is
  // acquired.
  void prefetch(std::span<const int> ids, PrefetchKind kind, std::span<const uint32_t> uses = {});

  // Counters, added into `out`.
  void add_stats(PlacementStats* out) const;
  int64_t n_slots() const { return opt_.n_slots; }
  int64_t n_permanent() const;
  uint64_t slot_bytes() const { return slot_bytes_; }

 private:
  class Lease;
  struct Load;
  struct Entry;

  void release(int id);
  // Tries to give `id` a slot and start its read; false when no slot can be had without waiting.
  // `predicted`: started by a kPredict hint. `steal`: may evict `wanted` entries as a last resort.
  bool try_start_locked(int id, bool predicted, bool steal, Status* err);
  int take_slot_locked(bool steal);
  // Marks finished reads of unpinned entries ready (or drops failed ones); those that need a
  // regroup turn kUnpacking and are appended to `claimed`, for the caller's unpack_claimed.
  void reap_locked(std::vector<int>* claimed);
  // Regroups the `claimed` entries with mu_ let go (held again on return), then settles them.
  void unpack_claimed(std::unique_lock<std::mutex>& lk, const std::vector<int>& claimed);
  // Waits for the pinned entry's load `ld` (kLoading or kUnpacking) to end; the first thread back
  // claims it, retries a failed read and regroups outside mu_. Returns the load's result.
  // REQUIRES: lk holds mu_; the caller pinned the entry.
  Status settle_pinned(std::unique_lock<std::mutex>& lk, int id, std::shared_ptr<Load> ld);
  // A kUnpacking entry's load ended: ready, or absent with its slot freed; wakes its waiters.
  // REQUIRES: mu_ held.
  void settle_locked(int id, const Status& result);
  // Waits, outside mu_, for the oldest read in flight or else for a regroup to end.
  void wait_for_a_slot(std::unique_lock<std::mutex>& lk);
  void start_deferred_locked();
  void touch_locked(Entry& e);
  // Counts a use as hit / in flight / miss (once per use: at the kDemand hint, else at acquire).
  void count_use_locked(Entry& e);
  // Clears the entry's `predicted` flag (used, evicted or failed), keeping the
  // prefetch_outstanding gauge equal to the number of flagged entries.
  void drop_prediction_locked(Entry& e);
  double score_locked(const Entry& e) const;
  // Re-reads an expert tensor by tensor (pread) after a failed batched read.
  Status reread(int id, uint8_t* base);
  ExpertView view_of(int id) const;
  uint8_t* slot_ptr(int slot) const { return arena_ + static_cast<uint64_t>(slot) * slot_bytes_; }

  const io::Checkpoint& ck_;
  const ExpertCatalog& cat_;
  io::UringReader& reader_;
  const std::vector<io::FdHandle>* direct_fds_;
  ExpertCacheOptions opt_;
  uint64_t slot_bytes_;
  uint8_t* arena_ = nullptr;
  uint64_t arena_bytes_ = 0;

  mutable std::mutex mu_;
  std::vector<Entry> entries_;        // by catalog id
  std::vector<int> slot_owner_;       // by slot: catalog id or -1
  std::vector<int> free_slots_;
  std::vector<int> loading_;          // ids with a read in flight
  std::vector<int> wanted_;           // ids flagged wanted
  std::deque<int> deferred_;          // kDemand ids waiting for a slot
  int64_t n_unpacking_ = 0;           // entries kUnpacking
  uint64_t settle_gen_ = 0;           // loads settled so far (wait_for_a_slot's clock)
  std::condition_variable settled_cv_;  // a load settled
  uint64_t tick_ = 0;                 // acquires so far (the policy's clock)
  PlacementStats stats_;              // expert_* and prefetch_* fields (prefetch_outstanding: a gauge)
};

}  // namespace strata::store
