// strata plan (-m DIR | --config FILE) [--ram SIZE] [--vram SIZE] [--reserve SIZE] [-t N] [-c|--ctx N]
//   [--prompt 512,2048,8192] [--gen N] [--chunk N] [--load-mode auto|resident|stream|mmap]
//   [--prefill exact|replay] [--hit-rate X] [--hot FILE] [--disk-gbps X] [--iops X] [--direct-io] [--no-overlap]
//   [--probe FILE] [--json] [--quant experts=T,dense=T,head=T,engram=T]
// From config.json alone (no weights are read): the size of every component by dtype, KV bytes per
// token and at 8K / 128K / 1M, Engram bytes per token, active weights per token; then, for the
// probed machine (the cached `strata probe` profile, measured now if there is none) with any
// overrides, the placement and the predicted prefill / decode speed with the bottleneck named.
// --quant (or -m a GGUF, whose tensor types are read) sizes every component as `strata quantize`
// writes it; block-format kernels are timed at assumed rates, which the output names.
#include <sys/stat.h>

#include <CLI/CLI.hpp>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <memory>
#include <string>

#include "cli/commands.h"
#include "cli/common.h"
#include "cli/output_files.h"
#include "cli/placement_flags.h"
#include "cli/probe_cache.h"
#include "io/checkpoint.h"
#include "io/file.h"
#include "tools/plan.h"

