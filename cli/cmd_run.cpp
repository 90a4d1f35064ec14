// strata run -m DIR -p TEXT [-f FILE] [-n N] [--temp T] [--top-p P] [--min-p P] [--top-k K]
//   [--seed S] [--think|--no-think] [-t THREADS] [--ctx N]
// Renders one user turn (the document from -f, then the prompt), prefills it, streams the generated
// text to stdout as it decodes (never splitting a UTF-8 character), then prints one stats line.
#include <CLI/CLI.hpp>
#include <unistd.h>

#include <cstdio>
#include <string>

#include "chat/render.h"
#include "cli/commands.h"
#include "cli/common.h"
#include "io/file.h"
#include "runtime/generator.h"
#include "tokenizer/stream_decoder.h"

namespace strata::cli {

namespace {

struct RunOptions {
  std::string model_dir, prompt, file;
  int n_predict = 256;
  float temp = 0.6f, top_p = 0.95f, min_p = 0.0f;
  int top_k = 0;
  uint64_t seed = 0;
  bool think = false;
  int threads = 0;
  int64_t ctx = 0;
  bool verbose = false;
};

int run_run(const RunOptions& o) {
  std::string user;
  if (!o.file.empty()) {
    auto doc = io::read_file_to_string(o.file, 64u << 20);
    if (!doc.ok()) return fail(doc.error());
    user = *doc;
    while (!user.empty() && (user.back() == '\n' || user.back() == '\r' || user.back() == ' ')) user.pop_back();
    if (!o.prompt.empty()) user += "\n\n";
  }
  user += o.prompt;
  if (user.empty()) return fail(InvalidArgument("empty prompt: give -p TEXT and/or -f FILE"));

  runtime::GenerateOptions g;
  g.max_new_tokens = o.n_predict;
  g.max_context = o.ctx;
  g.sampler.temperature = o.temp;
  g.sampler.top_p = o.top_p;
  g.sampler.min_p = o.min_p;
  g.sampler.top_k = o.top_k;
  g.sampler.seed = o.seed;
  if (Status s = g.validate(); !s.ok()) return fail(s);

  Logger log = stderr_logger(o.verbose ? LogLevel::kInfo : LogLevel::kWarn);
  auto lm = load_model(o.model_dir, o.threads, &log);
  if (!lm.ok()) return fail(lm.error());
  const tokenizer::Tokenizer& tok = *lm->tok;
  model::Model& m = *lm->model;
  g.stop_ids = {static_cast<int32_t>(m.config().eos_token_id)};

  auto prompt = chat::render_single_turn(tok, user, o.think);
  if (!prompt.ok()) return fail(prompt.error());
  if (o.verbose)
    std::fprintf(stderr, "strata: loaded %s in %.2f s, prompt %zu tokens, %d threads\n", o.model_dir.c_str(), lm->load_s,
                 prompt->size(), m.pool().n_threads());

  runtime::Generator gen(m);
  tokenizer::StreamDecoder dec(tok, /*skip_special=*/true);
  runtime::GenerateStats st;
  Status s = gen.generate(*prompt, g, [&](int32_t id) {
    if (id == g.stop_ids[0]) return true;
    std::string piece = dec.push(id);
    if (!piece.empty()) {
      std::fwrite(piece.data(), 1, piece.size(), stdout);
      std::fflush(stdout);
    }
    return true;
  }, &st);
  std::string rest = dec.flush();
  std::fwrite(rest.data(), 1, rest.size(), stdout);
  if (!s.ok()) {
    std::fputc('\n', stdout);
    return fail(s);
  }
  const char* why = st.stopped_by_eos ? " (end of sequence)" : st.stopped_by_context ? " (context full)" : "";
  std::printf("\n\n[strata] prompt %lld tokens, prefill %.1f tok/s | generated %lld tokens, decode %.2f tok/s%s\n",
              static_cast<long long>(st.prompt_tokens), st.prefill_tok_per_s(),
              static_cast<long long>(st.generated_tokens), st.decode_tok_per_s(), why);
  if (Status w = flush_stdout(); !w.ok()) return fail(w);
  return 0;
}

}  // namespace

Command register_run(CLI::App& app) {
  auto o = std::make_shared<RunOptions>();
  app.add_option("-m,--model", o->model_dir, "checkpoint directory (config.json, *.safetensors, tokenizer.json)")
      ->required();
  app.add_option("-p,--prompt", o->prompt, "prompt text (the question, after the document when -f is given)");
  app.add_option("-f,--file", o->file, "a document to read before the prompt");
  app.add_option("-n,--n-predict", o->n_predict, "maximum tokens to generate")->check(in_range(0, 1 << 24));
  app.add_option("--temp", o->temp, "sampling temperature (0 = greedy)")->check(non_negative());
  app.add_option("--top-p", o->top_p, "nucleus sampling mass in (0, 1]");
  app.add_option("--min-p", o->min_p, "drop tokens below min-p x the top probability");
  app.add_option("--top-k", o->top_k, "keep the k most likely tokens (0 = all)")->check(in_range(0, 1 << 24));
  app.add_option("--seed", o->seed, "sampler seed (a number >= 0)")->check(in_range(0, 1.8e19));
  app.add_flag("--think,!--no-think", o->think, "thinking mode (default: off)");
  app.add_option("-t,--threads", o->threads, "threads (default: physical cores)")->check(in_range(0, ThreadPool::kMaxThreads));
  app.add_option("--ctx", o->ctx, "context limit in tokens (default: the model's)")->check(in_range(0, 1 << 30));
  app.add_flag("-v,--verbose", o->verbose, "log load and run details to stderr");
  return [o]() { return run_run(*o); };
}

}  // namespace strata::cli
