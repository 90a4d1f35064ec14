// Per-phase placement stats for `strata run --stats / --stats-json` and `strata logits --stats`:
// tokens, wall time, bytes read, expert cache and prefetch hit rates, Engram rows and time, time
// blocked on I/O (store::PlacementStats) next to where the forward time went (model::ForwardProfile)
// and the process's CPU time, user and kernel (the kernel's share is what reads cost the cores, issue 15
// item 3).
#pragma once

#include <cstdio>
#include <string>
#include <vector>

#include "core/status.h"
#include "model/model.h"
#include "store/placement_stats.h"

namespace strata::cli {

struct PhaseStats {
  std::string name;          // "prefill", "decode"
  int64_t tokens = 0;        // tokens run through the model in this phase
  double wall_s = 0;
  store::PlacementStats store;
  model::ForwardProfile profile;
  double cpu_user_s = 0;  // CPU time of all the process's threads (io_uring workers included) in user space
  double cpu_sys_s = 0;   // ... and in the kernel (reads, page faults, copies from the page cache)
};

// The process's CPU time so far, in seconds (getrusage RUSAGE_SELF: every thread, live or joined).
struct CpuTimes {
  double user_s = 0;
  double sys_s = 0;
  static CpuTimes now();
};

// Snapshot of the counters, to subtract at the end of a phase.
struct StatsMark {
  store::PlacementStats store;
  model::ForwardProfile profile;
  CpuTimes cpu;
  static StatsMark take(model::Model& m, const model::ForwardProfile& p) {
    return StatsMark{m.store().stats(), p, CpuTimes::now()};
  }
};
PhaseStats phase_between(const std::string& name, const StatsMark& a, const StatsMark& b, int64_t tokens, double wall_s);

// A table, one column per phase.
void print_stats(std::FILE* out, const std::vector<PhaseStats>& phases);

// JSON: {"placement": ..., "model": ..., "phases": {name: {...}}} with every counter and the rates.
std::string stats_json(const std::vector<PhaseStats>& phases, const std::string& model_dir,
                       const std::string& placement);

}  // namespace strata::cli
