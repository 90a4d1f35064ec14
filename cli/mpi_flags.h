// `--mpi` for `strata logits` and `strata run` (issue 18: expert parallelism over MPI, dist/):
//   mpirun -np N strata logits|run|serve ... --mpi [--mpi-timeout S] [--mpi-spin-us US]
//       [--mpi-weights W0,W1,..] [--mpi-inject-latency-us US]
// Rank 0 runs the command; ranks 1.. open the same checkpoint's store and compute the routed experts
// they own (dist/mpi_job.h) until rank 0 is done. Without MPI in the build, --mpi is an error that
// says what to install.
#pragma once

#include <CLI/CLI.hpp>
#include <memory>
#include <string>
#include <vector>

#include "core/status.h"
#include "dist/mpi_job.h"
#include "model/expert_peers.h"
#include "store/placement_options.h"

namespace strata::cli {

struct MpiFlags {
  bool on = false;
  double answer_timeout_s = 120.0;
  double spin_us = 500.0;
  double inject_latency_us = 0.0;  // dist::MpiOptions::inject_latency_us (a measurement aid)
  std::vector<double> weights;     // --mpi-weights: one per rank; empty: each rank's MemAvailable
};

void add_mpi_flags(CLI::App& app, MpiFlags* f);

// This process's part in the job.
struct MpiRole {
  std::unique_ptr<dist::MpiJob> job;     // null without --mpi
  model::ExpertPeers* peers = nullptr;   // rank 0's, for ModelOptions::expert_peers (null: no --mpi)
  bool served = false;                   // a rank >= 1 that served experts: the command is done
};

// Without --mpi: an empty role. With it: starts MPI, agrees on the expert partition with every rank
// (dist::MpiJob::agree_partition: --mpi-weights, else each rank's MemAvailable); on a rank >= 1 opens DIR's store with
// `placement`, serves experts until rank 0 ends the job and returns with served = true (its errors
// are returned). Errors: MPI not built or not starting (naming --mpi), DIR's config or store.
[[nodiscard]] Result<MpiRole> start_mpi(const MpiFlags& f, const std::string& dir, int n_threads,
                                        const store::PlacementOptions& placement);

}  // namespace strata::cli
