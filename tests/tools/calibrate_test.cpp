// strata calibrate (tools/calibrate.h) and synth --routing-skew (tools/synth_skew.h): the ranking
// counts every router pick of the fixture prompt and the hot file round-trips in ranking order; the
// skew leaves the plain generator untouched when unset, zeroes the router biases at 0, and at S > 0
// gives Zipf biases and topic components with the documented values.
#include "tools/calibrate.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "io/file.h"
#include "tests/support/files.h"
#include "tests/support/npy.h"
#include "tests/support/temp_dir.h"
#include "tests/support/tiny_model.h"
#include "tools/synth.h"
#include "tools/synth_fill.h"
#include "tools/synth_skew.h"

namespace strata::tools {
namespace {

std::vector<int32_t> prompt_ids() {
  std::ifstream f(testing::tiny_dir() + "/tokens.json");
  std::stringstream ss;
  ss << f.rdbuf();
  return nlohmann::json::parse(ss.str())["ids"].get<std::vector<int32_t>>();
}

TEST(Calibrate, CountsEveryRouterPickAndRoundTripsTheHotFile) {
  STRATA_REQUIRE_FIXTURE(testing::tiny_dir() + "/manifest.json");
  auto m = testing::load_model(testing::tiny_dir() + "/checkpoint");
  ASSERT_TRUE(m.ok()) << m.error().to_string();
  const std::vector<int32_t> ids = prompt_ids();
  int64_t progress = 0;
  model::Activations act = (*m)->new_activations();
  auto r = calibrate(**m, act, ids, 64, [&](int64_t done) { progress = done; });
  ASSERT_TRUE(r.ok()) << r.error().to_string();
  const model::ModelConfig& c = (*m)->config();
  EXPECT_EQ(progress, static_cast<int64_t>(ids.size()));
  EXPECT_EQ(r->picks, ids.size() * static_cast<uint64_t>(c.n_activated_experts) * static_cast<uint64_t>(c.n_layers));
  uint64_t sum = 0;
  for (size_t i = 0; i < r->experts.size(); ++i) {
    sum += r->experts[i].count;
    if (i > 0) {
      EXPECT_GE(r->experts[i - 1].count, r->experts[i].count);
    }
  }
  EXPECT_EQ(sum, r->picks);
  EXPECT_NEAR(r->coverage(1.0), 1.0, 1e-12);
  // The first layer's counts agree with the fixture's router selections.
  testing::Npy g;
  std::string err;
  ASSERT_TRUE(testing::read_npy(testing::tiny_dir() + "/golden/prefill_L0_router_topk_idx.npy", &g, &err)) << err;
  std::vector<uint64_t> want(static_cast<size_t>(c.n_experts(0)), 0);
  for (double e : g.to_f64()) ++want[static_cast<size_t>(e)];
  for (const ExpertCount& e : r->experts) {
    if (e.layer == 0) {
      EXPECT_EQ(e.count, want[static_cast<size_t>(e.expert)]) << "expert " << e.expert;
    }
  }

  testing::TempDir d;
  r->model = "tiny";
  const std::string js = hot_json(*r);
  ASSERT_TRUE(io::write_file_atomic(d.file("hot.json"), js.data(), js.size()).ok());
  auto keys = read_hot_file(d.file("hot.json"));
  ASSERT_TRUE(keys.ok()) << keys.error().to_string();
  ASSERT_EQ(keys->size(), r->experts.size());
  for (size_t i = 0; i < keys->size(); ++i) {
    EXPECT_EQ((*keys)[i].layer, r->experts[i].layer);
    EXPECT_EQ((*keys)[i].expert, r->experts[i].expert);
  }
}

TEST(Calibrate, CancelStopsBetweenChunksAndTheRankingCoversTheChunksDone) {
  STRATA_REQUIRE_FIXTURE(testing::tiny_dir() + "/manifest.json");
  auto m = testing::load_model(testing::tiny_dir() + "/checkpoint");
  ASSERT_TRUE(m.ok()) << m.error().to_string();
  const std::vector<int32_t> ids = prompt_ids();
  ASSERT_GT(ids.size(), 2u);
  const int64_t chunk = static_cast<int64_t>(ids.size()) / 2;  // two or three chunks
  const model::ModelConfig& c = (*m)->config();
  model::Activations act = (*m)->new_activations();
  std::atomic<bool> cancel{false};
  int calls = 0;
  // Ctrl-C arrives during the first chunk: that chunk ends, no other starts.
  auto r = calibrate(**m, act, ids, chunk, [&](int64_t) { ++calls; cancel = true; }, nullptr, &cancel);
  ASSERT_TRUE(r.ok()) << r.error().to_string();
  EXPECT_EQ(calls, 1);
  EXPECT_EQ(r->tokens, chunk);
  EXPECT_EQ(r->picks, static_cast<uint64_t>(chunk) * static_cast<uint64_t>(c.n_activated_experts) *
                          static_cast<uint64_t>(c.n_layers));
  // Set before the first chunk: nothing runs.
  auto none = calibrate(**m, act, ids, chunk, {}, nullptr, &cancel);
  ASSERT_TRUE(none.ok()) << none.error().to_string();
  EXPECT_EQ(none->tokens, 0);
  EXPECT_EQ(none->picks, 0u);
}

TEST(Calibrate, BadHotFilesNameTheProblem) {
  testing::TempDir d;
  testing::write_all(d.file("a.json"), "not json");
  testing::write_all(d.file("b.json"), R"({"format": "something-else", "experts": []})");
  testing::write_all(d.file("c.json"), R"({"format": "strata-hot-experts", "experts": [[1, 2, 3], [4, -1, 2]]})");
  EXPECT_NE(read_hot_file(d.file("a.json")).error().message().find("not a JSON object"), std::string::npos);
  EXPECT_NE(read_hot_file(d.file("b.json")).error().message().find("format"), std::string::npos);
  EXPECT_NE(read_hot_file(d.file("c.json")).error().message().find("experts[1]"), std::string::npos);
  EXPECT_EQ(read_hot_file(d.file("missing.json")).error().code(), StatusCode::kNotFound);
}

// The values fill_rows writes for a (rank-1 or rank-2) BF16/F32 tensor row, as floats.
std::vector<float> row_values(const SynthPlan& plan, const std::string& name, int64_t row) {
  for (size_t i = 0; i < plan.tensors.size(); ++i) {
    const SynthTensor& t = plan.tensors[i];
    if (t.decl.name != name) continue;
    const FillTables tables = FillTables::build(std::span<const SynthTensor>(&t, 1));
    std::vector<uint8_t> bytes(fill_row_bytes(t));
    fill_rows(t, 0, tables, row, row + 1, bytes.data());
    std::vector<float> v;
    if (t.decl.dtype == DType::kF32) {
      v.resize(bytes.size() / 4);
      std::memcpy(v.data(), bytes.data(), bytes.size());
    } else {
      for (size_t k = 0; k + 1 < bytes.size(); k += 2)
        v.push_back(bf16_to_f32(static_cast<uint16_t>(bytes[k] | (bytes[k + 1] << 8))));
    }
    return v;
  }
  ADD_FAILURE() << "no tensor " << name;
  return {};
}

Result<SynthPlan> tiny_plan(double skew) {
  SynthOptions o;
  o.preset = "tiny";
  o.out_dir = "unused";
  o.seed = 3;
  o.routing_skew = skew;
  return plan_synth(o, kV41CompressedVocabSize);
}

TEST(RoutingSkew, UnsetChangesNothingZeroIsUnbiasedPositiveIsZipfPlusTopics) {
  auto plain = tiny_plan(-1), zero = tiny_plan(0), one = tiny_plan(1);
  ASSERT_TRUE(plain.ok() && zero.ok() && one.ok());
  const std::string bias = "layers.3.ffn.gate.bias", gate = "layers.3.ffn.gate.weight";
  // Unset: every tensor has no skew.
  for (const SynthTensor& t : plain->tensors) EXPECT_EQ(t.skew.kind, RoutingSkew::Kind::kNone) << t.decl.name;
  // 0: zero biases, router weights and embeddings as the plain generator writes them.
  for (float v : row_values(*zero, bias, 0)) EXPECT_EQ(v, 0.0f);
  EXPECT_EQ(row_values(*zero, gate, 5), row_values(*plain, gate, 5));
  EXPECT_EQ(row_values(*zero, "embed.weight", 77), row_values(*plain, "embed.weight", 77));
  // 1: biases are -0.15 ln(1 + rank) over a permutation of the experts.
  std::vector<float> b = row_values(*one, bias, 0);
  std::sort(b.begin(), b.end(), std::greater<float>());
  for (size_t k = 0; k < b.size(); ++k)
    EXPECT_FLOAT_EQ(b[k], -0.15f * static_cast<float>(std::log1p(static_cast<double>(k)))) << "rank " << k;
  // Router rows gain a topic component, and two experts of one topic share it: their difference
  // from the plain rows is the same vector.
  const int64_t n_exp = 8;
  std::vector<std::vector<float>> delta;
  for (int64_t e = 0; e < n_exp; ++e) {
    auto a = row_values(*one, gate, e), p = row_values(*plain, gate, e);
    std::vector<float> d(a.size());
    for (size_t i = 0; i < a.size(); ++i) d[i] = a[i] - p[i];
    delta.push_back(d);
  }
  double norm = 0;
  for (float v : delta[0]) norm += double(v) * v;
  EXPECT_GT(norm, 0);
  // Tiny has 8 experts and 16 topics: experts are in distinct topics, so their components differ.
  EXPECT_NE(delta[0], delta[1]);
}

}  // namespace
}  // namespace strata::tools
