// GGUFs made by other tools (ik_llama.cpp `deepseek41`, antirez/ds4; docs/gguf.md "GGUFs from
// ik_llama.cpp and ds4"), on the v41-tiny fixture rewritten into their layout by
// tests/model/foreign_gguf_writer.h:
//   - the config rebuilt from deepseek41.* keys equals the fixture's (DSpark aside: the layout has
//     no mtp.* tensors, so the model loads without it);
//   - the tokenizer rebuilt from tokenizer.ggml.* gives llama.cpp's deepseek-v3 vector ids, the same
//     ids and compressed Engram vocabulary as tokenizer.json;
//   - exact variant (BF16/F32 kept, official FP8/MXFP4 bits, interleaved Engram rows): logits
//     byte-equal to the official checkpoint, resident and streamed from disk;
//   - ds4's recipe (F16 projections, Q8_0 linears, head and experts): finite logits within a KLD bound;
//   - errors: a missing deepseek41 key, a bad Engram row width, an unknown tokenizer pre, an Engram
//     hash table that differs from strata's.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <sstream>

#include "io/checkpoint.h"
#include "io/gguf.h"
#include "model/config.h"
#include "tests/model/foreign_gguf_writer.h"
#include "tests/support/files.h"
#include "tests/support/fixture_quantize.h"
#include "tests/support/forward_one.h"
#include "tests/support/npy.h"
#include "tests/support/temp_dir.h"
#include "tests/support/tiny_model.h"
#include "tokenizer/compressed_vocab.h"
#include "tokenizer/tokenizer.h"
#include "tools/quantize.h"

