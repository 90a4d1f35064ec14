// ForwardProfile: where a Model's forward passes spent their wall time, for `strata run --stats`
// and the tiering benchmark (docs/performance.md). Counters only (STYLE.md §3.7): the forward pass
// adds to them, readers take snapshots and subtract (one per phase: prefill, decode).
// Times are steady-clock nanoseconds on the thread that runs forward(); waits on the weight store
// are inside the sublayer that waited (store::PlacementStats splits them out).
// Thread safety: written by the one thread running forward(); read between forwards.
#pragma once

#include <chrono>
#include <cstdint>

namespace strata::model {

struct ForwardProfile {
  uint64_t forwards = 0;      // forward() calls that ran layers
  uint64_t tokens = 0;        // tokens through those calls
  uint64_t forward_ns = 0;    // whole forward() calls
  uint64_t engram_ns = 0;     // Engram sublayers, incl. waiting for rows
  uint64_t moe_ns = 0;        // MoE sublayers (router, prefetch, routed + shared experts), incl. waits
  uint64_t attention_ns = 0;  // attention sublayers (projections, compressor, indexer, attention, wo_a/wo_b)
  uint64_t head_ns = 0;       // final norm and LM head
  // The rest of forward_ns: embedding, mHC mixing and norms, buffers.
  uint64_t dspark_ns = 0;     // DSpark drafts (Model::dspark_seed / dspark_draft), outside forward_ns

  ForwardProfile since(const ForwardProfile& e) const {
    return ForwardProfile{forwards - e.forwards,   tokens - e.tokens,   forward_ns - e.forward_ns,
                          engram_ns - e.engram_ns, moe_ns - e.moe_ns,   attention_ns - e.attention_ns,
                          head_ns - e.head_ns,     dspark_ns - e.dspark_ns};
  }
};

// Adds the lifetime of the timer to *counter (no-op when counter is null).
class ScopedNs {
 public:
  explicit ScopedNs(uint64_t* counter) : counter_(counter), t0_(std::chrono::steady_clock::now()) {}
  ~ScopedNs() {
    if (counter_)
      *counter_ += static_cast<uint64_t>(
          std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now() - t0_).count());
  }
  ScopedNs(const ScopedNs&) = delete;
  ScopedNs& operator=(const ScopedNs&) = delete;

 private:
  uint64_t* counter_;
  std::chrono::steady_clock::time_point t0_;
};

}  // namespace strata::model
