// strata plan --quant (issue 16 item 6; tools/quant_choice.h, tools/plan_sizes.h):
//  - parse_quant_spec: keys and types case-insensitive, errors name the key or type and what is
//    accepted;
//  - at the release config, component bytes for experts=q2_k,dense=q8_0,head=q6_k,engram=q4_k
//    derived here from the tensor shapes and the block sizes (Q2_K 84 B / 256, Q8_0 34 B / 32,
//    Q6_K 210 B / 256, Q4_K 144 B / 256), and the placement's bytes per decode token;
//  - on the tiny fixture, the footprint of a choice equals the tensor bytes of the GGUF `strata
//    quantize` writes for it, and the choice read back from that GGUF is the one given.
#include <gtest/gtest.h>

#include "io/checkpoint.h"
#include "store/expert_catalog.h"
#include "tests/support/files.h"
#include "tests/support/npy.h"
#include "tests/support/temp_dir.h"
#include "tests/support/tiny_model.h"
#include "tools/plan.h"
#include "tools/quant_choice.h"
#include "tools/quantize.h"

namespace strata::tools {
namespace {

const std::string kRealConfig = std::string(STRATA_FIXTURES_DIR) + "/real-config/config.json";

model::ModelConfig load_config(const std::string& path) {
  auto text = io::read_file_to_string(path);
  EXPECT_TRUE(text.ok()) << text.error().to_string();
  auto c = model::ModelConfig::parse(text.ok() ? *text : std::string("{}"), path);
  EXPECT_TRUE(c.ok()) << c.error().to_string();
  return c.ok() ? *c : model::ModelConfig{};
}

const ComponentSize& component(const ModelFootprint& f, const std::string& name) {
  for (const ComponentSize& cs : f.components)
    if (cs.name == name) return cs;
  ADD_FAILURE() << "no component " << name;
  return f.components.front();
}

TEST(PlanQuant, ParseSpec) {
  auto q = parse_quant_spec("Experts=Q2_K, engram=q4_k");
  ASSERT_TRUE(q.ok()) << q.error().to_string();
  EXPECT_EQ(q->experts, DType::kQ2_K);
  EXPECT_EQ(q->engram, DType::kQ4_K);
  EXPECT_FALSE(q->dense.has_value());
  EXPECT_FALSE(q->head.has_value());
  EXPECT_EQ(q->to_string(), "experts=q2_k,dense=keep,head=keep,engram=q4_k");
  auto back = parse_quant_spec(q->to_string());
  ASSERT_TRUE(back.ok());
  EXPECT_EQ(*back, *q);
  auto all = parse_quant_spec("dense=q8_0,head=iq4_nl,experts=keep");
  ASSERT_TRUE(all.ok());
  EXPECT_EQ(all->dense, DType::kQ8_0);
  EXPECT_EQ(all->head, DType::kIQ4_NL);
  EXPECT_FALSE(all->experts.has_value());
  // experts=mxfp4 (quantize --experts mxfp4) is the kept bits in ggml's blocks: sized as keep.
  auto mx = parse_quant_spec("experts=MXFP4,engram=q8_0");
  ASSERT_TRUE(mx.ok()) << mx.error().to_string();
  EXPECT_FALSE(mx->experts.has_value());
  EXPECT_EQ(mx->engram, DType::kQ8_0);

  struct Bad {
    const char* spec;
    const char* message;
  };
  for (const Bad& b : {Bad{"expert=q4_k", "unknown key 'expert' (expected one of experts, dense, head, engram)"},
                       Bad{"experts=q5_k", "--quant experts: 'q5_k' is not a quantisation type (keep, q8_0, q6_k"},
                       Bad{"q4_k", "'q4_k' is not KEY=TYPE"},
                       Bad{"experts=q4_k,experts=q2_k", "key 'experts' given twice"},
                       Bad{"dense=mxfp4", "--quant dense: 'mxfp4' is not a quantisation type"},
                       Bad{"", "empty"}}) {
    auto r = parse_quant_spec(b.spec);
    ASSERT_FALSE(r.ok()) << b.spec;
    EXPECT_EQ(r.error().code(), StatusCode::kInvalidArgument);
    EXPECT_NE(r.error().message().find(b.message), std::string::npos) << r.error().message();
  }
}

// Every component at the release config, from the shapes and the block sizes.
TEST(PlanQuant, ComponentBytesAtTheReleaseConfig) {
  STRATA_REQUIRE_FIXTURE(kRealConfig);
  const model::ModelConfig c = load_config(kRealConfig);
  auto keep = model_footprint(c);
  ASSERT_TRUE(keep.ok()) << keep.error().to_string();
  QuantChoice q;
  q.experts = DType::kQ2_K;
  q.dense = DType::kQ8_0;
  q.head = DType::kQ6_K;
  q.engram = DType::kQ4_K;
  auto f = model_footprint(c, {}, q);
  ASSERT_TRUE(f.ok()) << f.error().to_string();
  EXPECT_EQ(f->quant, q);
  EXPECT_TRUE(f->quant_notes.empty()) << f->quant_notes.front();

  // Routed experts: w1, w3 [moe_inter, dim] and w2 [dim, moe_inter] per expert, Q2_K 84 B per 256.
  const uint64_t expert_values = 3ull * static_cast<uint64_t>(c.dim * c.moe_inter_dim);
  const uint64_t expert_bytes = expert_values / 256 * 84;
  EXPECT_EQ(f->expert_bytes, expert_bytes);
  uint64_t routed = 0, active = 0;
  for (int l = 0; l < c.n_layers; ++l) {
    routed += static_cast<uint64_t>(c.n_experts(l)) * expert_bytes;
    active += static_cast<uint64_t>(c.n_active(l)) * expert_bytes;
  }
  EXPECT_EQ(f->routed_bytes, routed);
  EXPECT_EQ(component(*f, "routed experts").bytes, routed);
  EXPECT_EQ(component(*f, "routed experts").ram_bytes, routed);
  EXPECT_EQ(f->decode.expert_bytes, active);
  // The keep checkpoint's experts are MXFP4: 2 values a byte + one E8M0 scale per 32.
  EXPECT_EQ(keep->expert_bytes, expert_values / 2 + expert_values / 32);

  // LM head [vocab, dim] BF16 -> Q6_K 210 B per 256; the final norm is unchanged.
  const uint64_t head_values = static_cast<uint64_t>(c.vocab_size * c.dim);
  const uint64_t norm = component(*keep, "LM head + final norm").bytes - 2 * head_values;
  EXPECT_EQ(component(*f, "LM head + final norm").bytes, head_values / 256 * 210 + norm);

  // Dense: every FP8 weight (one byte a value) -> Q8_0 34 B per 32, its E8M0 scales gone.
  for (const char* name : {"shared experts", "attention (incl. compressor, indexer)", "Engram projection"}) {
    const ComponentSize& k = component(*keep, name);
    const uint64_t fp8 = k.bytes_by_dtype.at(DType::kF8E4M3), e8m0 = k.bytes_by_dtype.at(DType::kF8E8M0);
    EXPECT_EQ(component(*f, name).bytes, k.bytes - fp8 - e8m0 + fp8 / 32 * 34) << name;
    EXPECT_EQ(component(*f, name).bytes_by_dtype.at(DType::kQ8_0), fp8 / 32 * 34) << name;
  }
  // attn.wo_a [o_groups * o_lora_rank, n_heads * head_dim / o_groups], W values: beyond the stored
  // bytes the model's copies for the kernels, its scales again (W / 1024) when FP8 (the store holds
  // the blocked codes in place of the stored ones, keeping at most 4 MiB a layer of those), a bf16
  // widening (2 W) when quantised.
  {
    const char* a = "attention (incl. compressor, indexer)";
    const double w = static_cast<double>(c.n_layers) * static_cast<double>(c.o_lora_rank * c.n_heads * c.head_dim);
    const double extra_q = static_cast<double>(component(*f, a).ram_bytes) - static_cast<double>(component(*f, a).bytes);
    const double extra_k = static_cast<double>(component(*keep, a).ram_bytes) - static_cast<double>(component(*keep, a).bytes);
    EXPECT_EQ(extra_k, w / 1024 + static_cast<double>(c.n_layers) * (4 << 20));
    EXPECT_EQ(extra_q, 2 * w);
  }

  // Engram tables: rows x head_dim values, Q4_K 144 B per 256; 48 rows a token.
  uint64_t rows = 0;
  for (int64_t r : c.engram_num_embeddings) rows += static_cast<uint64_t>(r);
  const uint64_t row_bytes = static_cast<uint64_t>(c.engram_head_dim) / 256 * 144;
  EXPECT_EQ(f->engram_table_bytes, rows * row_bytes);
  EXPECT_EQ(f->decode.engram_bytes, 48u * row_bytes);
  uint64_t sum = 0;
  for (const ComponentSize& cs : f->components) sum += cs.bytes;
  EXPECT_EQ(f->text_bytes, sum);

  // The placement at a 64 GiB budget (stream): bytes per decode token from disk are the expert
  // misses plus the Engram rows (the tables stay on disk); from RAM the rest of the weights.
  MachineProfile m;
  m.date = "2026-12-03T00:00:00Z";
  m.logical_cores = m.physical_cores = 2;
  m.ram_total = m.ram_available = 128ull << 30;
  ThreadRates r;
  r.threads = 2;
  r.mem_read_gbps = 20;
  for (KernelRates& k : r.kernels) {
    k.matvec_gbps.fill(20);
    k.matmul_gflops.fill(100);
    k.matmul_small_gflops.fill(100);
  }
  r.attn_gflops = r.index_gflops = 100;
  m.threads.push_back(r);
  m.disk.measured = true;
  m.disk.seq_gbps_buffered = m.disk.seq_gbps_direct = 2;
  m.disk.iops_qd32_buffered = m.disk.iops_qd32_direct = 100000;
  PlanOptions po;
  po.ram_budget_bytes = 64ull << 30;
  po.quant = q;
  auto plan = make_plan(c, {}, m, po, kRealConfig);
  ASSERT_TRUE(plan.ok()) << plan.error().to_string();
  const Placement& pl = plan->placement;
  EXPECT_EQ(pl.load_mode, "stream");
  EXPECT_FALSE(pl.engram_resident);
  const double miss = 1.0 - pl.expert_hit_rate;
  EXPECT_NEAR(pl.decode_disk_bytes, miss * static_cast<double>(active) + 48.0 * row_bytes, 1.0);
  EXPECT_NEAR(pl.decode_ram_bytes, static_cast<double>(f->decode.weight_bytes) - miss * static_cast<double>(active), 1.0);
  // The block kernels' rate is assumed, and the output says so.
  ASSERT_EQ(plan->assumed_rates.size(), 1u);
  for (const char* t : {"Q8_0", "Q6_K", "Q2_K"})
    EXPECT_NE(plan->assumed_rates[0].find(t), std::string::npos) << plan->assumed_rates[0];
  EXPECT_NE(plan_text(*plan).find("ASSUMED RATES"), std::string::npos);
  EXPECT_NE(plan_json(*plan).find("\"rates_assumed\": true"), std::string::npos);
  // Keep everywhere: nothing assumed.
  PlanOptions official = po;
  official.quant = {};
  auto plain = make_plan(c, {}, m, official, kRealConfig);
  ASSERT_TRUE(plain.ok());
  EXPECT_TRUE(plain->assumed_rates.empty());
  EXPECT_EQ(plan_text(*plain).find("ASSUMED"), std::string::npos);
}

// The footprint of a choice is the GGUF quantize writes for it, byte for byte (tensor data).
TEST(PlanQuant, FootprintEqualsTheGgufQuantizeWrites) {
  const std::string ck = testing::tiny_dir() + "/checkpoint";
  STRATA_REQUIRE_FIXTURE(ck + "/config.json");
  const model::ModelConfig c = load_config(ck + "/config.json");
  testing::TempDir d;
  struct Variant {
    const char* name;
    QuantChoice q;
    std::optional<DType> experts_read;  // what the GGUF's experts carry (Q4_K on rows of 64/32: IQ4_NL, llama.cpp's fallback)
  };
  QuantChoice q8;
  q8.experts = q8.dense = q8.head = DType::kQ8_0;
  q8.engram = DType::kIQ4_NL;
  QuantChoice k4;
  k4.experts = DType::kQ4_K;
  k4.dense = DType::kIQ4_NL;
  for (const Variant& v : {Variant{"keep", QuantChoice{}, std::nullopt}, Variant{"q8", q8, DType::kQ8_0},
                          Variant{"k4", k4, DType::kIQ4_NL}}) {
    QuantizeOptions o;
    o.src_dir = ck;
    o.out_path = d.file(std::string(v.name) + ".gguf");
    o.experts = v.q.experts;
    o.dense = v.q.dense;
    o.head = v.q.head;
    o.engram = v.q.engram;
    o.fsync = false;
    o.n_threads = 2;
    auto rep = quantize_checkpoint(o);
    ASSERT_TRUE(rep.ok()) << v.name << ": " << rep.error().to_string();
    auto g = io::Checkpoint::open_gguf(o.out_path);
    ASSERT_TRUE(g.ok()) << g.error().to_string();
    auto read = quant_choice_of_checkpoint(**g);
    ASSERT_TRUE(read.ok()) << read.error().to_string();
    QuantChoice want = v.q;
    want.experts = v.experts_read;
    EXPECT_EQ(*read, want) << v.name << ": " << read->to_string();

    auto f = model_footprint(c, {}, v.q);
    ASSERT_TRUE(f.ok()) << f.error().to_string();
    EXPECT_EQ(f->quant, v.q) << v.name;
    EXPECT_EQ(f->text_bytes, (*g)->total_bytes()) << v.name;
    uint64_t experts = 0, tables = 0;
    for (const auto& [n, t] : (*g)->tensors()) {
      if (n.find(".ffn.experts.") != std::string::npos && n.rfind("layers.", 0) == 0) experts += t.nbytes;
      if (n.find(".engram.embed.") != std::string::npos) tables += t.nbytes;
    }
    EXPECT_EQ(f->routed_bytes, experts) << v.name;
    EXPECT_EQ(f->engram_table_bytes, tables) << v.name;
    // The footprint read from the GGUF's own types is the same.
    auto from_gguf = model_footprint(c, {}, *read);
    ASSERT_TRUE(from_gguf.ok());
    EXPECT_EQ(from_gguf->text_bytes, f->text_bytes) << v.name;
    if (v.experts_read != v.q.experts) {  // quantize and plan say the same about the fallback
      ASSERT_FALSE(rep->notes.empty());
      EXPECT_NE(rep->notes[0].find("(llama.cpp's fallback)"), std::string::npos) << rep->notes[0];
      std::vector<std::string> plan_fallback;
      for (const std::string& n : f->quant_notes)
        if (n.find("(llama.cpp's fallback)") != std::string::npos) plan_fallback.push_back(n);
      std::vector<std::string> quant_fallback;
      for (const std::string& n : rep->notes)
        if (n.find("(llama.cpp's fallback)") != std::string::npos) quant_fallback.push_back(n);
      EXPECT_EQ(plan_fallback, quant_fallback);
    }
    // The stream store's slot for this GGUF is the one plan sizes: every span reads a non-empty
    // part (the block formats' empty .scale placeholders get none), and the largest expert's
    // spans fit the plan's slot, within one 4 KiB block per span of it.
    const model::ModelConfig& gc = c;
    for (bool direct : {false, true}) {
      auto cat = store::ExpertCatalog::build(**g, gc.n_layers, direct);
      ASSERT_TRUE(cat.ok()) << cat.error().to_string();
      const uint64_t planned = expert_slot_bytes(*f, direct, /*stacked=*/true);
      int max_spans = 0;
      for (int id = 0; id < cat->size(); ++id) {
        const store::ExpertPlan& p = cat->plan(id);
        if (p.key.layer >= gc.n_layers) continue;  // DSpark stages: not in the plan's slot
        max_spans = std::max(max_spans, static_cast<int>(p.spans.size()));
        for (const store::ExpertSpan& sp : p.spans) EXPECT_GT(sp.needed, 0u) << v.name;
        // Buffered reads merge parts across gaps of up to 4 KiB (store/expert_catalog.cpp), which
        // the plan's 64-byte rounding does not count.
        EXPECT_LE(p.slot_bytes, planned + (direct ? 0u : 4096u * 5)) << v.name << " direct " << direct << " expert " << id;
      }
      int parts = 0;
      for (uint64_t b : f->expert_part_bytes) parts += b > 0;
      EXPECT_LE(max_spans, parts) << v.name << ": at most one span per non-empty stacked part";
      EXPECT_GE(cat->slot_bytes() + (direct ? 4096u * parts : 4096u), planned) << v.name << " direct " << direct;
    }
  }
}

}  // namespace
}  // namespace strata::tools
