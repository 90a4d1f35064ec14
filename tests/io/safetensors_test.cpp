#include "io/safetensors.h"

#include <gtest/gtest.h>

namespace strata::io {
namespace {

TEST(Safetensors, ParsesAndValidates) {
  const std::string h =
      R"({"__metadata__":{"format":"pt"},"a":{"dtype":"BF16","shape":[2,3],"data_offsets":[0,12]},)"
      R"("b":{"dtype":"F8_E4M3","shape":[4],"data_offsets":[12,16]}})";
  auto r = parse_safetensors_header("x.safetensors", h, 100, 116, 0);
  ASSERT_TRUE(r.ok()) << r.error().to_string();
  ASSERT_EQ(r->size(), 2u);
  EXPECT_EQ((*r)[0].offset, 100u);
  EXPECT_EQ((*r)[1].offset, 112u);
  EXPECT_EQ((*r)[1].dtype, DType::kF8E4M3);
}

TEST(Safetensors, RejectsBadEntries) {
  auto bad = [](const std::string& h, uint64_t file_size, const std::string& want) {
    auto r = parse_safetensors_header("x.safetensors", h, 8, file_size, 0);
    ASSERT_FALSE(r.ok()) << h;
    EXPECT_EQ(r.error().code(), StatusCode::kCorruption);
    EXPECT_NE(r.error().message().find(want), std::string::npos) << r.error().to_string();
  };
  bad("not json", 100, "not a JSON object");
  bad(R"({"a":{"dtype":"Q9","shape":[1],"data_offsets":[0,1]}})", 100, "unknown dtype 'Q9'");
  bad(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,4]}})", 100, "data_offsets span 4 bytes, expected 8");
  bad(R"({"a":{"dtype":"F32","shape":[-1],"data_offsets":[0,4]}})", 100, "non-negative");
  bad(R"({"a":{"dtype":"F32","shape":[100],"data_offsets":[0,400]}})", 100, "past the end of the file");
  bad(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},"b":{"dtype":"F32","shape":[2],"data_offsets":[4,12]}})",
      100, "overlap");
  bad(R"({"a":{"dtype":"F32","shape":[2]}})", 100, "data_offsets");
}

}  // namespace
}  // namespace strata::io
