// batch_bench: what a batched forward buys at the model level (issue "One engine loop and a batched
// forward pass"), printed as markdown rows for docs/performance.md.
//
// For each batch size B: B sequences each prefill a random prompt of --prompt tokens (alone), then
// decode --gen steps in which every sequence contributes one token (RowKind::kDecode) to ONE
// Model::forward per step. Reports aggregate decode tok/s, per-sequence tok/s, and the ratio to
// B = 1 measured in the same run (the denominator; the machine's bandwidth moves between days).
// --check also runs each sequence alone and confirms its greedy tokens are identical (batch
// invariance at full size; a failure exits 1). --hash prints a hash of every decode step's logits
// (all sequences), so two builds can be compared bit for bit (it slows the steps it times).
#include <CLI/CLI.hpp>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "bench/bench_support.h"
#include "model/model.h"
#include "runtime/sampler.h"
#include "tokenizer/compressed_vocab.h"
#include "tokenizer/tokenizer.h"

namespace {

using namespace strata;
using clock_type = std::chrono::steady_clock;

struct Run {
  double decode_s = 0;
  model::ForwardProfile prof;  // the decode steps' split
  std::vector<std::vector<int32_t>> tokens;  // per sequence, the greedy tokens
  uint64_t logits_hash = 1469598103934665603ull;  // FNV-1a over the decode steps' logits (--hash)
};

// FNV-1a over the bits of a row of logits.
uint64_t fnv1a(uint64_t h, const std::vector<float>& v) {
  const auto* p = reinterpret_cast<const unsigned char*>(v.data());
  for (size_t i = 0; i < v.size() * sizeof(float); ++i) h = (h ^ p[i]) * 1099511628211ull;
  return h;
}

// B sequences: prefill each alone, then `gen` batched decode steps (all B in one forward).
Result<Run> run_batch(model::Model& m, const std::vector<std::vector<int32_t>>& prompts, int64_t gen, bool hash) {
  const int64_t V = m.config().vocab_size;
  const size_t B = prompts.size();
  model::Activations act = m.new_activations();
  std::vector<model::KvCache> caches;
  std::vector<std::vector<float>> logits(B, std::vector<float>(static_cast<size_t>(V)));
  Run r;
  r.tokens.resize(B);
  for (size_t i = 0; i < B; ++i) {
    caches.push_back(m.new_cache());
    model::ForwardEntry e;
    e.cache = &caches[i];
    e.tokens = prompts[i];
    e.logits_out = logits[i].data();
    STRATA_RETURN_IF_ERROR(m.forward(model::ForwardRequest{std::span<model::ForwardEntry>(&e, 1)}, act));
  }
  std::vector<int32_t> tok(B);
  std::vector<model::ForwardEntry> entries(B);
  const model::ForwardProfile p0 = act.profile;
  const auto t0 = clock_type::now();
  for (int64_t s = 0; s < gen; ++s) {
    for (size_t i = 0; i < B; ++i) {
      tok[i] = runtime::argmax(logits[i]);
      r.tokens[i].push_back(tok[i]);
      entries[i] = model::ForwardEntry{};
      entries[i].cache = &caches[i];
      entries[i].tokens = std::span<const int32_t>(&tok[i], 1);
      entries[i].kind = model::RowKind::kDecode;
      entries[i].logits_out = logits[i].data();
    }
    STRATA_RETURN_IF_ERROR(m.forward(model::ForwardRequest{entries}, act));
    for (size_t i = 0; i < B && hash; ++i) r.logits_hash = fnv1a(r.logits_hash, logits[i]);
  }
  r.decode_s = std::chrono::duration<double>(clock_type::now() - t0).count();
  r.prof = act.profile.since(p0);
  return r;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"batch_bench: aggregate decode tok/s of B sequences sharing each forward pass"};
  std::string dir, sizes_s = "1,2,4,8";
  int threads = 0;
  int64_t prompt = 32, gen = 32;
  bool check = false, hash = false;
  app.add_option("-m,--model", dir, "checkpoint directory")->required();
  app.add_option("--batch", sizes_s, "comma-separated batch sizes (1 is always run first: the baseline)");
  app.add_option("--prompt", prompt, "prompt tokens per sequence");
  app.add_option("--gen", gen, "decode steps");
  app.add_option("-t,--threads", threads, "threads (0 = physical cores)");
  app.add_flag("--check", check, "also run every sequence alone and compare its greedy tokens");
  app.add_flag("--hash", hash, "print a hash of every decode step's logits (to compare builds bit for bit)");
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  }
  const std::string cmdline = bench::command_line(argc, argv);
  auto loaded = bench::load_model(dir, threads);
  if (!loaded) return 1;
  model::Model& m = *loaded->model;
  std::vector<int64_t> sizes = {1};
  for (std::stringstream ss(sizes_s); ss.good();) {
    std::string item;
    std::getline(ss, item, ',');
    if (!item.empty() && std::stoll(item) > 1) sizes.push_back(std::stoll(item));
  }
  std::mt19937 rng(1);
  std::uniform_int_distribution<int32_t> d(3, static_cast<int32_t>(m.config().vocab_size) - 1);
  std::printf("# %s\n# %s: dim %lld, %d layers, %d threads, prompt %lld, %lld decode steps\n", cmdline.c_str(), dir.c_str(),
              static_cast<long long>(m.config().dim), m.config().n_layers, m.pool().n_threads(),
              static_cast<long long>(prompt), static_cast<long long>(gen));
  std::printf("| batch | aggregate decode tok/s | per-sequence tok/s | x batch 1 | ms/step: attention, MoE, Engram, head, rest |%s\n",
              check ? " greedy = alone |" : "");
  std::printf("|---|---|---|---|---|%s\n", check ? "---|" : "");
  double base = 0;
  int failures = 0;
  for (int64_t B : sizes) {
    std::vector<std::vector<int32_t>> prompts(static_cast<size_t>(B));
    for (auto& p : prompts) {
      p.resize(static_cast<size_t>(prompt));
      for (auto& t : p) t = d(rng);
    }
    auto r = run_batch(m, prompts, gen, hash);
    if (!r.ok()) return std::fprintf(stderr, "%s\n", r.error().to_string().c_str()), 1;
    const double agg = static_cast<double>(B * gen) / r->decode_s;
    if (B == 1) base = agg;
    std::string same;
    if (check) {
      bool ok = true;
      for (int64_t i = 0; i < B && B > 1; ++i) {
        auto one = run_batch(m, {prompts[static_cast<size_t>(i)]}, gen, false);
        if (!one.ok()) return std::fprintf(stderr, "%s\n", one.error().to_string().c_str()), 1;
        ok = ok && one->tokens[0] == r->tokens[static_cast<size_t>(i)];
      }
      same = ok ? " yes |" : " NO |";
      failures += !ok;
    }
    const model::ForwardProfile& p = r->prof;
    const double per = 1e-6 / static_cast<double>(gen);  // ns -> ms per step
    const double rest = static_cast<double>(p.forward_ns - p.attention_ns - p.moe_ns - p.engram_ns - p.head_ns);
    std::printf("| %lld | %.1f | %.1f | %.2f | %.2f, %.2f, %.2f, %.2f, %.2f |%s\n", static_cast<long long>(B), agg,
                agg / static_cast<double>(B), base > 0 ? agg / base : 0.0, p.attention_ns * per, p.moe_ns * per,
                p.engram_ns * per, p.head_ns * per, rest * per, same.c_str());
    if (hash) std::printf("# batch %lld: decode logits hash %016llx\n", static_cast<long long>(B),
                          static_cast<unsigned long long>(r->logits_hash));
    std::fflush(stdout);
  }
  return failures == 0 ? 0 : 1;
}
