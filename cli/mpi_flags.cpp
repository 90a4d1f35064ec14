#include "cli/mpi_flags.h"

#include "cli/common.h"
#include "core/thread_pool.h"
#include "model/model.h"

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
}

Result<MpiRole> start_mpi(const MpiFlags& f, const std::string& dir, int n_threads,
                          const store::PlacementOptions& placement) {
  MpiRole role;
  if (!f.on) return role;
  dist::MpiOptions o;
  o.answer_timeout_s = f.answer_timeout_s;
  o.spin_us = f.spin_us;
  STRATA_ASSIGN_OR_RETURN(role.job, dist::MpiJob::init(o));
  if (role.job->rank() == 0) {
    STRATA_ASSIGN_OR_RETURN(model::ModelConfig c, model::ModelConfig::load(dir));
    role.peers = role.job->peers(c);
    return role;
  }
  STRATA_ASSIGN_OR_RETURN(model::OpenedCheckpoint ck, model::open_checkpoint(dir, placement));
  ThreadPool pool(n_threads);
  const Status s = role.job->serve_experts(ck.config, *ck.store, &pool);
  if (!s.ok()) return s.with_context("MPI rank " + std::to_string(role.job->rank()));
  role.served = true;
  return role;
}

}  // namespace strata::cli
