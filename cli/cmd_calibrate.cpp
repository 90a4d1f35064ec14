// strata calibrate -m DIR -f TEXT [--out hot.json] [--imatrix F] [--max-tokens N] [--chunk N] [-t T]
//                  [placement flags] [--stats-json FILE]
// Runs a text through the model and writes the routed experts ranked by how often the router picks
// them (--out, tools/calibrate.h; `strata run --hot hot.json` then pins the top of the ranking in
// the expert cache) and/or the importance matrix of every quantisable linear (--imatrix, llama.cpp's
// GGUF imatrix format, tools/imatrix.h; `strata quantize --imatrix F` and llama-quantize read it).
// At least one of the two is required. Prints a summary: tokens, and the share of picks the top
// 10% / 25% of experts get.
// With --chunk 1 the text runs token by token, as decode would see it (teacher forcing), so
// --stats-json (one phase, "calibrate") measures an expert cache policy on a real text's routing.
#include <CLI/CLI.hpp>

#include <chrono>
#include <cstdio>
#include <optional>
#include <string>

#include "cli/commands.h"
#include "cli/common.h"
#include "cli/interrupt.h"
#include "cli/output_files.h"
#include "cli/progress_bar.h"
#include "cli/placement_flags.h"
#include "cli/stats_report.h"
#include "io/file.h"
#include "tools/calibrate.h"

namespace strata::cli {

namespace {

struct CalibrateOptions {
  std::string model_dir, text_file, out_file, imatrix_file;
  int64_t max_tokens = 8192;
  int64_t chunk = 2048;
  int threads = 0;
  PlacementFlags placement;
  std::string stats_json;
};

int run_calibrate(const CalibrateOptions& o) {
  if (o.out_file.empty() && o.imatrix_file.empty())
    return fail_usage(InvalidArgument("calibrate: nothing to write: give --out FILE (hot experts), --imatrix FILE "
                                      "(importance matrix), or both"));
  // Before the model loads: a bad output path would otherwise fail only after the whole run.
  if (Status s = check_output_files(
          {{"--out", o.out_file}, {"--imatrix", o.imatrix_file}, {"--stats-json", o.stats_json}},
          {{"--file", o.text_file},
           {"--hot", o.placement.hot_file},
           {.flag = "--model", .path = o.model_dir, .model = true}});
      !s.ok())
    return fail_usage(s);
  auto text = io::read_file_to_string(o.text_file, 256u << 20, io::ReadFrom::kFileOrStream);
  if (!text.ok()) return fail(text.error());
  auto popt = placement_options(o.placement);
  if (!popt.ok()) return fail_flag_value(popt.error());
  Logger log = stderr_logger(LogLevel::kWarn);
  auto lm = load_model(o.model_dir, o.threads, &log, *popt);
  if (!lm.ok()) return fail(lm.error());
  std::vector<int32_t> ids = lm->tok->encode(*text, /*special=*/false);
  if (ids.empty()) return fail(InvalidArgument(o.text_file + ": the text has no tokens"));
  if (o.max_tokens > 0 && static_cast<int64_t>(ids.size()) > o.max_tokens) ids.resize(static_cast<size_t>(o.max_tokens));
  model::Activations act = lm->model->new_activations();
  const StatsMark mark0 = StatsMark::take(*lm->model, act.profile);
  const auto t0 = std::chrono::steady_clock::now();
  ProgressBar bar;  // on stderr when it is a terminal
  std::optional<tools::ImatrixCollector> imatrix;
  if (!o.imatrix_file.empty()) imatrix.emplace(lm->model->config());
  InterruptGuard interrupt;  // Ctrl-C: stop after the current chunk and write what the chunks done cover
  auto r = tools::calibrate(
      *lm->model, act, ids, o.chunk,
      [&](int64_t done) {
        bar.on_event(ProgressEvent{"calibrate", "tokens", static_cast<uint64_t>(done), ids.size(), "", false});
      },
      imatrix ? &*imatrix : nullptr, interrupt.flag_ptr());
  bar.clear();
  if (!r.ok()) return fail(r.error());
  const bool interrupted = interrupt.interrupted();
  if (interrupted && r->tokens == 0) {
    std::fprintf(stderr, "strata calibrate: interrupted before the first chunk started; nothing written\n");
    return interrupt.exit_status();
  }
  if (interrupted)
    std::fprintf(stderr, "strata calibrate: interrupted: the outputs cover the first %lld of %zu tokens\n",
                 static_cast<long long>(r->tokens), ids.size());
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  const StatsMark mark1 = StatsMark::take(*lm->model, act.profile);
  r->model = o.model_dir;
  if (!o.out_file.empty()) {
    const std::string js = tools::hot_json(*r);
    if (Status s = io::write_file_atomic(o.out_file, js.data(), js.size()); !s.ok()) return fail(s);
  }
  size_t n_entries = 0;
  if (imatrix) {
    const tools::Imatrix m = imatrix->result({o.text_file}, static_cast<uint32_t>(o.chunk));
    n_entries = m.entries.size();
    if (Status s = tools::write_imatrix(m, o.imatrix_file); !s.ok()) return fail(s);
  }
  if (!o.stats_json.empty()) {
    const std::string sj = stats_json({phase_between("calibrate", mark0, mark1, r->tokens, secs)}, o.model_dir,
                                      lm->model->store().describe());
    if (Status s = io::write_file_atomic(o.stats_json, sj.data(), sj.size()); !s.ok()) return fail(s);
  }
  std::printf("strata calibrate: %lld tokens in %.1f s, %llu picks over %lld experts in %d layers%s%s\n",
              static_cast<long long>(r->tokens), secs, static_cast<unsigned long long>(r->picks),
              static_cast<long long>(r->n_experts_total), r->n_layers, o.out_file.empty() ? "" : " -> ",
              o.out_file.c_str());
  if (imatrix)
    std::printf("  imatrix: %zu entries -> %s\n", n_entries, o.imatrix_file.c_str());
  std::printf("  top 10%% of experts take %.1f%% of picks, top 25%% take %.1f%% (uniform routing: 10%%, 25%%)\n",
              100 * r->coverage(0.10), 100 * r->coverage(0.25));
  if (Status w = flush_stdout(); !w.ok()) return fail(w);
  return interrupted ? interrupt.exit_status() : 0;
}

}  // namespace

Command register_calibrate(CLI::App& app) {
  auto o = std::make_shared<CalibrateOptions>();
  app.add_option("-m,--model", o->model_dir, "checkpoint directory")->required();
  app.add_option("-f,--file", o->text_file, "text to calibrate on (plain text, tokenized as is)")->required();
  add_output_option(app, "--out", &o->out_file, "output hot file (JSON ranking for strata run --hot)");
  add_output_option(app, "--imatrix", &o->imatrix_file,
                    "output importance matrix (llama.cpp GGUF imatrix, for strata quantize / llama-quantize --imatrix)");
  app.add_option("--max-tokens", o->max_tokens, "use at most this many tokens of the text (0 = all)")
      ->check(in_range(0, 1 << 30));
  app.add_option("--chunk", o->chunk, "tokens per forward pass")->check(in_range(1, 1 << 20));
  add_threads_flag(app, &o->threads);
  add_placement_flags(app, &o->placement);
  add_output_option(app, "--stats-json", &o->stats_json,
                    "write placement stats of the calibration run (hit rates, bytes read) as JSON to FILE");
  return [o]() { return run_calibrate(*o); };
}

}  // namespace strata::cli
