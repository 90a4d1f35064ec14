// PlacementStats: counters of where weights came from while the model ran (STYLE.md §3.7: hot
// paths bump counters, `strata run --stats` and /metrics read them).
//
// All counts are cumulative since the store was created; subtract two snapshots for one phase
// (prefill, decode). Times are wall nanoseconds on the thread that ran the forward pass. The one
// gauge, prefetch_outstanding, is not subtracted: a difference keeps it and, as
// prefetch_outstanding_at_start, the earlier snapshot's value.
#pragma once

#include <cstdint>

namespace strata::store {

struct PlacementStats {
  // Routed experts.
  // Each use is counted once, where the expert was when its layer named it (the kDemand hint, or
  // the acquire when there was no hint): in RAM, already being read (a layer-ahead prefetch), or
  // not there (a demand read).
  uint64_t expert_acquires = 0;      // acquire_expert calls
  uint64_t expert_hits = 0;          // uses whose bytes were in RAM
  uint64_t expert_inflight = 0;      // uses whose read a prefetch had started
  uint64_t expert_misses = 0;        // uses that had to start a read
  uint64_t expert_loads = 0;         // experts read from disk (demand + prefetch + pinning)
  uint64_t expert_bytes_read = 0;    // bytes of those reads (aligned spans with O_DIRECT)
  uint64_t expert_evictions = 0;
  uint64_t prefetch_issued = 0;      // loads started for a predicted next-layer expert
  uint64_t prefetch_used = 0;        // ... that a later acquire used before eviction
  // Gauge, not a count: prefetches issued and not yet used or dropped (evicted unused, failed read).
  // A phase can use prefetches an earlier phase issued (the prefill's last layers' guesses that
  // decode then picks), so its hit rate divides by these plus its own issues.
  uint64_t prefetch_outstanding = 0;
  // In a since() difference: the earlier snapshot's prefetch_outstanding (0 in a cumulative
  // snapshot: the store started with none).
  uint64_t prefetch_outstanding_at_start = 0;
  uint64_t predicted = 0;            // token-expert picks of the layer-ahead prediction
  uint64_t predicted_correct = 0;    // ... that the layer's router then chose
  // Engram rows.
  uint64_t engram_rows_requested = 0;  // row ids asked for (n_tokens x columns)
  uint64_t engram_rows_unique = 0;     // after sorting and deduplicating per fetch
  uint64_t engram_rows_cached = 0;     // unique rows served by the row cache
  uint64_t engram_rows_read = 0;       // unique rows read from disk
  uint64_t engram_reads = 0;           // read requests issued (coalesced rows share one)
  uint64_t engram_bytes_read = 0;     // bytes of those requests (coalescing gaps included)
  uint64_t engram_row_bytes_read = 0; // rows read x row bytes (codes + scales: 264 for FP8 at head_dim
                                      // 256, 144 for Q4_K), what `strata plan` counts per row
  uint64_t engram_fetch_ns = 0;        // per fetch: start until its rows were in RAM, summed
  uint64_t engram_busy_ns = 0;         // wall time with at least one fetch's reads in flight
  // Waiting: time the forward pass was blocked on reads.
  uint64_t expert_wait_ns = 0;
  uint64_t engram_wait_ns = 0;
  // Whole process: bytes the kernel read from storage for it (/proc/self/io read_bytes; counts
  // mmap page faults and page-cache misses, not page-cache hits). 0 where unavailable.
  uint64_t os_read_bytes = 0;

  uint64_t bytes_read() const { return expert_bytes_read + engram_bytes_read; }
  uint64_t io_wait_ns() const { return expert_wait_ns + engram_wait_ns; }
  // Hit rates as fractions in [0, 1] (0 when nothing was counted).
  uint64_t expert_uses() const { return expert_hits + expert_inflight + expert_misses; }
  double expert_hit_rate() const { return expert_uses() ? double(expert_hits) / double(expert_uses()) : 0.0; }
  // Prefetches this span could use: outstanding at its start plus issued in it (>= prefetch_used).
  uint64_t prefetch_usable() const { return prefetch_outstanding_at_start + prefetch_issued; }
  double prefetch_hit_rate() const {
    return prefetch_usable() ? double(prefetch_used) / double(prefetch_usable()) : 0.0;
  }
  double prediction_recall() const { return predicted ? double(predicted_correct) / double(predicted) : 0.0; }
  double engram_cache_hit_rate() const {
    return engram_rows_unique ? double(engram_rows_cached) / double(engram_rows_unique) : 0.0;
  }

  // Field-wise difference (this - earlier): the counts of one phase; prefetch_outstanding stays
  // this snapshot's, and prefetch_outstanding_at_start is the earlier one's.
  PlacementStats since(const PlacementStats& earlier) const;
};

}  // namespace strata::store
