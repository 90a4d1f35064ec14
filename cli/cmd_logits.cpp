// strata logits -m DIR --tokens FILE.json --out FILE.f32 [--positions i,j,...] [--decode N]
//   [--decode-logits FILE.f32] [--dump DIR] [placement flags] [--stats] [--stats-json FILE]
// Prefills the token ids in one forward and writes float32 little-endian logits, one row of vocab
// size per requested position (all positions by default). With --decode N it also greedy-decodes N
// tokens through the incremental cache path: [0] is the prefill's last argmax, [k+1] the argmax of
// decode step k, printed as a JSON array on stdout (the fixtures' check, manifest "engine_check").
// With --dump on a checkpoint with DSpark stages, the draft (model/dspark.h) runs after the prefill
// and after every decode step, as the fixtures' harness ran forward_spec, and is dumped too.
#include <CLI/CLI.hpp>

#include <chrono>
#include <cstdio>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>

#include "cli/commands.h"
#include "cli/common.h"
#include "cli/placement_flags.h"
#include "cli/stats_report.h"
#include "cli/dump_observer.h"
#include "cli/mpi_flags.h"
#include "cli/output_files.h"
#include "io/file.h"
#include "runtime/sampler.h"

namespace strata::cli {

namespace {

struct LogitsOptions {
  std::string model_dir, tokens_file, out_file, positions, decode_logits_file, dump_dir;
  int decode = 0;
  int threads = 0;
  PlacementFlags placement;
  MpiFlags mpi;
  bool stats = false;
  std::string stats_json;
};

Result<std::vector<int32_t>> read_tokens(const std::string& path) {
  STRATA_ASSIGN_OR_RETURN(std::string text, io::read_file_to_string(path, 256u << 20));
  auto j = nlohmann::json::parse(text, nullptr, false);
  if (j.is_discarded()) return InvalidArgument(path + ": not JSON (expected an array of token ids or {\"ids\": [...]})");
  const nlohmann::json* arr = &j;
  if (j.is_object()) {
    auto it = j.find("ids");
    if (it == j.end()) return InvalidArgument(path + ": JSON object without an \"ids\" array");
    arr = &*it;
  }
  if (!arr->is_array()) return InvalidArgument(path + ": expected an array of token ids");
  std::vector<int32_t> ids;
  for (const auto& v : *arr) {
    if (!v.is_number_integer()) return InvalidArgument(path + ": token ids must be integers");
    const int64_t x = v.get<int64_t>();
    if (x < 0 || x > INT32_MAX) return InvalidArgument(path + ": token id " + std::to_string(x) + " out of range");
    ids.push_back(static_cast<int32_t>(x));
  }
  return ids;
}

Result<std::vector<int64_t>> parse_positions(const std::string& s, int64_t n) {
  std::vector<int64_t> out;
  std::stringstream ss(s);
  std::string item;
  while (std::getline(ss, item, ',')) {
    if (item.empty()) continue;
    char* end = nullptr;
    const long long v = std::strtoll(item.c_str(), &end, 10);
    if (*end != '\0' || v < 0 || v >= n)
      return InvalidArgument("--positions: '" + item + "' is not a position in [0, " + std::to_string(n) + ")");
    if (!out.empty() && v <= out.back()) return InvalidArgument("--positions must be strictly increasing");
    out.push_back(v);
  }
  if (out.empty()) return InvalidArgument("--positions '" + s + "' names no position");
  return out;
}

int run_logits(const LogitsOptions& o) {
  if (!o.decode_logits_file.empty() && o.decode == 0)
    return fail_usage(InvalidArgument("--decode-logits needs --decode N (it writes the logits of the decode steps)"));
  // Before the model loads: a bad output path would otherwise fail only after the whole run.
  if (Status s = check_output_files(
          {{"--out", o.out_file},
           {"--decode-logits", o.decode_logits_file},
           {"--stats-json", o.stats_json},
           // DumpObserver::write creates the directory: it must not be (or be in) the model, and an
           // existing file there used to fail only after the run.
           {.flag = "--dump", .path = o.dump_dir, .dir = true}},
          {{"--tokens", o.tokens_file},
           {"--hot", o.placement.hot_file},
           {.flag = "--model", .path = o.model_dir, .model = true}});
      !s.ok())
    return fail_usage(s);
  auto ids = read_tokens(o.tokens_file);
  if (!ids.ok()) return fail(ids.error());
  if (ids->empty()) return fail(InvalidArgument(o.tokens_file + ": no token ids (empty prompt)"));
  const int64_t n = static_cast<int64_t>(ids->size());
  std::vector<int64_t> positions;
  if (!o.positions.empty()) {
    auto p = parse_positions(o.positions, n);
    if (!p.ok()) return fail(p.error());
    positions = *p;
  } else {
    for (int64_t i = 0; i < n; ++i) positions.push_back(i);
  }
  Logger log = stderr_logger(LogLevel::kWarn);
  auto popt = placement_options(o.placement);
  if (!popt.ok()) return fail_flag_value(popt.error());
  if (Status s = check_mpi_flags(o.mpi, o.dump_dir.empty() ? "" : "--dump (rank 0 sees only its layers)"); !s.ok())
    return fail_usage(s);
  auto role = start_mpi(o.mpi, o.model_dir, o.threads, *popt);  // before the model: it must outlive it
  if (!role.ok()) return fail_flag_value(role.error());
  if (role->served) return 0;
  auto lm = load_model(o.model_dir, o.threads, &log, *popt, {}, role->peers, role->part());
  if (!lm.ok()) return fail(lm.error());
  model::Model& m = *lm->model;
  const int64_t V = m.config().vocab_size;
  const std::string placement = m.store().describe();
  if (o.stats || !o.stats_json.empty()) std::fprintf(stderr, "strata: placement: %s\n", placement.c_str());
  using clock = std::chrono::steady_clock;
  model::Activations act = m.new_activations();
  const StatsMark mark0 = StatsMark::take(m, act.profile);
  const auto t0 = clock::now();

  // Prefill once, with logits for the requested positions plus the last one (for decode).
  model::LogitsRequest req;
  req.kind = model::LogitsRequest::Kind::kRows;
  req.rows = positions;
  const bool last_included = !positions.empty() && positions.back() == n - 1;
  if (!last_included) req.rows.push_back(n - 1);
  std::vector<float> logits(static_cast<size_t>(req.rows.size() * V));
  std::unique_ptr<DumpObserver> dump;
  if (!o.dump_dir.empty()) {
    dump = std::make_unique<DumpObserver>(m.config().window_size);
    dump->begin_prefill(n);
  }
  model::KvCache cache = m.new_cache();
  // With --dump on a checkpoint with DSpark stages, the draft runs after the prefill (seeding its
  // rings) and after every decode step, as the fixtures' harness ran forward_spec.
  const bool draft = dump && m.has_dspark();
  std::vector<float> main_hidden;
  model::DSparkState dspark = m.new_dspark_state();
  // One sequence: the prompt's rows take the prefill arithmetic, each decode step the decode
  // arithmetic (model/forward_request.h), as the engine loop runs them.
  auto run = [&](std::span<const int32_t> toks, model::RowKind kind, const model::LogitsRequest& lr, float* out) {
    model::ForwardEntry e;
    e.cache = &cache;
    e.tokens = toks;
    e.kind = kind;
    e.logits = lr;
    e.logits_out = out;
    e.dspark_features = draft ? &main_hidden : nullptr;
    return m.forward(model::ForwardRequest{std::span<model::ForwardEntry>(&e, 1), dump.get()}, act);
  };
  Status s = run(*ids, model::RowKind::kPrompt, req, logits.data());
  if (!s.ok()) return fail(s);
  if (draft) {
    s = m.dspark_seed(dspark, main_hidden.data(), n, 0, act);
    if (!s.ok()) return fail(s);
  }
  const StatsMark mark1 = StatsMark::take(m, act.profile);
  const auto t1 = clock::now();
  StatsMark mark2 = mark1;
  auto t2 = t1;
  s = io::write_file_atomic(o.out_file, logits.data(), positions.size() * static_cast<size_t>(V) * sizeof(float));
  if (!s.ok()) return fail(s);

  if (o.decode > 0) {
    std::vector<int32_t> out;
    std::vector<float> row(logits.end() - V, logits.end());
    std::vector<float> all_decode;
    double draft_s = 0;  // DSpark drafts (with --dump), not part of the decode timing
    out.push_back(runtime::argmax(row));
    for (int k = 0; k + 1 < o.decode; ++k) {
      const int32_t tok[1] = {out.back()};
      if (dump) dump->begin_decode();
      model::LogitsRequest last;
      s = run(tok, model::RowKind::kDecode, last, row.data());
      if (!s.ok()) return fail(s);
      if (!o.decode_logits_file.empty()) all_decode.insert(all_decode.end(), row.begin(), row.end());
      out.push_back(runtime::argmax(row));
      // A draft block must fit in the context; its time stays out of the decode phase's.
      const int64_t block = m.config().dspark_block_size;
      if (draft && n + k + 1 + block <= m.config().max_position_embeddings) {
        const auto d0 = clock::now();
        auto d = m.dspark_draft(dspark, out.back(), main_hidden.data(), n + k, act);
        if (!d.ok()) return fail(d.error());
        dump->begin_dspark();
        const int64_t B = static_cast<int64_t>(d->confidence.size());
        const std::vector<int64_t> draft_ids(d->ids.begin(), d->ids.end());
        dump->ids("draft_ids", -1, draft_ids, {1, B + 1});
        dump->tensor("confidence", -1, d->confidence, {1, B});
        if (k < 2) dump->tensor("draft_logits_first_steps", -1, d->logits, {1, B, V});
        draft_s += std::chrono::duration<double>(clock::now() - d0).count();
      }
    }
    // The decode phase's time without the drafts' (its store counters still include their reads).
    t2 = clock::now() - std::chrono::duration_cast<clock::duration>(std::chrono::duration<double>(draft_s));
    mark2 = StatsMark::take(m, act.profile);
    if (!o.decode_logits_file.empty()) {
      s = io::write_file_atomic(o.decode_logits_file, all_decode.data(), all_decode.size() * sizeof(float));
      if (!s.ok()) return fail(s);
    }
    std::string js = "[";
    for (size_t i = 0; i < out.size(); ++i) js += (i ? ", " : "") + std::to_string(out[i]);
    js += "]\n";
    std::fwrite(js.data(), 1, js.size(), stdout);
    if (Status w = flush_stdout(); !w.ok()) return fail(w);
  }
  if (o.stats || !o.stats_json.empty()) {
    std::vector<PhaseStats> phases = {
        phase_between("prefill", mark0, mark1, n, std::chrono::duration<double>(t1 - t0).count())};
    if (o.decode > 1)
      phases.push_back(phase_between("decode", mark1, mark2, o.decode - 1, std::chrono::duration<double>(t2 - t1).count()));
    if (o.stats) print_stats(stderr, phases);
    if (!o.stats_json.empty()) {
      const std::string js = stats_json(phases, o.model_dir, placement);
      s = io::write_file_atomic(o.stats_json, js.data(), js.size());
      if (!s.ok()) return fail(s);
    }
  }
  if (dump) {
    s = dump->write(o.dump_dir);
    if (!s.ok()) return fail(s);
  }
  return 0;
}

}  // namespace

Command register_logits(CLI::App& app) {
  auto o = std::make_shared<LogitsOptions>();
  app.add_option("-m,--model", o->model_dir, "checkpoint directory")->required();
  app.add_option("--tokens", o->tokens_file, "JSON file: an array of token ids, or an object with \"ids\"")->required();
  add_output_option(app, "--out", &o->out_file,
                    "output: float32 little-endian logits, one row of vocab_size per position")
      ->required();
  app.add_option("--positions", o->positions, "comma-separated prompt positions (default: all)");
  app.add_option("--decode", o->decode, "also greedy-decode N tokens; prints them as a JSON array")
      ->check(in_range(0, 1 << 20));
  add_output_option(app, "--decode-logits", &o->decode_logits_file,
                    "with --decode: write each decode step's logits here");
  app.add_option("--dump", o->dump_dir, "write named intermediates as .npy (golden fixture names) into DIR; with DSpark stages and --decode, also each step's draft (dspark_*.npy)");
  add_threads_flag(app, &o->threads);
  add_placement_flags(app, &o->placement);
  add_mpi_flags(app, &o->mpi);
  app.add_flag("--stats", o->stats, "print per-phase (prefill, decode) placement stats to stderr");
  add_output_option(app, "--stats-json", &o->stats_json, "write per-phase placement stats as JSON to FILE");
  return [o]() { return run_logits(*o); };
}

}  // namespace strata::cli
