// strata bench -m DIR [--prompt 512,2048,8192] [--gen 128] [--reps 3] [--warmup 1] [-t N] [--chunk N]
//   [--load-mode auto|resident|stream|mmap] [--ram-budget SIZE] [--direct-io] [--cold auto|fadvise|drop-caches|copy|none] [--text FILE] [--seed S]
//   [--json FILE] [--svg FILE] [--no-plan] [--probe FILE] [--spec dspark|none] [--spec-max N] [--spec-min-conf F]
//   [--spec-guard on|off]
// Measures prefill tok/s, time to first token and decode tok/s per prompt length, cold and warm
// (tools/bench.h); prints a table, writes the JSON report and the SVG plot, and sets the
// measurements beside `strata plan`'s predictions for the same machine profile (ratio measured /
// predicted) unless --no-plan.
#include <CLI/CLI.hpp>
#include <cstdio>
#include <filesystem>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>

#include "cli/commands.h"
#include "cli/common.h"
#include "cli/interrupt.h"
#include "cli/mpi_flags.h"
#include "cli/output_files.h"
#include "cli/placement_flags.h"
#include "cli/probe_cache.h"
#include "cli/progress_bar.h"
#include "cli/spec_flags.h"
#include "io/checkpoint.h"
#include "io/file.h"
#include "runtime/draft_model.h"
#include "tools/bench.h"
#include "tools/bench_svg.h"
#include "tools/plan.h"

