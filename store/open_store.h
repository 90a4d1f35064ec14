// open_store: picks and sizes the weight store for a checkpoint from PlacementOptions.
//
// Budget (see placement_options.h): `ram_budget_bytes`, or MemAvailable minus the margin. `auto`
// runs resident when the whole checkpoint fits in it, stream otherwise. For stream the budget is
// split: resident tensors first, then the Engram scales (when kept in RAM) and row cache, and the
// rest becomes expert-cache slots. A budget that cannot hold one token's working set — resident
// tensors + Engram RAM + one layer's top-k routed experts (+ any pinned experts) — is refused with
// the minimum in the message (kResourceExhausted). Pinned layers come first, then the hot set,
// which may take up to hot_share of the slots and always leaves the working set free.
// Thread safety: a plain function.
#pragma once

#include <memory>

#include "core/status.h"
#include "io/checkpoint.h"
#include "store/placement_options.h"
#include "store/weight_store.h"

namespace strata::store {

// Model facts the store needs, from config.json (passed down by the model floor).
struct StoreShape {
  int n_layers = 0;          // backbone layers (DSpark stage s is layer n_layers + s)
  int max_active = 0;        // most routed experts one token uses in one layer (top-k)
  int active_per_token = 0;  // routed experts one token uses over the backbone (sum of top-k)
};

// Opens the store `options.mode` asks for (auto resolved). Errors: options.validate(), the budget
// checks above, bad --pin-layers / hot entries (kInvalidArgument naming them), store open errors.
[[nodiscard]] Result<std::unique_ptr<WeightStore>> open_store(std::unique_ptr<io::Checkpoint> ck,
                                                              const StoreShape& shape,
                                                              const PlacementOptions& options);

}  // namespace strata::store
