// ForwardScratch: Model::forward's per-step bookkeeping (the batch's spans, Engram row ids and
// fetches, attention entries, head rows), kept in the Activations object and reused so that a
// decode step allocates nothing per layer (docs/performance.md, "Heap allocations of a decode step").
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "model/attention.h"
#include "model/forward_request.h"
#include "store/weight_store.h"

namespace strata::model {

// Model::forward's per-step bookkeeping, reused: with it a decode step allocates nothing per layer
// and, beyond the store's Engram fetch handles (one per Engram layer), nothing per step.
struct ForwardScratch {
  struct Span {
    ForwardEntry* e;
    int64_t row0, n, start;  // rows in the batch; position of the first
  };
  std::vector<Span> spans;                    // the batch's entries, decode entries first
  std::vector<int64_t> erows, erows_part, engram_layer_rows;  // Engram row ids
  std::vector<std::vector<uint32_t>> classes;  // [entry] Engram token classes to append
  std::vector<std::unique_ptr<store::EngramFetch>> efetch;
  std::vector<AttentionShared> shared;         // [entry] index selections down the stack
  std::vector<AttentionEntry> aentries;
  std::vector<int> first_nonfinite;
  std::vector<int64_t> want, first_want;       // head rows, entry by entry
  std::vector<float*> want_out;                // [head row] where its logits go (an entry's buffer)
  std::vector<char> finite;
};

}  // namespace strata::model
