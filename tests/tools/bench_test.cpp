// strata bench (tools/bench.h, bench_svg.h): a full cold + warm run on the tiny fixture checkpoint,
// the report's JSON and SVG, the checkpoint identity, and the page-cache helpers.
#include "tools/bench.h"
#include "tools/bench_parallel.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "tests/support/files.h"
#include "tests/support/npy.h"
#include "tests/support/temp_dir.h"
#include "tools/bench_svg.h"
#include "tools/quantize.h"

namespace strata::tools {
namespace {

namespace fs = std::filesystem;
const std::string kTiny = std::string(STRATA_FIXTURES_DIR) + "/v41-tiny/checkpoint";

TEST(Bench, SpreadOf) {
  const Spread s = spread_of({3, 1, 2});
  EXPECT_EQ(s.median, 2);
  EXPECT_EQ(s.min, 1);
  EXPECT_EQ(s.max, 3);
  EXPECT_EQ(spread_of({4, 1, 2, 3}).median, 2.5);
  EXPECT_EQ(spread_of({}).median, 0);
}

TEST(Bench, OptionsValidate) {
  BenchOptions o;
  EXPECT_FALSE(o.validate().ok()) << "no model dir";
  o.model_dir = "/x";
  EXPECT_TRUE(o.validate().ok());
  for (auto bad : {+[](BenchOptions& b) { b.prompts.clear(); }, +[](BenchOptions& b) { b.prompts = {0}; },
                   +[](BenchOptions& b) { b.gen = 0; }, +[](BenchOptions& b) { b.reps = 0; },
                   +[](BenchOptions& b) { b.cold = "freeze"; }, +[](BenchOptions& b) { b.load_mode = "cloud"; }}) {
    BenchOptions b = o;
    bad(b);
    EXPECT_FALSE(b.validate().ok());
  }
}

TEST(Bench, TinyCheckpointColdAndWarm) {
  STRATA_REQUIRE_FIXTURE(kTiny + "/config.json");
  BenchOptions o;
  o.model_dir = kTiny;
  o.prompts = {24, 8};
  o.gen = 3;
  o.reps = 2;
  o.warmup = 1;
  o.threads = 1;
  o.cold = "fadvise";
  o.git_commit = "abc123";
  o.command = "strata bench test";
  uint64_t prefill_events = 0, bench_events = 0;
  o.progress = [&](const ProgressEvent& e) {
    if (e.task == "bench") ++bench_events;
    if (e.task == "prefill") ++prefill_events;
  };
  auto r = run_bench(o);
  ASSERT_TRUE(r.ok()) << r.error().to_string();
  ASSERT_EQ(r->points.size(), 4u);
  // Cold first, ascending prompt lengths, then warm.
  EXPECT_TRUE(r->points[0].cold);
  EXPECT_EQ(r->points[0].prompt, 8);
  EXPECT_EQ(r->points[1].prompt, 24);
  EXPECT_FALSE(r->points[2].cold);
  EXPECT_EQ(r->points[3].runs.size(), 2u);
  for (const BenchPoint& p : r->points) {
    EXPECT_GT(p.prefill_tok_s.median, 0);
    EXPECT_GT(p.decode_tok_s.median, 0);
    EXPECT_LE(p.prefill_tok_s.min, p.prefill_tok_s.median);
    EXPECT_GE(p.prefill_tok_s.max, p.prefill_tok_s.median);
    for (const BenchRun& run : p.runs) {
      EXPECT_EQ(run.prompt, p.prompt);
      EXPECT_GE(run.ttft_s, run.prefill_s);
      EXPECT_GT(run.kv_bytes, 0u);
    }
  }
  EXPECT_EQ(r->cold_method, "fadvise");
  EXPECT_LE(r->page_cache_after, r->page_cache_before + 1e-9);
  EXPECT_GT(r->load_cold_s, 0);
  EXPECT_EQ(r->threads, 1);
  EXPECT_EQ(r->checkpoint.hash.size(), 16u);
  EXPECT_EQ(bench_events, 2u + 2 * (1 + 2) + 1);
  EXPECT_EQ(prefill_events, 0u) << "prefill bars only for prompts of 4096 tokens and more";

  auto j = nlohmann::json::parse(r->to_json(), nullptr, false);
  ASSERT_FALSE(j.is_discarded());
  EXPECT_EQ(j["git_commit"], "abc123");
  EXPECT_EQ(j["checkpoint"]["hash"], r->checkpoint.hash);
  EXPECT_EQ(j["points"].size(), 4u);
  EXPECT_EQ(j["points"][3]["runs"].size(), 2u);
  // auto load mode holds the tiny checkpoint in RAM: no routed expert is streamed
  EXPECT_EQ(r->expert_reads, store::ExpertReads::kNotStreamed);
  EXPECT_EQ(j["expert_reads"], "none");
  EXPECT_NE(r->to_text().find("warm"), std::string::npos);

  const std::string svg = bench_svg(*r, {{8, 100, 10}, {24, 120, 9}});
  EXPECT_EQ(svg.rfind("<svg", 0), 0u);
  EXPECT_NE(svg.find("</svg>"), std::string::npos);
  EXPECT_NE(svg.find("prefill tok/s"), std::string::npos);
  EXPECT_NE(svg.find("decode tok/s"), std::string::npos);
  EXPECT_NE(svg.find("stroke-dasharray"), std::string::npos) << "predicted line";
  EXPECT_EQ(svg.find("nan"), std::string::npos);
  size_t open = 0, close = 0;
  for (size_t p = 0; (p = svg.find("<g>", p)) != std::string::npos; ++p) ++open;
  for (size_t p = 0; (p = svg.find("</g>", p)) != std::string::npos; ++p) ++close;
  EXPECT_EQ(open, close);
}

// A warm run reuses the loaded model, so it can use prefetches the run before it issued (still
// outstanding at its start): its prefetch hit rate divides by those plus its own issues, from the
// one definition `strata run --stats` uses (store::PlacementStats::prefetch_hit_rate), never above 1.
// The report used to give only issued and used, whose ratio can exceed 1 in such a run.
TEST(Bench, PrefetchHitRateCountsThePrefetchesOutstandingAtARunsStart) {
  STRATA_REQUIRE_FIXTURE(kTiny + "/config.json");
  BenchOptions o;
  o.model_dir = kTiny;
  o.prompts = {8, 24};  // two prompts: the second routes to experts the first only guessed
  o.gen = 6;
  o.reps = 2;
  o.warmup = 0;
  o.threads = 1;
  o.cold = "none";
  o.load_mode = "stream";  // experts are read when first named: the first run prefetches
  auto r = run_bench(o);
  ASSERT_TRUE(r.ok()) << r.error().to_string();
  auto j = nlohmann::json::parse(r->to_json(), nullptr, false);
  ASSERT_FALSE(j.is_discarded());
  uint64_t issued = 0, outstanding = 0;
  bool used_above_issued = false;  // a run where used / issued, the old report's ratio, is above 1
  for (size_t pi = 0; pi < r->points.size(); ++pi)
    for (size_t ri = 0; ri < r->points[pi].runs.size(); ++ri) {
      const BenchRun& run = r->points[pi].runs[ri];
      SCOPED_TRACE("point " + std::to_string(pi) + " run " + std::to_string(ri));
      const uint64_t usable = run.prefetch_outstanding_at_start + run.prefetch_issued;
      EXPECT_LE(run.prefetch_used, usable);
      EXPECT_DOUBLE_EQ(run.prefetch_hit_rate, usable ? double(run.prefetch_used) / double(usable) : 0.0);
      const auto& jr = j["points"][pi]["runs"][ri];
      EXPECT_EQ(jr["prefetch_outstanding_at_start"], run.prefetch_outstanding_at_start);
      ASSERT_TRUE(jr["prefetch_hit_rate"].is_number()) << jr.dump();
      EXPECT_DOUBLE_EQ(jr["prefetch_hit_rate"].get<double>(), run.prefetch_hit_rate);
      EXPECT_LE(jr["prefetch_hit_rate"].get<double>(), 1.0);
      used_above_issued = used_above_issued || run.prefetch_used > run.prefetch_issued;
      issued += run.prefetch_issued;
      if (ri > 0 || pi > 0) outstanding += run.prefetch_outstanding_at_start;
    }
  EXPECT_GT(issued, 0u) << "streamed experts are prefetched";
  EXPECT_GT(outstanding, 0u) << "a later run starts with the earlier runs' unused prefetches";
  EXPECT_TRUE(used_above_issued) << "the case the rate is for: a run that used prefetches an earlier run issued";
}

// strata bench --parallel (issue 14 item 7): N concurrent greedy streams through one engine, with
// aggregate and per-stream decode rates and TTFT quantiles, in the report, its JSON and its text.
TEST(Bench, ParallelStreamsThroughTheEngine) {
  STRATA_REQUIRE_FIXTURE(kTiny + "/config.json");
  BenchOptions o;
  o.model_dir = kTiny;
  o.prompts = {12};
  o.gen = 4;
  o.reps = 1;
  o.warmup = 0;
  o.threads = 1;
  o.cold = "none";
  o.parallel = {1, 3};
  o.batch_tokens = 16;
  auto r = run_bench(o);
  ASSERT_TRUE(r.ok()) << r.error().to_string();
  ASSERT_EQ(r->parallel.size(), 2u);
  for (size_t i = 0; i < 2; ++i) {
    const ParallelPoint& p = r->parallel[i];
    EXPECT_EQ(p.streams, o.parallel[i]);
    EXPECT_EQ(p.prompt, 12);
    EXPECT_EQ(p.gen, 4);
    EXPECT_GT(p.aggregate_decode_tok_s, 0);
    EXPECT_GT(p.stream_decode_tok_s.median, 0);
    EXPECT_GT(p.ttft_p50_s, 0);
    EXPECT_LE(p.ttft_p50_s, p.ttft_p95_s);
    // Prompts share steps under the budget, then one step per token decodes every stream.
    EXPECT_LE(p.steps, 1 + 3 + 3);
  }
  auto j = nlohmann::json::parse(r->to_json(), nullptr, false);
  ASSERT_FALSE(j.is_discarded());
  ASSERT_EQ(j["parallel"].size(), 2u);
  EXPECT_EQ(j["parallel"][1]["streams"], 3);
  EXPECT_TRUE(j["parallel"][1]["ttft_p95_s"].is_number());
  EXPECT_NE(r->to_text().find("aggregate tok/s"), std::string::npos);
  o.parallel = {0};
  EXPECT_FALSE(o.validate().ok());
}

TEST(Bench, QuantileIsNearestRank) {
  EXPECT_EQ(quantile({}, 0.5), 0);
  EXPECT_EQ(quantile({3, 1, 2}, 0.5), 2);
  EXPECT_EQ(quantile({1, 2, 3, 4, 5, 6, 7, 8, 9, 10}, 0.95), 10);
  EXPECT_EQ(quantile({1, 2, 3, 4}, 0.5), 2);
}

TEST(Bench, PromptBeyondContextFailsBeforeRunning) {
  STRATA_REQUIRE_FIXTURE(kTiny + "/config.json");
  BenchOptions o;
  o.model_dir = kTiny;
  o.prompts = {1 << 24};
  o.cold = "none";
  auto r = run_bench(o);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.error().message().find("context"), std::string::npos) << r.error().message();
}

// --cold copy: the copy sits beside the checkpoint in a temporary directory that is gone after the
// bench; a copy a killed bench left (its process gone, untouched for a while) is removed by the next.
// One short cold run (--cold copy) of the checkpoint at `dir`.
BenchOptions cold_copy_options(const std::string& dir) {
  BenchOptions o;
  o.model_dir = dir;
  o.prompts = {8};
  o.gen = 2;
  o.reps = 1;
  o.warmup = 0;
  o.threads = 1;
  o.cold = "copy";
  return o;
}

TEST(Bench, ColdCopyIsRemovedAfterwardsAndAfterAKilledBench) {
  STRATA_REQUIRE_FIXTURE(kTiny + "/config.json");
  testing::TempDir tmp;
  const std::string ck = tmp.file("ck");
  ASSERT_TRUE(copy_uncached(kTiny, ck).ok());
  // What a bench killed during its cold runs leaves (pid 2^22 + 1: above the default pid_max).
  const fs::path left = fs::path(tmp.path()) / "ck.strata-bench-cold-4194305-Ab12Cd";
  fs::create_directory(left);
  ASSERT_TRUE(copy_uncached(kTiny, (left / "ck").string()).ok());
  const auto old = fs::file_time_type::clock::now() - std::chrono::hours(1);
  for (const auto& e : fs::recursive_directory_iterator(left)) fs::last_write_time(e.path(), old);
  fs::last_write_time(left, old);
  auto r = run_bench(cold_copy_options(ck + "/"));
  ASSERT_TRUE(r.ok()) << r.error().to_string();
  EXPECT_EQ(r->cold_method, "copy");
  std::vector<std::string> names;
  for (const auto& e : fs::directory_iterator(tmp.path())) names.push_back(e.path().filename().string());
  EXPECT_EQ(names, std::vector<std::string>{"ck"}) << "left behind: " << names.size() << " entries";
}

TEST(Bench, ColdCopyOfAGgufSplitSetCopiesEveryFile) {
  STRATA_REQUIRE_FIXTURE(kTiny + "/config.json");
  testing::TempDir tmp;
  QuantizeOptions q;
  q.src_dir = kTiny;
  q.out_path = tmp.file("q.gguf");
  q.fsync = false;
  q.n_threads = 1;
  q.split_max_bytes = 8000000;
  auto rep = quantize_checkpoint(q);
  ASSERT_TRUE(rep.ok()) << rep.error().to_string();
  ASSERT_GE(rep->files.size(), 2u);
  // The page cache of a split set is every file's: a copy of the set into a new directory.
  const std::string copy = tmp.file("copy");
  ASSERT_TRUE(copy_uncached(rep->files[1], copy).ok());
  size_t n = 0;
  for (const auto& e : fs::directory_iterator(copy)) ++n, (void)e;
  EXPECT_EQ(n, rep->files.size());
  auto r = run_bench(cold_copy_options(rep->files[1]));  // any file of the set
  ASSERT_TRUE(r.ok()) << r.error().to_string();
  EXPECT_EQ(r->cold_method, "copy");
}

TEST(Bench, CheckpointIdentityAndUncachedCopy) {
  STRATA_REQUIRE_FIXTURE(kTiny + "/config.json");
  testing::TempDir tmp;
  const std::string copy = tmp.file("ck");
  ASSERT_TRUE(copy_uncached(kTiny, copy).ok());
  auto a = checkpoint_identity(kTiny);
  auto b = checkpoint_identity(copy);
  ASSERT_TRUE(a.ok() && b.ok()) << a.error().to_string() << b.error().to_string();
  EXPECT_EQ(a->hash, b->hash);
  EXPECT_EQ(a->tensor_bytes, b->tensor_bytes);
  for (auto& e : fs::directory_iterator(kTiny)) {
    if (e.is_regular_file()) {
      EXPECT_EQ(testing::read_all(e.path().string()), testing::read_all(copy + "/" + e.path().filename().string()))
          << e.path();
    }
  }
  // A changed config is a different checkpoint.
  std::string cfg = testing::read_all(copy + "/config.json");
  cfg.insert(cfg.find('{') + 1, "\"_note\": 1,");
  testing::write_all(copy + "/config.json", cfg);
  auto c = checkpoint_identity(copy);
  ASSERT_TRUE(c.ok());
  EXPECT_NE(c->hash, a->hash);
  EXPECT_FALSE(copy_uncached(kTiny, copy).ok()) << "the destination exists";
  EXPECT_FALSE(checkpoint_identity(tmp.file("none")).ok());
}

TEST(Bench, PageCacheEviction) {
  testing::TempDir tmp;
  const std::string f = tmp.file("data.bin");
  testing::write_all(f, std::string(8u << 20, 'x'));
  (void)testing::read_all(f);  // in the page cache now (written and read)
  auto before = page_cache_fraction(tmp.path());
  ASSERT_TRUE(before.ok()) << before.error().to_string();
  ASSERT_TRUE(evict_page_cache(tmp.path()).ok());
  auto after = page_cache_fraction(tmp.path());
  ASSERT_TRUE(after.ok());
  if (*before < 0.9 || *after > 0.5)
    GTEST_SKIP() << "this filesystem keeps written pages regardless (before " << *before << ", after " << *after << ")";
  EXPECT_LT(*after, *before);
  EXPECT_FALSE(page_cache_fraction(tmp.file("none")).ok());
}

}  // namespace
}  // namespace strata::tools