namespace strata::test {
namespace {

// A GGUF of the fixture in `strata quantize`'s layout: everything kept, or Q8_0 experts.
std::string strata_gguf(const testing::TempDir& d, const std::string& name, std::optional<DType> experts) {
  tools::QuantizeOptions o = testing::fixture_quantize_options(d, name);
  o.experts = experts;
  return testing::quantize_fixture(o);
}

// The exact GGUF of the fixture, written once per process and rewritten by every exact case (the
// source is only read): ~0.3 s of a ~1.1 s case in Release; most of a case is the foreign rewrite
// itself (tokenizer parse, Engram tables, 46 MB copied). Removed at exit with its directory.
const std::string& exact_strata_gguf() {
  static testing::TempDir dir;
  static const std::string path = strata_gguf(dir, "exact.strata.gguf", std::nullopt);
  return path;
}

// The fixture in the foreign layout.
std::string foreign(const testing::TempDir& d, const std::string& name, bool lossy, ForeignGgufOptions o = {}) {
  const std::string src = lossy ? strata_gguf(d, name + ".strata.gguf", DType::kQ8_0) : exact_strata_gguf();
  o.lossy = lossy;
  Status s = write_foreign_gguf(src, d.file(name), o);
  EXPECT_TRUE(s.ok()) << s.to_string();
  return d.file(name);
}

// Logits [n, vocab] of the first n prompt tokens; the model's compressed vocabulary comes from the
// model's own tokenizer (the GGUF's tokenizer.ggml.* for a foreign GGUF).
std::vector<float> logits_of(const std::string& model, size_t n, const store::PlacementOptions& placement = {}) {
  auto text = io::read_checkpoint_text(model, "tokenizer.json", 1u << 30);
  EXPECT_TRUE(text.ok()) << text.error().to_string();
  if (!text.ok()) return {};
  auto tok = tokenizer::Tokenizer::from_json(*text, model);
  EXPECT_TRUE(tok.ok()) << tok.error().to_string();
  auto cv = tokenizer::build_compressed_vocab(*tok);
  model::ModelOptions opt;
  opt.n_threads = 2;
  opt.placement = placement;
  auto m = model::Model::load(model, model::CompressedVocabMap{cv->map, cv->n_classes}, opt);
  EXPECT_TRUE(m.ok()) << m.error().to_string();
  if (!m.ok()) return {};
  const std::vector<int32_t> ids = testing::tiny_prompt_ids(n);
  model::KvCache cache = (*m)->new_cache();
  model::LogitsRequest req;
  req.kind = model::LogitsRequest::Kind::kAll;
  std::vector<float> out(ids.size() * static_cast<size_t>((*m)->config().vocab_size));
  Status s = forward_one(**m, cache, ids, req, out.data());
  EXPECT_TRUE(s.ok()) << s.to_string();
  return out;
}

// Mean over positions of KL(softmax(ref) || softmax(got)), nats.
double mean_kld(const std::vector<float>& ref, const std::vector<float>& got, size_t n) {
  const size_t V = ref.size() / n;
  double total = 0;
  for (size_t r = 0; r < n; ++r) {
    const float* a = ref.data() + r * V;
    const float* b = got.data() + r * V;
    double ma = -1e300, mb = -1e300;
    for (size_t i = 0; i < V; ++i) ma = std::max(ma, double(a[i])), mb = std::max(mb, double(b[i]));
    double sa = 0, sb = 0;
    for (size_t i = 0; i < V; ++i) sa += std::exp(a[i] - ma), sb += std::exp(b[i] - mb);
    const double la = ma + std::log(sa), lb = mb + std::log(sb);
    for (size_t i = 0; i < V; ++i) total += std::exp(a[i] - la) * ((a[i] - la) - (b[i] - lb));
  }
  return total / static_cast<double>(n);
}

constexpr size_t kPositions = 24;

// The official checkpoint's logits over the first kPositions prompt tokens, computed once per
// process (two cases compare with them).
const std::vector<float>& official_logits() {
  static const std::vector<float> ref = logits_of(testing::tiny_checkpoint(), kPositions);
  return ref;
}

TEST(ForeignGguf, ConfigFromMetadataEqualsTheFixtures) {
  STRATA_REQUIRE_FIXTURE(testing::tiny_checkpoint() + "/config.json");
  testing::TempDir d;
  const std::string g = foreign(d, "exact.gguf", false);
  auto a = model::ModelConfig::load(testing::tiny_checkpoint());
  auto b = model::ModelConfig::load(g);
  ASSERT_TRUE(a.ok()) << a.error().to_string();
  ASSERT_TRUE(b.ok()) << b.error().to_string();
  const model::ModelConfig& x = *a;
  const model::ModelConfig& y = *b;
#define SAME(f) EXPECT_EQ(x.f, y.f) << #f
  SAME(vocab_size); SAME(dim); SAME(moe_inter_dim); SAME(n_layers); SAME(n_heads); SAME(head_dim);
  SAME(rope_head_dim); SAME(q_lora_rank); SAME(o_groups); SAME(o_lora_rank); SAME(norm_eps);
  SAME(n_routed_experts); SAME(n_shared_experts); SAME(n_activated_experts); SAME(score_func); SAME(gate_temp);
  SAME(norm_topk_prob); SAME(route_scale); SAME(swiglu_limit); SAME(window_size); SAME(kv_source_layers);
  SAME(index_source_layers); SAME(candidate_source_layer); SAME(candidate_topk_blocks); SAME(candidate_block_size);
  SAME(index_n_heads); SAME(index_head_dim); SAME(index_topk); SAME(rope_theta); SAME(compress_rope_theta);
  SAME(original_seq_len); SAME(rope_factor); SAME(beta_fast); SAME(beta_slow); SAME(max_position_embeddings);
  SAME(hc_mult); SAME(hc_sinkhorn_iters); SAME(hc_eps); SAME(engram_layer_ids); SAME(engram_num_embeddings);
  SAME(engram_max_ngram_size); SAME(engram_vocab_size); SAME(engram_n_heads); SAME(engram_head_dim);
  SAME(engram_pad_id); SAME(engram_compressed_vocab_size); SAME(bos_token_id); SAME(eos_token_id);
  SAME(expert_dtype); SAME(weight_block_size);
#undef SAME
  // The layout has no DSpark stages: the backbone's ratios, no draft.
  EXPECT_EQ(y.n_mtp_layers, 0);
  EXPECT_EQ(y.dspark_block_size, 0);
  EXPECT_EQ(y.compress_ratios, std::vector<int>(x.compress_ratios.begin(), x.compress_ratios.begin() + x.n_layers));
}

TEST(ForeignGguf, TokenizerFromMetadataMatchesTokenizerJson) {
  STRATA_REQUIRE_FIXTURE(testing::fixtures_dir() + "/tokenizer/deepseek-v3.inp");
  STRATA_REQUIRE_FIXTURE(testing::tiny_checkpoint() + "/tokenizer.json");
  testing::TempDir d;
  const std::string g = foreign(d, "exact.gguf", false);
  auto ref = tokenizer::Tokenizer::load(testing::tiny_checkpoint() + "/tokenizer.json");
  ASSERT_TRUE(ref.ok());
  auto text = io::read_checkpoint_text(g, "tokenizer.json", 1u << 30);
  ASSERT_TRUE(text.ok()) << text.error().to_string();
  auto got = tokenizer::Tokenizer::from_json(*text, g);
  ASSERT_TRUE(got.ok()) << got.error().to_string();
  EXPECT_EQ(got->vocab_size(), ref->vocab_size());  // the converter's [PAD] tail is dropped
  EXPECT_EQ(got->model_vocab_size(), ref->model_vocab_size());
  EXPECT_EQ(got->n_merges(), ref->n_merges());
  for (int32_t id = 0; id < ref->vocab_size(); ++id) {
    ASSERT_EQ(got->id_to_token(id), ref->id_to_token(id)) << id;
    ASSERT_EQ(got->is_special(id), ref->is_special(id)) << id;
    ASSERT_EQ(got->is_added(id), ref->is_added(id)) << id;
  }
  // llama.cpp's deepseek-v3 vocab vectors (tests/tokenizer/tokenizer_fixture_test.cpp reads them too).
  const std::string inp = testing::read_all(testing::fixtures_dir() + "/tokenizer/deepseek-v3.inp");
  std::istringstream out(testing::read_all(testing::fixtures_dir() + "/tokenizer/deepseek-v3.out"));
  const std::string sep = "\n__ggml_vocab_test__\n";
  size_t pos = 0, n = 0;
  for (std::string line; std::getline(out, line); ++n) {
    const size_t next = inp.find(sep, pos);
    const std::string s = inp.substr(pos, next == std::string::npos ? std::string::npos : next - pos);
    pos = next == std::string::npos ? inp.size() : next + sep.size();
    std::vector<int32_t> want;
    std::istringstream ls(line);
    for (int32_t v; ls >> v;) want.push_back(v);
    EXPECT_EQ(got->encode(s, false), want) << "input " << n;
  }
  EXPECT_GE(n, 40u);
  // Template text with special tokens, and the Engram compressed vocabulary.
  const std::string chat = "<｜begin▁of▁sentence｜><｜User｜>Call me Ishmael.<｜Assistant｜></think>Ahoy 123";
  EXPECT_EQ(got->encode(chat, true), ref->encode(chat, true));
  auto ca = tokenizer::build_compressed_vocab(*ref);
  auto cb = tokenizer::build_compressed_vocab(*got);
  ASSERT_TRUE(ca.ok() && cb.ok());
  EXPECT_EQ(ca->map, cb->map);
  EXPECT_EQ(ca->n_classes, cb->n_classes);
}

// Exact variant: only the layout differs (names, keys, tokenizer.ggml.*, interleaved Engram rows,
// no mtp.*), so the math is the official checkpoint's: byte-equal logits, resident and streamed.
TEST(ForeignGguf, ExactVariantLogitsEqualTheOfficialCheckpoints) {
  STRATA_REQUIRE_FIXTURE(testing::tiny_dir() + "/tokens.json");
  testing::TempDir d;
  const std::string g = foreign(d, "exact.gguf", false);
  auto ck = io::Checkpoint::open(g);
  ASSERT_TRUE(ck.ok()) << ck.error().to_string();
  const io::TensorInfo* t = (*ck)->find("layers.1.engram.embed.weight");
  ASSERT_NE(t, nullptr);
  EXPECT_EQ(t->dtype, DType::kU8);
  EXPECT_EQ(t->shape, (Shape{7592, 33}));
  EXPECT_EQ((*ck)->find("layers.1.engram.embed.scale"), nullptr);
  const std::vector<float>& ref = official_logits();
  ASSERT_FALSE(ref.empty());
  const std::vector<float> got = logits_of(g, kPositions);
  ASSERT_EQ(got.size(), ref.size());
  EXPECT_EQ(std::memcmp(got.data(), ref.data(), ref.size() * sizeof(float)), 0);
  for (store::LoadMode mode : {store::LoadMode::kStream, store::LoadMode::kMmap}) {
    store::PlacementOptions p;
    p.mode = mode;
    p.engram_cache_rows = mode == store::LoadMode::kStream ? 0 : p.engram_cache_rows;
    const std::vector<float> s = logits_of(g, kPositions, p);
    ASSERT_EQ(s.size(), ref.size()) << store::load_mode_name(mode);
    EXPECT_EQ(std::memcmp(s.data(), ref.data(), ref.size() * sizeof(float)), 0) << store::load_mode_name(mode);
  }
}

// ds4's recipe: F16 projections (an f16 rounding of BF16/FP8 values), Q8_0 for every FP8 linear, the
// head and the experts. Bound: the Q8_0 GGUF of `strata quantize` measures 0.107-0.113 nats on this
// fixture (docs/gguf.md); F16 adds ~2^-11 relative error on the projections, far below Q8_0's, so
// 0.3 nats leaves margin for the random-weight fixture's flipped router choices without hiding a
// broken binding (a wrong layout gives KLDs of several nats).
TEST(ForeignGguf, Ds4RecipeLogitsAreFiniteAndClose) {
  STRATA_REQUIRE_FIXTURE(testing::tiny_dir() + "/tokens.json");
  testing::TempDir d;
  const std::string g = foreign(d, "ds4.gguf", true);
  auto ck = io::Checkpoint::open(g);
  ASSERT_TRUE(ck.ok()) << ck.error().to_string();
  EXPECT_EQ((*ck)->find("embed.weight")->dtype, DType::kF16);
  EXPECT_EQ((*ck)->find("layers.2.attn.compressor.wkv.weight")->dtype, DType::kF16);
  EXPECT_EQ((*ck)->find("layers.0.attn.wq_a.weight")->dtype, DType::kQ8_0);
  EXPECT_EQ((*ck)->find("head.weight")->dtype, DType::kQ8_0);
  const std::vector<float>& ref = official_logits();
  const std::vector<float> got = logits_of(g, kPositions);
  ASSERT_EQ(got.size(), ref.size());
  for (float v : got) ASSERT_TRUE(std::isfinite(v));
  const double kld = mean_kld(ref, got, kPositions);
  std::printf("ds4 recipe: mean KLD %.4f nats over %zu positions\n", kld, kPositions);
  EXPECT_LT(kld, 0.3);
}

// ik_llama.cpp's key list has no engram.max_ngram_size / n_heads / head_dim / vocab_size (its config
// blob carries them): without the blob they are derived (multipliers, primes, the table's row width,
// the smallest prime), the primes are checked, and the logits stay byte-equal.
TEST(ForeignGguf, IkKeySetWithoutBlobDerivesTheEngramShape) {
  STRATA_REQUIRE_FIXTURE(testing::tiny_dir() + "/tokens.json");
  testing::TempDir d;
  ForeignGgufOptions o;
  o.edit_metadata = [](auto* m) {
    std::erase_if(*m, [](const auto& kv) {
      for (const char* k : {"max_ngram_size", "n_heads", "head_dim", "vocab_size", "pad_token_id"})
        if (kv.first == std::string("deepseek41.engram.") + k) return true;
      return false;
    });
  };
  const std::string g = foreign(d, "ik.gguf", false, o);
  auto a = model::ModelConfig::load(testing::tiny_checkpoint());
  auto b = model::ModelConfig::load(g);
  ASSERT_TRUE(a.ok() && b.ok()) << (b.ok() ? "" : b.error().to_string());
  EXPECT_EQ(b->engram_max_ngram_size, a->engram_max_ngram_size);
  EXPECT_EQ(b->engram_n_heads, a->engram_n_heads);
  EXPECT_EQ(b->engram_head_dim, a->engram_head_dim);
  EXPECT_EQ(b->engram_pad_id, a->engram_pad_id);  // config.cpp's default 2, the release's pad token
  EXPECT_GE(b->engram_vocab_size, a->engram_vocab_size);  // the smallest prime: same primes
  const std::vector<float> ref = logits_of(testing::tiny_checkpoint(), 8);
  const std::vector<float> got = logits_of(g, 8);
  ASSERT_EQ(got.size(), ref.size());
  EXPECT_EQ(std::memcmp(got.data(), ref.data(), ref.size() * sizeof(float)), 0);
}

// An embedded config blob (deepseek41.config) wins over the keys; DSpark is still dropped without mtp.*.
TEST(ForeignGguf, ConfigBlobIsUsed) {
  STRATA_REQUIRE_FIXTURE(testing::tiny_checkpoint() + "/config.json");
  testing::TempDir d;
  ForeignGgufOptions o;
  o.edit_metadata = [](auto* m) {
    std::erase_if(*m, [](const auto& kv) {
      return kv.first.rfind("deepseek41.", 0) == 0 && kv.first.rfind("deepseek41.engram.", 0) != 0;
    });
    m->emplace_back("deepseek41.config",
                    io::GgufValue::string(testing::read_all(testing::tiny_checkpoint() + "/config.json")));
  };
  const std::string g = foreign(d, "blob.gguf", false, o);
  auto a = model::ModelConfig::load(testing::tiny_checkpoint());
  auto b = model::ModelConfig::load(g);
  ASSERT_TRUE(a.ok() && b.ok()) << (b.ok() ? "" : b.error().to_string());
  EXPECT_EQ(b->dim, a->dim);
  EXPECT_EQ(b->norm_eps, a->norm_eps);
  EXPECT_EQ(b->engram_vocab_size, a->engram_vocab_size);
  EXPECT_EQ(b->n_mtp_layers, 0);
  EXPECT_EQ(b->dspark_block_size, 0);
  EXPECT_EQ(b->compress_ratios.size(), static_cast<size_t>(a->n_layers));
}

TEST(ForeignGguf, MissingKeyIsNamed) {
  STRATA_REQUIRE_FIXTURE(testing::tiny_checkpoint() + "/config.json");
  testing::TempDir d;
  ForeignGgufOptions o;
  o.edit_metadata = [](auto* m) {
    std::erase_if(*m, [](const auto& kv) { return kv.first == "deepseek41.hidden_size"; });
  };
  const std::string g = foreign(d, "nokey.gguf", false, o);
  auto c = model::ModelConfig::load(g);
  ASSERT_FALSE(c.ok());
  EXPECT_NE(c.error().message().find("missing metadata key 'deepseek41.hidden_size'"), std::string::npos)
      << c.error().to_string();
  EXPECT_NE(c.error().message().find(g), std::string::npos);
}

TEST(ForeignGguf, WrongKeyTypeIsNamed) {
  STRATA_REQUIRE_FIXTURE(testing::tiny_checkpoint() + "/config.json");
  testing::TempDir d;
  ForeignGgufOptions o;
  o.edit_metadata = [](auto* m) {
    for (auto& [k, v] : *m)
      if (k == "deepseek41.kv_source_layer_ids") v = io::GgufValue::string("2,4,5");
  };
  const std::string g = foreign(d, "type.gguf", false, o);
  auto c = model::ModelConfig::load(g);
  ASSERT_FALSE(c.ok());
  EXPECT_NE(c.error().message().find("'deepseek41.kv_source_layer_ids' is string, expected an array of integers"),
            std::string::npos)
      << c.error().to_string();
}

TEST(ForeignGguf, BadEngramRowWidthIsNamed) {
  STRATA_REQUIRE_FIXTURE(testing::tiny_checkpoint() + "/config.json");
  testing::TempDir d;
  ForeignGgufOptions o;
  o.engram_row_pad = 1;  // 34-byte rows: not head_dim + head_dim / 32
  const std::string g = foreign(d, "badrow.gguf", false, o);
  auto ck = io::Checkpoint::open(g);
  ASSERT_FALSE(ck.ok());
  EXPECT_NE(ck.error().message().find("blk.1.engram_embd.weight"), std::string::npos) << ck.error().to_string();
  EXPECT_NE(ck.error().message().find("34 bytes"), std::string::npos) << ck.error().to_string();
}

TEST(ForeignGguf, UnknownTokenizerPreIsNamed) {
  STRATA_REQUIRE_FIXTURE(testing::tiny_checkpoint() + "/config.json");
  testing::TempDir d;
  ForeignGgufOptions o;
  o.edit_metadata = [](auto* m) {
    for (auto& [k, v] : *m)
      if (k == "tokenizer.ggml.pre") v = io::GgufValue::string("qwen2");
  };
  const std::string g = foreign(d, "pre.gguf", false, o);
  auto t = io::read_checkpoint_text(g, "tokenizer.json", 1u << 30);
  ASSERT_FALSE(t.ok());
  EXPECT_NE(t.error().message().find("tokenizer.ggml.pre 'qwen2'"), std::string::npos) << t.error().to_string();
  EXPECT_NE(t.error().message().find("deepseek-v3"), std::string::npos);
}

TEST(ForeignGguf, EngramTablesAreCheckedNotTrusted) {
  STRATA_REQUIRE_FIXTURE(testing::tiny_dir() + "/tokens.json");
  testing::TempDir d;
  ForeignGgufOptions o;
  o.edit_metadata = [](auto* m) {
    for (auto& [k, v] : *m)
      if (k == "deepseek41.engram.primes") {
        std::vector<uint8_t> raw = v.raw();
        raw[4 * 5] ^= 2;  // entry 5 off by 2
        v = io::GgufValue::array(v.elem_type(), raw);
      }
  };
  const std::string g = foreign(d, "primes.gguf", false, o);
  auto text = io::read_checkpoint_text(g, "tokenizer.json", 1u << 30);
  ASSERT_TRUE(text.ok());
  auto tok = tokenizer::Tokenizer::from_json(*text, g);
  auto cv = tokenizer::build_compressed_vocab(*tok);
  auto m = model::Model::load(g, model::CompressedVocabMap{cv->map, cv->n_classes}, model::ModelOptions{});
  ASSERT_FALSE(m.ok());
  EXPECT_NE(m.error().message().find("'deepseek41.engram.primes'"), std::string::npos) << m.error().to_string();
  EXPECT_NE(m.error().message().find("entry 5"), std::string::npos) << m.error().to_string();
}

}  // namespace
}  // namespace strata::test
