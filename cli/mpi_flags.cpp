#include "cli/mpi_flags.h"

#include <sys/stat.h>

#include <algorithm>
#include <cmath>
#include <cstdio>

#include "cli/common.h"
#include "cli/probe_cache.h"
#include "core/thread_pool.h"
#include "model/model.h"
#include "tools/plan_sizes.h"

namespace strata::cli {

void add_mpi_flags(CLI::App& app, MpiFlags* f) {
  app.add_flag("--mpi", f->on,
               "expert parallelism over MPI: run under `mpirun -np N`; rank 0 runs the command, the other ranks "
               "compute the routed experts they own (README: Several machines)");
  app.add_option("--mpi-timeout", f->answer_timeout_s,
                 "with --mpi: seconds to wait for one rank's answer to one layer before failing (default 120)")
      ->check(in_range(0.001, 86400));
  app.add_option("--mpi-spin-us", f->spin_us,
                 "with --mpi: microseconds a waiting rank polls before it sleeps between polls (default 500; 0 when "
                 "there are more ranks than cores on a machine)")
      ->check(in_range(0, 1e6));
  app.add_option("--mpi-weights", f->weights,
                 "with --mpi: partition weights, one per rank (rank 0 first), e.g. 2,1: rank r owns a contiguous "
                 "share of every layer's routed experts proportional to its weight (default: each rank's "
                 "MemAvailable, and where that cannot hold every expert, the disk rate of its `strata probe` profile)")
      ->delimiter(',')
      ->check(in_range(0, 1e9));
  app.add_option("--mpi-inject-latency-us", f->inject_latency_us,
                 "with --mpi: a measurement aid: every message between rank 0 and another rank takes this many "
                 "microseconds longer, as on a slower link (stands in for netem; docs/distributed.md)")
      ->check(in_range(0, 1e7));
}

namespace {

// The sequential read rate `strata probe` measured on this machine for the disk holding `dir`
// (its cached profile, when it measured that device: O_DIRECT where supported, as the stream store
// reads experts), bytes/s; 0 when there is no such profile.
uint64_t probed_disk_rate(const std::string& dir) {
  auto m = tools::MachineProfile::load(default_probe_cache());
  struct stat st {};
  if (!m.ok() || !m->disk.measured || ::stat(dir.c_str(), &st) != 0 || st.st_dev != m->disk.device) return 0;
  const double gbps = m->disk.direct_supported && m->disk.seq_gbps_direct > 0 ? m->disk.seq_gbps_direct
                                                                              : m->disk.seq_gbps_buffered;
  return gbps > 0 ? static_cast<uint64_t>(gbps * 1e9) : 0;
}

}  // namespace

Result<MpiRole> start_mpi(const MpiFlags& f, const std::string& dir, int n_threads,
                          const store::PlacementOptions& placement) {
  MpiRole role;
  if (!f.on) return role;
  dist::MpiOptions o;
  o.answer_timeout_s = f.answer_timeout_s;
  o.spin_us = f.spin_us;
  o.inject_latency_us = f.inject_latency_us;
  // Declared weights as integers: scaled so the largest is 2^20 (the partition keeps ratios to ~1e-6).
  double top = 0;
  for (double w : f.weights) top = std::max(top, w);
  for (double w : f.weights) o.weights.push_back(top > 0 ? static_cast<uint64_t>(std::llround(w / top * (1 << 20))) : 0);
  o.disk_bytes_per_s = probed_disk_rate(dir);
  auto c = model::ModelConfig::load(dir);
  if (c.ok()) {
    // Rank 0 weighs RAM against the experts it must hold beside the resident set (plan's sizes).
    if (auto f = tools::model_footprint(*c); f.ok()) {
      o.expert_bytes = f->routed_bytes;
      o.rank0_resident_bytes = f->dense_ram_bytes;
    }
  }
  STRATA_ASSIGN_OR_RETURN(role.job, dist::MpiJob::init(o));
  if (role.job->rank() == 0) {
    STRATA_RETURN_IF_ERROR(role.job->agree_partition(c.ok() ? c->n_routed_experts : 0, c.ok() ? Status() : c.error()));
    for (size_t a = 0, b; a < role.job->partition_summary().size(); a = b + 1) {
      b = role.job->partition_summary().find('\n', a);
      std::fprintf(stderr, "strata: --mpi %s\n", role.job->partition_summary().substr(a, b - a).c_str());
    }
    role.peers = role.job->peers(*c);
    if (!role.peers) return Internal("MPI rank 0: no expert transport after the partition");
    return role;
  }
  STRATA_RETURN_IF_ERROR(role.job->agree_partition(0));
  STRATA_ASSIGN_OR_RETURN(model::OpenedCheckpoint ck, model::open_checkpoint(dir, placement));
  ThreadPool pool(n_threads);
  const Status s = role.job->serve_experts(ck.config, *ck.store, &pool);
  if (!s.ok()) return s.with_context("MPI rank " + std::to_string(role.job->rank()));
  role.served = true;
  return role;
}

}  // namespace strata::cli
