// The whole V4.1 forward pass against DeepSeek's official code (../shared/fixtures/v41-tiny):
// prefill logits, every per-layer intermediate and selection the fixture records, greedy decode
// tokens and decode logits (the *_fixed target), plus strata's own invariants (chunked prefill and
// incremental decode give the same numbers as one prefill). Tolerances are the fixture's
// (fixtures README "Tolerances"); selections are compared exactly.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <sstream>

#include "tests/support/forward_one.h"
#include "runtime/sampler.h"
#include "tests/support/npy.h"
#include "tests/support/tiny_model.h"

namespace strata::model {
namespace {

using testing::Npy;

constexpr double kLogitAbs = 1e-3, kLogitRel = 1e-3;  // fixtures README: logits
constexpr double kInterAbs = 1e-4, kInterRel = 1e-4;  // residual stream, attention, compressor

std::string golden(const std::string& name) { return testing::tiny_dir() + "/golden/" + name; }

Npy load_npy(const std::string& path) {
  Npy n;
  std::string err;
  EXPECT_TRUE(testing::read_npy(path, &n, &err)) << err;
  return n;
}

std::vector<int32_t> prompt_ids() {
  std::ifstream f(testing::tiny_dir() + "/tokens.json");
  std::stringstream ss;
  ss << f.rdbuf();
  auto j = nlohmann::json::parse(ss.str());
  return j["ids"].get<std::vector<int32_t>>();
}

// Worst |got - ref| / (abs + rel*|ref|) over the arrays (<= 1 passes).
double worst_ratio(const float* got, const std::vector<double>& ref, double abs_tol, double rel_tol, size_t* at) {
  double worst = 0;
  for (size_t i = 0; i < ref.size(); ++i) {
    const double d = std::isfinite(got[i]) ? std::fabs(got[i] - ref[i]) : INFINITY;
    const double r = d / (abs_tol + rel_tol * std::fabs(ref[i]));
    if (r > worst) {
      worst = r;
      *at = i;
    }
  }
  return worst;
}

struct Recorder : Observer {
  std::map<std::string, std::vector<float>> f;
  std::map<std::string, std::vector<int64_t>> i;
  std::map<std::string, std::vector<int64_t>> shape;
  static std::string key(std::string_view name, int layer) {
    return (layer >= 0 ? "L" + std::to_string(layer) + "_" : std::string()) + std::string(name);
  }
  void tensor(std::string_view name, int layer, std::span<const float> d, std::vector<int64_t> s) override {
    auto& v = f[key(name, layer)];
    v.insert(v.end(), d.begin(), d.end());
    shape[key(name, layer)] = s;
  }
  void ids(std::string_view name, int layer, std::span<const int64_t> d, std::vector<int64_t> s) override {
    auto& v = i[key(name, layer)];
    v.insert(v.end(), d.begin(), d.end());
    shape[key(name, layer)] = s;
  }
};

class V41Tiny : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    if (!std::ifstream(testing::tiny_dir() + "/manifest.json")) return;
    auto m = testing::load_model(testing::tiny_dir() + "/checkpoint");
    ASSERT_TRUE(m.ok()) << m.error().to_string();
    model_ = std::move(*m).release();
    ids_ = prompt_ids();
  }
  static void TearDownTestSuite() {
    delete model_;
    model_ = nullptr;
  }
  void SetUp() override {
    STRATA_REQUIRE_FIXTURE(testing::tiny_dir() + "/manifest.json");
    ASSERT_NE(model_, nullptr);
  }
  static Model* model_;
  static std::vector<int32_t> ids_;
};
Model* V41Tiny::model_ = nullptr;
std::vector<int32_t> V41Tiny::ids_;

