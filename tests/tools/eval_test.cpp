// strata eval (tools/eval.h, eval_math.h, eval_base.h): the arithmetic on hand-computed cases
// (uniform logits -> ppl = vocab; identical distributions -> KLD 0; a two-token KLD; percentiles;
// the u16 grid), the window plan, the base file (round trip, malformed and mismatched files named),
// and on the v41-tiny fixture: a run against its own saved base gives KLD exactly 0, top-1 100% and
// delta ppl 0; a Q8_0-expert GGUF from strata quantize gives a finite KLD > 0.
#include "tools/eval.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "io/fault_env.h"
#include "tests/support/forward_one.h"
#include "tests/support/npy.h"
#include "tests/support/temp_dir.h"
#include "tests/support/tiny_model.h"
#include "tools/eval_base.h"
#include "tools/eval_math.h"
#include "tools/quantize.h"

namespace strata::tools {
namespace {

TEST(EvalMath, UniformLogitsGivePerplexityEqualToVocab) {
  const size_t V = 1000;
  std::vector<float> logits(V, 3.25f);
  std::vector<double> lp(V);
  log_softmax(logits, lp);
  PplAccumulator acc;
  for (int32_t t : {0, 17, 999, 500}) acc.add(-lp[static_cast<size_t>(t)]);
  EXPECT_NEAR(acc.ppl(), 1000.0, 1e-9);
  EXPECT_EQ(acc.ppl_stderr(), 0.0);  // every nll equal
}

TEST(EvalMath, PerplexityStderrByDeltaMethod) {
  PplAccumulator acc;
  acc.add(1.0);
  acc.add(3.0);
  // mean 2, population variance 1, n 2: ppl e^2, stderr e^2 * sqrt(1 / 1).
  EXPECT_NEAR(acc.ppl(), std::exp(2.0), 1e-12);
  EXPECT_NEAR(acc.ppl_stderr(), std::exp(2.0), 1e-12);
  PplAccumulator one;
  one.add(2.0);
  EXPECT_EQ(one.ppl_stderr(), 0.0);
}

TEST(EvalMath, KldOfIdenticalIsZeroAndOfTwoTokensByHand) {
  const std::vector<float> x = {0.5f, -1.0f, 2.0f, 0.0f};
  std::vector<double> a(4), b(4);
  log_softmax(x, a);
  log_softmax(x, b);
  EXPECT_EQ(kl_divergence(a, b), 0.0);
  EXPECT_EQ(argmax(a), 2);
  // p = (1/2, 1/2), q = (1/4, 3/4): KL = 1/2 ln 2 + 1/2 ln(2/3).
  const std::vector<double> p = {std::log(0.5), std::log(0.5)}, q = {std::log(0.25), std::log(0.75)};
  EXPECT_NEAR(kl_divergence(p, q), 0.5 * std::log(2.0) + 0.5 * std::log(2.0 / 3.0), 1e-15);
  EXPECT_GT(kl_divergence(p, q), 0.0);
}

TEST(EvalMath, ArgmaxTakesTheFirstOnTies) {
  const std::vector<double> v = {1.0, 3.0, 3.0, -2.0};
  EXPECT_EQ(argmax(v), 1);
}

TEST(EvalMath, PercentileInterpolatesLinearly) {
  std::vector<double> v;
  for (int i = 100; i >= 0; --i) v.push_back(i);
  EXPECT_DOUBLE_EQ(percentile(v, 0.99), 99.0);
  EXPECT_DOUBLE_EQ(percentile(v, 1.0), 100.0);
  std::vector<double> two = {10.0, 0.0};
  EXPECT_DOUBLE_EQ(percentile(two, 0.25), 2.5);
  std::vector<double> none;
  EXPECT_EQ(percentile(none, 0.5), 0.0);
}

TEST(EvalMath, U16GridRoundTripsWithinHalfAStep) {
  const size_t V = 5000;
  std::vector<float> x(V);
  for (size_t j = 0; j < V; ++j) x[j] = static_cast<float>(std::sin(0.37 * j) * 12.0);
  std::vector<double> lp(V), back(V), again(V);
  log_softmax(x, lp);
  EncodedRow row;
  encode_row(lp, &row);
  ASSERT_EQ(row.codes.size(), V);
  EXPECT_GT(row.scale, 0.0f);
  decode_row(row, back);
  // The renormalisation shifts every value by the same tiny amount; differences are within a step.
  double kl = kl_divergence(lp, back);
  EXPECT_GE(kl, -1e-12);
  EXPECT_LT(kl, 1e-7);
  for (size_t j = 0; j < V; ++j) ASSERT_NEAR(back[j], lp[j], 2.0 * row.scale) << j;
  decode_row(row, again);
  EXPECT_EQ(kl_divergence(back, again), 0.0);
  // A uniform row: scale 0, every code 0, decoded back to uniform.
  std::vector<double> u(8, -std::log(8.0)), ub(8);
  encode_row(u, &row);
  EXPECT_EQ(row.scale, 0.0f);
  decode_row(row, ub);
  for (double v : ub) EXPECT_NEAR(v, -std::log(8.0), 1e-15);
}

TEST(EvalPlan, WindowsStrideAndClamping) {
  EvalOptions o;
  o.ctx = 4;
  auto p = plan_windows(10, o, 1 << 20);
  ASSERT_TRUE(p.ok());
  EXPECT_EQ(p->ctx, 4);
  EXPECT_EQ(p->stride, 2);
  EXPECT_EQ(p->n_windows, 4);  // starts 0, 2, 4, 6
  EXPECT_EQ(p->n_scored, 8);   // targets 2..9
  o.ctx = 512;
  p = plan_windows(100, o, 1 << 20);  // clamped to the text
  ASSERT_TRUE(p.ok());
  EXPECT_EQ(p->ctx, 100);
  EXPECT_EQ(p->n_windows, 1);
  EXPECT_EQ(p->n_scored, 50);
  p = plan_windows(100, o, 64);  // and to the model's context
  ASSERT_TRUE(p.ok());
  EXPECT_EQ(p->ctx, 64);
  o.ctx = 8;
  o.stride = 7;
  p = plan_windows(20, o, 1 << 20);
  ASSERT_TRUE(p.ok());
  EXPECT_EQ(p->n_windows, 2);  // starts 0, 7 (14 + 8 > 20)
  EXPECT_EQ(p->n_scored, 14);
  EXPECT_FALSE(plan_windows(1, o, 1 << 20).ok());
  o.stride = 8;
  auto bad = plan_windows(20, o, 1 << 20);
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.error().message().find("stride"), std::string::npos) << bad.error().to_string();
  o.stride = 4;
  o.save_base = "a";
  o.base = "b";
  EXPECT_FALSE(o.validate().ok());
}

// A base file of `n_scored` records over `tokens`, written through EvalBaseWriter.
EvalBaseHeader write_small_base(const std::string& path, const std::vector<int32_t>& tokens, uint32_t vocab,
                                uint64_t ctx, uint64_t stride) {
  EvalBaseHeader h;
  h.vocab_size = vocab;
  h.n_tokens = tokens.size();
  h.ctx = ctx;
  h.stride = stride;
  h.n_windows = (h.n_tokens - ctx) / stride + 1;
  h.n_scored = h.n_windows * stride;
  auto w = EvalBaseWriter::create(path, h, tokens);
  EXPECT_TRUE(w.ok()) << w.error().to_string();
  if (!w.ok()) return h;
  std::vector<float> x(vocab);
  std::vector<double> lp(vocab);
  for (uint64_t i = 0; i < h.n_scored; ++i) {
    for (uint32_t j = 0; j < vocab; ++j) x[j] = static_cast<float>(std::cos(0.1 * (i + 1) * j));
    log_softmax(x, lp);
    EvalBaseRecord rec;
    rec.nll = -lp[i % vocab];
    rec.argmax = argmax(lp);
    encode_row(lp, &rec.row);
    EXPECT_TRUE((*w)->append(rec).ok());
  }
  EXPECT_TRUE((*w)->finish().ok());
  return h;
}

std::string slurp(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}
void spit(const std::string& path, const std::string& s) { std::ofstream(path, std::ios::binary) << s; }

TEST(EvalBase, RoundTripAndMatchChecks) {
  testing::TempDir d;
  const std::vector<int32_t> toks = {5, 9, 2, 7, 7, 1, 0, 3, 8, 4};
  const EvalBaseHeader h = write_small_base(d.file("b.bin"), toks, 33, 4, 2);
  auto r = EvalBaseReader::open(d.file("b.bin"));
  ASSERT_TRUE(r.ok()) << r.error().to_string();
  EXPECT_EQ((*r)->header().n_scored, 8u);
  EXPECT_EQ(std::vector<int32_t>((*r)->tokens().begin(), (*r)->tokens().end()), toks);
  EvalBaseRecord rec;
  ASSERT_TRUE((*r)->read(7, &rec).ok());
  EXPECT_EQ(rec.row.codes.size(), 33u);
  EXPECT_FALSE((*r)->read(8, &rec).ok());
  EXPECT_TRUE(check_base_matches(**r, h, toks).ok());

  auto expect_mismatch = [&](EvalBaseHeader run, std::vector<int32_t> t, const std::string& word) {
    Status s = check_base_matches(**r, run, t);
    ASSERT_FALSE(s.ok()) << word;
    EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
    EXPECT_NE(s.message().find(word), std::string::npos) << s.to_string();
    EXPECT_NE(s.message().find(d.file("b.bin")), std::string::npos) << s.to_string();
  };
  EvalBaseHeader other = h;
  other.vocab_size = 34;
  expect_mismatch(other, toks, "vocab_size 33");
  other = h;
  other.ctx = 6;
  expect_mismatch(other, toks, "ctx 4, this run's is 6");
  other = h;
  other.stride = 1;
  expect_mismatch(other, toks, "stride 2, this run's is 1");
  std::vector<int32_t> t2 = toks;
  t2[6] = 31;
  expect_mismatch(h, t2, "token 6 is 0, this run's is 31");
  t2 = toks;
  t2.pop_back();
  expect_mismatch(h, t2, "10 tokens");
}

TEST(EvalBase, MalformedFilesAreNamedWithTheirField) {
  testing::TempDir d;
  const std::vector<int32_t> toks = {5, 9, 2, 7, 7, 1};
  write_small_base(d.file("b.bin"), toks, 16, 4, 2);
  const std::string good = slurp(d.file("b.bin"));
  auto expect_error = [&](const std::string& bytes, const std::string& word) {
    spit(d.file("bad.bin"), bytes);
    auto r = EvalBaseReader::open(d.file("bad.bin"));
    ASSERT_FALSE(r.ok()) << word;
    EXPECT_NE(r.error().message().find(word), std::string::npos) << r.error().to_string();
    EXPECT_NE(r.error().message().find(d.file("bad.bin")), std::string::npos) << r.error().to_string();
  };
  expect_error("short", "shorter than the 64-byte header");
  std::string b = good;
  b[0] = 'X';
  expect_error(b, "field 'magic'");
  b = good;
  b[8] = 2;
  expect_error(b, "field 'version' is 2");
  b = good;
  b[12] = 9;
  expect_error(b, "field 'encoding' is 9");
  b = good;
  b[32] = 9;  // ctx 9 > n_tokens 6
  expect_error(b, "field 'ctx' is 9");
  b = good;
  b[40] = 4;  // stride = ctx
  expect_error(b, "field 'stride' is 4");
  b = good;
  b[48] = 3;
  expect_error(b, "field 'n_windows' is 3");
  b = good;
  b[16] = 0;
  b[17] = 0;
  b[18] = 0;
  b[19] = 1;  // vocab 2^24 is allowed by the limit, but the size no longer matches
  expect_error(b, "truncated");
  expect_error(good.substr(0, good.size() - 1), "size");
  auto missing = EvalBaseReader::open(d.file("none.bin"));
  ASSERT_FALSE(missing.ok());
  EXPECT_EQ(missing.error().code(), StatusCode::kNotFound);
}

// ---- on the v41-tiny fixture ----------------------------------------------------------------------

std::string ckpt() { return testing::tiny_dir() + "/checkpoint"; }

std::vector<int32_t> prompt_ids() {
  std::ifstream f(testing::tiny_dir() + "/tokens.json");
  std::stringstream ss;
  ss << f.rdbuf();
  return nlohmann::json::parse(ss.str())["ids"].get<std::vector<int32_t>>();
}

Result<EvalReport> eval_model(const std::string& path, const EvalOptions& o) {
  STRATA_ASSIGN_OR_RETURN(model::CompressedVocabMap v, testing::vocab_of(ckpt()));
  model::ModelOptions opt;
  opt.n_threads = 2;
  STRATA_ASSIGN_OR_RETURN(std::unique_ptr<model::Model> m, model::Model::load(path, v, opt));
  model::Activations act = m->new_activations();
  const std::vector<int32_t> ids = prompt_ids();
  return evaluate(*m, act, ids, o);
}

TEST(EvalFixture, SameModelAgainstItsBaseGivesKldZeroAndQ8ZeroGivesKldAboveZero) {
  STRATA_REQUIRE_FIXTURE(testing::tiny_dir() + "/tokens.json");
  testing::TempDir d;
  EvalOptions o;
  o.ctx = 48;
  o.stride = 16;
  o.save_base = d.file("base.bin");
  auto b = eval_model(ckpt(), o);
  ASSERT_TRUE(b.ok()) << b.error().to_string();
  EXPECT_GT(b->plan.n_windows, 1);
  EXPECT_TRUE(std::isfinite(b->ppl));
  EXPECT_GT(b->ppl, 1.0);
  EXPECT_GT(b->ppl_stderr, 0.0);
  EXPECT_FALSE(b->has_base);

  o.save_base.clear();
  o.base = d.file("base.bin");
  auto same = eval_model(ckpt(), o);
  ASSERT_TRUE(same.ok()) << same.error().to_string();
  ASSERT_TRUE(same->has_base);
  EXPECT_EQ(same->kld_mean, 0.0);
  EXPECT_EQ(same->kld_max, 0.0);
  EXPECT_EQ(same->kld_p99, 0.0);
  EXPECT_EQ(same->top1, 100.0);
  EXPECT_EQ(same->delta_ppl, 0.0);
  EXPECT_EQ(same->ppl, b->ppl);

  QuantizeOptions q;
  q.src_dir = ckpt();
  q.out_path = d.file("q8.gguf");
  q.experts = DType::kQ8_0;
  q.fsync = false;
  q.n_threads = 2;
  auto rep = quantize_checkpoint(q);
  ASSERT_TRUE(rep.ok()) << rep.error().to_string();
  auto q8 = eval_model(q.out_path, o);
  ASSERT_TRUE(q8.ok()) << q8.error().to_string();
  EXPECT_TRUE(std::isfinite(q8->kld_mean));
  EXPECT_GT(q8->kld_mean, 0.0);
  EXPECT_GE(q8->kld_max, q8->kld_p99);
  EXPECT_GE(q8->kld_p99, 0.0);
  EXPECT_LE(q8->top1, 100.0);
  EXPECT_TRUE(std::isfinite(q8->delta_ppl));
  const auto j = nlohmann::json::parse(eval_json(*q8));
  for (const char* k :
       {"ppl", "ppl_stderr", "kld_mean", "kld_p99", "kld_max", "top1", "delta_ppl", "tokens", "windows"})
    EXPECT_TRUE(j.contains(k)) << k;

  // Another ctx is refused, naming the field.
  o.ctx = 40;
  auto other = eval_model(ckpt(), o);
  ASSERT_FALSE(other.ok());
  EXPECT_NE(other.error().message().find("ctx 48, this run's is 40"), std::string::npos) << other.error().to_string();
}

// The windows score the right targets with the right rows: evaluate's perplexity equals one
// computed here from every row of each window (kAll), targets at offsets ctx-stride .. ctx-1
// predicted by the rows before them.
TEST(EvalFixture, ScoresEachWindowsLastStrideTargetsFromTheRowsBefore) {
  STRATA_REQUIRE_FIXTURE(testing::tiny_dir() + "/tokens.json");
  auto m = testing::load_model(ckpt());
  ASSERT_TRUE(m.ok()) << m.error().to_string();
  std::vector<int32_t> ids = prompt_ids();
  ids.resize(22);
  EvalOptions o;
  o.ctx = 8;
  o.stride = 3;
  model::Activations act = (*m)->new_activations();
  auto r = evaluate(**m, act, ids, o);
  ASSERT_TRUE(r.ok()) << r.error().to_string();
  ASSERT_EQ(r->plan.n_windows, 5);  // starts 0, 3, 6, 9, 12 (15 + 8 > 22)
  ASSERT_EQ(r->plan.n_scored, 15);  // targets 5 .. 19
  const size_t V = static_cast<size_t>((*m)->config().vocab_size);
  PplAccumulator acc;
  std::vector<float> logits(8 * V);
  std::vector<double> lp(V);
  int64_t next_target = 5;
  for (int64_t start = 0; start + 8 <= 22; start += 3) {
    model::KvCache cache = (*m)->new_cache();
    model::LogitsRequest all;
    all.kind = model::LogitsRequest::Kind::kAll;
    const std::span<const int32_t> win(ids.data() + start, 8);
    ASSERT_TRUE(strata::test::forward_one(**m, cache, win, all, logits.data()).ok());
    for (int64_t k = 8 - 3; k < 8; ++k, ++next_target) {
      ASSERT_EQ(start + k, next_target);  // each target once, in order
      log_softmax(std::span<const float>(logits.data() + (k - 1) * V, V), lp);
      acc.add(-lp[static_cast<size_t>(ids[static_cast<size_t>(start + k)])]);
    }
  }
  EXPECT_EQ(acc.count(), 15);
  EXPECT_NEAR(r->ppl, acc.ppl(), 1e-9 * acc.ppl());
  EXPECT_NEAR(r->ppl_stderr, acc.ppl_stderr(), 1e-9 * acc.ppl());
}

TEST(EvalFixture, FullDiskWhileSavingTheBaseLeavesTheOldFile) {
  STRATA_REQUIRE_FIXTURE(testing::tiny_dir() + "/tokens.json");
  testing::TempDir d;
  spit(d.file("base.bin"), "old");
  io::WriteFaults f;
  f.fail_after_bytes = 300000;  // the header, the tokens and one record fit; the second record does not
  io::FaultInjectionEnv env(f);
  EvalOptions o;
  o.ctx = 16;
  o.stride = 8;
  o.save_base = d.file("base.bin");
  o.env = &env;
  auto r = eval_model(ckpt(), o);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.error().code(), StatusCode::kResourceExhausted) << r.error().to_string();
  EXPECT_EQ(slurp(d.file("base.bin")), "old");
  size_t n_files = 0;
  for (const auto& e : std::filesystem::directory_iterator(d.path())) n_files += e.is_regular_file() ? 1 : 0;
  EXPECT_EQ(n_files, 1u) << "the temp file was left behind";
}

}  // namespace
}  // namespace strata::tools
