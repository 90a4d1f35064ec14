// io::SafetensorsWriter: round trips through io::Checkpoint (one shard, several shards + index),
// header layout, and every byte-count / order error.
#include "io/safetensors_writer.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <nlohmann/json.hpp>
#include <numeric>
#include <vector>

#include "io/checkpoint.h"
#include "io/file.h"
#include "tests/support/temp_dir.h"

namespace strata::io {
namespace {

namespace fs = std::filesystem;
using testing::TempDir;

std::vector<TensorDecl> sample_decls() {
  return {
      {"embed.weight", DType::kBF16, Shape{5, 4}},                       // 40 bytes
      {"layers.0.attn_sink", DType::kF32, Shape{3}},                     // 12 bytes
      {"empty", DType::kF32, Shape{0, 7}},                               // 0 bytes
      {"layers.0.ffn.experts.0.w1.weight", DType::kI8, Shape{6, 8}},     // 48 bytes
      {"layers.0.ffn.experts.0.w1.scale", DType::kF8E8M0, Shape{6, 1}},  // 6 bytes
      {"head.weight", DType::kBF16, Shape{5, 4}},                        // 40 bytes
  };
}

// Deterministic bytes for tensor i.
std::vector<uint8_t> bytes_for(size_t i, uint64_t n) {
  std::vector<uint8_t> b(n);
  for (uint64_t k = 0; k < n; ++k) b[k] = static_cast<uint8_t>(k * 7 + i * 31 + 1);
  return b;
}

// Writes every tensor in chunks of `chunk` bytes.
Status write_all(SafetensorsWriter& w, const std::vector<TensorDecl>& decls, size_t chunk) {
  for (size_t i = 0; i < decls.size(); ++i) {
    auto b = bytes_for(i, decls[i].nbytes());
    for (size_t off = 0; off < b.size(); off += chunk)
      STRATA_RETURN_IF_ERROR(w.write(b.data() + off, std::min(chunk, b.size() - off)));
  }
  return w.finish();
}

void expect_round_trip(const std::string& dir, const std::vector<TensorDecl>& decls) {
  auto ck = Checkpoint::open(dir);
  ASSERT_TRUE(ck.ok()) << ck.error().to_string();
  EXPECT_EQ((*ck)->tensors().size(), decls.size());
  for (size_t i = 0; i < decls.size(); ++i) {
    const TensorInfo* t = (*ck)->find(decls[i].name);
    ASSERT_NE(t, nullptr) << decls[i].name;
    EXPECT_EQ(t->dtype, decls[i].dtype) << decls[i].name;
    EXPECT_EQ(t->shape, decls[i].shape) << decls[i].name;
    ASSERT_EQ(t->nbytes, decls[i].nbytes());
    std::vector<uint8_t> got(t->nbytes);
    if (t->nbytes) {
      ASSERT_TRUE((*ck)->read(*t, got.data()).ok());
    }
    EXPECT_EQ(got, bytes_for(i, decls[i].nbytes())) << decls[i].name;
  }
}

std::vector<std::string> dir_entries(const std::string& dir) {
  std::vector<std::string> names;
  for (const auto& e : fs::directory_iterator(dir)) names.push_back(e.path().filename().string());
  std::sort(names.begin(), names.end());
  return names;
}

SafetensorsWriterOptions fast(uint64_t max_shard = 0) {
  SafetensorsWriterOptions o;
  o.max_shard_bytes = max_shard;
  o.fsync = false;
  return o;
}

TEST(SafetensorsWriter, SingleShardRoundTrip) {
  TempDir d;
  auto decls = sample_decls();
  auto w = SafetensorsWriter::create(d.path(), decls, fast());
  ASSERT_TRUE(w.ok()) << w.error().to_string();
  ASSERT_EQ((*w)->shards().size(), 1u);
  EXPECT_EQ((*w)->index_file_name(), "");
  ASSERT_TRUE(write_all(**w, decls, 5).ok());
  EXPECT_EQ((*w)->data_bytes_written(), 146u);
  EXPECT_EQ(dir_entries(d.path()), std::vector<std::string>{"model.safetensors"});
  expect_round_trip(d.path(), decls);

  // Header: u64 length, multiple of 8, __metadata__ first, offsets in declaration order.
  auto text = read_file_to_string(d.file("model.safetensors"));
  ASSERT_TRUE(text.ok());
  uint64_t n = 0;
  for (int b = 7; b >= 0; --b) n = (n << 8) | static_cast<uint8_t>((*text)[static_cast<size_t>(b)]);
  EXPECT_EQ(n % 8, 0u);
  EXPECT_EQ(text->size(), 8 + n + 146);
  auto j = nlohmann::ordered_json::parse(text->substr(8, n));
  EXPECT_EQ(j.begin().key(), "__metadata__");
  EXPECT_EQ(j["__metadata__"]["format"], "pt");
  EXPECT_EQ(j["layers.0.attn_sink"]["data_offsets"], nlohmann::ordered_json::array({40, 52}));
  EXPECT_EQ(j["layers.0.attn_sink"]["dtype"], "F32");
  EXPECT_EQ((*w)->total_file_bytes(), text->size());
}

TEST(SafetensorsWriter, MultiShardWithIndex) {
  TempDir d;
  auto decls = sample_decls();
  // 50-byte shards: [embed 40][sink 12 + empty 0 would overflow -> new]... greedy in order.
  auto w = SafetensorsWriter::create(d.path(), decls, fast(50));
  ASSERT_TRUE(w.ok()) << w.error().to_string();
  const auto shards = (*w)->shards();
  ASSERT_GE(shards.size(), 3u);
  for (const ShardPlan& s : shards) {
    EXPECT_TRUE(s.data_bytes <= 50 || s.end_tensor - s.first_tensor == 1) << s.file_name;
  }
  EXPECT_EQ(shards[0].file_name, "model-00001-of-0000" + std::to_string(shards.size()) + ".safetensors");
  ASSERT_TRUE(write_all(**w, decls, 1000).ok());
  expect_round_trip(d.path(), decls);

  auto idx = read_file_to_string(d.file("model.safetensors.index.json"));
  ASSERT_TRUE(idx.ok());
  auto j = nlohmann::json::parse(*idx);
  EXPECT_EQ(j["metadata"]["total_size"], 146);
  EXPECT_EQ(j["weight_map"].size(), decls.size());
  EXPECT_EQ(j["weight_map"]["head.weight"], shards.back().file_name);
  // No temporary files remain.
  for (const std::string& n : dir_entries(d.path())) EXPECT_EQ(n.find(".tmp."), std::string::npos) << n;
  EXPECT_EQ(dir_entries(d.path()).size(), shards.size() + 1);
}

TEST(SafetensorsWriter, TensorLargerThanShardGetsItsOwn) {
  TempDir d;
  std::vector<TensorDecl> decls = {
      {"a", DType::kU8, Shape{10}}, {"big", DType::kU8, Shape{100}}, {"c", DType::kU8, Shape{10}}};
  auto w = SafetensorsWriter::create(d.path(), decls, fast(30));
  ASSERT_TRUE(w.ok());
  ASSERT_EQ((*w)->shards().size(), 3u);
  EXPECT_EQ((*w)->shards()[1].data_bytes, 100u);
  ASSERT_TRUE(write_all(**w, decls, 7).ok());
  expect_round_trip(d.path(), decls);
}

TEST(SafetensorsWriter, ChunkPastTensorEndIsAnError) {
  TempDir d;
  auto decls = sample_decls();
  auto w = SafetensorsWriter::create(d.path(), decls, fast());
  ASSERT_TRUE(w.ok());
  std::vector<uint8_t> b(41);
  Status s = (*w)->write(b.data(), 41);  // embed.weight has 40 bytes
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("embed.weight"), std::string::npos) << s.to_string();
  EXPECT_NE(s.message().find("only 40"), std::string::npos) << s.to_string();
  // The writer is dead and its temporary file is gone.
  EXPECT_FALSE((*w)->write(b.data(), 1).ok());
  EXPECT_FALSE((*w)->finish().ok());
  EXPECT_TRUE(dir_entries(d.path()).empty());
}

TEST(SafetensorsWriter, FinishWithMissingBytesNamesTheTensor) {
  TempDir d;
  auto decls = sample_decls();
  {
    auto w = SafetensorsWriter::create(d.path(), decls, fast());
    ASSERT_TRUE(w.ok());
    auto b = bytes_for(0, 40);
    ASSERT_TRUE((*w)->write(b.data(), 40).ok());
    ASSERT_TRUE((*w)->write(b.data(), 5).ok());  // 5 of attn_sink's 12 bytes
    Status s = (*w)->finish();
    EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
    EXPECT_NE(s.message().find("layers.0.attn_sink"), std::string::npos) << s.to_string();
    EXPECT_NE(s.message().find("5 of its 12"), std::string::npos) << s.to_string();
  }
  EXPECT_TRUE(dir_entries(d.path()).empty());
}

TEST(SafetensorsWriter, AbandonedWriterLeavesNothing) {
  TempDir d;
  auto decls = sample_decls();
  {
    auto w = SafetensorsWriter::create(d.path(), decls, fast(50));
    ASSERT_TRUE(w.ok());
    auto b = bytes_for(0, 40);
    ASSERT_TRUE((*w)->write(b.data(), 40).ok());
    ASSERT_TRUE((*w)->write(b.data(), 12).ok());  // opens the second shard
    EXPECT_FALSE(dir_entries(d.path()).empty());
  }
  EXPECT_TRUE(dir_entries(d.path()).empty());
}

TEST(SafetensorsWriter, WriteTensorChecksNameAndSize) {
  TempDir d;
  auto decls = sample_decls();
  auto w = SafetensorsWriter::create(d.path(), decls, fast());
  ASSERT_TRUE(w.ok());
  auto b = bytes_for(0, 40);
  ASSERT_TRUE((*w)->write_tensor("embed.weight", b.data(), 40).ok());
  Status s = (*w)->write_tensor("head.weight", b.data(), 40);
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("out of order"), std::string::npos) << s.to_string();
  EXPECT_NE(s.message().find("layers.0.attn_sink"), std::string::npos) << s.to_string();

