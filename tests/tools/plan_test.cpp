// strata plan (tools/plan_sizes.h, plan_cost.h, plan.h): the published V4.1 figures from the real
// config alone (~475 GiB checkpoint, ~189 GiB Engram, 890 B/token, 0.11 GiB at 128K, 0.87 GiB at 1M,
// 48 x 264 B Engram rows), agreement with `strata synth --dry-run`'s sizes, the time model against
// hand-computed cases, and placement decisions for given RAM sizes.
#include "tools/plan.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <optional>
#include <tuple>

#include "io/file.h"
#include "tests/support/files.h"
#include "tests/support/temp_dir.h"
#include "tests/support/npy.h"
#include "tools/synth.h"

namespace strata::tools {
namespace {

constexpr double kGiB = 1024.0 * 1024.0 * 1024.0;
const std::string kRealConfig = std::string(STRATA_FIXTURES_DIR) + "/real-config/config.json";
const std::string kRealInferenceConfig = std::string(STRATA_FIXTURES_DIR) + "/real-config/inference_config.json";

struct Loaded {
  model::ModelConfig config;
  VisionShape vision;
};

Loaded load_config(const std::string& path) {
  auto text = io::read_file_to_string(path);
  EXPECT_TRUE(text.ok()) << text.error().to_string();
  auto c = model::ModelConfig::parse(*text, path);
  EXPECT_TRUE(c.ok()) << c.error().to_string();
  auto v = parse_vision_shape(*text, path);
  EXPECT_TRUE(v.ok()) << v.error().to_string();
  return Loaded{*c, *v};
}

// A machine with round numbers: every kernel streams `gbps`, no per-call cost, `gflops` of matmul,
// attention and indexer as given.
MachineProfile fake_machine(double gbps, double gflops, uint64_t ram, int threads = 1) {
  MachineProfile m;
  m.date = "2026-11-29T00:00:00Z";
  m.hostname = "test";
  m.cpu_model = "test cpu";
  m.simd = "avx2";
  m.kernel_level = "avx2";
  m.logical_cores = m.physical_cores = threads;
  m.ram_total = m.ram_available = ram;
  ThreadRates r;
  r.threads = threads;
  r.mem_read_gbps = gbps;
  for (KernelRates& k : r.kernels) {
    k.matvec_gbps.fill(gbps);
    k.matvec_small_gbps.fill(gbps);
    k.call_us = 0;
    k.matmul_gflops.fill(gflops);
    k.matmul_small_gflops.fill(gflops);
  }
  r.attn_gflops = 1e9;  // free: the tests below isolate the linears
  r.index_gflops = 1e9;
  m.threads.push_back(r);
  m.topk_ns_per_elem = 0;
  m.disk.measured = true;
  m.disk.dir = "/data";
  m.disk.seq_gbps_buffered = m.disk.seq_gbps_direct = 2.0;
  m.disk.iops_qd32_buffered = m.disk.iops_qd32_direct = 100000;
  m.disk.iops_qd1_buffered = m.disk.iops_qd1_direct = 10000;
  return m;
}

// The Engram dial at the release config (issue 16 item 4): 2 tables, 768,022,850 rows of 256 values.
TEST(PlanSizes, EngramDialAtTheReleaseConfig) {
  STRATA_REQUIRE_FIXTURE(kRealConfig);
  const Loaded l = load_config(kRealConfig);
  auto fp8 = model_footprint(l.config);
  ASSERT_TRUE(fp8.ok()) << fp8.error().to_string();
  const uint64_t rows = 384006168ull + 384016682ull;
  // Two types (each footprint of the release config takes ~0.7 s): Q8_0 is wider than FP8 + E8M0;
  // Q4_K through make_plan and its text, as `strata plan -m X.gguf` prints it.
  PlanOptions po;
  po.quant.engram = DType::kQ4_K;
  auto plan = make_plan(l.config, l.vision, fake_machine(20.0, 200.0, 24ull << 30, 2), po, kRealConfig);
  ASSERT_TRUE(plan.ok()) << plan.error().to_string();
  const std::string text = plan_text(*plan);
  EXPECT_NE(text.find("Engram: 48 rows x 144 B = 6,912 B (6.9 KB) read per token (tables Q4_K)"), std::string::npos)
      << text;
  EXPECT_NE(plan_json(*plan).find("\"dtype\": \"Q4_K\""), std::string::npos);
  QuantChoice q8_engram;
  q8_engram.engram = DType::kQ8_0;
  auto q8 = model_footprint(l.config, {}, q8_engram);
  ASSERT_TRUE(q8.ok()) << q8.error().to_string();
  for (auto [f, d, rb] : {std::tuple{&*q8, DType::kQ8_0, 272u}, std::tuple{&plan->footprint, DType::kQ4_K, 144u}}) {
    EXPECT_EQ(f->engram_row_bytes, rb) << dtype_name(d);
    EXPECT_EQ(f->engram_bytes_per_token, 48u * rb) << dtype_name(d);
    EXPECT_EQ(f->engram_table_bytes, rows * rb) << dtype_name(d);
    EXPECT_EQ(f->engram_scale_bytes, 0u);
    // Everything else is the same checkpoint.
    EXPECT_EQ(f->text_bytes - f->engram_table_bytes, fp8->text_bytes - fp8->engram_table_bytes) << dtype_name(d);
    EXPECT_EQ(f->decode.engram_bytes, 48u * rb) << dtype_name(d);
  }
}

TEST(PlanSizes, RealConfigPublishedFigures) {
  STRATA_REQUIRE_FIXTURE(kRealConfig);
  const Loaded l = load_config(kRealConfig);
  ASSERT_GT(l.vision.layers, 0) << "the release config has a vision tower";
  auto f = model_footprint(l.config, l.vision);
  ASSERT_TRUE(f.ok()) << f.error().to_string();
  // ~475 GiB checkpoint (474.3 GiB of text tensors + the ~0.9 GiB vision estimate).
  EXPECT_NEAR(static_cast<double>(f->checkpoint_bytes) / kGiB, 475.0, 0.5);
  EXPECT_NEAR(static_cast<double>(f->text_bytes) / kGiB, 474.3, 0.1);
  // ~189 GiB Engram: two tables of 384,006,168 and 384,016,682 rows x 264 B.
  EXPECT_EQ(f->engram_table_bytes, (384006168ull + 384016682ull) * 264ull);
  EXPECT_NEAR(static_cast<double>(f->engram_table_bytes) / kGiB, 188.8, 0.05);
  // KV: 890 B/token; 0.11 GiB at 128K, 0.87 GiB at 1M.
  EXPECT_EQ(f->kv.main_entry_bytes, 288u);
  EXPECT_EQ(f->kv.index_entry_bytes, 68u);
  EXPECT_DOUBLE_EQ(f->kv.bytes_per_token, 890.0);
  EXPECT_EQ(f->kv.main_sources.size(), 4u);
  EXPECT_EQ(f->kv.key_owners.size(), 4u);
  EXPECT_NEAR(static_cast<double>(f->kv.bytes_at(131072)) / kGiB, 0.11, 0.005);
  EXPECT_NEAR(static_cast<double>(f->kv.bytes_at(1 << 20)) / kGiB, 0.87, 0.005);
  // Per sequence: 40 window rings of 128 x (512 + 16) bytes + 3 ratio-2 compressor states.
  EXPECT_EQ(f->kv.fixed_bytes, 40ull * 128 * 528 + 3ull * 2 * 2 * 512 * 4);
  // Engram per token: 2 layers x 3 orders x 8 heads = 48 rows of 256 + 8 bytes = 12,672 B.
  EXPECT_EQ(f->engram_rows_per_token, 48);
  EXPECT_EQ(f->engram_row_bytes, 264u);
  EXPECT_EQ(f->engram_bytes_per_token, 12672u);
  // Routed experts: one expert = 3 x (2304 x 5120 / 2 + 2304 x 160) = 18,800,640 B; 384 per layer.
  EXPECT_EQ(f->expert_bytes, 18800640u);
  EXPECT_EQ(f->routed_bytes, 40ull * 384 * 18800640ull);
  // Active parameters per token: ~16 B in decode, ~8 B in prefill under replay (encoder only).
  EXPECT_NEAR(static_cast<double>(f->decode.params) / 1e9, 16.1, 0.3);
  EXPECT_NEAR(static_cast<double>(f->prefill_replay.params) / 1e9, 7.9, 0.3);
  EXPECT_EQ(f->decode.engram_rows, 48u);
  EXPECT_EQ(f->decode.expert_bytes, 40ull * 6 * 18800640ull);
  EXPECT_EQ(f->prefill_replay.expert_bytes, 20ull * 6 * 18800640ull);  // layers 0-19
  EXPECT_EQ(f->first_decoder_layer, 20);
}

TEST(PlanSizes, FlatInferenceConfigGivesTheSameFootprint) {
  STRATA_REQUIRE_FIXTURE(kRealInferenceConfig);
  STRATA_REQUIRE_FIXTURE(kRealConfig);
  const Loaded hf = load_config(kRealConfig), flat = load_config(kRealInferenceConfig);
  auto a = model_footprint(hf.config, hf.vision);
  auto b = model_footprint(flat.config, flat.vision);
  ASSERT_TRUE(a.ok() && b.ok());
  EXPECT_EQ(a->checkpoint_bytes, b->checkpoint_bytes);
  EXPECT_EQ(a->kv.bytes_per_token, b->kv.bytes_per_token);
  EXPECT_EQ(flat.vision.layers, 32);
  EXPECT_EQ(flat.vision.dim, 1024);
}

TEST(PlanSizes, MatchesSynthDryRun) {
  // The plan's text-model size is, tensor for tensor, what `strata synth` writes for the preset.
  for (const char* preset : {"tiny", "demo", "full"}) {
    SynthOptions so;
    so.preset = preset;
    so.out_dir = "/nonexistent";
    auto plan = plan_synth(so, kV41CompressedVocabSize);
    ASSERT_TRUE(plan.ok()) << plan.error().to_string();
    auto f = model_footprint(plan->config);
    ASSERT_TRUE(f.ok()) << f.error().to_string();
    EXPECT_EQ(f->text_bytes, plan->total_bytes) << preset;
    EXPECT_EQ(f->checkpoint_bytes, plan->total_bytes) << preset << ": no vision in synth checkpoints";
    EXPECT_EQ(f->n_tensors, plan->tensors.size()) << preset;
    EXPECT_EQ(f->engram_table_bytes, plan->engram_table_bytes) << preset;
    // Every component's dtype split adds up to its size.
    for (const ComponentSize& c : f->components) {
      uint64_t sum = 0;
      for (const auto& [t, b] : c.bytes_by_dtype) sum += b;
      EXPECT_EQ(sum, c.bytes) << preset << " " << c.name;
    }
  }
}

TEST(PlanSizes, WoAAddsOnlyItsScalesInRam) {
  STRATA_REQUIRE_FIXTURE(kRealConfig);
  Loaded l = load_config(kRealConfig);
  auto f = model_footprint(l.config);
  ASSERT_TRUE(f.ok());
  // attn.wo_a [8192, 4096] FP8: the store holds its codes blocked in place of the stored ones
  // (o_lora_rank 1024: whole 32-row scale blocks), keeping at most 4 MiB of the stored bytes (the
  // partial 2 MiB chunks at the ends), and the model copies the scales, in 40 layers + 3 stages.
  const uint64_t wo_a_scale = (8192 / 32) * (4096 / 32);
  EXPECT_EQ(f->text_ram_bytes - f->text_bytes, 43 * ((4ull << 20) + wo_a_scale));
  // Groups that are not whole scale blocks: the copy is widened to 8 x 1008 x 4096 BF16.
  l.config.o_lora_rank = 1008;
  auto w = model_footprint(l.config);
  ASSERT_TRUE(w.ok());
  EXPECT_EQ(w->text_ram_bytes - w->text_bytes, 43 * 2 * (8ull * 1008 * 4096));
}

TEST(PlanSizes, VisionShapeParsing) {
  auto none = parse_vision_shape(R"({"text_config": {}})", "c.json");
  ASSERT_TRUE(none.ok());
  EXPECT_EQ(none->layers, 0);
  auto bad = parse_vision_shape(R"({"vision_config": {"num_hidden_layers": "many"}})", "c.json");
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.error().message().find("num_hidden_layers"), std::string::npos) << bad.error().message();
  EXPECT_NE(bad.error().message().find("c.json"), std::string::npos);
  EXPECT_FALSE(parse_vision_shape("{not json", "c.json").ok());
  auto missing = parse_vision_shape(R"({"vision_n_layers": 4})", "c.json");
  EXPECT_FALSE(missing.ok()) << "layers without a hidden size";
}

TEST(PlanSizes, ParseSizeAndFormat) {
  EXPECT_EQ(*parse_size("24G", "--ram"), 24ull << 30);
  EXPECT_EQ(*parse_size("24GiB", "--ram"), 24ull << 30);
  EXPECT_EQ(*parse_size("512m", "--ram"), 512ull << 20);
  EXPECT_EQ(*parse_size("1.5T", "--ram"), 3ull << 39);
  EXPECT_EQ(*parse_size("1000", "--ram"), 1000u);
  for (const char* bad : {"", "G", "-1G", "12Q", "nanG"}) {
    auto r = parse_size(bad, "--ram");
    ASSERT_FALSE(r.ok()) << bad;
    EXPECT_NE(r.error().message().find("--ram"), std::string::npos);
  }
  EXPECT_EQ(format_bytes(890), "890 B");
  EXPECT_EQ(format_bytes(475.2 * kGiB), "475.2 GiB");
  EXPECT_EQ(format_bytes(0.5 * kGiB), "512.0 MiB");
}

// The cost model's tests on the real V4.1 config: `l` the parsed config, `f` its footprint.
class PlanCost : public ::testing::Test {
 protected:
  void SetUp() override {
    STRATA_REQUIRE_FIXTURE(kRealConfig);
    l = load_config(kRealConfig);
    auto fp = model_footprint(l.config);
    ASSERT_TRUE(fp.ok()) << fp.error().to_string();
    f = std::move(*fp);
  }
  Loaded l;
  std::optional<ModelFootprint> f;
};

TEST_F(PlanCost, DecodeLinearsAreBytesOverBandwidth) {
  MachineProfile m = fake_machine(10.0, 100.0, 1ull << 40);
  IoModel io;  // everything in RAM
  const Cost c = decode_token_cost(l.config, *f, m, 1, 1000, io);
  // With no call cost and free attention, a token costs its weight bytes (minus the embedding row,
  // a lookup) at 10 GB/s.
  const double embed_row = 2.0 * 5120;
  const double expect = (static_cast<double>(f->decode.weight_bytes) - embed_row) / 10e9;
  EXPECT_NEAR(c.total_s, expect, expect * 1e-6);
  EXPECT_EQ(c.io_s, 0);
  // Dense FP8 weights (attention 4.8 GiB, shared experts, Engram projection) outweigh the 4.2 GiB
  // of six routed experts per layer.
  EXPECT_EQ(c.bottleneck, "fp8 linears");

  // attn.wo_a's FP8 codes run at the rate of their own kernel (the bf16 chains on E4M3 codes): at
  // half that rate a token costs their bytes once more.
  double wo_a = 0;
  for (const LinearUse& u : f->linears)
    if (u.kind == LinearKind::kBf16E4m3) {
      EXPECT_NE(u.name.find(".attn.wo_a"), std::string::npos) << u.name;
      wo_a += static_cast<double>(u.bytes) * u.calls * u.per_token;
    }
  EXPECT_EQ(wo_a, 40.0 * (8192.0 * 4096 + 8192 / 32 * (4096 / 32))) << "wo_a's FP8 bytes, 40 layers";
  KernelRates& k = m.threads[0].kernels[static_cast<size_t>(LinearKind::kBf16E4m3)];
  k.matvec_gbps.fill(5.0);
  k.matvec_small_gbps.fill(5.0);
  const Cost half = decode_token_cost(l.config, *f, m, 1, 1000, io);
  EXPECT_NEAR(half.total_s, expect + wo_a / 10e9, expect * 1e-6);
}

TEST_F(PlanCost, ShortDecodePassesStreamSlower) {
  // Small-weight matvec rates at half the large ones: the release has weights above 16 MiB (the LM
  // head, Engram's projection) and below (an expert's 11.8 MB, wq_b's 6 MB), so a token costs
  // more than at the large rates throughout and less than at half of them throughout.
  IoModel io;
  const MachineProfile fast = fake_machine(10.0, 100.0, 1ull << 40);
  MachineProfile mixed = fast;
  for (KernelRates& k : mixed.threads[0].kernels) k.matvec_small_gbps.fill(5.0);
  const MachineProfile slow = fake_machine(5.0, 100.0, 1ull << 40);
  const double t_fast = decode_token_cost(l.config, *f, fast, 1, 1000, io).total_s;
  const double t_mixed = decode_token_cost(l.config, *f, mixed, 1, 1000, io).total_s;
  const double t_slow = decode_token_cost(l.config, *f, slow, 1, 1000, io).total_s;
  EXPECT_GT(t_mixed, t_fast * 1.01);
  EXPECT_LT(t_mixed, t_slow * 0.99);
}

TEST_F(PlanCost, StreamingExpertsAreBoundByTheDisk) {
  const MachineProfile m = fake_machine(50.0, 1000.0, 1ull << 40);
  IoModel io;
  io.expert_hit_rate = 0.5;
  io.expert_read_gbps = 2.0;
  io.engram_from_disk = true;
  io.engram_iops = 48000;
  io.overlap = true;
  const Cost c = decode_token_cost(l.config, *f, m, 1, 1000, io);
  // 240 expert uses, half read at 2 GB/s; 48 Engram rows at 48k IOPS = 1 ms.
  const double expert_io = 120.0 * 18800640 / 2e9;
  EXPECT_NEAR(c.io_s, expert_io + 1e-3, 1e-9);
  EXPECT_EQ(c.total_s, std::max(c.compute_s, c.io_s));
  EXPECT_EQ(c.bottleneck, "disk: expert reads");
  io.overlap = false;
  const Cost serial = decode_token_cost(l.config, *f, m, 1, 1000, io);
  EXPECT_NEAR(serial.total_s, serial.compute_s + serial.io_s, 1e-12);
}

TEST_F(PlanCost, OverlappedIoIsNotTheBottleneckWhenComputeIsSlower) {
  // Slow compute (1 GB/s), a fast disk: expert reads are the largest single term serially but run
  // under compute with overlap, so the bottleneck is the largest compute term.
  const MachineProfile m = fake_machine(1.0, 10.0, 1ull << 40);
  IoModel io;
  io.expert_hit_rate = 0.0;
  io.expert_read_gbps = 0.5;
  io.overlap = true;
  const Cost c = decode_token_cost(l.config, *f, m, 1, 1000, io);
  ASSERT_LT(c.io_s, c.compute_s);
  double biggest = 0;
  for (const CostTerm& t : c.terms) biggest = std::max(biggest, t.seconds);
  EXPECT_GT(c.io_s, 0.5 * biggest) << "the test needs expert reads among the largest terms";
  EXPECT_EQ(c.total_s, c.compute_s);
  EXPECT_EQ(c.bottleneck, "fp8 linears");
}

// strata plan --parallel (issue 14 item 7): a batched step reads the dense weights once and each
// distinct routed expert once; per-token work scales with the streams.
TEST_F(PlanCost, BatchedDecodeReadsDenseWeightsOncePerStep) {
  const MachineProfile m = fake_machine(10.0, 100.0, 1ull << 40);
  IoModel io;
  const Cost single = decode_token_cost(l.config, *f, m, 1, 1000, io);
  const BatchedDecode one = batched_decode(single, l.config, *f, 1, false);
  EXPECT_NEAR(one.step_s, single.total_s, single.total_s * 1e-12);
  EXPECT_NEAR(one.distinct_experts, 1.0, 1e-12);
  double routed = 0, rest = 0;
  for (const CostTerm& t : single.terms) (t.name == "routed experts" ? routed : rest) += t.seconds;
  ASSERT_GT(routed, 0);
  const BatchedDecode four = batched_decode(single, l.config, *f, 4, false);
  // Uniform routing: 6 of 256 experts per token, so 4 tokens touch 256 (1 - (250/256)^4) of them.
  const double d = 256.0 * (1.0 - std::pow(250.0 / 256.0, 4.0)) / 6.0;
  EXPECT_NEAR(four.distinct_experts, d, 0.05);  // a few layers of the real config route differently
  EXPECT_GT(four.distinct_experts, 3.5);
  EXPECT_LT(four.distinct_experts, 4.0);
  // This fake machine makes everything but the linears free: the step is dense once + routed x d.
  EXPECT_NEAR(four.step_s, rest + routed * four.distinct_experts, four.step_s * 1e-3);
  // Four streams: 4 tokens for dense once + routed x d, against one token for dense + routed.
  const double gain = 4.0 * (rest + routed) / (rest + routed * four.distinct_experts);
  EXPECT_NEAR(four.aggregate_tok_s / one.aggregate_tok_s, gain, gain * 1e-3);
  EXPECT_GT(four.aggregate_tok_s, 1.2 * one.aggregate_tok_s);
  EXPECT_LT(four.aggregate_tok_s, 4.0 * one.aggregate_tok_s);
  EXPECT_NEAR(four.aggregate_tok_s, 4.0 * four.per_stream_tok_s, 1e-9);
}

TEST_F(PlanCost, PrefillTouchesEveryExpertOfALongChunk) {
  const MachineProfile m = fake_machine(50.0, 1000.0, 1ull << 40);
  IoModel io;
  io.expert_hit_rate = 0;
  io.expert_read_gbps = 1.0;
  const Cost c = prefill_cost(l.config, *f, m, 1, 2048, 2048, false, io);
  // 2048 tokens x top-6 of 384: every expert of every layer is read once (1 - (1 - 6/384)^2048 ~ 1).
  EXPECT_NEAR(c.io_s, static_cast<double>(f->routed_bytes) / 1e9, 0.001 * static_cast<double>(f->routed_bytes) / 1e9);
  const Cost replay = prefill_cost(l.config, *f, m, 1, 2048, 2048, true, io);
  // Replay: the 20 encoder layers read every expert; the 20 decoder layers run the last 128 tokens,
  // touching 1 - (1 - 6/384)^128 of theirs.
  const double share = 0.5 + 0.5 * (1 - std::pow(1 - 6.0 / 384, 128));
  EXPECT_NEAR(replay.io_s, share * c.io_s, 1e-3 * c.io_s);
  EXPECT_LT(replay.compute_s, 0.6 * c.compute_s) << "replay skips the decoder for all but 128 tokens";
}

TEST_F(PlanCost, EngineGlueScalesWithTokensAndLayers) {
  MachineProfile m = fake_machine(50.0, 1000.0, 1ull << 40);
  IoModel io;
  auto glue = [](const Cost& c) {
    for (const CostTerm& t : c.terms)
      if (t.name == "engine glue") return t.seconds;
    return -1.0;
  };
  EXPECT_EQ(glue(prefill_cost(l.config, *f, m, 1, 2048, 2048, false, io)), -1.0) << "no term when not measured";
  m.threads[0].glue_us_prefill = 2;
  m.threads[0].glue_us_decode = 3;
  EXPECT_NEAR(glue(prefill_cost(l.config, *f, m, 1, 2048, 2048, false, io)), 2048.0 * 40 * 2e-6, 1e-9);
  // Replay: every token through the 20 encoder layers, the last 128 through the 20 decoder layers.
  EXPECT_NEAR(glue(prefill_cost(l.config, *f, m, 1, 2048, 2048, true, io)), (2048.0 * 20 + 128.0 * 20) * 2e-6, 1e-9);
  // Decode: per token and layer (us), and the model's width does not enter either.
  EXPECT_NEAR(glue(decode_token_cost(l.config, *f, m, 1, 1000, io)), 40.0 * 3e-6, 1e-12);
}

TEST(Plan, StreamedExpertReadsFollowTheExpertIoMode) {
  STRATA_REQUIRE_FIXTURE(kRealConfig);
  const Loaded l = load_config(kRealConfig);
  MachineProfile m = fake_machine(20.0, 200.0, 64ull << 30, 4);
  m.disk.seq_gbps_direct = 4.0;  // buffered stays 2.0
  PlanOptions o;
  o.ram_bytes = 64ull << 30;
  o.prompts = {512};
  auto io_s = [&](store::ExpertIo mode, bool direct_supported, bool* direct) {
    m.disk.direct_supported = direct_supported;
    o.expert_io = mode;
    auto p = make_plan(l.config, l.vision, m, o, kRealConfig);
    EXPECT_TRUE(p.ok());
    *direct = p->placement.expert_direct_io;
    for (const CostTerm& t : p->speeds.at(0).decode.terms)
      if (t.name == "expert reads") return t.seconds;
    return -1.0;
  };
  bool direct = false;
  const double buffered = io_s(store::ExpertIo::kBuffered, true, &direct);
  EXPECT_FALSE(direct);
  const double automatic = io_s(store::ExpertIo::kAuto, true, &direct);
  EXPECT_TRUE(direct);
  EXPECT_NEAR(automatic, buffered / 2, 1e-3 * buffered) << "O_DIRECT reads at 4 GB/s instead of 2";
  io_s(store::ExpertIo::kAuto, false, &direct);
  EXPECT_FALSE(direct) << "auto falls back to buffered where O_DIRECT is refused";
  io_s(store::ExpertIo::kDirect, false, &direct);
  EXPECT_TRUE(direct);
}

TEST(Plan, PlacementForGivenRam) {
  STRATA_REQUIRE_FIXTURE(kRealConfig);
  const Loaded l = load_config(kRealConfig);
  const MachineProfile m = fake_machine(20.0, 200.0, 64ull << 30, 4);
  PlanOptions o;
  o.ram_bytes = 64ull << 30;
  auto p = make_plan(l.config, l.vision, m, o, kRealConfig);
  ASSERT_TRUE(p.ok()) << p.error().to_string();
  const Placement& pl = p->placement;
  EXPECT_EQ(pl.load_mode, "stream");
  EXPECT_TRUE(pl.fits);
  EXPECT_EQ(pl.total_experts, 40 * 384);
  // As store::open_store sizes it: budget = 64 GiB - max(1 GiB, 10%); resident tensors (all but
  // routed experts and Engram tables) + Engram row cache (scales stay on disk: 5.7 GiB x 16 >
  // budget); the rest in 4 KiB-aligned expert slots.
  EXPECT_EQ(pl.reserve_bytes, (64ull << 30) / 10);
  EXPECT_EQ(pl.budget_bytes, (64ull << 30) - (64ull << 30) / 10);
  EXPECT_EQ(pl.engram_ram_bytes, 65536ull * (264 + 16));
  const uint64_t slot = (18800640ull + 4095) / 4096 * 4096;
  const uint64_t left = pl.budget_bytes - pl.dense_bytes - pl.engram_ram_bytes;
  EXPECT_EQ(pl.expert_slots, static_cast<int64_t>(left / slot));
  EXPECT_NEAR(pl.expert_hit_rate, static_cast<double>(pl.expert_slots) / (40 * 384), 1e-12);
  // wo_a's blocked codes replace the stored ones in the store (resident_relaid) but for at most
  // 4 MiB at the ends; its scales are copied outside it (40 layers + 3 DSpark stages, 32 KiB each).
  EXPECT_EQ(pl.dense_ram_bytes - pl.dense_bytes, 43ull * ((4ull << 20) + (8192 / 32) * (4096 / 32)))
      << "wo_a's copies outside the store";
  EXPECT_FALSE(pl.engram_resident);
  EXPECT_EQ(p->speeds.size(), 3u);
  for (const SpeedPrediction& s : p->speeds) {
    EXPECT_GT(s.prefill_tok_s, 0);
    EXPECT_GT(s.decode_tok_s, 0);
    EXPECT_FALSE(s.decode_bottleneck.empty());
  }
  // Pinned layers leave two tokens' top-k for every other layer.
  if (pl.pinned_layers > 0) {
    EXPECT_GE(pl.expert_slots - pl.pinned_layers * 384, 2 * 6 * (40 - pl.pinned_layers));
  }

  // Enough RAM for everything: resident, every expert in RAM, Engram in the page cache.
  o.ram_bytes = 1ull << 40;
  auto big = make_plan(l.config, l.vision, m, o, kRealConfig);
  ASSERT_TRUE(big.ok());
  EXPECT_EQ(big->placement.load_mode, "resident");
  EXPECT_EQ(big->placement.expert_hit_rate, 1.0);
  EXPECT_TRUE(big->placement.engram_resident);
  EXPECT_TRUE(big->placement.streams.empty());

  // Too little for the resident tensors: says so, with both numbers.
  o.ram_bytes = 8ull << 30;
  auto small = make_plan(l.config, l.vision, m, o, kRealConfig);
  ASSERT_TRUE(small.ok());
  EXPECT_FALSE(small->placement.fits);
  ASSERT_FALSE(small->placement.notes.empty());
  EXPECT_NE(plan_text(*small).find("does not fit"), std::string::npos);

  // Forcing resident without the RAM: not fitting, with the reason.
  o.ram_bytes = 64ull << 30;
  o.load_mode = "resident";
  auto forced = make_plan(l.config, l.vision, m, o, kRealConfig);
  ASSERT_TRUE(forced.ok());
  EXPECT_FALSE(forced->placement.fits);

  o.load_mode = "sideways";
  EXPECT_FALSE(make_plan(l.config, l.vision, m, o, kRealConfig).ok());
}

// plan --ram is run's --ram-budget (issue #19): the store gets the whole number, no margin taken off
// (store::open_store takes none off an explicit budget), so plan streams where run streams.
TEST(Plan, GivenBudgetIsTheStoresWhole) {
  STRATA_REQUIRE_FIXTURE(kRealConfig);
  const Loaded l = load_config(kRealConfig);
  const MachineProfile m = fake_machine(20.0, 200.0, 64ull << 30, 4);
  PlanOptions o;
  o.ram_budget_bytes = 40ull << 30;
  auto p = make_plan(l.config, l.vision, m, o, kRealConfig);
  ASSERT_TRUE(p.ok()) << p.error().to_string();
  EXPECT_TRUE(p->placement.budget_given);
  EXPECT_EQ(p->placement.budget_bytes, 40ull << 30);
  EXPECT_EQ(p->placement.reserve_bytes, 0u);
  EXPECT_EQ(p->placement.load_mode, "stream");
  EXPECT_TRUE(p->placement.fits);
  EXPECT_NE(plan_text(*p).find("(--ram, as run --ram-budget)"), std::string::npos) << plan_text(*p);
  // The same number as RAM (not a budget) leaves max(1 GiB, 10%) outside the store.
  PlanOptions r;
  r.ram_bytes = 40ull << 30;
  auto q = make_plan(l.config, l.vision, m, r, kRealConfig);
  ASSERT_TRUE(q.ok());
  EXPECT_FALSE(q->placement.budget_given);
  EXPECT_EQ(q->placement.budget_bytes, (40ull << 30) - (4ull << 30));
  EXPECT_LT(q->placement.expert_slots, p->placement.expert_slots);
}

TEST(Plan, TextAndJsonCarryTheFigures) {
  STRATA_REQUIRE_FIXTURE(kRealConfig);
  const Loaded l = load_config(kRealConfig);
  const MachineProfile m = fake_machine(20.0, 200.0, 24ull << 30, 2);
  auto p = make_plan(l.config, l.vision, m, PlanOptions{}, kRealConfig);
  ASSERT_TRUE(p.ok());
  const std::string text = plan_text(*p);
  for (const char* s : {"475.", "188.8 GiB", "890 B/token", "0.11 GiB", "0.87 GiB", "12,672 B", "routed experts",
                        "vision tower (estimate)", "load mode stream", "decode t/s"})
    EXPECT_NE(text.find(s), std::string::npos) << "missing '" << s << "' in\n" << text;
  const std::string json = plan_json(*p);
  EXPECT_NE(json.find("\"bytes_per_token\": 890"), std::string::npos);
  EXPECT_NE(json.find("\"predicted\""), std::string::npos);
}

TEST(Plan, MeasuredRoutingSetsTheHitRate) {
  STRATA_REQUIRE_FIXTURE(kRealConfig);
  const Loaded l = load_config(kRealConfig);
  testing::TempDir dir;
  // A hot file as strata calibrate writes it: 3 experts got 90 of 100 picks, 10 others one each.
  std::string experts = "[[0,5,50],[3,1,30],[7,2,10]";
  for (int e = 0; e < 10; ++e) experts += ",[1," + std::to_string(e) + ",1]";
  experts += "]";
  const std::string hot = dir.file("hot.json");
  testing::write_all(hot, "{\"format\":\"strata-hot-experts\",\"version\":1,\"model\":\"m\",\"tokens\":10,"
                          "\"n_layers\":40,\"picks\":100,\"experts\":" + experts + "}");
  auto r = read_routing_counts(hot);
  ASSERT_TRUE(r.ok()) << r.error().to_string();
  EXPECT_EQ(r->picks, 100u);
  EXPECT_DOUBLE_EQ(r->coverage(0), 0.0);
  EXPECT_DOUBLE_EQ(r->coverage(1), 0.5);
  EXPECT_DOUBLE_EQ(r->coverage(3), 0.9);
  EXPECT_DOUBLE_EQ(r->coverage(1000), 1.0);

  // In a plan: hit rate = coverage of the expert slots (far more than 13 at 64 GiB: every pick).
  const MachineProfile m = fake_machine(20.0, 200.0, 64ull << 30, 4);
  PlanOptions o;
  o.ram_bytes = 64ull << 30;
  o.routing = &*r;
  auto p = make_plan(l.config, l.vision, m, o, kRealConfig);
  ASSERT_TRUE(p.ok());
  EXPECT_EQ(p->placement.load_mode, "stream");
  EXPECT_DOUBLE_EQ(p->placement.expert_hit_rate, 1.0);
  EXPECT_NE(plan_text(*p).find("routing of " + hot), std::string::npos) << plan_text(*p);
  // A given hit rate wins over the routing.
  o.expert_hit_rate = 0.25;
  auto given = make_plan(l.config, l.vision, m, o, kRealConfig);
  ASSERT_TRUE(given.ok());
  EXPECT_DOUBLE_EQ(given->placement.expert_hit_rate, 0.25);

  // Bad files name the file and the problem.
  const std::string bad = dir.file("bad.json");
  for (const auto& [text, want] : std::vector<std::pair<std::string, std::string>>{
           {"[1,2]", "not a JSON object"},
           {"{\"format\":\"other\"}", "strata-hot-experts"},
           {"{\"format\":\"strata-hot-experts\",\"tokens\":1,\"experts\":[]}", "'picks'"},
           {"{\"format\":\"strata-hot-experts\",\"tokens\":1,\"picks\":2,\"experts\":[[0,1]]}", "experts[0]"},
           {"{\"format\":\"strata-hot-experts\",\"tokens\":1,\"picks\":5,\"experts\":[[0,1,2]]}", "add up to 2"}}) {
    testing::write_all(bad, text);
    auto e = read_routing_counts(bad);
    ASSERT_FALSE(e.ok()) << text;
    EXPECT_NE(e.error().message().find(bad), std::string::npos) << e.error().to_string();
    EXPECT_NE(e.error().message().find(want), std::string::npos) << e.error().to_string();
  }
  EXPECT_FALSE(read_routing_counts(dir.file("missing.json")).ok());
}

TEST(Plan, StreamingWithoutDiskNumbersSaysSoInsteadOfPredicting) {
  STRATA_REQUIRE_FIXTURE(kRealConfig);
  const Loaded l = load_config(kRealConfig);
  MachineProfile m = fake_machine(20.0, 200.0, 24ull << 30, 2);
  m.disk = DiskProfile{};  // `strata probe --no-disk`
  auto p = make_plan(l.config, l.vision, m, PlanOptions{}, kRealConfig);
  ASSERT_TRUE(p.ok());
  ASSERT_EQ(p->placement.load_mode, "stream");
  for (const SpeedPrediction& s : p->speeds) {
    EXPECT_TRUE(s.disk_unknown);
    EXPECT_EQ(s.decode_bottleneck, "disk (not measured)");
  }
  const std::string text = plan_text(*p);
  EXPECT_NE(text.find("n/a"), std::string::npos) << text;
  EXPECT_NE(text.find("--disk-gbps"), std::string::npos) << text;
  EXPECT_NE(plan_json(*p).find("\"decode_tok_s\": null"), std::string::npos);
  // Given rates make it predictable again.
  PlanOptions o;
  o.disk_gbps = 2.0;
  o.iops = 50000;
  auto given = make_plan(l.config, l.vision, m, o, kRealConfig);
  ASSERT_TRUE(given.ok());
  for (const SpeedPrediction& s : given->speeds) {
    EXPECT_FALSE(s.disk_unknown);
    EXPECT_GT(s.decode_tok_s, 0);
  }
}

}  // namespace
}  // namespace strata::tools