TEST_F(V41Tiny, PrefillLogitsAndIntermediatesMatchOfficialCode) {
  const int64_t S = static_cast<int64_t>(ids_.size());
  const int64_t V = model_->config().vocab_size;
  ASSERT_EQ(S, 197);
  KvCache cache = model_->new_cache();
  Recorder rec;
  LogitsRequest req;
  req.kind = LogitsRequest::Kind::kAll;
  std::vector<float> logits(static_cast<size_t>(S * V));
  ASSERT_TRUE(strata::test::forward_one(*model_, cache, ids_, req, logits.data(), &rec).ok());

  // Logits at the fixture's positions; argmax at every position.
  Npy pos = load_npy(golden("prefill_logits_positions.npy"));
  Npy gl = load_npy(golden("prefill_logits.npy"));
  auto gv = gl.to_f64();
  auto p = pos.as<int64_t>();
  for (size_t r = 0; r < p.size(); ++r) {
    std::vector<double> ref(gv.begin() + r * V, gv.begin() + (r + 1) * V);
    size_t at = 0;
    const double w = worst_ratio(logits.data() + p[r] * V, ref, kLogitAbs, kLogitRel, &at);
    EXPECT_LE(w, 1.0) << "prefill logits at position " << p[r] << ", vocab id " << at;
  }
  auto am = load_npy(golden("prefill_argmax.npy")).as<int64_t>();
  for (int64_t t = 0; t < S; ++t)
    EXPECT_EQ(runtime::argmax(std::span<const float>(logits.data() + t * V, V)), am[static_cast<size_t>(t)])
        << "argmax at position " << t;

  // Float intermediates within the fixture's intermediate tolerance.
  auto check_f = [&](const std::string& gname, const std::string& key) {
    Npy g = load_npy(golden(gname));
    ASSERT_TRUE(rec.f.count(key)) << "engine did not report " << key;
    const auto& got = rec.f[key];
    auto ref = g.to_f64();
    ASSERT_EQ(got.size(), ref.size()) << key;
    size_t at = 0;
    EXPECT_LE(worst_ratio(got.data(), ref, kInterAbs, kInterRel, &at), 1.0) << key << " element " << at;
  };
  // Selections exactly (as sets per row).
  auto check_sel = [&](const std::string& gname, const std::string& key, int64_t offset) {
    Npy g = load_npy(golden(gname));
    ASSERT_TRUE(rec.i.count(key)) << "engine did not report " << key;
    auto ref = g.to_f64();
    std::vector<int64_t> got = rec.i[key];
    for (auto& v : got)
      if (v >= 0) v += offset;
    ASSERT_EQ(got.size(), ref.size()) << key;
    const int64_t width = g.shape.back();
    for (size_t r = 0; r * width < ref.size(); ++r) {
      std::vector<int64_t> a(got.begin() + r * width, got.begin() + (r + 1) * width), b;
      for (int64_t k = 0; k < width; ++k) b.push_back(static_cast<int64_t>(ref[r * width + k]));
      std::sort(a.begin(), a.end());
      std::sort(b.begin(), b.end());
      EXPECT_EQ(a, b) << key << " row " << r;
    }
  };
  const ModelConfig& c = model_->config();
  for (int l = 0; l < c.n_layers; ++l) {
    const std::string L = "L" + std::to_string(l) + "_";
    check_f("prefill_" + L + "block_out.npy", L + "block_out");
    check_f("prefill_" + L + "attn_out.npy", L + "attn_out");
    check_f("prefill_" + L + "ffn_pre_mix.npy", L + "ffn_pre_mix");
    check_f("prefill_" + L + "router_weights.npy", L + "router_weights");
    check_sel("prefill_" + L + "router_topk_idx.npy", L + "router_topk_idx", 0);
    if (c.is_index_source(l)) check_sel("prefill_" + L + "indexer_topk.npy", L + "indexer_topk", S);
    if (c.is_kv_source(l)) check_f("prefill_" + L + "compressor_latent.npy", L + "compressor_latent");
    if (c.engram_index(l) >= 0) {
      check_f("prefill_" + L + "after_engram.npy", L + "after_engram");
      check_f("prefill_" + L + "engram_rows_dequant.npy", L + "engram_rows_dequant");
    }
  }
  check_f("prefill_final_norm_out.npy", "final_norm_out");
  {
    Npy g = load_npy(golden("prefill_engram_row_ids.npy"));
    EXPECT_EQ(rec.i["engram_row_ids"], g.as<int64_t>());
  }
  {
    // Candidate mask of the candidate source layer, [S, S/ratio].
    const std::string key = "L" + std::to_string(c.candidate_source_layer) + "_candidate_mask";
    Npy g = load_npy(golden("prefill_" + key + ".npy"));
    auto ref = g.to_f64();
    ASSERT_EQ(rec.i[key].size(), ref.size());
    for (size_t k = 0; k < ref.size(); ++k) ASSERT_EQ(rec.i[key][k] != 0, ref[k] != 0) << "candidate mask element " << k;
  }
}

