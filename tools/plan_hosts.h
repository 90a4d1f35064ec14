// `strata plan --hosts FILE`: the per-token time of expert parallelism over MPI (dist/mpi_job.h)
// on the machines FILE lists, from the one-machine decode cost (tools/plan_cost.h).
//
// FILE: one host per line, `#` starts a comment:
//   NAME ram=SIZE disk_gbps=X link_gbps=X latency_us=X
// ram: what strata may use there (parse_size: 128G); disk_gbps: sequential read GB/s (expert
// misses); link_gbps: network bandwidth in Gbit/s; latency_us: one-way message latency. The first
// host is rank 0 (dense weights, KV, tokenizer).
//
// The model, per main layer and decode token (k picks among E experts, ranks owning contiguous
// ranges proportional to their RAM in GiB as model::weighted_expert_ranges gives them and `--mpi`
// uses by default, picks uniform over experts):
//   rank r gets c_r of the k picks (multinomial over the ranks' shares; every outcome enumerated)
//   rank r's time   c_r x (t_expert + miss_r x expert_bytes / disk_r), where t_expert is the
//                   one-machine routed-expert compute per pick and miss_r = 1 - min(1, RAM left
//                   on r / its experts' bytes) (rank 0's RAM first holds the dense weights)
//   a remote rank   + 2 x latency (request, answer) + its bytes / the slower link
//                   (request: header + c_r rows of dim float32 + weights; answer: c_r rows)
//   the layer       max over ranks (rank 0 computes its own picks while the others work)
// and per token the one-machine decode cost without its routed-expert terms (compute and I/O added,
// no overlap assumed) plus the layers' sum.
// Messages per layer: 3 per remote rank with picks (header, rows, answer).
// Every host is assumed to compute at this machine's measured rates (the probe); what differs is
// RAM, disk and link. Source: issue 18 item 3; model/moe.cpp, dist/mpi_job.cpp.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/status.h"
#include "model/config.h"
#include "tools/plan_cost.h"
#include "tools/plan_sizes.h"

namespace strata::tools {

struct Host {
  std::string name;
  uint64_t ram_bytes = 0;
  double disk_gbps = 0;
  double link_gbps = 0;
  double latency_us = 0;
};

// Reads FILE. Errors (kInvalidArgument / kNotFound) name the file, the line and the field.
[[nodiscard]] Result<std::vector<Host>> read_hosts(const std::string& path);
// The same from text (`source` names it in errors).
[[nodiscard]] Result<std::vector<Host>> parse_hosts(const std::string& text, const std::string& source);

struct HostShare {
  std::string name;
  int64_t experts = 0;          // routed experts it owns over the backbone
  uint64_t expert_bytes = 0;    // their bytes
  double hit_rate = 1;          // share of its experts' uses served from RAM
};

struct ExpertParallelPlan {
  int ranks = 1;
  std::vector<HostShare> hosts;
  double messages_per_layer = 0;  // expected, rank 0's sends + receives, one decode token
  double bytes_per_layer = 0;     // expected, both directions
  double comm_s_per_token = 0;    // expected latency + transfer on the critical path, all layers
  double routed_s_per_token = 0;  // expected slowest-rank expert time (incl. comm), all layers
  double token_s = 0;             // predicted decode time per token
  double tok_s = 0;
  double single_tok_s = 0;        // `single` itself: this machine's one-process prediction
  std::vector<std::string> notes;
};

// `single`: decode_token_cost on one machine (its "routed experts" and "expert reads" terms are
// replaced). `dense_bytes`: what rank 0 holds besides its experts. REQUIRES hosts non-empty.
ExpertParallelPlan plan_expert_parallel(const model::ModelConfig& c, const ModelFootprint& f, const Cost& single,
                                        uint64_t dense_bytes, const std::vector<Host>& hosts);

}  // namespace strata::tools
