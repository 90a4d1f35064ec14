// strata run -m DIR -p TEXT [-f FILE] [-n N] [--temp T] [--top-p P] [--min-p P] [--top-k K]
//   [--seed S] [--think|--no-think] [-t THREADS] [-c|--ctx N] [placement flags] [--stats] [--stats-json F]
//   [--prefill exact|replay] [--save-session F] [--load-session F] [--spec dspark|draft|none]
//   [--draft-model M] [--spec-max N] [--spec-min-conf F]
// Renders one user turn (the document from -f, then the prompt), prefills it, streams the generated
// text to stdout as it decodes (never splitting a UTF-8 character), then prints one summary line on
// stderr (stdout holds only the answer, so `> answer.txt` captures the text alone).
// --load-session continues a saved session (-p/-f, when given, become a new user turn after it);
// --save-session feeds the last generated token and saves the session (runtime/session_file.h).
// Placement flags (cli/placement_flags.h) choose where weights live; --stats adds per-phase
// placement counters on stderr.
// Ctrl-C (cli/interrupt.h, issue #13 item 10): the first SIGINT (or SIGTERM) ends generation after
// the current token, then the newline, the stats line and --save-session are written as after any
// run, and the exit status is 130 (143); a second signal exits at once. One during prefill stops at
// the next chunk: stats are printed but no session is saved (it would end inside the prompt).
#include <CLI/CLI.hpp>
#include <unistd.h>

#include <cstdio>
#include <optional>
#include <span>
#include <string>

#include "chat/prompt_builder.h"
#include "chat/render.h"
#include "cli/commands.h"
#include "cli/common.h"
#include "cli/interrupt.h"
#include "cli/mpi_flags.h"
#include "cli/output_files.h"
#include "cli/placement_flags.h"
#include "cli/progress_bar.h"
#include "cli/spec_flags.h"
#include "cli/stats_report.h"
#include "io/file.h"
#include "runtime/generator.h"
#include "runtime/session_file.h"
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
  PlacementFlags placement;
  MpiFlags mpi;
  bool stats = false;
  std::string stats_json;
  std::string prefill = "exact";
  std::string save_session, load_session;
  SpecFlags spec;
};

// The tokens that continue a saved conversation with a new user turn (chat-and-api.md §4): the
// previous assistant turn ends with EOS (added when the saved run stopped before emitting it), then
// <｜User｜>TEXT<｜Assistant｜> and the thinking header (as render_single_turn writes it).
Result<std::vector<int32_t>> next_user_turn(const tokenizer::Tokenizer& tok, std::span<const int32_t> history,
                                            const std::string& text, bool thinking, int32_t eos) {
  chat::PromptBuilder b(tok);
  if (history.empty() || history.back() != eos) b.special_id(eos);
  STRATA_RETURN_IF_ERROR(b.special("<｜User｜>"));
  b.client_text(text);
  STRATA_RETURN_IF_ERROR(b.special("<｜Assistant｜>"));
  if (thinking) {
    STRATA_RETURN_IF_ERROR(b.special("<think>"));
  } else if (tok.token_to_id("</think>")) {
    b.special_id(*tok.token_to_id("</think>"));
  }
  return b.ids();
}

std::string mb(uint64_t bytes) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%.2f MB", static_cast<double>(bytes) / 1e6);
  return buf;
}

// The summary line: what was prefilled (or continued) and generated. The first generated token comes
// out of the prefill's last forward pass, so the decode rate (and --stats' decode column) covers the
// other N - 1: the line says so rather than disagreeing with the table.
void print_summary(std::FILE* out, const runtime::GenerateStats& st, int64_t resumed_tokens, const char* why) {
  char head[192];
  const std::string after = resumed_tokens > 0 ? " (after a saved session of " + std::to_string(resumed_tokens) + ")" : "";
  // A signal between prefill chunks stops the prompt part-way: the rate is over the chunks that ran.
  const std::string part = st.prefilled_tokens < st.prompt_tokens
                               ? " (stopped after " + std::to_string(st.prefilled_tokens) + ")"
                               : "";
  if (st.prompt_tokens > 0)
    std::snprintf(head, sizeof head, "prompt %lld tokens%s%s, prefill %.1f tok/s", static_cast<long long>(st.prompt_tokens),
                  part.c_str(), after.c_str(), st.prefill_tok_per_s());
  else
    std::snprintf(head, sizeof head, "continued a saved session of %lld tokens", static_cast<long long>(resumed_tokens));
  const long long n = st.generated_tokens;
  if (n <= 1) {  // nothing was decoded after the first token: no rate to report
    std::fprintf(out, "[strata] %s | generated %lld token%s%s\n", head, n, n == 1 ? "" : "s", why);
    return;
  }
  const char* first = st.prompt_tokens > 0 ? "comes with the prefill" : "was sampled from the saved logits";
  std::fprintf(out, "[strata] %s | generated %lld tokens, decode %.2f tok/s over the last %lld (the first %s)%s\n", head,
               n, st.decode_tok_per_s(), n - 1, first, why);
}