TEST_F(V41Tiny, GreedyDecodeMatchesFixedTarget) {
  const int64_t V = model_->config().vocab_size;
  KvCache cache = model_->new_cache();
  std::vector<float> row(static_cast<size_t>(V));
  ASSERT_TRUE(strata::test::forward_one(*model_, cache, ids_, LogitsRequest{}, row.data()).ok());
  auto gold_tokens = load_npy(golden("decode_tokens_fixed.npy")).as<int64_t>();
  auto gold_logits = load_npy(golden("decode_logits_fixed.npy")).to_f64();
  const size_t steps = gold_tokens.size() - 1;
  Recorder rec;
  std::vector<int32_t> toks{runtime::argmax(row)};
  for (size_t k = 0; k < steps; ++k) {
    const int32_t t[1] = {toks.back()};
    ASSERT_TRUE(strata::test::forward_one(*model_, cache, t, LogitsRequest{}, row.data(), &rec).ok());
    std::vector<double> ref(gold_logits.begin() + k * V, gold_logits.begin() + (k + 1) * V);
    size_t at = 0;
    EXPECT_LE(worst_ratio(row.data(), ref, kLogitAbs, kLogitRel, &at), 1.0) << "decode step " << k << " vocab id " << at;
    toks.push_back(runtime::argmax(row));
  }
  for (size_t i = 0; i < gold_tokens.size(); ++i) EXPECT_EQ(toks[i], gold_tokens[i]) << "decode token " << i;
  // Per-step selections (decode offsets compressed ids by window_size).
  const ModelConfig& c = model_->config();
  for (int l = 0; l < c.n_layers; ++l) {
    const std::string L = "L" + std::to_string(l) + "_";
    auto gr = load_npy(golden("decode_" + L + "router_topk_idx_fixed.npy")).as<int64_t>();
    auto got = rec.i[L + "router_topk_idx"];
    ASSERT_EQ(got.size(), gr.size());
    const int k = c.n_activated_experts;
    for (size_t s = 0; s < steps; ++s) {
      std::vector<int64_t> a(got.begin() + s * k, got.begin() + (s + 1) * k), b(gr.begin() + s * k, gr.begin() + (s + 1) * k);
      std::sort(a.begin(), a.end());
      std::sort(b.begin(), b.end());
      EXPECT_EQ(a, b) << L << "router step " << s;
    }
    if (c.is_index_source(l)) {
      auto gi = load_npy(golden("decode_" + L + "indexer_topk_fixed.npy")).to_f64();
      auto gi_got = rec.i[L + "indexer_topk"];
      const int K = c.index_topk;
      ASSERT_EQ(gi_got.size(), gi.size());
      for (size_t s = 0; s < steps; ++s) {
        std::vector<int64_t> a, b;
        for (int j = 0; j < K; ++j) {
          const int64_t v = gi_got[s * K + j];
          a.push_back(v < 0 ? -1 : v + c.window_size);
          b.push_back(static_cast<int64_t>(gi[s * K + j]));
        }
        std::sort(a.begin(), a.end());
        std::sort(b.begin(), b.end());
        EXPECT_EQ(a, b) << L << "indexer step " << s;
      }
    }
  }
}

// strata's own invariant: any chunking of the prompt, and decode one token at a time, compute the
// same numbers as one prefill over everything (per-row math is identical, only the caches differ).
TEST_F(V41Tiny, ChunkedPrefillAndDecodeEqualOnePrefill) {
  const int64_t V = model_->config().vocab_size;
  std::vector<int32_t> all = ids_;
  for (int32_t t : {56097, 57055, 58665, 23237, 70220}) all.push_back(t);
  const int64_t n = static_cast<int64_t>(all.size());
  // Reference: one prefill over everything, logits at every position.
  KvCache one = model_->new_cache();
  LogitsRequest every;
  every.kind = LogitsRequest::Kind::kAll;
  std::vector<float> ref(static_cast<size_t>(n * V));
  ASSERT_TRUE(strata::test::forward_one(*model_, one, all, every, ref.data()).ok());
  // Chunks of 1, 60, 17, 119, then single tokens.
  KvCache cache = model_->new_cache();
  std::vector<int64_t> cuts{1, 61, 78, 197, 198, 199, 200, 201, 202};
  int64_t prev = 0;
  std::vector<float> got(static_cast<size_t>(n * V));
  for (int64_t cut : cuts) {
    LogitsRequest r;
    r.kind = LogitsRequest::Kind::kAll;
    std::span<const int32_t> chunk(all.data() + prev, static_cast<size_t>(cut - prev));
    ASSERT_TRUE(strata::test::forward_one(*model_, cache, chunk, r, got.data() + prev * V).ok());
    prev = cut;
  }
  ASSERT_EQ(prev, n);
  for (int64_t t = 0; t < n; ++t) {
    double worst = 0;
    for (int64_t v = 0; v < V; ++v) worst = std::max(worst, std::fabs(double(got[t * V + v]) - ref[t * V + v]));
    EXPECT_LE(worst, 1e-5) << "position " << t;
  }
}

TEST_F(V41Tiny, BadTokensAndContextAreRejectedWithoutSideEffects) {
  KvCache cache = model_->new_cache();
  const int32_t bad[2] = {5, static_cast<int32_t>(model_->config().vocab_size)};
  Status s = strata::test::forward_one(*model_, cache, bad, LogitsRequest{}, nullptr);
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("outside the vocabulary"), std::string::npos) << s.to_string();
  EXPECT_EQ(cache.n_past, 0);
  Status e = strata::test::forward_one(*model_, cache, std::span<const int32_t>(), LogitsRequest{}, nullptr);
  EXPECT_EQ(e.code(), StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace strata::model
