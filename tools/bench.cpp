// strata bench: see bench.h.
#include "tools/bench.h"

#include "io/checkpoint.h"

#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <ctime>
#include <filesystem>
#include <memory>
#include <nlohmann/json.hpp>
#include <sstream>
#include <thread>

#include "core/cpu_features.h"
#include "io/file.h"
#include "model/model.h"
#include "runtime/engine.h"
#include "runtime/session.h"
#include "store/placement_options.h"
#include "runtime/draft_model.h"
#include "tokenizer/compressed_vocab.h"
#include "tokenizer/tokenizer.h"
#include "tools/bench_parallel.h"
#include "tools/scoped_dir.h"

namespace strata::tools {

namespace {

namespace fs = std::filesystem;
using clock_type = std::chrono::steady_clock;
using ojson = nlohmann::ordered_json;

double seconds_since(clock_type::time_point t0) {
  return std::chrono::duration<double>(clock_type::now() - t0).count();
}

// Bytes this process has caused to be read from storage (/proc/self/io read_bytes); 0 if unknown.
uint64_t os_read_bytes() {
  auto t = io::read_file_to_string("/proc/self/io", 1 << 16);
  if (!t.ok()) return 0;
  const size_t p = t->find("\nread_bytes:");
  return p == std::string::npos ? 0 : std::strtoull(t->c_str() + p + 12, nullptr, 10);
}

uint64_t major_faults() {
  rusage ru{};
  ::getrusage(RUSAGE_SELF, &ru);
  return static_cast<uint64_t>(ru.ru_majflt);
}

uint64_t peak_rss() {
  rusage ru{};
  ::getrusage(RUSAGE_SELF, &ru);
  return static_cast<uint64_t>(ru.ru_maxrss) * 1024;
}

std::string utc_now() {
  const std::time_t t = std::time(nullptr);
  std::tm tm{};
  gmtime_r(&t, &tm);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%SZ", &tm);
  return buf;
}

}  // namespace

// Prompt of exactly `n` tokens: the text's tokens repeated, or seeded ids of ordinary tokens.
std::vector<int32_t> bench_prompt(const std::vector<int32_t>& text_ids, int64_t n, uint64_t seed, int32_t id_limit) {
  std::vector<int32_t> p(static_cast<size_t>(n));
  if (!text_ids.empty()) {
    for (int64_t i = 0; i < n; ++i) p[static_cast<size_t>(i)] = text_ids[static_cast<size_t>(i) % text_ids.size()];
    return p;
  }
  uint64_t s = seed * 0x9E3779B97F4A7C15ull + 0x2545F4914F6CDD1Dull;
  const uint32_t lo = 100, hi = static_cast<uint32_t>(std::max<int32_t>(id_limit, 101));
  for (int64_t i = 0; i < n; ++i) {
    s ^= s << 13;
    s ^= s >> 7;
    s ^= s << 17;
    p[static_cast<size_t>(i)] = static_cast<int32_t>(lo + (s >> 11) % (hi - lo));
  }
  return p;
}

namespace {

struct Loaded {
  std::unique_ptr<model::Model> model;
  double seconds = 0;
  uint64_t read_bytes = 0;
};

// How the bench loads a model (target or draft): threads, logger and placement from the options.
Result<model::ModelOptions> model_options(const BenchOptions& o) {
  model::ModelOptions mo;
  mo.n_threads = o.threads;
  mo.logger = o.logger;
  STRATA_ASSIGN_OR_RETURN(mo.placement.mode, store::parse_load_mode(o.load_mode));
  mo.placement.ram_budget_bytes = o.ram_budget;
  mo.placement.expert_io = o.expert_io;
  return mo;
}

Result<Loaded> load(const std::string& dir, const model::CompressedVocabMap& vocab, const BenchOptions& o) {
  STRATA_ASSIGN_OR_RETURN(model::ModelOptions mo, model_options(o));
  mo.progress = o.progress;
  mo.expert_peers = o.expert_peers;
  mo.pipeline = o.pipeline;
  Loaded l;
  const uint64_t r0 = os_read_bytes();
  const auto t0 = clock_type::now();
  STRATA_ASSIGN_OR_RETURN(l.model, model::Model::load(dir, vocab, mo));
  l.seconds = seconds_since(t0);
  l.read_bytes = os_read_bytes() - r0;
  return l;
}

}  // namespace

// One run: prefill `prompt` in chunks, sample, decode gen - 1 more tokens (greedy, EOS ignored).
Result<BenchRun> run_once(model::Model& m, const std::vector<int32_t>& prompt, int64_t gen, int64_t chunk,
                          const ProgressFn& progress, const runtime::SpecOptions& spec,
                          const std::atomic<bool>* cancel) {
  BenchRun r;
  r.prompt = static_cast<int64_t>(prompt.size());
  r.gen = gen;
  // One greedy sequence through the generation loop (runtime/engine.h), no stop ids: every
  // repetition does the same work. A fresh engine per run: its Activations start cold, as before.
  runtime::EngineOptions eo;
  eo.prefill_chunk = chunk;
  eo.batch_tokens = chunk;
  runtime::Engine engine(m, eo);
  runtime::Session s(m);
  model::Activations& act = engine.activations();
  runtime::SequenceOptions so;
  so.max_new_tokens = gen;
  so.sampler.temperature = 0;
  so.spec = spec;
  so.cancel = cancel;
  so.prefill_progress = [&](const ProgressEvent& e) {
    report_progress(progress, ProgressEvent{"prefill", "tokens", e.done, e.total, "", false});
  };
  const uint64_t rb0 = os_read_bytes(), mf0 = major_faults();
  const store::PlacementStats st0 = m.store().stats();
  const model::ForwardProfile fp0 = act.profile;
  model::ForwardProfile fp1;
  bool first = true, done = false;
  Status result;
  clock_type::time_point t1;
  runtime::SequenceCallbacks cb;
  const auto t0 = clock_type::now();
  cb.on_token = [&](int32_t) {
    if (first) {  // the phase boundary: prefill's logits gave the first token
      first = false;
      r.ttft_s = seconds_since(t0);
      r.prefill_s = r.ttft_s;
      report_progress(progress, ProgressEvent{"prefill", "tokens", prompt.size(), prompt.size(), "", true});
      fp1 = act.profile;
      const store::PlacementStats st1 = m.store().stats().since(st0);
      r.prefill_expert_acquires = st1.expert_acquires;
      r.prefill_expert_hits = st1.expert_hits;
      t1 = clock_type::now();
    }
    return true;
  };
  cb.on_finish = [&](runtime::FinishReason, const Status& st, const runtime::SequenceStats& ss) {
    done = true;
    result = st;
    r.prefill_s = ss.prefill_s;
    r.spec = ss.spec;
  };
  STRATA_RETURN_IF_ERROR(engine.add(&s, prompt, std::move(so), std::move(cb)).status());
  while (!done) engine.step();
  STRATA_RETURN_IF_ERROR(result);
  // A cancel that lands on a token ends the sequence with OK (SequenceOptions::cancel): still no run.
  if (cancel != nullptr && cancel->load()) return Cancelled("bench: interrupted");
  r.decode_s = gen > 1 ? seconds_since(t1) : 0;
  const model::ForwardProfile pp = fp1.since(fp0), dp = act.profile.since(fp1);
  r.prefill_moe_s = static_cast<double>(pp.moe_ns) * 1e-9;
  r.prefill_engram_s = static_cast<double>(pp.engram_ns) * 1e-9;
  r.decode_moe_s = static_cast<double>(dp.moe_ns) * 1e-9;
  r.decode_engram_s = static_cast<double>(dp.engram_ns) * 1e-9;
  r.prefill_attention_s = static_cast<double>(pp.attention_ns) * 1e-9;
  r.prefill_head_s = static_cast<double>(pp.head_ns) * 1e-9;
  r.prefill_forward_s = static_cast<double>(pp.forward_ns) * 1e-9;
  r.decode_attention_s = static_cast<double>(dp.attention_ns) * 1e-9;
  r.decode_head_s = static_cast<double>(dp.head_ns) * 1e-9;
  r.decode_forward_s = static_cast<double>(dp.forward_ns) * 1e-9;
  r.os_read_bytes = os_read_bytes() - rb0;
  r.major_faults = major_faults() - mf0;
  r.kv_bytes = s.cache().bytes();
  const store::PlacementStats st = m.store().stats().since(st0);
  r.expert_acquires = st.expert_acquires;
  r.expert_hits = st.expert_hits;
  r.expert_loads = st.expert_loads;
  r.store_bytes_read = st.bytes_read();
  r.engram_rows_read = st.engram_rows_read;
  r.io_wait_s = static_cast<double>(st.io_wait_ns()) * 1e-9;
  r.prefetch_issued = st.prefetch_issued;
  r.prefetch_used = st.prefetch_used;
  r.prefetch_outstanding_at_start = st.prefetch_outstanding_at_start;
  r.prefetch_hit_rate = st.prefetch_hit_rate();
  return r;
}

namespace {

BenchPoint summarize(int64_t prompt, bool cold, std::vector<BenchRun> runs) {
  BenchPoint p;
  p.prompt = prompt;
  p.cold = cold;
  std::vector<double> pf, tt, dc;
  for (const BenchRun& r : runs) {
    pf.push_back(r.prefill_tok_s());
    tt.push_back(r.ttft_s);
    dc.push_back(r.decode_tok_s());
  }
  p.prefill_tok_s = spread_of(pf);
  p.ttft_s = spread_of(tt);
  p.decode_tok_s = spread_of(dc);
  p.runs = std::move(runs);
  return p;
}

ojson spread_json(const Spread& s) { return ojson{{"median", s.median}, {"min", s.min}, {"max", s.max}}; }

// Evicts the checkpoint's pages by the requested method; returns the method that worked and the
// directory to load from (a fresh copy for "copy").
Result<std::string> make_cold(const BenchOptions& o, ScopedDir* copy, std::string* load_dir,
                              std::vector<std::string>* notes) {
  *load_dir = o.model_dir;
  const std::string& want = o.cold;
  if (want == "fadvise" || want == "auto") {
    STRATA_RETURN_IF_ERROR(evict_page_cache(o.model_dir));
    STRATA_ASSIGN_OR_RETURN(double left, page_cache_fraction(o.model_dir));
    if (want == "fadvise" || left < 0.02) return std::string("fadvise");
    notes->push_back("posix_fadvise left " + std::to_string(static_cast<int>(100 * left)) +
                     "% of the checkpoint cached (mapped elsewhere?)");
  }
  if (want == "drop-caches" || want == "auto") {
    Status d = drop_all_page_caches();
    if (d.ok()) return std::string("drop-caches");
    if (want == "drop-caches") return d;
    notes->push_back("drop_caches not permitted: " + d.message());
  }
  // A fresh copy written around the page cache, beside the checkpoint (the same disk), in a
  // directory removed when the bench ends, fails, or (killed) by the next bench's make_temp.
  fs::path model = fs::absolute(o.model_dir).lexically_normal();
  if (model.filename().empty()) model = model.parent_path();  // "dir/" names dir
  STRATA_ASSIGN_OR_RETURN(*copy, ScopedDir::make_temp(model.parent_path().string(),
                                                      model.filename().string() + ".strata-bench-cold"));
  // A directory is copied as a directory; a GGUF (and the rest of its split set) into one, keeping
  // its file names (a split set is found by them).
  const bool one_file = fs::is_regular_file(model);
  const std::string dst = (fs::path(copy->path()) / (one_file ? fs::path("gguf") : model.filename())).string();
  STRATA_RETURN_IF_ERROR(copy_uncached(o.model_dir, dst, o.cancel));
  *load_dir = one_file ? (fs::path(dst) / model.filename()).string() : dst;
  return std::string("copy");
}

}  // namespace

Spread spread_of(std::vector<double> v) {
  Spread s;
  if (v.empty()) return s;
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  s.median = n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
  s.min = v.front();
  s.max = v.back();
  return s;
}

Status BenchOptions::validate() const {
  if (model_dir.empty()) return InvalidArgument("bench needs a checkpoint directory (-m DIR)");
  if (prompts.empty()) return InvalidArgument("--prompt needs at least one length");
  for (int64_t p : prompts)
    if (p < 1 || p > (1 << 24)) return InvalidArgument("--prompt lengths must be in [1, 16777216], got " + std::to_string(p));
  if (gen < 1 || gen > (1 << 20)) return InvalidArgument("--gen must be in [1, 1048576]");
  if (reps < 1 || reps > 1000) return InvalidArgument("--reps must be in [1, 1000]");
  if (warmup < 0 || warmup > 100) return InvalidArgument("--warmup must be in [0, 100]");
  if (threads < 0 || threads > 256) return InvalidArgument("--threads must be in [0, 256]");
  if (prefill_chunk < 1) return InvalidArgument("prefill chunk must be positive");
  for (int n : parallel)
    if (n < 1 || n > 256) return InvalidArgument("--parallel stream counts must be in [1, 256], got " + std::to_string(n));
  if (batch_tokens < 1) return InvalidArgument("--batch-tokens must be >= 1");
  if (Status m = store::parse_load_mode(load_mode).status(); !m.ok()) return m;
  if (cold != "auto" && cold != "fadvise" && cold != "drop-caches" && cold != "copy" && cold != "none")
    return InvalidArgument("--cold must be auto, fadvise, drop-caches, copy or none, got '" + cold + "'");
  return Status();
}

Result<BenchReport> run_bench(const BenchOptions& o) {
  STRATA_RETURN_IF_ERROR(o.validate());
  BenchReport rep;
  rep.options = o;
  rep.options.progress = nullptr;
  rep.options.logger = nullptr;
  rep.date = utc_now();
  rep.git_commit = o.git_commit;
  rep.command = o.command;
  char host[256] = {};
  if (::gethostname(host, sizeof host - 1) == 0) rep.hostname = host;
  rep.simd = CpuFeatures::detect().best_level();
  if (auto info = io::read_file_to_string("/proc/cpuinfo", 1 << 20); info.ok()) {
    const size_t p = info->find("model name");
    if (p != std::string::npos) {
      const size_t c = info->find(':', p), e = info->find('\n', p);
      if (c != std::string::npos && c < e) rep.cpu_model = info->substr(c + 2, e - c - 2);
    }
  }
  STRATA_ASSIGN_OR_RETURN(rep.checkpoint, checkpoint_identity(o.model_dir));

  // Tokenizer, Engram vocabulary, prompts (before any timing).
  // A GGUF (`strata quantize`) carries its tokenizer.json as metadata (io::read_checkpoint_text).
  STRATA_ASSIGN_OR_RETURN(std::string tok_json, io::read_checkpoint_text(o.model_dir, "tokenizer.json", 1ull << 30));
  STRATA_ASSIGN_OR_RETURN(tokenizer::Tokenizer tok, tokenizer::Tokenizer::from_json(tok_json, o.model_dir));
  STRATA_ASSIGN_OR_RETURN(tokenizer::CompressedVocab cv, tokenizer::build_compressed_vocab(tok));
  const model::CompressedVocabMap vocab{std::move(cv.map), cv.n_classes};
  std::vector<int32_t> text_ids;
  if (!o.text_file.empty()) {
    STRATA_ASSIGN_OR_RETURN(std::string text, io::read_file_to_string(o.text_file, 256u << 20, io::ReadFrom::kFileOrStream));
    text_ids = tok.encode(text, /*allow_special=*/false);
    if (text_ids.empty()) return InvalidArgument(o.text_file + ": no tokens");
  }
  STRATA_ASSIGN_OR_RETURN(model::ModelConfig cfg, model::ModelConfig::load(o.model_dir));
  std::vector<int64_t> prompts = o.prompts;
  std::sort(prompts.begin(), prompts.end());
  prompts.erase(std::unique(prompts.begin(), prompts.end()), prompts.end());
  if (prompts.back() + o.gen > cfg.max_position_embeddings)
    return InvalidArgument("prompt " + std::to_string(prompts.back()) + " + gen " + std::to_string(o.gen) +
                           " exceeds the model's context of " + std::to_string(cfg.max_position_embeddings));
  const int32_t id_limit = std::min<int32_t>(tok.model_vocab_size(), static_cast<int32_t>(cfg.vocab_size));
  std::vector<std::vector<int32_t>> prompt_ids;
  for (size_t i = 0; i < prompts.size(); ++i) prompt_ids.push_back(bench_prompt(text_ids, prompts[i], o.seed + i, id_limit));

  const uint64_t total_runs = (o.cold != "none" ? prompts.size() : 0) +
                              prompts.size() * static_cast<uint64_t>(o.warmup + o.reps) + o.parallel.size();
  uint64_t runs_done = 0;
  auto tick = [&](const std::string& what) {
    ++runs_done;
    report_progress(o.progress, ProgressEvent{"bench", "runs", runs_done, total_runs, what, false});
  };
  // Between phases (a load is not cut short; the runs and the cold copy stop within themselves).
  auto check_cancel = [&]() { return o.cancel != nullptr && o.cancel->load() ? Cancelled("bench: interrupted") : Status(); };
  // Prefill progress only for prompts long enough to be worth a bar.
  const ProgressFn no_progress;
  // --spec draft: the draft model, loaded after each load of the target (cold, then warm), sharing
  // the tensors it kept identical with that target (runtime::load_draft_model).
  runtime::SpecOptions spec = o.spec;
  std::unique_ptr<model::Model> draft;
  if (spec.mode == runtime::SpecMode::kDraft) {
    if (o.draft_model_dir.empty()) return InvalidArgument("--spec draft needs --draft-model");
    STRATA_RETURN_IF_ERROR(runtime::check_draft_checkpoint(o.model_dir, o.draft_model_dir));
  }
  auto load_draft_for = [&](const model::Model& target) -> Status {
    if (spec.mode != runtime::SpecMode::kDraft) return Status();
    spec.draft_model = nullptr;
    draft.reset();
    STRATA_ASSIGN_OR_RETURN(model::ModelOptions mo, model_options(o));  // the draft computes its own experts
    runtime::DraftSharing sh;
    STRATA_ASSIGN_OR_RETURN(draft, runtime::load_draft_model(o.draft_model_dir, target, vocab, mo, &sh));
    rep.draft_shared_bytes = sh.bytes;
    spec.draft_model = draft.get();
    return Status();
  };

  // Cold: evict, load, one run per prompt length.
  if (o.cold != "none") {
    STRATA_ASSIGN_OR_RETURN(rep.page_cache_before, page_cache_fraction(o.model_dir));
    std::string load_dir;
    ScopedDir cold_copy;  // holds the cold copy, if one was made, until the cold runs are done
    STRATA_ASSIGN_OR_RETURN(rep.cold_method, make_cold(o, &cold_copy, &load_dir, &rep.notes));
    STRATA_ASSIGN_OR_RETURN(rep.page_cache_after, page_cache_fraction(load_dir));
    STRATA_ASSIGN_OR_RETURN(Loaded l, load(load_dir, vocab, o));
    STRATA_RETURN_IF_ERROR(check_cancel());
    rep.load_cold_s = l.seconds;
    rep.load_cold_read_bytes = l.read_bytes;
    rep.threads = l.model->pool().n_threads();
    STRATA_RETURN_IF_ERROR(load_draft_for(*l.model));
    for (size_t i = 0; i < prompts.size(); ++i) {
      STRATA_ASSIGN_OR_RETURN(BenchRun r, run_once(*l.model, prompt_ids[i], o.gen, o.prefill_chunk,
                                                   prompts[i] >= 4096 ? o.progress : no_progress, spec, o.cancel));
      rep.points.push_back(summarize(prompts[i], true, {r}));
      tick("cold " + std::to_string(prompts[i]));
    }
    spec.draft_model = nullptr;
    draft.reset();  // before its target
  } else {
    rep.cold_method = "none";
  }

  // Warm: load again (from the page cache), warm up, then the recorded repetitions.
  STRATA_RETURN_IF_ERROR(check_cancel());
  STRATA_ASSIGN_OR_RETURN(Loaded l, load(o.model_dir, vocab, o));
  STRATA_RETURN_IF_ERROR(check_cancel());
  rep.load_warm_s = l.seconds;
  rep.threads = l.model->pool().n_threads();
  STRATA_RETURN_IF_ERROR(load_draft_for(*l.model));
  for (size_t i = 0; i < prompts.size(); ++i) {
    const ProgressFn& pf = prompts[i] >= 4096 ? o.progress : no_progress;
    for (int w = 0; w < o.warmup; ++w) {
      STRATA_RETURN_IF_ERROR(run_once(*l.model, prompt_ids[i], o.gen, o.prefill_chunk, pf, spec, o.cancel).status());
      tick("warm-up " + std::to_string(prompts[i]));
    }
    std::vector<BenchRun> runs, plain;
    const bool pairs = o.spec.mode != runtime::SpecMode::kNone;
    for (int r = 0; r < o.reps; ++r) {
      if (pairs) {  // the same run without speculation right before: a ratio measured side by side
        STRATA_ASSIGN_OR_RETURN(BenchRun run, run_once(*l.model, prompt_ids[i], o.gen, o.prefill_chunk, pf, {}, o.cancel));
        plain.push_back(run);
      }
      STRATA_ASSIGN_OR_RETURN(BenchRun run, run_once(*l.model, prompt_ids[i], o.gen, o.prefill_chunk, pf, spec, o.cancel));
      runs.push_back(run);
      tick("warm " + std::to_string(prompts[i]));
    }
    BenchPoint point = summarize(prompts[i], false, runs);
    if (pairs) {
      std::vector<double> pd, ratio;
      for (size_t k = 0; k < plain.size(); ++k) {
        pd.push_back(plain[k].decode_tok_s());
        if (plain[k].decode_tok_s() > 0) ratio.push_back(runs[k].decode_tok_s() / plain[k].decode_tok_s());
      }
      point.plain_decode_tok_s = spread_of(pd);
      point.spec_over_plain = spread_of(ratio);
      point.plain_runs = std::move(plain);
    }
    rep.points.push_back(std::move(point));
  }
  // Concurrent streams (issue 14 item 7): the shortest prompt length, a different prompt per stream.
  for (int n : o.parallel) {
    std::vector<std::vector<int32_t>> ps;
    for (int k = 0; k < n; ++k)
      ps.push_back(bench_prompt(text_ids, prompts.front(), o.seed + 1 + static_cast<uint64_t>(k), id_limit));
    STRATA_RETURN_IF_ERROR(check_cancel());
    STRATA_ASSIGN_OR_RETURN(ParallelPoint pp, run_parallel(*l.model, ps, o.gen, o.prefill_chunk, o.batch_tokens, o.cancel));
    rep.parallel.push_back(pp);
    tick("parallel " + std::to_string(n));
  }
  // A cancel that came after the last run's last token still means no report.
  STRATA_RETURN_IF_ERROR(check_cancel());
  report_progress(o.progress, ProgressEvent{"bench", "runs", total_runs, total_runs, "", true});
  rep.peak_rss_bytes = peak_rss();
  rep.store = l.model->store().describe();
  rep.expert_reads = l.model->store().expert_reads();
  spec.draft_model = nullptr;
  draft.reset();  // before its target
  return rep;
}

std::string BenchReport::to_json() const {
  ojson j;
  j["format"] = "strata-bench/1";
  j["date"] = date;
  j["git_commit"] = git_commit;
  j["command"] = command;
  j["machine"] = {{"hostname", hostname}, {"cpu_model", cpu_model}, {"simd", simd}, {"threads", threads}};
  j["checkpoint"] = {{"dir", checkpoint.dir},
                     {"hash", checkpoint.hash},
                     {"tensor_bytes", checkpoint.tensor_bytes},
                     {"file_bytes", checkpoint.file_bytes},
                     {"n_tensors", checkpoint.n_tensors},
                     {"n_shards", checkpoint.n_shards}};
  j["options"] = {{"prompts", options.prompts}, {"gen", options.gen},           {"reps", options.reps},
                  {"warmup", options.warmup},   {"threads", options.threads},   {"prefill_chunk", options.prefill_chunk},
                  {"load_mode", options.load_mode}, {"ram_budget", options.ram_budget}, {"expert_io", store::expert_io_name(options.expert_io)},
                  {"cold", options.cold},     {"text_file", options.text_file},
                  {"seed", options.seed},     {"mpi_ranks", options.mpi_ranks}};
  j["cold"] = {{"method", cold_method},
               {"page_cache_before", page_cache_before},
               {"page_cache_after", page_cache_after},
               {"load_s", load_cold_s},
               {"load_read_bytes", load_cold_read_bytes}};
  j["load_warm_s"] = load_warm_s;
  j["store"] = store;
  j["expert_reads"] = store::expert_reads_name(expert_reads);
  j["counters"] = {{"peak_rss_bytes", peak_rss_bytes}, {"draft_shared_bytes", draft_shared_bytes}};
  ojson pts = ojson::array();
  for (const BenchPoint& p : points) {
    ojson pj;
    pj["prompt"] = p.prompt;
    pj["phase"] = p.cold ? "cold" : "warm";
    pj["prefill_tok_s"] = spread_json(p.prefill_tok_s);
    pj["ttft_s"] = spread_json(p.ttft_s);
    pj["decode_tok_s"] = spread_json(p.decode_tok_s);
    if (!p.plain_runs.empty()) {
      pj["plain_decode_tok_s"] = spread_json(p.plain_decode_tok_s);
      pj["spec_over_plain"] = spread_json(p.spec_over_plain);
      ojson sp = ojson::array();
      for (const BenchRun& r : p.runs)
        sp.push_back({{"cycles", r.spec.cycles}, {"drafted", r.spec.drafted}, {"accepted", r.spec.accepted},
                      {"cycle_tokens", r.spec.cycle_tokens}, {"plain_steps", r.spec.plain_steps},
                      {"empty_drafts", r.spec.empty_drafts}, {"draft_s", r.spec.draft_s}, {"verify_s", r.spec.verify_s},
                      {"plain_s", r.spec.plain_s}, {"guard_pauses", r.spec.pauses}, {"guard_probes", r.spec.probes}});
      pj["spec_runs"] = sp;
    }
    ojson runs = ojson::array();
    for (const BenchRun& r : p.runs)
      runs.push_back({{"prefill_s", r.prefill_s},
                      {"ttft_s", r.ttft_s},
                      {"decode_s", r.decode_s},
                      {"gen", r.gen},
                      {"os_read_bytes", r.os_read_bytes},
                      {"major_faults", r.major_faults},
                      {"kv_bytes", r.kv_bytes},
                      {"expert_acquires", r.expert_acquires},
                      {"expert_hits", r.expert_hits},
                      {"expert_loads", r.expert_loads},
                      {"prefill_expert_acquires", r.prefill_expert_acquires},
                      {"prefill_expert_hits", r.prefill_expert_hits},
                      {"store_bytes_read", r.store_bytes_read},
                      {"engram_rows_read", r.engram_rows_read},
                      {"io_wait_s", r.io_wait_s},
                      {"prefetch_issued", r.prefetch_issued},
                      {"prefetch_used", r.prefetch_used},
                      {"prefetch_outstanding_at_start", r.prefetch_outstanding_at_start},
                      {"prefetch_hit_rate", r.prefetch_hit_rate},
                      {"prefill_moe_s", r.prefill_moe_s},
                      {"prefill_engram_s", r.prefill_engram_s},
                      {"decode_moe_s", r.decode_moe_s},
                      {"decode_engram_s", r.decode_engram_s},
                      {"prefill_attention_s", r.prefill_attention_s},
                      {"prefill_head_s", r.prefill_head_s},
                      {"prefill_forward_s", r.prefill_forward_s},
                      {"decode_attention_s", r.decode_attention_s},
                      {"decode_head_s", r.decode_head_s},
                      {"decode_forward_s", r.decode_forward_s}});
    pj["runs"] = runs;
    pts.push_back(pj);
  }
  j["points"] = pts;
  ojson par = ojson::array();
  for (const ParallelPoint& p : parallel)
    par.push_back({{"streams", p.streams},
                   {"prompt", p.prompt},
                   {"gen", p.gen},
                   {"aggregate_decode_tok_s", p.aggregate_decode_tok_s},
                   {"stream_decode_tok_s", spread_json(p.stream_decode_tok_s)},
                   {"ttft_p50_s", p.ttft_p50_s},
                   {"ttft_p95_s", p.ttft_p95_s},
                   {"wall_s", p.wall_s},
                   {"steps", p.steps}});
  j["parallel"] = par;
  j["notes"] = notes;
  return j.dump(2, ' ', false, nlohmann::json::error_handler_t::replace) + "\n";
}

std::string BenchReport::to_text() const {
  std::ostringstream o;
  char line[256];
  o << "strata bench: " << checkpoint.dir << " (id " << checkpoint.hash << ", " << checkpoint.n_tensors << " tensors, "
    << std::fixed;
  o.precision(2);
  o << static_cast<double>(checkpoint.tensor_bytes) / 1e9 << " GB)\n";
  o << "  commit " << (git_commit.empty() ? "unknown" : git_commit) << ", " << hostname << " (" << cpu_model << ", " << simd
    << "), " << threads << " threads, load mode " << options.load_mode << ", chunk " << options.prefill_chunk << ", gen "
    << options.gen << ", " << options.reps << " reps after " << options.warmup << " warm-up";
  if (options.mpi_ranks > 0 && options.pipeline)
    o << ", --mpi-pipeline over " << options.mpi_ranks << " ranks (layer ranges, rank 0 layers "
      << options.pipeline->layer_lo << "-" << options.pipeline->layer_hi - 1 << ")";
  else if (options.mpi_ranks > 0)
    o << ", --mpi over " << options.mpi_ranks << " rank" << (options.mpi_ranks > 1 ? "s" : "")
      << " (routed experts split, dense on rank 0)";
  o << "\n";
  if (cold_method != "none") {
    std::snprintf(line, sizeof line,
                  "  cold: %s (page cache %.0f%% -> %.0f%% of the checkpoint), load %.2f s reading %.2f GB; warm load %.2f s\n",
                  cold_method.c_str(), 100 * page_cache_before, 100 * page_cache_after, load_cold_s,
                  static_cast<double>(load_cold_read_bytes) / 1e9, load_warm_s);
    o << line;
  }
  o << "  store: " << store << "\n";
  std::snprintf(line, sizeof line, "  %-5s %8s %22s %22s %22s %9s %8s %8s %9s\n", "phase", "prompt", "prefill tok/s (min-max)",
                "TTFT s (min-max)", "decode tok/s (min-max)", "disk MB", "hit %", "I/O s", "MoE % p/d");
  o << line;
  for (const BenchPoint& p : points) {
    uint64_t rd = 0, acq = 0, hits = 0;
    double wait = 0, pf_s = 0, pf_moe = 0, dc_s = 0, dc_moe = 0;
    for (const BenchRun& r : p.runs) {
      pf_s += r.prefill_s;
      pf_moe += r.prefill_moe_s;
      dc_s += r.decode_s;
      dc_moe += r.decode_moe_s;
      rd += std::max(r.os_read_bytes, r.store_bytes_read);
      acq += r.expert_acquires;
      hits += r.expert_hits;
      wait += r.io_wait_s;
    }
    const double runs = static_cast<double>(std::max<size_t>(1, p.runs.size()));
    std::snprintf(line, sizeof line, "  %-5s %8lld %9.1f (%5.1f-%5.1f) %9.3f (%5.3f-%5.3f) %9.2f (%5.2f-%5.2f) %9.1f %8.1f %8.2f %4.0f/%-4.0f\n",
                  p.cold ? "cold" : "warm", static_cast<long long>(p.prompt), p.prefill_tok_s.median, p.prefill_tok_s.min,
                  p.prefill_tok_s.max, p.ttft_s.median, p.ttft_s.min, p.ttft_s.max, p.decode_tok_s.median,
                  p.decode_tok_s.min, p.decode_tok_s.max, static_cast<double>(rd) / 1e6 / runs,
                  acq ? 100.0 * static_cast<double>(hits) / static_cast<double>(acq) : 100.0, wait / runs,
                  pf_s > 0 ? 100 * pf_moe / pf_s : 0.0, dc_s > 0 ? 100 * dc_moe / dc_s : 0.0);
    o << line;
  }
  for (const BenchPoint& p : points) {
    if (p.plain_runs.empty()) continue;
    runtime::SpecStats t;
    for (const BenchRun& r : p.runs) {
      t.cycles += r.spec.cycles;
      t.drafted += r.spec.drafted;
      t.accepted += r.spec.accepted;
      t.cycle_tokens += r.spec.cycle_tokens;
      t.draft_s += r.spec.draft_s;
      t.verify_s += r.spec.verify_s;
      t.pauses += r.spec.pauses;
      t.probes += r.spec.probes;
    }
    char sline[512];
    std::snprintf(sline, sizeof sline,
                  "  spec %s, prompt %lld: decode %.2f vs %.2f tok/s plain, ratio %.3f (%.3f-%.3f); acceptance %.1f%%, "
                  "%.2f tokens/cycle, %lld cycles, verify %.0f%%, guard %lld pauses / %lld probes\n",
                  std::string(runtime::spec_mode_name(options.spec.mode)).c_str(), static_cast<long long>(p.prompt),
                  p.decode_tok_s.median, p.plain_decode_tok_s.median, p.spec_over_plain.median, p.spec_over_plain.min,
                  p.spec_over_plain.max, 100 * t.acceptance(), t.tokens_per_cycle(), static_cast<long long>(t.cycles),
                  100 * t.verify_share(), static_cast<long long>(t.pauses), static_cast<long long>(t.probes));
    o << sline;
  }
  if (!parallel.empty()) {
    std::snprintf(line, sizeof line, "  %-8s %8s %18s %28s %16s\n", "streams", "prompt", "aggregate tok/s",
                  "per-stream tok/s (min-max)", "TTFT p50/p95 s");
    o << line;
    for (const ParallelPoint& p : parallel) {
      std::snprintf(line, sizeof line, "  %-8d %8lld %18.2f %10.2f (%6.2f-%6.2f) %8.3f/%-7.3f\n", p.streams,
                    static_cast<long long>(p.prompt), p.aggregate_decode_tok_s, p.stream_decode_tok_s.median,
                    p.stream_decode_tok_s.min, p.stream_decode_tok_s.max, p.ttft_p50_s, p.ttft_p95_s);
      o << line;
    }
  }
  std::snprintf(line, sizeof line, "  peak RSS %.2f GB\n", static_cast<double>(peak_rss_bytes) / 1e9);
  o << line;
  for (const std::string& n : notes) o << "  note: " << n << "\n";
  return o.str();
}

}  // namespace strata::tools