int run_run(const RunOptions& o) {
  // Before the model loads: a bad output path would otherwise fail only after the whole run.
  // --save-session may name the --load-session file (a conversation continued in place): the
  // session is read before it is saved.
  const std::string loaded =
      !o.save_session.empty() && same_file(o.load_session, o.save_session) ? std::string() : o.load_session;
  if (Status s = check_output_files({{"--stats-json", o.stats_json}, {"--save-session", o.save_session}},
                                    {{"--file", o.file},
                                     {"--load-session", loaded},
                                     {"--hot", o.placement.hot_file},
                                     {.flag = "--model", .path = o.model_dir, .model = true},
                                     {.flag = "--draft-model", .path = o.spec.draft_model, .model = true}});
      !s.ok())
    return fail_usage(s);
  std::string user;
  if (!o.file.empty()) {
    auto doc = io::read_file_to_string(o.file, 64u << 20, io::ReadFrom::kFileOrStream);  // -f <(cmd) works
    if (!doc.ok()) return fail(doc.error());
    user = *doc;
    while (!user.empty() && (user.back() == '\n' || user.back() == '\r' || user.back() == ' ')) user.pop_back();
    if (!o.prompt.empty()) user += "\n\n";
  }
  user += o.prompt;
  if (user.empty() && o.load_session.empty())
    return fail_usage(InvalidArgument("empty prompt: give -p TEXT and/or -f FILE (or --load-session F to continue)"));
  auto prefill_mode = runtime::parse_prefill_mode(o.prefill);
  if (!prefill_mode.ok()) return fail_usage(InvalidArgument("--prefill: " + prefill_mode.error().message()));
  // After -f is read: a signal while a pipe or FIFO blocks that read ends the process as before (the
  // guard's SA_RESTART would resume the read and leave the signal waiting on the writer).
  InterruptGuard interrupt;

  runtime::GenerateOptions g;
  g.max_new_tokens = o.n_predict;
  g.max_context = o.ctx;
  g.sampler.temperature = o.temp;
  g.sampler.top_p = o.top_p;
  g.sampler.min_p = o.min_p;
  g.sampler.top_k = o.top_k;
  g.sampler.seed = o.seed;
  g.prefill_mode = *prefill_mode;
  g.consume_last = !o.save_session.empty();  // the saved session then ends with the last printed token
  auto spec = spec_options(o.spec);
  if (!spec.ok()) return fail_usage(spec.error());
  g.spec = *spec;
  if (Status s = g.validate(); !s.ok()) return fail(s);

  Logger log = stderr_logger(o.verbose ? LogLevel::kInfo : LogLevel::kWarn);
  auto popt = placement_options(o.placement);
  if (!popt.ok()) return fail_flag_value(popt.error());
  // --mpi-pipeline keeps one mirror of the session's cache on each stage, moved only by forwards.
  std::string refused;
  if (o.spec.mode == "dspark") refused = "--spec dspark (the draft reads the last layers' features)";
  else if (o.spec.mode != "none") refused = "--spec " + o.spec.mode + " (verification rewinds the session)";
  else if (g.prefill_mode != runtime::PrefillMode::kExact) refused = "--prefill " + o.prefill;
  else if (!o.save_session.empty() || !o.load_session.empty()) refused = "--save-session / --load-session";
  if (Status s = check_mpi_flags(o.mpi, refused); !s.ok()) return fail_usage(s);
  auto role = start_mpi(o.mpi, o.model_dir, o.threads, *popt);  // before the model: it must outlive it
  if (!role.ok()) return fail_flag_value(role.error());
  if (role->served) return 0;
  ProgressBar bar;  // load and long-prefill progress on stderr when it is a terminal
  auto lm = load_model(o.model_dir, o.threads, &log, *popt, bar.fn(), role->peers, role->part());
  if (!lm.ok()) return fail(lm.error());
  if (interrupt.interrupted()) return interrupt.exit_status();  // nothing generated yet: nothing to report
  g.cancel = interrupt.flag_ptr();
  const tokenizer::Tokenizer& tok = *lm->tok;
  model::Model& m = *lm->model;
  warn_if_ctx_above_model(o.ctx, m.config().max_position_embeddings, &log);
  if (g.spec.mode == runtime::SpecMode::kDSpark && !m.has_dspark())
    return fail(NotSupported("--spec dspark: " + o.model_dir + " has no DSpark draft stages"));
  auto draft = load_draft_model(o.spec, o.model_dir, *lm, o.threads, &log, *popt);  // outlives the generation
  if (!draft.ok()) return fail_flag_value(draft.error());
  g.spec.draft_model = draft->get();
  g.stop_ids = {static_cast<int32_t>(m.config().eos_token_id)};

  // Sessions on disk are tied to this checkpoint (config.json + tensors).
  runtime::ModelIdentity identity;
  if (!o.load_session.empty() || !o.save_session.empty()) {
    auto id = runtime::model_identity(o.model_dir);
    if (!id.ok()) return fail(id.error());
    identity = *id;
  }
  std::optional<runtime::Session> resumed;
  Result<std::vector<int32_t>> prompt = std::vector<int32_t>{};
  if (!o.load_session.empty()) {
    auto loaded = runtime::load_session(m, identity, o.load_session);
    if (!loaded.ok()) return fail(loaded.error());
    if (!user.empty()) prompt = next_user_turn(tok, loaded->tokens(), user, o.think, g.stop_ids[0]);
    resumed.emplace(std::move(*loaded));
  } else {
    prompt = chat::render_single_turn(tok, user, o.think);
  }
  if (!prompt.ok()) return fail(prompt.error());
  if (o.verbose)
    std::fprintf(stderr, "strata: loaded %s in %.2f s, prompt %zu tokens, %d threads\n", o.model_dir.c_str(), lm->load_s,
                 prompt->size(), m.pool().n_threads());

  const int64_t resumed_tokens = resumed ? resumed->n_past() : 0;
  runtime::Generator gen(m);
  if (resumed) gen.session() = std::move(*resumed);
  tokenizer::StreamDecoder dec(tok, /*skip_special=*/true);
  runtime::GenerateStats st;
  const std::string placement = m.store().describe();
  if (o.verbose || o.stats || placement.rfind("resident", 0) != 0)
    std::fprintf(stderr, "strata: placement: %s\n", placement.c_str());
  warn_unused_placement_flags(o.placement, m.store(), &log);
  // Counter snapshots at the phase boundaries: the first token arrives right after prefill.
  if (static_cast<int64_t>(prompt->size()) > 2 * g.prefill_chunk) g.prefill_progress = bar.fn();
  const StatsMark mark0 = StatsMark::take(m, gen.activations().profile);
  StatsMark mark1;
  bool first_token = true;
  Status s = gen.generate(*prompt, g, [&](int32_t id) {
    if (first_token) {
      mark1 = StatsMark::take(m, gen.activations().profile);
      first_token = false;
    }
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
  // Ctrl-C during prefill: report what ran, but the session ends inside the prompt (not saved).
  const bool stopped_in_prefill = !s.ok() && s.code() == StatusCode::kCancelled && interrupt.interrupted();
  if (!s.ok() && !stopped_in_prefill) {
    std::fputc('\n', stdout);
    return fail(s);
  }
  // A signal the generation did not see (-n 0: no token step to read the flag at) still sets the
  // exit status (below), so the line says so too.
  const char* why = st.cancelled || interrupt.interrupted() ? " (interrupted)"
                    : st.stopped_by_eos                     ? " (end of sequence)"
                    : st.stopped_by_context                 ? " (context full)"
                                                            : "";
  std::fputc('\n', stdout);
  if (Status w = flush_stdout(); !w.ok()) return fail(w);
  print_summary(stderr, st, resumed_tokens, why);
  if (o.stats || !o.stats_json.empty()) {
    const StatsMark mark2 = StatsMark::take(m, gen.activations().profile);
    if (first_token) mark1 = mark2;
    const std::vector<PhaseStats> phases = {
        phase_between("prefill", mark0, mark1, st.prefilled_tokens, st.prefill_s),
        phase_between("decode", mark1, mark2, st.generated_tokens > 1 ? st.generated_tokens - 1 : 0, st.decode_s)};
    if (o.stats) {
      print_stats(stderr, phases);
      print_spec_stats(stderr, st.spec);
      // KV cache: the global KV per token of this config (model/kv_cache.h) and what the session holds.
      const model::KvCache& kv = gen.session().cache();
      const model::KvFootprint fp = model::kv_footprint(m.config());
      std::fprintf(stderr,
                   "[strata] kv cache: %lld tokens, global KV %.1f B/token (config), %s compressed KV + index keys, "
                   "%s held in all (rings %s)\n",
                   static_cast<long long>(kv.n_past), fp.global_bytes_per_token, mb(kv.global_bytes()).c_str(),
                   mb(kv.bytes()).c_str(), mb(static_cast<uint64_t>(fp.window_bytes)).c_str());
    }
    if (!o.stats_json.empty()) {
      const std::string js = with_spec_stats(stats_json(phases, o.model_dir, placement), st.spec);
      if (Status w = io::write_file_atomic(o.stats_json, js.data(), js.size()); !w.ok()) return fail(w);
    }
  }
  if (!o.save_session.empty() && stopped_in_prefill) {
    std::fprintf(stderr, "[strata] interrupted during prefill: session not saved to %s\n", o.save_session.c_str());
  } else if (!o.save_session.empty()) {
    if (Status w = runtime::save_session(gen.session(), identity, o.save_session); !w.ok()) return fail(w);
    std::fprintf(stderr, "[strata] session saved to %s (%lld tokens)\n", o.save_session.c_str(),
                 static_cast<long long>(gen.session().n_past()));
  }
  return interrupt.interrupted() ? interrupt.exit_status() : 0;
}

}  // namespace

Command register_run(CLI::App& app) {
  auto o = std::make_shared<RunOptions>();
  app.add_option("-m,--model", o->model_dir, "checkpoint directory (config.json, *.safetensors, tokenizer.json)")
      ->required();
  app.add_option("-p,--prompt", o->prompt, "prompt text (the question, after the document when -f is given)");
  app.add_option("-f,--file", o->file, "a document to read before the prompt");
  app.add_option("-n,--n-predict", o->n_predict, "maximum tokens to generate")
      ->check(in_range(0, 1 << 24))
      ->capture_default_str();
  app.add_option("--temp,--temperature", o->temp, "sampling temperature (0 = greedy)")
      ->check(non_negative())
      ->capture_default_str();
  app.add_option("--top-p", o->top_p, "nucleus sampling mass in (0, 1]")->capture_default_str();
  app.add_option("--min-p", o->min_p, "drop tokens below min-p x the top probability")->capture_default_str();
  app.add_option("--top-k", o->top_k, "keep the k most likely tokens (0 = all)")
      ->check(in_range(0, 1 << 24))
      ->capture_default_str();
  app.add_option("--seed", o->seed, "sampler seed (a number >= 0)")->check(in_range(0, 1.8e19));
  // Two flags rather than CLI11's "--think,!--no-think", whose help reads "--think,--no-think{false}".
  app.add_flag_callback("--think", [o] { o->think = true; }, "reason in <think>...</think> before answering");
  app.add_flag_callback("--no-think", [o] { o->think = false; }, "answer at once, no reasoning (the default)");
  add_threads_flag(app, &o->threads);
  app.add_option("-c,--ctx,--ctx-size", o->ctx, "context limit in tokens (default: the model's)")->check(in_range(0, 1 << 30));
  app.add_flag("-v,--verbose", o->verbose, "log load and run details to stderr");
  add_placement_flags(app, &o->placement);
  add_mpi_flags(app, &o->mpi);
  add_spec_flags(app, &o->spec);
  app.add_flag("--stats", o->stats, "print per-phase placement stats (bytes read, hit rates, I/O wait) to stderr");
  add_output_option(app, "--stats-json", &o->stats_json, "write per-phase placement stats as JSON to FILE");
  app.add_option("--prefill", o->prefill,
                 "exact (every prompt token through every layer, the default) or replay (decoder layers only for "
                 "the last sliding_window tokens, as official serving does)");
  add_output_option(app, "--save-session", &o->save_session,
                    "save the session (tokens, Engram history, caches) to FILE");
  app.add_option("--load-session", o->load_session,
                 "continue the session saved in FILE; -p/-f then add a new user turn, without them generation continues");
  return [o]() { return run_run(*o); };
}

}  // namespace strata::cli