namespace strata::cli {

namespace {

struct BenchCliOptions {
  tools::BenchOptions bench;
  std::vector<int64_t> prompts;
  std::string json, svg, probe = default_probe_cache(), ram_budget;
  bool no_plan = false, direct_io = false, buffered_io = false;
  SpecFlags spec;
  MpiFlags mpi;
};

// `git describe --always --dirty` of the source tree strata was built from ("" when unknown).
std::string source_commit() {
  const std::string cmd = "git -C '" + std::string(STRATA_SOURCE_DIR) + "' describe --always --dirty --abbrev=12 2>/dev/null";
  FILE* p = ::popen(cmd.c_str(), "r");
  if (!p) return "";
  char buf[128] = {};
  const size_t n = std::fread(buf, 1, sizeof buf - 1, p);
  ::pclose(p);
  std::string s(buf, n);
  while (!s.empty() && (s.back() == '\n' || s.back() == ' ')) s.pop_back();
  return s;
}

template <class T>
std::string join(const std::vector<T>& v) {
  std::string s;
  for (size_t i = 0; i < v.size(); ++i) s += (i ? "," : "") + std::to_string(v[i]);
  return s;
}

Status write_text(const std::string& path, const std::string& text) {
  return io::write_file_atomic(path, text.data(), text.size());
}

int run_bench_cmd(BenchCliOptions& o) {
  tools::BenchOptions& b = o.bench;
  // Before any measuring: a bad output path would otherwise fail only after the whole bench.
  if (Status s = check_output_files({{"--json", o.json}, {"--svg", o.svg}},
                                    {{"--text", b.text_file},
                                     {"--probe", o.no_plan ? std::string() : o.probe},
                                     {.flag = "--model", .path = b.model_dir, .model = true},
                                     {.flag = "--draft-model", .path = o.spec.draft_model, .model = true}});
      !s.ok())
    return fail_usage(s);
  if (Status s = check_checkpoint_dir(b.model_dir); !s.ok()) return fail(s);  // as run, serve and plan
  if (!o.prompts.empty()) b.prompts = o.prompts;
  auto expert_io = expert_io_flags(o.direct_io, o.buffered_io, b.load_mode);
  if (!expert_io.ok()) return fail(expert_io.error());
  b.expert_io = *expert_io;
  b.git_commit = source_commit();
  b.command = "strata bench -m " + b.model_dir + " --prompt " + join(b.prompts) + " --gen " + std::to_string(b.gen) +
              " --reps " + std::to_string(b.reps) + " --warmup " + std::to_string(b.warmup) + " -t " +
              std::to_string(b.threads) + " --chunk " + std::to_string(b.prefill_chunk) + " --load-mode " + b.load_mode +
              " --cold " + b.cold + (o.ram_budget.empty() ? "" : " --ram-budget " + o.ram_budget) +
              (b.expert_io == store::ExpertIo::kDirect     ? " --direct-io"
               : b.expert_io == store::ExpertIo::kBuffered ? " --buffered-io"
                                                           : "") + (b.text_file.empty() ? "" : " --text " + b.text_file) + " --seed " + std::to_string(b.seed) +
              (b.parallel.empty() ? "" : " --parallel " + join(b.parallel) + " --batch-tokens " + std::to_string(b.batch_tokens)) +
              (o.spec.mode == "none" ? "" : " --spec " + o.spec.mode + " --spec-max " + std::to_string(o.spec.max_drafts) +
                                                " --spec-min-conf " + std::to_string(o.spec.min_conf) +
                                                " --spec-guard " + o.spec.guard +
                                                (o.spec.draft_model.empty() ? "" : " --draft-model " +
                                                                                       o.spec.draft_model));
  auto spec = spec_options(o.spec);
  if (!spec.ok()) return fail_usage(spec.error());
  b.spec = *spec;
  b.draft_model_dir = o.spec.draft_model;
  // A draft that does not match the target is a flag's error, as in run (exit 2), found before any load.
  if (!b.draft_model_dir.empty()) {
    if (Status s = check_checkpoint_dir(b.draft_model_dir); !s.ok()) return fail(s.with_context("--draft-model"));
    if (Status s = runtime::check_draft_checkpoint(b.model_dir, b.draft_model_dir); !s.ok()) return fail_flag_value(s);
  }
  if (!o.ram_budget.empty()) {
    auto v = tools::parse_size(o.ram_budget, "--ram-budget");
    if (!v.ok()) return fail_flag_value(v.error());
    if (*v == 0) return fail_usage(InvalidArgument("--ram-budget '" + o.ram_budget + "' must be at least one byte"));
    b.ram_budget = *v;
  }
  if (Status v = b.validate(); !v.ok()) return fail(v);
  // --mpi: ranks >= 1 open the store as the target is opened and serve their experts until rank 0
  // is done; rank 0 benches with them (every load of the target routes through the peers).
  store::PlacementOptions peer_placement;
  auto mode = store::parse_load_mode(b.load_mode);
  if (!mode.ok()) return fail(mode.error());
  peer_placement.mode = *mode;
  peer_placement.ram_budget_bytes = b.ram_budget;
  peer_placement.expert_io = b.expert_io;
  // --mpi-pipeline: one sequence per forward (the stages keep one mirror of its cache).
  std::string refused;
  if (!b.parallel.empty()) refused = "--parallel (several sessions in one forward)";
  else if (b.spec.mode != runtime::SpecMode::kNone) refused = "--spec " + o.spec.mode;
  if (Status s = check_mpi_flags(o.mpi, refused); !s.ok()) return fail_usage(s);
  auto role = start_mpi(o.mpi, b.model_dir, b.threads, peer_placement);  // before the model: it must outlive it
  if (!role.ok()) return fail_flag_value(role.error());
  if (role->served) return 0;
  b.expert_peers = role->peers;
  b.pipeline = role->part();
  b.mpi_ranks = role->job ? role->job->size() : 0;
  if (role->job)
    b.command += std::string(o.mpi.pipeline ? " --mpi-pipeline" : " --mpi") + " (" + std::to_string(b.mpi_ranks) + " ranks)";
  if (role->job && !o.no_plan)
    std::fprintf(stderr, "strata: note: --mpi: the predictions below are for one process (strata plan --hosts "
                         "FILE predicts several)\n");

  // Predictions first (config only), so a bad config fails before minutes of measuring.
  std::vector<tools::PredictedSpeed> predicted;
  std::string plan_json;
  std::optional<tools::MachineProfile> machine_used;
  std::optional<model::ModelConfig> config_used;
  tools::PlanOptions plan_options;
  std::string config_path;
  // The plan's routed expert reads (kNotStreamed when there is no plan or it keeps experts in RAM).
  store::ExpertReads plan_expert_reads = store::ExpertReads::kNotStreamed;
  double load_predicted = 0;  // s; 0: no prediction
  if (!o.no_plan) {
    auto machine = tools::MachineProfile::load(o.probe);
    if (!machine.ok()) {
      std::fprintf(stderr, "strata: note: no predictions: %s (run strata probe -m %s --cache %s)\n",
                   machine.error().to_string().c_str(), b.model_dir.c_str(), o.probe.c_str());
    } else {
      const std::string cfg_path = (std::filesystem::path(b.model_dir) / "config.json").string();
      auto text = io::read_checkpoint_text(b.model_dir, "config.json", 16u << 20);
      if (!text.ok()) return fail(text.error());
      auto cfg = model::ModelConfig::parse(*text, cfg_path);
      if (!cfg.ok()) return fail(cfg.error());
      tools::PlanOptions po;
      po.threads = b.threads;
      po.prompts = b.prompts;
      po.gen = b.gen;
      po.prefill_chunk = b.prefill_chunk;
      po.load_mode = b.load_mode;
      po.ram_budget_bytes = b.ram_budget;  // the store's budget, as plan --ram and run --ram-budget take it
      po.expert_io = b.expert_io;
      auto plan = tools::make_plan(*cfg, tools::VisionShape{}, *machine, po, cfg_path);
      if (!plan.ok()) return fail(plan.error());
      machine_used = *machine;
      config_used = *cfg;
      plan_options = po;
      config_path = cfg_path;
      for (const tools::SpeedPrediction& s : plan->speeds)
        if (!s.disk_unknown) predicted.push_back(tools::PredictedSpeed{s.prompt, s.prefill_tok_s, s.decode_tok_s});
      std::sort(predicted.begin(), predicted.end(), [](auto& x, auto& y) { return x.prompt < y.prompt; });
      plan_json = tools::plan_json(*plan);
      load_predicted = plan->placement.load_cold_s;
      if (plan->placement.load_mode == "stream")
        plan_expert_reads = plan->placement.expert_direct_io ? store::ExpertReads::kDirect : store::ExpertReads::kBuffered;
    }
  }

  ProgressBar bar;
  b.progress = bar.fn();
  Logger log = stderr_logger(LogLevel::kWarn);
  b.logger = &log;
  // Ctrl-C or SIGTERM: the bench stops at its next run, prefill chunk, token or copy block and
  // removes its cold copy (the checkpoint's size); nothing is written. A second signal exits at once
  // (cli/interrupt.h), leaving a copy for the next bench to sweep.
  InterruptGuard interrupt;
  b.cancel = interrupt.flag_ptr();
  auto rep = tools::run_bench(b);
  bar.clear();
  if (!rep.ok() && rep.error().code() == StatusCode::kCancelled && interrupt.interrupted()) {
    std::fprintf(stderr, "strata: bench interrupted: no report written\n");
    return interrupt.exit_status();
  }
  if (!rep.ok()) return fail(rep.error());
  std::fputs(rep->to_text().c_str(), stdout);
  // The plan resolves O_DIRECT from the probed disk, the store from the model's shards: say so when
  // they differ (the profile measured another file system).
  if (plan_expert_reads != store::ExpertReads::kNotStreamed && rep->expert_reads != store::ExpertReads::kNotStreamed &&
      plan_expert_reads != rep->expert_reads)
    std::printf("  note: the plan assumed %s expert reads, the store read them %s (the profile's disk is not the model's: run "
                "strata probe -m %s --cache %s)\n",
                store::expert_reads_name(plan_expert_reads), store::expert_reads_name(rep->expert_reads),
                b.model_dir.c_str(), o.probe.c_str());

  nlohmann::ordered_json cmp = nlohmann::ordered_json::array();
  bool out_of_band = false;
  if (!predicted.empty()) {
    // The profile's date: a VM's speed moves over hours, and a profile probed at a faster hour puts
    // every ratio low (the 8 GB checkpoint on a Zen 5 VM: prefill 0.72 against a morning profile,
    // 1.00 against one probed just before).
    std::printf("  predicted by strata plan (%s, probed %s), warm medians:\n", o.probe.c_str(),
                machine_used && !machine_used->date.empty() ? machine_used->date.c_str() : "at an unknown time");
    std::printf("  %8s %14s %14s %7s %14s %14s %7s\n", "prompt", "prefill pred", "measured", "ratio", "decode pred",
                "measured", "ratio");
    for (const tools::PredictedSpeed& p : predicted)
      for (const tools::BenchPoint& m : rep->points) {
        if (m.cold || m.prompt != p.prompt) continue;
        const double rp = m.prefill_tok_s.median / p.prefill_tok_s, rd = m.decode_tok_s.median / p.decode_tok_s;
        std::printf("  %8lld %14.2f %14.2f %7.2f %14.2f %14.2f %7.2f\n", static_cast<long long>(p.prompt), p.prefill_tok_s,
                    m.prefill_tok_s.median, rp, p.decode_tok_s, m.decode_tok_s.median, rd);
        cmp.push_back({{"prompt", p.prompt},
                       {"prefill_predicted", p.prefill_tok_s},
                       {"prefill_measured", m.prefill_tok_s.median},
                       {"prefill_ratio", rp},
                       {"decode_predicted", p.decode_tok_s},
                       {"decode_measured", m.decode_tok_s.median},
                       {"decode_ratio", rd}});
        if (rp < 0.85 || rp > 1.15 || rd < 0.85 || rd > 1.15) out_of_band = true;
      }
    if (out_of_band)
      std::printf("  note: a ratio is outside 0.85-1.15; if the machine's speed has moved since the profile was "
                  "probed, run strata probe --cache %s and bench again\n", o.probe.c_str());
  }
  // The cold load against the plan's load model (load_cold_s of the plan's placement).
  nlohmann::ordered_json load_cmp;
  if (load_predicted > 0 && rep->load_cold_s > 0) {
    const double r = rep->load_cold_s / load_predicted;
    std::printf("  cold load: predicted %.2f s, measured %.2f s, ratio %.2f (measured / predicted)\n", load_predicted,
                rep->load_cold_s, r);
    load_cmp = {{"predicted_s", load_predicted}, {"measured_s", rep->load_cold_s}, {"ratio", r}};
  }
  // The plan's own hit rate is the uniform-routing estimate; real routing is more concentrated. The
  // time model is checked on its own by predicting again at the hit rates this run measured
  // (prefill and decode separately), where the store counted expert acquisitions.
  nlohmann::ordered_json at_hit = nlohmann::ordered_json::array();
  if (machine_used && config_used) {
    bool header = false;
    for (const tools::BenchPoint& m : rep->points) {
      if (m.cold) continue;
      uint64_t pa = 0, ph = 0, da = 0, dh = 0;
      for (const tools::BenchRun& r : m.runs) {
        pa += r.prefill_expert_acquires;
        ph += r.prefill_expert_hits;
        da += r.expert_acquires - r.prefill_expert_acquires;
        dh += r.expert_hits - r.prefill_expert_hits;
      }
      if (pa == 0 && da == 0) continue;  // nothing streamed: the first table is the whole story
      const double hp = pa ? static_cast<double>(ph) / static_cast<double>(pa) : 1.0;
      const double hd = da ? static_cast<double>(dh) / static_cast<double>(da) : 1.0;
      tools::PlanOptions po = plan_options;
      po.prompts = {m.prompt};
      po.expert_hit_rate = hp;
      auto pp = tools::make_plan(*config_used, tools::VisionShape{}, *machine_used, po, config_path);
      po.expert_hit_rate = hd;
      auto pd = tools::make_plan(*config_used, tools::VisionShape{}, *machine_used, po, config_path);
      if (!pp.ok() || !pd.ok() || pp->speeds.empty() || pd->speeds.empty() || pp->speeds[0].disk_unknown) continue;
      const double pf = pp->speeds[0].prefill_tok_s, dc = pd->speeds[0].decode_tok_s;
      if (!header) {
        std::printf("  predicted at the measured expert hit rates, warm medians:\n");
        std::printf("  %8s %8s %12s %10s %7s %8s %12s %10s %7s\n", "prompt", "hit pf", "prefill pred", "measured",
                    "ratio", "hit dec", "decode pred", "measured", "ratio");
        header = true;
      }
      const double rp = m.prefill_tok_s.median / pf, rd = m.decode_tok_s.median / dc;
      std::printf("  %8lld %7.1f%% %12.2f %10.2f %7.2f %7.1f%% %12.2f %10.2f %7.2f\n", static_cast<long long>(m.prompt),
                  100 * hp, pf, m.prefill_tok_s.median, rp, 100 * hd, dc, m.decode_tok_s.median, rd);
      at_hit.push_back({{"prompt", m.prompt},
                        {"prefill_hit_rate", hp},
                        {"prefill_predicted", pf},
                        {"prefill_measured", m.prefill_tok_s.median},
                        {"prefill_ratio", rp},
                        {"prefill_bottleneck", pp->speeds[0].prefill_bottleneck},
                        {"decode_hit_rate", hd},
                        {"decode_predicted", dc},
                        {"decode_measured", m.decode_tok_s.median},
                        {"decode_ratio", rd},
                        {"decode_bottleneck", pd->speeds[0].decode_bottleneck}});
    }
  }
  if (!o.json.empty()) {
    auto j = nlohmann::ordered_json::parse(rep->to_json());
    if (!at_hit.empty()) j["predicted_at_measured_hit_rate"] = at_hit;
    if (!plan_json.empty()) {
      j["plan"] = nlohmann::ordered_json::parse(plan_json);
      j["predicted_vs_measured"] = cmp;
      if (!load_cmp.is_null()) j["cold_load_vs_plan"] = load_cmp;
    }
    if (Status w = write_text(o.json, j.dump(2, ' ', false, nlohmann::json::error_handler_t::replace) + "\n"); !w.ok()) return fail(w);
    std::printf("wrote %s\n", o.json.c_str());
  }
  if (!o.svg.empty()) {
    if (Status w = write_text(o.svg, tools::bench_svg(*rep, predicted)); !w.ok()) return fail(w);
    std::printf("wrote %s\n", o.svg.c_str());
  }
  Status w = flush_stdout();
  return w.ok() ? 0 : fail(w);
}

}  // namespace

Command register_bench(CLI::App& app) {
  auto o = std::make_shared<BenchCliOptions>();
  tools::BenchOptions& b = o->bench;
  b.load_mode = "auto";  // as run and serve: resident where the checkpoint fits, else stream
  app.add_option("-m,--model", b.model_dir, "checkpoint directory")->required();
  app.add_option("--prompt", o->prompts, "prompt lengths in tokens, comma separated (default 512,2048,8192)")
      ->delimiter(',')
      ->check(in_range(1, 1 << 24));
  app.add_option("--gen", b.gen, "tokens generated per run")->check(in_range(1, 1 << 20))->capture_default_str();
  app.add_option("--reps", b.reps, "recorded warm repetitions per prompt length")->check(in_range(1, 1000))->capture_default_str();
  app.add_option("--warmup", b.warmup, "unrecorded warm runs first")->check(in_range(0, 100))->capture_default_str();
  add_threads_flag(app, &b.threads);
  app.add_option("--chunk", b.prefill_chunk, "prefill chunk in tokens")->check(in_range(1, 1 << 20))->capture_default_str();
  app.add_option("--parallel", b.parallel, "also run N concurrent greedy streams of the shortest prompt through one "
                 "engine, for each N, comma separated (e.g. 1,2,4,8): aggregate and per-stream decode tok/s, TTFT p50/p95")
      ->delimiter(',')
      ->check(in_range(1, 256));
  app.add_option("--batch-tokens", b.batch_tokens, "tokens per engine step in the --parallel runs (as strata serve)")
      ->check(in_range(1, 1 << 20))
      ->capture_default_str();
  app.add_option("--load-mode", b.load_mode, "auto, resident, stream or mmap (as strata run)")->capture_default_str();
  app.add_option("--ram-budget", o->ram_budget, "RAM the weight store may hold, e.g. 12G (default: available minus a margin)");
  auto* direct = app.add_flag("--direct-io", o->direct_io,
                              "stream: read experts with O_DIRECT (default: O_DIRECT where the file system takes it)");
  app.add_flag("--buffered-io", o->buffered_io, "stream: read experts through the page cache")->excludes(direct);
  app.add_option("--cold", b.cold,
                 "how the cold run starts uncached: auto (fadvise, then drop_caches if root, then a fresh copy), "
                 "fadvise, drop-caches, copy, or none (no cold run)")
      ->capture_default_str();
  app.add_option("--text", b.text_file, "prompt text, tokenized and repeated to length (default: random token ids)");
  app.add_option("--seed", b.seed, "seed of the random prompt ids")->check(in_range(0, 1.8e19));
  add_spec_flags(app, &o->spec);
  add_mpi_flags(app, &o->mpi);
  add_output_option(app, "--json", &o->json, "write the full report (runs, counters, plan) as JSON to FILE");
  add_output_option(app, "--svg", &o->svg, "write a plot of prefill and decode tok/s against context length to FILE");
  app.add_flag("--no-plan", o->no_plan, "do not compare with strata plan's predictions");
  app.add_option("--probe", o->probe, "machine profile for the predictions")->capture_default_str();
  return [o]() { return run_bench_cmd(*o); };
}

}  // namespace strata::cli
