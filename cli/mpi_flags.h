// `--mpi` and `--mpi-pipeline` (issue 18: expert and pipeline parallelism over MPI, dist/):
//   mpirun -np N strata logits|run|serve|bench ... --mpi [--mpi-timeout S] [--mpi-spin-us US]
//       [--mpi-weights W0,W1,..] [--mpi-inject-latency-us US]
//   mpirun -np N strata logits|run|bench ... --mpi-pipeline [--mpi-pipeline-cuts L1,L2,..] [the same
//       --mpi-timeout, --mpi-spin-us, --mpi-inject-latency-us]
// Rank 0 runs the command. With --mpi, ranks 1.. open the same checkpoint's store and compute the
// routed experts they own (dist/mpi_job.h) until rank 0 is done; with --mpi-pipeline, rank r runs a
// range of layers (dist/mpi_pipeline.h). Without MPI in the build, both are errors that say what to
// install.
#pragma once

#include <CLI/CLI.hpp>
#include <memory>
#include <string>
#include <vector>

#include "core/status.h"
#include "dist/mpi_job.h"
#include "dist/mpi_pipeline.h"
#include "model/expert_peers.h"
#include "store/placement_options.h"

namespace strata::cli {

struct MpiFlags {
  bool on = false;
  double answer_timeout_s = 120.0;
  double spin_us = 500.0;
  double inject_latency_us = 0.0;  // dist::MpiOptions::inject_latency_us (a measurement aid)
  std::vector<double> weights;     // --mpi-weights: one per rank; empty: each rank's MemAvailable
  bool pipeline = false;           // --mpi-pipeline: ranks own layer ranges
  std::vector<int> pipeline_cuts;  // --mpi-pipeline-cuts: the first layer of ranks 1..; empty: model::default_cuts
};

void add_mpi_flags(CLI::App& app, MpiFlags* f);

// "8,20" -> {8, 20}: the value of --mpi-pipeline-cuts. Errors (kInvalidArgument, naming the item):
// an empty item ("1,,4", "4,", ""), a sign, a non-digit or a number above 10^6. Whether the cuts fit
// the model is model::check_cuts's question.
[[nodiscard]] Result<std::vector<int>> parse_layer_list(const std::string& text);
// "2,1" -> {2, 1}: the value of --mpi-weights. Errors (kInvalidArgument, naming the item): an empty
// item, a value that is not a finite number in [0, 1e9] written with digits.
[[nodiscard]] Result<std::vector<double>> parse_weight_list(const std::string& text);

// --mpi-pipeline with what the command cannot run that way: `refused` names the command's flags
// that do not combine with it (e.g. "--spec dspark"), empty when none. Errors (kInvalidArgument, a
// usage error every rank reports alike before MPI starts): --mpi and --mpi-pipeline together, a
// refused flag, --mpi-pipeline-cuts without --mpi-pipeline.
[[nodiscard]] Status check_mpi_flags(const MpiFlags& f, const std::string& refused = "");

// This process's part in the job.
struct MpiRole {
  std::unique_ptr<dist::MpiJob> job;     // null without --mpi / --mpi-pipeline
  model::ExpertPeers* peers = nullptr;   // rank 0's, for ModelOptions::expert_peers (null: no --mpi)
  std::unique_ptr<dist::MpiPipeline> pipeline;  // --mpi-pipeline (destroyed before the job)
  bool served = false;                   // a rank >= 1 that served experts or a stage: the command is done
  // Rank 0's layers and next stages with --mpi-pipeline, for ModelOptions::pipeline; else null.
  const model::PipelinePart* part() const { return pipeline ? &pipeline->part() : nullptr; }
};

// Without --mpi: an empty role. With it: starts MPI, agrees on the expert partition with every rank
// (dist::MpiJob::agree_partition: --mpi-weights, else each rank's MemAvailable); on a rank >= 1 opens DIR's store with
// `placement`, serves experts until rank 0 ends the job and returns with served = true (its errors
// are returned). With --mpi-pipeline: rank 0 picks the cuts (--mpi-pipeline-cuts, checked, else
// model::default_cuts over DIR's layer weight bytes) and sends them to every rank; a rank >= 1 loads
// its layers of DIR (and the tokenizer's Engram map), runs its stage until rank 0 stops the
// pipeline and returns with served = true. Errors: MPI not built or not starting (naming --mpi),
// DIR's config or store, fewer than 2 ranks or bad cuts (rank 0 returns them; a rank >= 1 then returns
// served and prints nothing: rank 0 prints the error once and mpirun returns rank 0's status). Callers report them with fail_flag_value (a usage
// error, kInvalidArgument, exits 2).
[[nodiscard]] Result<MpiRole> start_mpi(const MpiFlags& f, const std::string& dir, int n_threads,
                                        const store::PlacementOptions& placement);

}  // namespace strata::cli
