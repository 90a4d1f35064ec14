// strata eval -m DIR|FILE.gguf -f TEXT [--ctx N] [--stride N] [--save-base F | --base F] [--json OUT]
//             [-t N] [placement flags]
// Perplexity of the model over a text in windows, and with --base the distance from a saved base run
// (KLD mean / p99 / max, top-1 agreement, delta perplexity), as llama-perplexity's
// --kl-divergence-base / --kl-divergence (tools/eval.h; windows, file format and numbers in
// docs/eval.md). Progress on stderr (a bar on a terminal, one line per window otherwise); the
// summary on stdout; --json OUT writes the numbers.
#include <CLI/CLI.hpp>
#include <chrono>
#include <cstdio>
#include <string>

#include "cli/commands.h"
#include "cli/common.h"
#include "cli/interrupt.h"
#include "cli/output_files.h"
#include "cli/placement_flags.h"
#include "cli/progress_bar.h"
#include "io/file.h"
#include "tools/eval.h"

namespace strata::cli {

namespace {

struct EvalCliOptions {
  std::string model_dir, text_file, json_out;
  tools::EvalOptions eval;
  bool ctx_given = false;
  int threads = 0;
  PlacementFlags placement;
};

int run_eval(EvalCliOptions& o) {
  if (Status s = o.eval.validate(); !s.ok()) return fail_usage(s);
  // Before the model loads: a bad output path would otherwise fail only after the whole evaluation.
  if (Status s = check_output_files(
          {{"--json", o.json_out}, {"--save-base", o.eval.save_base}},
          {{"--file", o.text_file},
           {"--base", o.eval.base},
           {"--hot", o.placement.hot_file},
           {.flag = "--model", .path = o.model_dir, .model = true}});
      !s.ok())
    return fail_usage(s);
  if (Status s = check_checkpoint_dir(o.model_dir); !s.ok()) return fail(s);
  auto text = io::read_file_to_string(o.text_file, 256u << 20, io::ReadFrom::kFileOrStream);
  if (!text.ok()) return fail(text.error());
  auto popt = placement_options(o.placement);
  if (!popt.ok()) return fail_flag_value(popt.error());
  Logger log = stderr_logger(LogLevel::kWarn);
  auto lm = load_model(o.model_dir, o.threads, &log, *popt);
  if (!lm.ok()) return fail(lm.error());
  const std::vector<int32_t> ids = lm->tok->encode(*text, /*special=*/false);
  auto plan =
      tools::plan_windows(static_cast<int64_t>(ids.size()), o.eval, lm->model->config().max_position_embeddings);
  if (!plan.ok()) return fail(plan.error());
  if (o.ctx_given && plan->ctx < o.eval.ctx)
    std::fprintf(stderr, "strata eval: --ctx %lld clamped to %lld (the text's tokens or the model's context)\n",
                 static_cast<long long>(o.eval.ctx), static_cast<long long>(plan->ctx));
  std::fprintf(stderr, "strata eval: %zu tokens, %lld window(s) of %lld tokens, stride %lld: scoring %lld tokens\n",
               ids.size(), static_cast<long long>(plan->n_windows), static_cast<long long>(plan->ctx),
               static_cast<long long>(plan->stride), static_cast<long long>(plan->n_scored));
  model::Activations act = lm->model->new_activations();
  ProgressBar bar;  // draws only on a terminal; otherwise one line per window
  // Ctrl-C or SIGTERM: stop before the next window, write nothing (--save-base's temp file is
  // removed), exit 130 or 143; a second signal exits at once (cli/interrupt.h; the next save of that
  // name sweeps the temp).
  InterruptGuard interrupt;
  o.eval.cancel = interrupt.flag_ptr();
  const auto t0 = std::chrono::steady_clock::now();
  auto r = tools::evaluate(*lm->model, act, ids, o.eval, [&](int64_t done, int64_t total, double ppl) {
    if (bar.enabled()) {
      bar.on_event(ProgressEvent{"eval", "windows", static_cast<uint64_t>(done), static_cast<uint64_t>(total), "",
                                 done == total});
    } else {
      std::fprintf(stderr, "strata eval: window %lld/%lld ppl %.4f\n", static_cast<long long>(done),
                   static_cast<long long>(total), ppl);
    }
  });
  bar.clear();
  if (!r.ok() && r.error().code() == StatusCode::kCancelled && interrupt.interrupted()) {
    std::fprintf(stderr, "strata: %s: nothing written\n", r.error().message().c_str());
    return interrupt.exit_status();
  }
  if (!r.ok()) return fail(r.error());
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  std::printf("strata eval: %s on %s: %lld tokens scored in %lld window(s) of %lld (stride %lld), %.1f s\n",
              o.model_dir.c_str(), o.text_file.c_str(), static_cast<long long>(r->plan.n_scored),
              static_cast<long long>(r->plan.n_windows), static_cast<long long>(r->plan.ctx),
              static_cast<long long>(r->plan.stride), secs);
  std::printf("  ppl %.6g +/- %.4g\n", r->ppl, r->ppl_stderr);
  if (r->has_base) {
    std::printf("  base ppl %.6g, delta ppl %+.6g\n", r->base_ppl, r->delta_ppl);
    std::printf("  KLD(base || this) mean %.6g, p99 %.6g, max %.6g nats; top-1 agreement %.2f%%\n", r->kld_mean,
                r->kld_p99, r->kld_max, r->top1);
  }
  if (!o.eval.save_base.empty()) std::printf("  base written to %s\n", o.eval.save_base.c_str());
  if (!o.json_out.empty()) {
    const std::string js = tools::eval_json(*r);
    if (Status s = io::write_file_atomic(o.json_out, js.data(), js.size()); !s.ok()) return fail(s);
  }
  if (Status w = flush_stdout(); !w.ok()) return fail(w);
  return 0;
}

}  // namespace

Command register_eval(CLI::App& app) {
  auto o = std::make_shared<EvalCliOptions>();
  app.add_option("-m,--model", o->model_dir, "checkpoint directory or GGUF file (strata quantize)")->required();
  app.add_option("-f,--file", o->text_file, "text to score (plain text, tokenized with the checkpoint's tokenizer)")
      ->required();
  app.add_option("--ctx", o->eval.ctx, "window length in tokens (clamped to the text and the model's context)")
      ->check(in_range(2, 1 << 24))
      ->capture_default_str()
      ->each([o](const std::string&) { o->ctx_given = true; });
  app.add_option("--stride", o->eval.stride,
                 "window step = targets scored per window, below --ctx (0 = ctx/2: each window scores its second half)")
      ->check(in_range(0, 1 << 24))
      ->capture_default_str();
  auto* save = add_output_option(app, "--save-base", &o->eval.save_base,
                                 "write this run's per-position distributions to F (u16 log-prob grid, docs/eval.md)");
  auto* base = app.add_option("--base", o->eval.base,
                              "compare against a base file saved on the same text, --ctx and --stride: KLD, top-1, "
                              "delta ppl");
  save->excludes(base);
  add_output_option(app, "--json", &o->json_out,
                    "write the numbers as JSON to OUT (ppl, ppl_stderr, tokens, windows; with "
                    "--base kld_mean, kld_p99, kld_max, top1, delta_ppl)");
  add_threads_flag(app, &o->threads);
  add_placement_flags(app, &o->placement);
  return [o]() { return run_eval(*o); };
}

}  // namespace strata::cli
