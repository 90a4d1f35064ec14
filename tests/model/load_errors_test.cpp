// Bad checkpoints fail before the first token with an error naming the tensor or field and what was
// expected: a missing tensor, a wrong shape, a wrong dtype, a truncated shard, a corrupt safetensors
// header, a missing config field, a tokenizer that does not match the config.
#include <gtest/gtest.h>

#include "tests/support/files.h"

#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <nlohmann/json.hpp>
#include <sstream>

#include "io/checkpoint.h"
#include "tests/support/checkpoint_copy.h"
#include "tests/support/npy.h"
#include "tests/support/temp_dir.h"
#include "tests/support/tiny_model.h"

namespace strata::model {
namespace {

using strata::testing::read_all;
using strata::testing::write_all;

namespace fs = std::filesystem;

using strata::testing::copy_tiny;

Status load_status(const std::string& dir) {
  auto m = testing::load_model(dir, 1);
  return m.ok() ? Status() : m.error();
}

class LoadErrors : public ::testing::Test {
 protected:
  void SetUp() override { STRATA_REQUIRE_FIXTURE(testing::tiny_dir() + "/checkpoint/model.safetensors"); }
  testing::TempDir tmp_;
};

TEST_F(LoadErrors, IntactCopyLoads) {
  copy_tiny(tmp_.path(), nullptr);
  EXPECT_TRUE(load_status(tmp_.path()).ok());
}

TEST_F(LoadErrors, MissingTensor) {
  testing::copy_tiny_without(tmp_.path(), "layers.3.attn.wq_a.weight");
  Status s = load_status(tmp_.path());
  EXPECT_EQ(s.code(), StatusCode::kNotFound);
  EXPECT_NE(s.message().find("tensor 'layers.3.attn.wq_a.weight' is missing from the checkpoint (expected F8_E4M3 [64, 64]"),
            std::string::npos)
      << s.to_string();
}

TEST_F(LoadErrors, MissingRoutedExpertTensor) {
  testing::copy_tiny_without(tmp_.path(), "layers.6.ffn.experts.5.w2.scale");
  Status s = load_status(tmp_.path());
  EXPECT_EQ(s.code(), StatusCode::kNotFound);
  EXPECT_NE(s.message().find("layers.6.ffn.experts.5.w2.scale"), std::string::npos) << s.to_string();
}

TEST_F(LoadErrors, WrongShape) {
  copy_tiny(tmp_.path(), [](nlohmann::json& h) { h["layers.2.attn.wkv.weight"]["shape"] = {32, 128}; });
  Status s = load_status(tmp_.path());
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("tensor 'layers.2.attn.wkv.weight': shape [32, 128], expected [64, 64] (head_dim=64, dim=64)"),
            std::string::npos)
      << s.to_string();
}

TEST_F(LoadErrors, WrongDtype) {
  // F16 is accepted (GGUFs from ds4 / ik_llama.cpp, widened at load): a 1-byte dtype over the same bytes.
  copy_tiny(tmp_.path(), [](nlohmann::json& h) {
    h["layers.0.attn.q_norm.weight"]["dtype"] = "U8";
    h["layers.0.attn.q_norm.weight"]["shape"] = {2 * h["layers.0.attn.q_norm.weight"]["shape"][0].get<int64_t>()};
  });
  Status s = load_status(tmp_.path());
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("tensor 'layers.0.attn.q_norm.weight': dtype U8, expected BF16 or F32 or F16"),
            std::string::npos)
      << s.to_string();
}

TEST_F(LoadErrors, TruncatedShard) {
  copy_tiny(tmp_.path(), nullptr);
  const std::string p = tmp_.file("model.safetensors");
  fs::resize_file(p, fs::file_size(p) - 1000);
  Status s = load_status(tmp_.path());
  EXPECT_EQ(s.code(), StatusCode::kCorruption);
  EXPECT_NE(s.message().find("past the end of the file"), std::string::npos) << s.to_string();
  EXPECT_NE(s.message().find("truncated shard?"), std::string::npos) << s.to_string();
}

TEST_F(LoadErrors, CorruptHeader) {
  copy_tiny(tmp_.path(), nullptr);
  const std::string p = tmp_.file("model.safetensors");
  std::string st = read_all(p);
  st[8] = '#';  // the header JSON no longer parses
  write_all(p, st);
  Status s = load_status(tmp_.path());
  EXPECT_EQ(s.code(), StatusCode::kCorruption);
  EXPECT_NE(s.message().find("safetensors header is not valid JSON"), std::string::npos) << s.to_string();
  // A header length past the end of the file.
  uint64_t huge = 1ull << 40;
  std::memcpy(st.data(), &huge, 8);
  write_all(p, st);
  s = load_status(tmp_.path());
  EXPECT_EQ(s.code(), StatusCode::kCorruption);
  EXPECT_NE(s.message().find("exceeds the file"), std::string::npos) << s.to_string();
}

TEST_F(LoadErrors, OffsetsDisagreeWithShape) {
  copy_tiny(tmp_.path(), [](nlohmann::json& h) {
    auto& o = h["norm.weight"]["data_offsets"];
    o[1] = o[1].get<uint64_t>() + 2;
  });
  Status s = load_status(tmp_.path());
  EXPECT_EQ(s.code(), StatusCode::kCorruption);
  EXPECT_NE(s.message().find("tensor 'norm.weight': data_offsets span 130 bytes, expected 128"), std::string::npos)
      << s.to_string();
}

TEST_F(LoadErrors, MissingConfigField) {
  copy_tiny(tmp_.path(), nullptr, [](nlohmann::json& c) { c["text_config"].erase("q_lora_rank"); });
  Status s = load_status(tmp_.path());
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("missing field 'text_config.q_lora_rank'"), std::string::npos) << s.to_string();
}

TEST_F(LoadErrors, TokenizerDoesNotMatchConfig) {
  copy_tiny(tmp_.path(), nullptr, [](nlohmann::json& c) { c["text_config"]["engram_compressed_vocab_size"] = 99092; });
  Status s = load_status(tmp_.path());
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("98627"), std::string::npos) << s.to_string();
  EXPECT_NE(s.message().find("engram_compressed_vocab_size = 99092"), std::string::npos) << s.to_string();
}

TEST_F(LoadErrors, NotADirectory) {
  Status s = load_status(tmp_.file("nope"));
  EXPECT_FALSE(s.ok());
}

}  // namespace
}  // namespace strata::model
