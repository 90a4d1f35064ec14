// ExpertPeers: routed experts computed by other processes (expert parallelism, issue 18).
//
// The model floor only defines the contract; a transport above it implements it (dist/mpi_peers.h:
// MPI). Process 0 runs the whole forward pass; in each MoE sublayer it sends every peer the rows of
// the tokens that picked one of the peer's experts (one message per peer and layer), computes its
// own experts meanwhile, and adds every expert's output into the sum in ascending expert id, as one
// process does. A peer computes an expert's rows with the same code (run_expert_tasks) and the same
// row regimes, and a row's result does not depend on which other rows share its batch, so the
// logits are bit-identical to one process whatever the partition.
// Source: issue 18 item 1; model.py MoE.forward (the sum over experts).
#pragma once

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <span>
#include <string>
#include <vector>

#include "core/status.h"

namespace strata::model {

// One routed expert's share of a message: `m` token rows, the first `n_decode` of them decode rows
// and the rest prompt rows (model/weights.h Rows; n_decode -1: rows by size).
struct ExpertTask {
  int32_t expert = 0;
  int64_t m = 0;
  int64_t n_decode = 0;
};

// The partition every rank agrees on: `n_ranks` contiguous id ranges of near-equal size, rank r
// owning experts [r * E / n_ranks, (r + 1) * E / n_ranks). REQUIRES n_ranks >= 1, 0 <= expert < E.
inline int expert_owner(int32_t expert, int n_experts, int n_ranks) {
  // The largest r with floor(r * E / N) <= expert.
  return static_cast<int>(((static_cast<int64_t>(expert) + 1) * n_ranks - 1) / n_experts);
}

// A partition proportional to `weights` (one per rank, any unit: GiB of RAM, a declared share):
// bounds [N + 1], rank r owning the contiguous experts [bounds[r], bounds[r + 1]) with
// bounds[r] = floor(E * (w_0 + ... + w_{r-1}) / (w_0 + ... + w_{N-1})) in exact integer
// arithmetic, so every rank that computes it gets the same ranges, each rank's count is within one
// of its exact share, and equal weights give expert_owner's ranges. A rank of weight 0 owns none.
// Errors (kInvalidArgument): no weights, n_experts < 1, every weight 0, a sum past 2^62.
// Source: issue 18 item 1 ("weighted by each rank's measured RAM and disk rate").
[[nodiscard]] inline Result<std::vector<int32_t>> weighted_expert_ranges(int n_experts,
                                                                         std::span<const uint64_t> weights) {
  if (weights.empty()) return InvalidArgument("expert partition: no ranks");
  if (n_experts < 1) return InvalidArgument("expert partition: " + std::to_string(n_experts) + " experts");
  unsigned __int128 total = 0;
  for (uint64_t w : weights) total += w;
  if (total == 0) return InvalidArgument("expert partition: every rank's weight is 0");
  if (total > (static_cast<unsigned __int128>(1) << 62)) return InvalidArgument("expert partition: weights too large");
  std::vector<int32_t> bounds(weights.size() + 1, 0);
  unsigned __int128 acc = 0;
  for (size_t r = 0; r < weights.size(); ++r) {
    bounds[r] = static_cast<int32_t>(static_cast<unsigned __int128>(n_experts) * acc / total);
    acc += weights[r];
  }
  bounds.back() = n_experts;
  return bounds;
}

// What a rank brings to the expert partition (issue 18 item 1): RAM for routed experts and the
// sequential read rate of the disk they stream from (0: not measured).
struct RankCapacity {
  uint64_t ram_bytes = 0;         // MemAvailable at start
  uint64_t disk_bytes_per_s = 0;  // `strata probe`'s sequential read rate on that machine; 0 unknown
};

// Partition weights (for weighted_expert_ranges) from each rank's capacity, for `expert_bytes` of
// routed experts per layer-set (any consistent unit: all layers' expert bytes) with rank 0 also
// holding `rank0_resident_bytes` (dense weights, Engram scales). A rank's RAM for experts is its
// ram_bytes (rank 0: minus the resident bytes, at least 0). When all ranks' RAM holds the experts,
// each rank's share is proportional to that RAM (all from RAM). When it does not, every rank keeps
// what its RAM holds and the rest (streamed from disk per token) goes in proportion to the ranks'
// disk rates, so the slowest disk does not set the pace; with no rate measured anywhere, the rest
// follows RAM too. Each weight is the rank's planned share in bytes; all 0 (no RAM anywhere) gives
// equal weights of 1.
// Source: issue 18 item 1 ("weighted by each rank's measured RAM and disk rate").
inline std::vector<uint64_t> capacity_weights(std::span<const RankCapacity> ranks, uint64_t expert_bytes,
                                              uint64_t rank0_resident_bytes) {
  const size_t n = ranks.size();
  std::vector<uint64_t> ram(n), w(n, 0);
  unsigned __int128 ram_sum = 0, disk_sum = 0;
  for (size_t r = 0; r < n; ++r) {
    const uint64_t reserve = r == 0 ? rank0_resident_bytes : 0;
    ram[r] = std::min(expert_bytes, ranks[r].ram_bytes > reserve ? ranks[r].ram_bytes - reserve : 0);
    ram_sum += ram[r];
    disk_sum += ranks[r].disk_bytes_per_s;
  }
  if (ram_sum == 0 && disk_sum == 0) return std::vector<uint64_t>(n, 1);
  if (ram_sum >= expert_bytes) {
    for (size_t r = 0; r < n; ++r)
      w[r] = static_cast<uint64_t>(static_cast<unsigned __int128>(expert_bytes) * ram[r] / ram_sum);
  } else {
    const unsigned __int128 rest = expert_bytes - static_cast<uint64_t>(ram_sum);
    for (size_t r = 0; r < n; ++r)
      w[r] = ram[r] + static_cast<uint64_t>(disk_sum > 0 ? rest * ranks[r].disk_bytes_per_s / disk_sum
                                                         : rest * ram[r] / ram_sum);
  }
  if (std::all_of(w.begin(), w.end(), [](uint64_t x) { return x == 0; })) return std::vector<uint64_t>(n, 1);
  return w;
}

// The rank owning `expert` under `bounds` (weighted_expert_ranges): the last r with
// bounds[r] <= expert, skipping ranks of no experts. REQUIRES bounds[0] <= expert < bounds.back().
inline int owner_in_ranges(std::span<const int32_t> bounds, int32_t expert) {
  return static_cast<int>(std::upper_bound(bounds.begin(), bounds.end(), expert) - bounds.begin()) - 1;
}

// True when `name` is a routed-expert tensor of a main layer, "layers.L.ffn.experts.E.<part>",
// with *layer = L and *expert = E (the checkpoint's names; model/weights.cpp binds them).
inline bool routed_expert_tensor(const std::string& name, int* layer, int* expert) {
  int l = -1, e = -1, n = 0;
  if (std::sscanf(name.c_str(), "layers.%d.ffn.experts.%d.%n", &l, &e, &n) != 2 || n == 0 || l < 0 || e < 0) return false;
  *layer = l;
  *expert = e;
  return true;
}

class ExpertPeers {
 public:
  virtual ~ExpertPeers() = default;
  // The peer that computes expert `expert` of layer `layer`: 0 = this process, 1.. = peers.
  virtual int owner(int layer, int32_t expert) const = 0;
  // Sends peer `peer` (>= 1) one layer's work: tasks in ascending expert id, x [sum m, dim] their
  // rows in task order (float32, the MoE input after its norm), scale [sum m] each row's routing
  // weight. Returns when the data is handed to the transport (the spans may then be reused).
  // Errors: the transport's, naming the peer.
  [[nodiscard]] virtual Status submit(int peer, int layer, std::span<const ExpertTask> tasks, std::span<const float> x,
                                      std::span<const float> scale) = 0;
  // Waits for the answer to the last submit() to `peer`: y [sum m, dim], each task's rows' expert
  // outputs (routing weight applied), in task order. Errors: a peer that failed or did not answer
  // in time (kIOError naming the peer and the layer).
  [[nodiscard]] virtual Status collect(int peer, std::span<float> y) = 0;
};

}  // namespace strata::model
