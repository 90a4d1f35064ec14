#include "store/weight_store.h"

#include <vector>

#include "store/system_memory.h"

namespace strata::store {

namespace {

// The default fetch: remembers the ids and reads them synchronously in wait().
class DeferredEngramFetch final : public EngramFetch {
 public:
  DeferredEngramFetch(WeightStore& s, int layer, std::span<const int64_t> rows)
      : store_(s), layer_(layer), rows_(rows.begin(), rows.end()) {}
  Status wait(uint8_t* weight_out, uint8_t* scale_out) override {
    return store_.read_engram_rows(layer_, rows_, weight_out, scale_out);
  }

 private:
  WeightStore& store_;
  int layer_;
  std::vector<int64_t> rows_;
};

}  // namespace

Result<std::unique_ptr<EngramFetch>> WeightStore::start_engram_rows(int layer, std::span<const int64_t> rows) {
  return std::unique_ptr<EngramFetch>(new DeferredEngramFetch(*this, layer, rows));
}

PlacementStats WeightStore::stats() const {
  PlacementStats s;
  s.os_read_bytes = process_read_bytes();
  return s;
}

PlacementStats PlacementStats::since(const PlacementStats& e) const {
  PlacementStats d;
#define STRATA_SUB_(f) d.f = f - e.f
  STRATA_SUB_(expert_acquires);
  STRATA_SUB_(expert_hits);
  STRATA_SUB_(expert_inflight);
  STRATA_SUB_(expert_misses);
  STRATA_SUB_(expert_loads);
  STRATA_SUB_(expert_bytes_read);
  STRATA_SUB_(expert_evictions);
  STRATA_SUB_(prefetch_issued);
  STRATA_SUB_(prefetch_used);
  d.prefetch_outstanding = prefetch_outstanding;
  d.prefetch_outstanding_at_start = e.prefetch_outstanding;
  STRATA_SUB_(predicted);
  STRATA_SUB_(predicted_correct);
  STRATA_SUB_(engram_rows_requested);
  STRATA_SUB_(engram_rows_unique);
  STRATA_SUB_(engram_rows_cached);
  STRATA_SUB_(engram_rows_read);
  STRATA_SUB_(engram_reads);
  STRATA_SUB_(engram_bytes_read);
  STRATA_SUB_(engram_row_bytes_read);
  STRATA_SUB_(engram_fetch_ns);
  STRATA_SUB_(engram_busy_ns);
  STRATA_SUB_(expert_wait_ns);
  STRATA_SUB_(engram_wait_ns);
  STRATA_SUB_(os_read_bytes);
#undef STRATA_SUB_
  return d;
}

}  // namespace strata::store
