// strata calibrate: ranks routed experts by how often the router picks them on a text, and the
// hot-set file (`--hot FILE`) that pins the top of that ranking in the expert cache.
//
// calibrate() runs the text's token ids through the model (prefill, in chunks) and counts, for
// every backbone layer, each expert's top-k picks over all tokens (the "router_topk_idx"
// intermediate). The ranking orders (layer, expert) by count, highest first; ties by layer, then
// expert. Hot file (JSON, written atomically):
//   {"format": "strata-hot-experts", "version": 1, "model": DIR, "tokens": N, "n_layers": L,
//    "picks": P, "experts": [[layer, expert, count], ...]}   (ranking order, zero counts omitted)
// With an ImatrixCollector (tools/imatrix.h) the same passes also collect the importance matrix
// (`strata calibrate --imatrix F`).
// Thread safety: calibrate() runs forward passes on `m` (one at a time per Model).
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <span>
#include <string>
#include <vector>

#include "core/status.h"
#include "model/model.h"
#include "store/placement_options.h"
#include "tools/imatrix.h"

namespace strata::tools {

struct ExpertCount {
  int layer = 0;
  int expert = 0;
  uint64_t count = 0;  // token picks (each token picks top-k experts per layer)
};

struct HotRanking {
  std::string model;                // checkpoint directory, for the file
  int64_t tokens = 0;               // tokens run
  int n_layers = 0;                 // backbone layers counted
  uint64_t picks = 0;               // total token-expert picks (tokens x top-k x layers)
  std::vector<ExpertCount> experts; // ranking, highest count first
  int64_t n_experts_total = 0;      // routed experts in those layers (incl. never picked)

  // Fraction of all picks that the top `share` of experts (by count) receive, in [0, 1].
  double coverage(double share) const;
};

// Runs `ids` through `m` in chunks of `chunk` tokens and ranks the experts. `progress` (may be
// empty) gets tokens done after each chunk. `imatrix` (may be null) sees every linear's input rows
// and counts the chunks. `cancel` (may be null; Ctrl-C): once set, no further chunk starts and the
// ranking covers the chunks done (HotRanking::tokens says how many tokens; it may be 0). Errors:
// empty ids, model errors.
[[nodiscard]] Result<HotRanking> calibrate(model::Model& m, model::Activations& act, std::span<const int32_t> ids, int64_t chunk,
                                           const std::function<void(int64_t)>& progress = {},
                                           ImatrixCollector* imatrix = nullptr,
                                           const std::atomic<bool>* cancel = nullptr);

// The hot file text (see the file comment).
std::string hot_json(const HotRanking& r);

// Reads a hot file: the ranking as (layer, expert) keys, best first. Errors name the file and what
// is wrong (not JSON, wrong format tag, malformed entry).
[[nodiscard]] Result<std::vector<store::ExpertKey>> read_hot_file(const std::string& path);

}  // namespace strata::tools
