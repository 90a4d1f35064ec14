#include "cli/mpi_flags.h"

#include <sys/stat.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cstdlib>
#include <cmath>
#include <cstdio>

#include "cli/common.h"
#include "cli/probe_cache.h"
#include "core/thread_pool.h"
#include "io/checkpoint.h"
#include "model/model.h"
#include "model/pipeline_cuts.h"
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
  app.add_option_function<std::string>(
         "--mpi-weights",
         [f](const std::string& v) {
           auto w = parse_weight_list(v);
           if (!w.ok()) throw CLI::ValidationError("--mpi-weights", w.error().message());
           f->weights = std::move(*w);
         },
         "with --mpi: partition weights, one per rank (rank 0 first), e.g. 2,1: rank r owns a contiguous "
         "share of every layer's routed experts proportional to its weight (default: each rank's "
         "MemAvailable, and where that cannot hold every expert, the disk rate of its `strata probe` profile)")
      ->type_name("W0,W1,..");
  app.add_option("--mpi-inject-latency-us", f->inject_latency_us,
                 "with --mpi or --mpi-pipeline: a measurement aid: every message between two ranks takes this many "
                 "microseconds longer, as on a slower link (stands in for netem; docs/distributed.md)")
      ->check(in_range(0, 1e7));
  app.add_flag("--mpi-pipeline", f->pipeline,
               "pipeline parallelism over MPI: run under `mpirun -np N` (N >= 2); rank r runs a contiguous range of "
               "layers, rank 0 also the tokenizer, sampling and embedding, the last rank the head (README: Several "
               "machines)");
  // A string parsed here rather than CLI11's list splitting, which reads "1,,4" as 1,4 and "" as 0.
  app.add_option_function<std::string>(
         "--mpi-pipeline-cuts",
         [f](const std::string& v) {
           auto cuts = parse_layer_list(v);
           if (!cuts.ok()) throw CLI::ValidationError("--mpi-pipeline-cuts", cuts.error().message());
           f->pipeline_cuts = std::move(*cuts);
         },
         "with --mpi-pipeline: the first layer of ranks 1.., e.g. 8,20 at np 3; each must be a clean cut (no "
         "layer after it reads a cache before it; default: the encoder/decoder boundary at np 2, balanced "
         "weight bytes beyond)")
      ->type_name("L1,L2,..");
}

namespace {

// "a,b,c" -> its items; an empty item (",4", "4,", "1,,4", "") is refused naming its position.
Result<std::vector<std::string>> split_list(const std::string& text, const char* expected) {
  std::vector<std::string> items;
  size_t a = 0;
  while (true) {
    const size_t b = std::min(text.find(',', a), text.size());
    items.push_back(text.substr(a, b - a));
    if (items.back().empty())
      return InvalidArgument("'" + text + "': item " + std::to_string(items.size()) + " is empty; expected " + expected);
    if (b == text.size()) return items;
    a = b + 1;
  }
}

}  // namespace

Result<std::vector<double>> parse_weight_list(const std::string& text) {
  static const char* kExpected = "numbers >= 0 separated by commas, one per rank, e.g. 2,1";
  STRATA_ASSIGN_OR_RETURN(std::vector<std::string> items, split_list(text, kExpected));
  std::vector<double> out;
  for (size_t i = 0; i < items.size(); ++i) {
    char* end = nullptr;
    const double v = std::strtod(items[i].c_str(), &end);
    if (*end != '\0' || !std::isfinite(v) || v < 0 || v > 1e9 || !std::isdigit(static_cast<unsigned char>(items[i][0])))
      return InvalidArgument("'" + text + "': item " + std::to_string(i + 1) + " is '" + items[i] + "'; expected " +
                             kExpected);
    out.push_back(v);
  }
  return out;
}

Result<std::vector<int>> parse_layer_list(const std::string& text) {
  static const char* kExpected = "layer numbers separated by commas, e.g. 8,20";
  STRATA_ASSIGN_OR_RETURN(std::vector<std::string> items, split_list(text, kExpected));
  std::vector<int> out;
  for (size_t i = 0; i < items.size(); ++i) {
    char* end = nullptr;
    errno = 0;
    const long v = std::isdigit(static_cast<unsigned char>(items[i][0])) ? std::strtol(items[i].c_str(), &end, 10) : -1;
    if (v < 0 || errno != 0 || *end != '\0' || v > 1000000)
      return InvalidArgument("'" + text + "': item " + std::to_string(i + 1) + " is '" + items[i] + "'; expected " +
                             kExpected);
    out.push_back(static_cast<int>(v));
  }
  return out;
}