namespace strata::cli {

namespace {

struct PlanCliOptions {
  tools::PlanOptions plan;
  std::string model_dir, config, probe = default_probe_cache();
  std::string ram, vram, reserve, prefill = "exact", hot, hosts, quant;
  tools::RoutingCounts routing;
  std::vector<int64_t> prompts;
  bool json = false, direct_io = false, buffered_io = false, no_overlap = false, reprobe = false;
};

int run_plan(PlanCliOptions& o) {
  if (o.model_dir.empty() == o.config.empty())
    return fail_usage(InvalidArgument("give exactly one of -m DIR or --config FILE"));
  // Where there is no valid profile, --probe is an output: the measurement is saved there. Checked
  // before anything else, as every output is (an empty path, /proc/x or a path under a file used to
  // be found only after minutes of measuring, or to read as "not a strata machine profile").
  // The profile is read once, here; the plan below uses it.
  auto cached = tools::MachineProfile::load(o.probe);
  // --reprobe replaces a strata profile, whole or not; any other file at --probe is the user's and is
  // refused below as without it (--reprobe used to skip that check and overwrite a text file).
  const bool use_cached = cached.ok() && !o.reprobe;
  const bool replace = o.reprobe && (cached.ok() || cached.error().code() != StatusCode::kNotFound);
  if (!use_cached)
    if (Status s = check_output_files({{"--probe", o.probe, /*creates_dir=*/true}},
                                      {{.flag = "--model", .path = o.model_dir, .model = true}});
        !s.ok())
      return fail_usage(s);
  if (!o.config.empty() && io::is_gguf_path(o.config))
    return fail_usage(InvalidArgument("--config '" + o.config + "': a GGUF is a checkpoint, not a config.json; " +
                                      "use -m " + o.config));
  if (!o.model_dir.empty())
    if (Status s = check_checkpoint_dir(o.model_dir); !s.ok()) return fail(s);
  // What the plan's heading names: the config.json read, or for a GGUF the file itself.
  const std::string path = !o.config.empty()               ? o.config
                           : io::is_gguf_path(o.model_dir) ? o.model_dir
                                                           : (std::filesystem::path(o.model_dir) / "config.json").string();
  auto text = o.config.empty() ? io::read_checkpoint_text(o.model_dir, "config.json", 16u << 20)
                              : io::read_file_to_string(path, 16u << 20);
  if (!text.ok()) return fail(text.error());
  auto cfg = model::ModelConfig::parse(*text, path);
  if (!cfg.ok()) return fail(cfg.error());
  auto vision = tools::parse_vision_shape(*text, path);
  if (!vision.ok()) return fail(vision.error());

  tools::PlanOptions& po = o.plan;
  // --quant: every component as `strata quantize` would write it (tools/quant_choice.h).
  const bool gguf = !o.model_dir.empty() && io::is_gguf_path(o.model_dir);
  if (!o.quant.empty()) {
    if (gguf)
      return fail_usage(InvalidArgument("--quant sizes an official checkpoint or config; " + o.model_dir +
                                        " is a GGUF, whose tensor types plan reads (drop --quant)"));
    auto q = tools::parse_quant_spec(o.quant);
    if (!q.ok()) return fail_usage(q.error());
    po.quant = *q;
    if (po.quant.engram)
      if (Status s = tools::check_engram_quant(*po.quant.engram, cfg->engram_head_dim,
                                               "--quant engram=" + tools::quant_choice_name(po.quant.engram));
          !s.ok())
        return fail_usage(s);
  }
  // A GGUF from `strata quantize`: size every component as that file stores it (its tensor types).
  if (gguf) {
    auto ck = io::Checkpoint::open_gguf(o.model_dir);
    if (!ck.ok()) return fail(ck.error());
    auto q = tools::quant_choice_of_checkpoint(**ck);
    if (!q.ok()) return fail(q.error());
    po.quant = *q;
    po.gguf_layout = true;
  }
  if (!o.prompts.empty()) po.prompts = o.prompts;
  if (po.context > cfg->max_position_embeddings) {
    Logger log = stderr_logger(LogLevel::kWarn);
    warn_if_ctx_above_model(po.context, cfg->max_position_embeddings, &log);
    po.context = cfg->max_position_embeddings;
  }
  if (o.prefill != "exact" && o.prefill != "replay")
    return fail_usage(InvalidArgument("--prefill must be exact or replay, got '" + o.prefill + "'"));
  po.replay = o.prefill == "replay";
  auto expert_io = expert_io_flags(o.direct_io, o.buffered_io, po.load_mode);
  if (!expert_io.ok()) return fail(expert_io.error());
  po.expert_io = *expert_io;
  po.overlap_io = !o.no_overlap;
  for (auto [flag, text_value, out] :
       {std::tuple{"--ram", &o.ram, &po.ram_budget_bytes}, std::tuple{"--vram", &o.vram, &po.vram_bytes},
        std::tuple{"--reserve", &o.reserve, &po.reserve_bytes}}) {
    if (text_value->empty()) continue;
    auto v = tools::parse_size(*text_value, flag);
    if (!v.ok()) return fail_flag_value(v.error());
    if (*v == 0 && std::string(flag) == "--ram")  // as run's --ram-budget: 0 would silently mean "unset"
      return fail_usage(InvalidArgument("--ram '" + *text_value + "' must be at least one byte"));
    *out = *v;
  }
  if (!o.hot.empty()) {
    auto r = tools::read_routing_counts(o.hot);
    if (!r.ok()) return fail_flag_value(r.error());
    o.routing = std::move(*r);
    po.routing = &o.routing;
  }
  if (!o.hosts.empty()) {
    auto h = tools::read_hosts(o.hosts);
    if (!h.ok()) return fail_flag_value(h.error());
    po.hosts = std::move(*h);
  }
  if (Status v = po.validate(); !v.ok()) return fail(v);

  // The machine: the cached profile, or a measurement now (disk: the model's directory).
  tools::MachineProfile machine;
  if (use_cached) {
    machine = *cached;
    if (machine.age_days() > 30)
      std::fprintf(stderr, "strata: warning: machine profile %s is %.0f days old (run strata probe)\n", o.probe.c_str(),
                   machine.age_days());
    struct stat st {};
    if (!o.model_dir.empty() && machine.disk.measured && ::stat(o.model_dir.c_str(), &st) == 0 &&
        static_cast<uint64_t>(st.st_dev) != machine.disk.device)
      std::fprintf(stderr, "strata: warning: the profile's disk numbers are for %s, another device than %s (run strata probe -m %s)\n",
                   machine.disk.dir.c_str(), o.model_dir.c_str(), o.model_dir.c_str());
  } else {
    if (!cached.ok() && cached.error().code() != StatusCode::kNotFound) {
      // Only a strata profile is ever replaced; any other file at --probe is the user's and is never
      // overwritten, --reprobe or not.
      std::ifstream in(o.probe, std::ios::binary);
      std::string head(4096, '\0');
      in.read(head.data(), static_cast<std::streamsize>(head.size()));
      head.resize(static_cast<size_t>(in.gcount()));
      if (head.find("strata-probe/") == std::string::npos)
        return fail(InvalidArgument("--probe " + o.probe + ": exists and is not a strata machine profile (" +
                                    cached.error().to_string() + "); refusing to overwrite it"));
      // A profile of another format is whole and simply old: measure again. A damaged one (a bad or
      // missing field, a hand edit gone wrong, a newer strata's) is refused naming the field, unless
      // --reprobe asks for it: replacing it would cost the user's file and three minutes for one
      // mistyped value.
      if (!replace && cached.error().code() != StatusCode::kNotSupported)
        return fail(InvalidArgument("--probe " + cached.error().message() +
                                    "; fix it, or run with --reprobe to measure this machine again and replace it"));
    }
    // The probe takes minutes: say so before the first silent second (its progress follows).
    if (replace)
      std::fprintf(stderr, "strata: --reprobe: measuring this machine again (~3 min; strata probe) to replace %s\n",
                   o.probe.c_str());
    else if (cached.error().code() == StatusCode::kNotFound)
      std::fprintf(stderr,
                   "strata: no machine profile at %s: measuring this machine first (~3 min, once; "
                   "strata probe)\n",
                   o.probe.c_str());
    else
      std::fprintf(stderr, "strata: warning: %s; measuring this machine again (~3 min; strata probe) into %s\n",
                   cached.error().to_string().c_str(), o.probe.c_str());
    tools::ProbeOptions pr;
    pr.disk_dir = storage_dir_of(o.model_dir);
    auto m = probe_machine(pr, o.probe);
    if (!m.ok()) return fail(m.error());
    machine = *m;
  }
  auto plan = tools::make_plan(*cfg, *vision, machine, po, path);
  if (!plan.ok()) return fail(plan.error());
  const std::string out = o.json ? tools::plan_json(*plan) : tools::plan_text(*plan);
  std::fputs(out.c_str(), stdout);
  Status w = flush_stdout();
  return w.ok() ? 0 : fail(w);
}

}  // namespace

Command register_plan(CLI::App& app) {
  auto o = std::make_shared<PlanCliOptions>();
  app.add_option("-m,--model", o->model_dir, "checkpoint directory or GGUF (only config.json and, for a GGUF, the tensor types are read)");
  app.add_option("--config", o->config, "a config.json (HF release layout or flat inference config)");
  app.add_option("--quant", o->quant,
                 std::string("size the checkpoint as strata quantize would write it: KEY=TYPE,... with KEY one of ") +
                     tools::kQuantKeys + " (any subset; absent = keep) and TYPE one of " + tools::kQuantTypeNames +
                     ", e.g. experts=q2_k,engram=q4_k (a GGUF given with -m: its own types)");
  app.add_option("--ram,--ram-budget", o->ram,
                 "RAM for weights, as run --ram-budget takes it: e.g. 24G, all for the store, KV and activations on "
                 "top (default: the probe's available RAM minus max(1G, 10%), as run)");
  app.add_option("--vram", o->vram, "GPU memory, e.g. 24G (reported only: no GPU backend yet)");
  app.add_option("--reserve", o->reserve,
                 "RAM kept outside the store for KV, activations and the OS (default: max(1G, 10%); none with --ram)");
  add_threads_flag(app, &o->plan.threads);
  app.add_option("-c,--ctx,--ctx-size", o->plan.context, "tokens the KV cache must hold (default: longest prompt + gen)")
      ->check(in_range(0, 1 << 30));
  app.add_option("--prompt", o->prompts, "prompt lengths to predict, comma separated (default 512,2048,8192)")
      ->delimiter(',')
      ->check(in_range(1, 1 << 24));
  app.add_option("--gen", o->plan.gen, "generated tokens; decode is predicted at prompt + gen/2")
      ->check(in_range(0, 1 << 24))
      ->capture_default_str();
  app.add_option("--parallel", o->plan.parallel, "also predict the aggregate decode of N concurrent streams batched "
                 "per step, for each N, comma separated (e.g. 1,2,4,8)")
      ->delimiter(',')
      ->check(in_range(1, 4096));
  app.add_option("--hosts", o->hosts,
                 "also predict decode with expert parallelism over MPI on the hosts in FILE (one per line: NAME "
                 "ram=SIZE link_gbps=X latency_us=X [disk_gbps=X]; the first is rank 0), for the first 1..N of them");
  app.add_option("--chunk", o->plan.prefill_chunk, "prefill chunk in tokens")->check(in_range(1, 1 << 20))->capture_default_str();
  app.add_option("--load-mode", o->plan.load_mode, "auto, resident, stream or mmap")->capture_default_str();
  app.add_option("--prefill", o->prefill, "exact (every layer for every token) or replay (encoder only)")
      ->capture_default_str();
  app.add_option("--hit-rate", o->plan.expert_hit_rate, "expert cache hit rate in [0, 1] (default: uniform routing)")
      ->check(in_range(0, 1));
  app.add_option("--hot", o->hot,
                 "routing measured by strata calibrate (its hot file): hit rate = share of picks of the experts that fit");
  app.add_option("--disk-gbps", o->plan.disk_gbps, "sequential read GB/s of the model's disk (default: probed)")
      ->check(non_negative());
  app.add_option("--iops", o->plan.iops, "4 KiB random reads per second at depth 32 (default: probed)")->check(non_negative());
  auto* direct = app.add_flag("--direct-io", o->direct_io,
                              "streamed expert reads use O_DIRECT (default: O_DIRECT where the probed disk takes it)");
  app.add_flag("--buffered-io", o->buffered_io, "streamed expert reads go through the page cache")->excludes(direct);
  app.add_flag("--no-overlap", o->no_overlap, "streamed reads do not overlap compute (no prefetch)");
  // An output as well where no valid profile is there (the measurement is saved to it).
  add_output_option(app, "--probe", &o->probe, "machine profile from strata probe")->capture_default_str();
  app.add_flag("--reprobe", o->reprobe, "measure the machine again instead of reading the cached profile");
  app.add_flag("--json", o->json, "print the plan as JSON");
  return [o]() { return run_plan(*o); };
}

}  // namespace strata::cli