  TempDir d2;
  auto w2 = SafetensorsWriter::create(d2.path(), decls, fast());
  ASSERT_TRUE(w2.ok());
  s = (*w2)->write_tensor("embed.weight", b.data(), 39);
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("expected 40"), std::string::npos) << s.to_string();
}

TEST(SafetensorsWriter, WriteTensorAllInOrder) {
  TempDir d;
  auto decls = sample_decls();
  auto w = SafetensorsWriter::create(d.path(), decls, fast(64));
  ASSERT_TRUE(w.ok());
  for (size_t i = 0; i < decls.size(); ++i) {
    auto b = bytes_for(i, decls[i].nbytes());
    ASSERT_TRUE((*w)->write_tensor(decls[i].name, b.data(), b.size()).ok()) << decls[i].name;
  }
  ASSERT_TRUE((*w)->finish().ok());
  expect_round_trip(d.path(), decls);
}

TEST(SafetensorsWriter, RejectsBadDeclarations) {
  TempDir d;
  auto dup = sample_decls();
  dup.push_back(dup.front());
  auto w = SafetensorsWriter::create(d.path(), dup, fast());
  ASSERT_FALSE(w.ok());
  EXPECT_NE(w.error().message().find("declared twice"), std::string::npos);

  std::vector<TensorDecl> meta = {{"__metadata__", DType::kU8, Shape{1}}};
  EXPECT_EQ(SafetensorsWriter::create(d.path(), meta, fast()).error().code(), StatusCode::kInvalidArgument);

  EXPECT_EQ(SafetensorsWriter::create(d.file("missing"), sample_decls(), fast()).error().code(), StatusCode::kNotFound);
}

TEST(SafetensorsWriter, RefusesWhenTheDiskIsTooSmall) {
  TempDir d;
  std::vector<TensorDecl> huge = {{"x", DType::kU8, Shape{int64_t{1} << 40, 1024}}};  // 1 PiB
  SafetensorsWriterOptions o = fast();
  auto w = SafetensorsWriter::create(d.path(), huge, o);
  ASSERT_FALSE(w.ok());
  EXPECT_EQ(w.error().code(), StatusCode::kResourceExhausted) << w.error().to_string();
}

}  // namespace
}  // namespace strata::io