Status check_mpi_flags(const MpiFlags& f, const std::string& refused) {
  if (!f.pipeline_cuts.empty() && !f.pipeline) return InvalidArgument("--mpi-pipeline-cuts needs --mpi-pipeline");
  if (!f.pipeline) return Status();
  if (f.on)
    return InvalidArgument("--mpi-pipeline and --mpi (expert parallelism) do not combine: choose one");
  if (!f.weights.empty()) return InvalidArgument("--mpi-weights is for --mpi (expert parallelism), not --mpi-pipeline");
  if (!refused.empty()) return InvalidArgument("--mpi-pipeline does not support " + refused);
  return Status();
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


// Each backbone layer's weight bytes in DIR's checkpoint (its "layers.L." tensors).
Result<std::vector<uint64_t>> layer_weight_bytes(const std::string& dir, int n_layers) {
  STRATA_ASSIGN_OR_RETURN(auto ck, io::Checkpoint::open(dir));
  std::vector<uint64_t> bytes(static_cast<size_t>(n_layers), 0);
  for (const auto& [name, t] : ck->tensors()) {
    int l = -1, n = 0;
    if (std::sscanf(name.c_str(), "layers.%d.%n", &l, &n) == 1 && n > 0 && l >= 0 && l < n_layers)
      bytes[static_cast<size_t>(l)] += t.nbytes;
  }
  return bytes;
}

// A rank >= 1 whose agreement with rank 0 failed: rank 0's own error (kInvalidArgument from
// MpiJob::agree_ints) is printed by rank 0 alone, so this rank ends quietly with 0 (mpirun then
// returns rank 0's status); a transport failure is this rank's to report.
Result<MpiRole> echo_of_rank0(const Status& s) {
  if (s.code() != StatusCode::kInvalidArgument) return s;
  MpiRole role;
  role.served = true;
  return role;
}

// Rank 0: the layer bounds [n_ranks + 1] of the pipeline over DIR (declared cuts or model::default_cuts).
Result<std::vector<int32_t>> pipeline_bounds(const MpiFlags& f, const std::string& dir, int n_ranks) {
  STRATA_ASSIGN_OR_RETURN(model::ModelConfig c, model::ModelConfig::load(dir));
  std::vector<int> cuts = f.pipeline_cuts;
  if (cuts.empty()) {
    STRATA_ASSIGN_OR_RETURN(std::vector<uint64_t> bytes, layer_weight_bytes(dir, c.n_layers));
    STRATA_ASSIGN_OR_RETURN(cuts, model::default_cuts(c, n_ranks, bytes));
  } else {
    STRATA_RETURN_IF_ERROR(model::check_cuts(c, n_ranks, cuts).with_context("--mpi-pipeline-cuts"));
  }
  std::vector<int32_t> bounds = {0};
  bounds.insert(bounds.end(), cuts.begin(), cuts.end());
  bounds.push_back(c.n_layers);
  return bounds;
}

// --mpi-pipeline: agrees on the cuts; a rank >= 1 loads its layers and runs its stage.
Result<MpiRole> start_pipeline(const MpiFlags& f, const dist::MpiOptions& o, const std::string& dir, int n_threads,
                               const store::PlacementOptions& placement) {
  MpiRole role;
  STRATA_ASSIGN_OR_RETURN(role.job, dist::MpiJob::init(o));
  dist::MpiJob& job = *role.job;
  if (job.size() < 2)
    return InvalidArgument("--mpi-pipeline needs at least 2 ranks (mpirun -np N strata ..., N >= 2), got " +
                           std::to_string(job.size()));
  std::vector<int32_t> bounds;
  int64_t vocab = 0;
  if (job.rank() == 0) {
    auto b = pipeline_bounds(f, dir, job.size());
    const Status agreed = job.agree_ints(b.ok() ? &*b : &bounds, b.ok() ? "" : b.error().message());
    if (!b.ok()) return b.error();  // its own code: a missing config is not a usage error
    STRATA_RETURN_IF_ERROR(agreed);
    bounds = std::move(*b);
    std::string line;
    for (int r = 0; r < job.size(); ++r)
      line += (r ? ", " : "") + std::string("rank ") + std::to_string(r) + " " +
              dist::layer_range_text(bounds[static_cast<size_t>(r)], bounds[static_cast<size_t>(r) + 1]);
    std::fprintf(stderr, "strata: --mpi-pipeline: %s\n", line.c_str());
    STRATA_ASSIGN_OR_RETURN(model::ModelConfig c, model::ModelConfig::load(dir));
    vocab = c.vocab_size;
  } else if (Status s = job.agree_ints(&bounds); !s.ok()) {
    return echo_of_rank0(s);
  }
  if (bounds.size() != static_cast<size_t>(job.size()) + 1)
    return Corruption("MPI rank " + std::to_string(job.rank()) + ": pipeline of " + std::to_string(bounds.size()) + " bounds");
  role.pipeline = std::make_unique<dist::MpiPipeline>(job, bounds, vocab, o);
  if (job.rank() == 0) return role;
  Logger log = stderr_logger(LogLevel::kWarn);
  auto lm = load_model(dir, n_threads, &log, placement, {}, nullptr, &role.pipeline->part());
  const std::string who = "MPI rank " + std::to_string(job.rank());
  STRATA_RETURN_IF_ERROR(role.pipeline->agree_loaded(lm.ok() ? Status() : lm.error()).with_context(who));
  const Status s = role.pipeline->serve_stage(*lm->model);
  if (!s.ok()) return s.with_context(who);
  role.served = true;
  return role;
}

}  // namespace

Result<MpiRole> start_mpi(const MpiFlags& f, const std::string& dir, int n_threads,
                          const store::PlacementOptions& placement) {
  MpiRole role;
  if (!f.on && !f.pipeline) return role;
  dist::MpiOptions o;
  o.answer_timeout_s = f.answer_timeout_s;
  o.spin_us = f.spin_us;
  o.inject_latency_us = f.inject_latency_us;
  if (f.pipeline) return start_pipeline(f, o, dir, n_threads, placement);
  // Declared weights as integers: scaled so the largest is 2^20 (the partition keeps ratios to ~1e-6).
  double top = 0;
  for (double w : f.weights) top = std::max(top, w);
  o.declared_weights = f.weights;
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
  if (Status s = role.job->agree_partition(0); !s.ok()) return echo_of_rank0(s);
  STRATA_ASSIGN_OR_RETURN(model::OpenedCheckpoint ck, model::open_checkpoint(dir, placement));
  ThreadPool pool(n_threads);
  const Status s = role.job->serve_experts(ck.config, *ck.store, &pool);
  if (!s.ok()) return s.with_context("MPI rank " + std::to_string(role.job->rank()));
  role.served = true;
  return role;
}

}  // namespace strata::cli
