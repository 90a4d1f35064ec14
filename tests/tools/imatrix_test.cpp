// Importance matrices (tools/imatrix.h): the GGUF file round-trips with llama.cpp's keys and shapes,
// a hand-built legacy .dat reads as llama-quantize reads it, garbled files and mismatched entries are
// refused naming the file and tensor; calibrating the v41-tiny fixture gives an entry per
// quantisable linear with counts = tokens (routed experts: the tokens routed there); and quantize
// --imatrix weighs exactly the matrices it should, with llama-quantize's metadata.
#include "tools/imatrix.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "io/checkpoint.h"
#include "io/file.h"
#include "io/gguf.h"
#include "kernels/kquant.h"
#include "kernels/linear.h"
#include "tests/support/files.h"
#include "tests/support/npy.h"
#include "tests/support/temp_dir.h"
#include "tests/support/tiny_model.h"
#include "tools/calibrate.h"
#include "tools/quantize.h"

namespace strata::tools {
namespace {

Imatrix sample() {
  Imatrix m;
  m.datasets = {"a.txt", "b.txt"};
  m.chunk_count = 3;
  m.chunk_size = 512;
  ImatrixEntry dense;
  dense.n_cols = 4;
  dense.in_sum2 = {1, 2, 3, 4};
  dense.counts = {2};
  m.entries["blk.0.attn_q_a.weight"] = dense;
  ImatrixEntry ex;
  ex.n_cols = 2;
  ex.n_mats = 3;
  ex.in_sum2 = {1, 2, 3, 4, 5, 6};
  ex.counts = {1, 0, 4};
  m.entries["blk.0.ffn_gate_exps.weight"] = ex;
  return m;
}

TEST(Imatrix, GgufRoundTripsWithLlamaCppKeysAndShapes) {
  testing::TempDir d;
  const Imatrix m = sample();
  ASSERT_TRUE(write_imatrix(m, d.file("x.gguf")).ok());
  ASSERT_TRUE(write_imatrix(m, d.file("x.gguf")).ok()) << "an existing imatrix is replaced, as llama-imatrix does";
  auto g = io::GgufModel::open(d.file("x.gguf"));
  ASSERT_TRUE(g.ok()) << g.error().to_string();
  ASSERT_NE((*g)->find_key("general.type"), nullptr);
  EXPECT_EQ(*(*g)->find_key("general.type")->as_string(), "imatrix");
  EXPECT_EQ((*g)->find_key("imatrix.chunk_count")->type(), io::GgufType::kU32);
  EXPECT_EQ((*g)->find_key("imatrix.chunk_size")->type(), io::GgufType::kU32);
  const io::GgufTensorInfo* s = (*g)->find("blk.0.ffn_gate_exps.weight.in_sum2");
  const io::GgufTensorInfo* c = (*g)->find("blk.0.ffn_gate_exps.weight.counts");
  ASSERT_TRUE(s && c);
  EXPECT_EQ(s->ne, (std::vector<int64_t>{2, 3}));  // ne = [n_cols, n_mats]
  EXPECT_EQ(c->ne, (std::vector<int64_t>{1, 3}));
  EXPECT_EQ((*g)->find("blk.0.attn_q_a.weight.in_sum2")->ne, (std::vector<int64_t>{4, 1}));

  auto r = read_imatrix(d.file("x.gguf"));
  ASSERT_TRUE(r.ok()) << r.error().to_string();
  EXPECT_FALSE(r->legacy);
  EXPECT_EQ(r->datasets, m.datasets);
  EXPECT_EQ(r->chunk_count, 3u);
  EXPECT_EQ(r->chunk_size, 512u);
  ASSERT_EQ(r->entries.size(), 2u);
  for (const auto& [name, e] : m.entries) {
    const ImatrixEntry& got = r->entries.at(name);
    EXPECT_EQ(got.n_cols, e.n_cols) << name;
    EXPECT_EQ(got.n_mats, e.n_mats) << name;
    EXPECT_EQ(got.in_sum2, e.in_sum2) << name;
    EXPECT_EQ(got.counts, e.counts) << name;
  }
  // Weights: sum / count per matrix, 1 where the matrix was never counted (llama-quantize).
  auto w = imatrix_weights(*r, "x.gguf", "blk.0.ffn_gate_exps.weight", 2, 3);
  ASSERT_TRUE(w.ok());
  EXPECT_EQ(*w, (std::vector<float>{1, 2, 1, 1, 1.25f, 1.5f}));
  auto none = imatrix_weights(*r, "x.gguf", "blk.9.attn_q_a.weight", 4, 1);
  ASSERT_TRUE(none.ok());
  EXPECT_TRUE(none->empty());
  auto bad = imatrix_weights(*r, "x.gguf", "blk.0.attn_q_a.weight", 8, 1);
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.error().message().find("x.gguf"), std::string::npos) << bad.error().message();
  EXPECT_NE(bad.error().message().find("blk.0.attn_q_a.weight"), std::string::npos) << bad.error().message();
  EXPECT_NE(bad.error().message().find("8 columns"), std::string::npos) << bad.error().message();
}

// The legacy layout, written here from its description (llama-imatrix save_imatrix_legacy).
void put_i32(std::string* b, int32_t v) { b->append(reinterpret_cast<const char*>(&v), 4); }
void put_entry(std::string* b, const std::string& name, int32_t ncall, const std::vector<float>& v) {
  put_i32(b, static_cast<int32_t>(name.size()));
  b->append(name);
  put_i32(b, ncall);
  put_i32(b, static_cast<int32_t>(v.size()));
  b->append(reinterpret_cast<const char*>(v.data()), v.size() * 4);
}

// Importance the quantisers cannot take (a NaN, inf, negative or overflowing in_sum2 / count: a
// 3e38 weight crashed the IQ4_NL search, an inf one wrote NaN scales) is refused naming the entry,
// matrix and column; what they can take comes back as in_sum2 / count (1 for a matrix never counted).
TEST(Imatrix, NonFiniteNegativeOrOverflowingImportanceIsRefused) {
  const Imatrix m = sample();
  auto ok = imatrix_weights(m, "x.gguf", "blk.0.ffn_gate_exps.weight", 2, 3);
  ASSERT_TRUE(ok.ok()) << ok.error().to_string();
  EXPECT_EQ(*ok, (std::vector<float>{1, 2, 1, 1, 1.25f, 1.5f}));
  struct Bad {
    float sum2, count;
  };
  for (const Bad& b : {Bad{std::nanf(""), 1}, Bad{INFINITY, 1}, Bad{-5, 1}, Bad{3e38f, 1}, Bad{1, 1e-45f}}) {
    Imatrix bad = m;
    bad.entries["blk.0.ffn_gate_exps.weight"].in_sum2[3] = b.sum2;
    bad.entries["blk.0.ffn_gate_exps.weight"].counts[1] = b.count;
    auto r = imatrix_weights(bad, "x.gguf", "blk.0.ffn_gate_exps.weight", 2, 3);
    ASSERT_FALSE(r.ok()) << b.sum2 << " / " << b.count;
    EXPECT_NE(r.error().message().find("x.gguf: imatrix entry 'blk.0.ffn_gate_exps.weight', matrix 1 column "),
              std::string::npos)
        << r.error().message();
  }
}

TEST(Imatrix, ReadsTheLegacyDatFormat) {
  testing::TempDir d;
  std::string b;
  put_i32(&b, 2);
  put_entry(&b, "blk.1.ffn_up_exps.weight", 4, {4, 8, 12, 16});  // 2 experts x 2 columns, mean x^2 * ncall
  put_entry(&b, "output.weight", 0, {0.5f, 0.25f});               // ncall 0: values as stored
  put_i32(&b, 7);                                                 // chunk count
  put_i32(&b, 8);
  b.append("wiki.txt");
  ASSERT_TRUE(io::write_file_atomic(d.file("old.dat"), b.data(), b.size()).ok());
  auto r = read_imatrix(d.file("old.dat"));
  ASSERT_TRUE(r.ok()) << r.error().to_string();
  EXPECT_TRUE(r->legacy);
  EXPECT_EQ(r->chunk_count, 7u);
  EXPECT_EQ(r->datasets, (std::vector<std::string>{"wiki.txt"}));
  auto w = imatrix_weights(*r, "old.dat", "blk.1.ffn_up_exps.weight", 2, 2);  // split per expert
  ASSERT_TRUE(w.ok()) << w.error().to_string();
  EXPECT_EQ(*w, (std::vector<float>{1, 2, 3, 4}));
  auto o = imatrix_weights(*r, "old.dat", "output.weight", 2, 1);
  ASSERT_TRUE(o.ok());
  EXPECT_EQ(*o, (std::vector<float>{0.5f, 0.25f}));
  // Without the optional trailer (older legacy files) it still reads.
  std::string short_b = b.substr(0, b.size() - 16);
  ASSERT_TRUE(io::write_file_atomic(d.file("older.dat"), short_b.data(), short_b.size()).ok());
  auto r2 = read_imatrix(d.file("older.dat"));
  ASSERT_TRUE(r2.ok()) << r2.error().to_string();
  EXPECT_EQ(r2->chunk_count, 0u);
}

TEST(Imatrix, GarbledFilesAreRefusedNamingTheFile) {
  testing::TempDir d;
  auto expect_bad = [&](const std::string& name, const std::string& bytes, const std::string& what) {
    ASSERT_TRUE(io::write_file_atomic(d.file(name), bytes.data(), bytes.size()).ok());
    auto r = read_imatrix(d.file(name));
    ASSERT_FALSE(r.ok()) << name;
    EXPECT_EQ(r.error().code(), StatusCode::kCorruption) << r.error().to_string();
    EXPECT_NE(r.error().message().find(name), std::string::npos) << r.error().message();
    EXPECT_NE(r.error().message().find(what), std::string::npos) << r.error().message();
  };
  std::string b;
  put_i32(&b, 1);
  put_entry(&b, "blk.0.attn_q_a.weight", 1, {1, 2, 3, 4});
  expect_bad("truncated.dat", b.substr(0, b.size() - 3), "values");
  expect_bad("tiny.dat", "ab", "not an imatrix");
  std::string zero;
  put_i32(&zero, 0);
  expect_bad("empty.dat", zero, "0 entries");
  auto missing = read_imatrix(d.file("nope.gguf"));
  ASSERT_FALSE(missing.ok());
  EXPECT_EQ(missing.error().code(), StatusCode::kNotFound);
  // A GGUF that is not an imatrix (no imatrix keys).
  Imatrix m = sample();
  ASSERT_TRUE(write_imatrix(m, d.file("ok.gguf")).ok());
  auto text = io::read_file_to_string(d.file("ok.gguf"));
  ASSERT_TRUE(text.ok());
  std::string s = *text;
  const size_t at = s.find("imatrix.datasets");
  ASSERT_NE(at, std::string::npos);
  s[at] = 'X';
  expect_bad("renamed.gguf", s, "imatrix keys");
}

std::vector<int32_t> prompt_ids() {
  std::ifstream f(testing::tiny_dir() + "/tokens.json");
  std::stringstream ss;
  ss << f.rdbuf();
  return nlohmann::json::parse(ss.str())["ids"].get<std::vector<int32_t>>();
}

TEST(Imatrix, CalibrateCountsTokensPerLinearAndRoutedTokensPerExpert) {
  STRATA_REQUIRE_FIXTURE(testing::tiny_dir() + "/manifest.json");
  auto m = testing::load_model(testing::tiny_dir() + "/checkpoint");
  ASSERT_TRUE(m.ok()) << m.error().to_string();
  const model::ModelConfig& c = (*m)->config();
  const std::vector<int32_t> ids = prompt_ids();
  const auto n = static_cast<float>(ids.size());
  model::Activations act = (*m)->new_activations();
  ImatrixCollector col(c);
  auto r = calibrate(**m, act, ids, 64, {}, &col);
  ASSERT_TRUE(r.ok()) << r.error().to_string();
  const Imatrix im = col.result({"prompt.txt"}, 64);
  EXPECT_EQ(im.chunk_count, static_cast<uint32_t>((ids.size() + 63) / 64));
  auto entry = [&](const std::string& name) -> const ImatrixEntry& {
    static const ImatrixEntry kNone;
    auto it = im.entries.find(name);
    EXPECT_NE(it, im.entries.end()) << "no entry " << name;
    return it == im.entries.end() ? kNone : it->second;
  };
  for (int l = 0; l < c.n_layers; ++l) {
    const std::string p = "blk." + std::to_string(l) + ".";
    for (const char* t : {"attn_q_a", "attn_kv", "attn_q_b", "attn_output_b", "ffn_gate_shexp", "ffn_up_shexp",
                          "ffn_down_shexp"}) {
      const ImatrixEntry& e = entry(p + t + ".weight");
      ASSERT_EQ(e.counts.size(), 1u) << p << t;
      EXPECT_EQ(e.counts[0], n) << p << t;
    }
    const ImatrixEntry& wo_a = entry(p + "attn_output_a.weight");  // one row per (token, group)
    ASSERT_EQ(wo_a.counts.size(), 1u);
    EXPECT_EQ(wo_a.counts[0], n * static_cast<float>(c.o_groups));
    EXPECT_EQ(wo_a.n_cols, static_cast<int64_t>(c.n_heads) * c.head_dim / c.o_groups);
    // Routed experts: per expert, the tokens the router sent there (the hot ranking's counts).
    std::vector<float> routed(static_cast<size_t>(c.n_experts(l)), 0.0f);
    for (const ExpertCount& x : r->experts)
      if (x.layer == l) routed[static_cast<size_t>(x.expert)] = static_cast<float>(x.count);
    for (const char* t : {"ffn_gate_exps", "ffn_up_exps", "ffn_down_exps"}) {
      const ImatrixEntry& e = entry(p + t + ".weight");
      EXPECT_EQ(e.n_mats, c.n_experts(l)) << p << t;
      EXPECT_EQ(e.counts, routed) << p << t;
      EXPECT_EQ(e.n_cols, std::string(t) == "ffn_down_exps" ? c.moe_inter_dim : c.dim) << p << t;
    }
  }
  for (int l : c.engram_layer_ids) EXPECT_EQ(entry("blk." + std::to_string(l) + ".engram_kv.weight").counts[0], n);
  for (int l = 0; l < c.n_layers; ++l)
    if (c.compress_ratio(l) > 0 && c.is_index_source(l))
      EXPECT_EQ(entry("blk." + std::to_string(l) + ".indexer.attn_q_b.weight").counts[0], n) << l;
  EXPECT_EQ(entry("output.weight").counts[0], n);
  // Sums of squares are positive wherever rows were counted.
  for (const auto& [name, e] : im.entries)
    for (int64_t k = 0; k < e.n_mats; ++k)
      if (e.counts[static_cast<size_t>(k)] > 0) {
        double s = 0;
        for (int64_t j = 0; j < e.n_cols; ++j) s += e.in_sum2[static_cast<size_t>(k * e.n_cols + j)];
        EXPECT_GT(s, 0.0) << name << " matrix " << k;
      }
}

TEST(Imatrix, QuantizeWeighsTheBlockQuantisedMatricesAndWritesLlamaQuantizeKeys) {
  STRATA_REQUIRE_FIXTURE(testing::tiny_dir() + "/manifest.json");
  const std::string ck_dir = testing::tiny_dir() + "/checkpoint";
  auto m = testing::load_model(ck_dir);
  ASSERT_TRUE(m.ok()) << m.error().to_string();
  const std::vector<int32_t> ids = prompt_ids();
  model::Activations act = (*m)->new_activations();
  ImatrixCollector col((*m)->config());
  ASSERT_TRUE(calibrate(**m, act, ids, 256, {}, &col).ok());
  testing::TempDir d;
  const Imatrix im = col.result({"prompt.txt"}, 256);
  ASSERT_TRUE(write_imatrix(im, d.file("t.imatrix")).ok());
  QuantizeOptions o;
  o.src_dir = ck_dir;
  o.out_path = d.file("w.gguf");
  o.experts = DType::kQ4_K;  // rows of 32/64: llama.cpp's fallback IQ4_NL, weighted per expert
  o.dense = DType::kIQ4_NL;
  o.head = DType::kQ8_0;  // ignores the imatrix
  o.imatrix = d.file("t.imatrix");
  o.fsync = false;
  o.n_threads = 2;
  auto rep = quantize_checkpoint(o);
  ASSERT_TRUE(rep.ok()) << rep.error().to_string();
  // Every backbone matrix with an entry is weighted; the DSpark stages (not run by calibrate) are
  // noted and quantised unweighted.
  int n_mtp_notes = 0;
  for (const std::string& note : rep->notes) n_mtp_notes += note.starts_with("'mtp.") && note.find("no entry") != std::string::npos;
  EXPECT_GT(n_mtp_notes, 0);
  EXPECT_EQ(rep->n_weighted, im.entries.size() - 1) << "all entries but output.weight (Q8_0)";
  auto g = io::GgufModel::open(o.out_path);
  ASSERT_TRUE(g.ok()) << g.error().to_string();
  ASSERT_NE((*g)->find_key("quantize.imatrix.file"), nullptr);
  EXPECT_EQ(*(*g)->find_key("quantize.imatrix.file")->as_string(), o.imatrix);
  EXPECT_EQ(*(*g)->find_key("quantize.imatrix.dataset")->as_string(), "prompt.txt");
  EXPECT_EQ((*g)->find_key("quantize.imatrix.entries_count")->as_uint(), im.entries.size());
  EXPECT_EQ((*g)->find_key("quantize.imatrix.chunks_count")->as_uint(), im.chunk_count);

  // One weighted tensor byte for byte: layer 0's wq_a, dequantised from the source and quantised
  // with its imatrix weights by quantize_row_weighted.
  auto ck = io::Checkpoint::open(ck_dir);
  ASSERT_TRUE(ck.ok());
  const io::TensorInfo* w = (*ck)->find("layers.0.attn.wq_a.weight");
  const io::TensorInfo* sc = (*ck)->find("layers.0.attn.wq_a.scale");
  ASSERT_TRUE(w && sc);
  const int64_t out = w->shape[0], in = w->shape[1];
  std::vector<uint8_t> wb(w->nbytes), sb(sc->nbytes);
  ASSERT_TRUE((*ck)->read(*w, wb.data()).ok());
  ASSERT_TRUE((*ck)->read(*sc, sb.data()).ok());
  std::vector<float> f(static_cast<size_t>(out * in));
  kernels::dequant_fp8(kernels::Fp8Weight{wb.data(), sb.data(), out, in}, f.data());
  auto qw = imatrix_weights(im, "t", "blk.0.attn_q_a.weight", in, 1);
  ASSERT_TRUE(qw.ok() && !qw->empty());
  const int64_t rb = kernels::quant_row_bytes(kernels::QuantType::kIq4Nl, in);
  std::vector<uint8_t> want(static_cast<size_t>(out * rb)), plain(want.size()), got(want.size());
  for (int64_t r = 0; r < out; ++r) {
    kernels::quantize_row_weighted(kernels::QuantType::kIq4Nl, f.data() + r * in, qw->data(), want.data() + r * rb, in);
    kernels::quantize_row_ref(kernels::QuantType::kIq4Nl, f.data() + r * in, plain.data() + r * rb, in);
  }
  const io::GgufTensorInfo* t = (*g)->find("blk.0.attn_q_a.weight");
  ASSERT_NE(t, nullptr);
  ASSERT_EQ(t->nbytes, got.size());
  ASSERT_TRUE((*g)->read_range(*t, 0, got.size(), got.data()).ok());
  EXPECT_EQ(got, want);
  EXPECT_NE(got, plain) << "the imatrix changed nothing";

  // An entry whose width disagrees with its tensor is an error naming the file and the tensor.
  Imatrix bad = im;
  bad.entries["blk.0.attn_q_a.weight"].n_cols = 32;
  bad.entries["blk.0.attn_q_a.weight"].in_sum2.resize(32);
  ASSERT_TRUE(write_imatrix(bad, d.file("bad.imatrix")).ok());
  o.out_path = d.file("bad.gguf");
  o.imatrix = d.file("bad.imatrix");
  auto e = quantize_checkpoint(o);
  ASSERT_FALSE(e.ok());
  EXPECT_EQ(e.error().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(e.error().message().find("bad.imatrix"), std::string::npos) << e.error().message();
  EXPECT_NE(e.error().message().find("blk.0.attn_q_a.weight"), std::string::npos) << e.error().message();
  EXPECT_FALSE(io::file_exists(o.out_path));
}

}  // namespace
}  // namespace strata::tools
