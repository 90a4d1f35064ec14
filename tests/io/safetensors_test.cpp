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

// Issue 13 items 1 and 7: offsets that wrap past 2^64 (pointing into the header or below byte 0),
// gaps, trailing bytes and a data region the tensors do not cover exactly are all refused.
TEST(Safetensors, RefusesWrappingOffsetsAndUncoveredBytes) {
  auto parse = [](const std::string& h, uint64_t data_start, uint64_t file_size) {
    return parse_safetensors_header("x.safetensors", h, data_start, file_size, 0);
  };
  const uint64_t max = ~uint64_t{0};
  // begin = 2^64 - 100 + 8: data_start (100) + begin wraps to byte 8, inside the header.
  const std::string wrap = R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[)" + std::to_string(max - 91) + "," +
                           std::to_string(max - 83) + "]}}";
  auto r = parse(wrap, 100, 108);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.error().message().find("past the end of the file"), std::string::npos) << r.error().to_string();
  // A data region longer than the tensors (trailing bytes, or a header length one byte short).
  r = parse(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}})", 100, 109);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.error().message().find("the tensors cover 8 of the 9 bytes"), std::string::npos) << r.error().to_string();
  // A hole between two tensors.
  r = parse(R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},"b":{"dtype":"F32","shape":[1],"data_offsets":[8,12]}})",
            100, 112);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.error().message().find("bytes 4..8 of the data region belong to no tensor (before 'b')"), std::string::npos)
      << r.error().to_string();
  // A data region that does not start at 0.
  r = parse(R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}})", 100, 108);
  ASSERT_FALSE(r.ok());
  // A header that claims to end past the file.
  r = parse("{}", 200, 100);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.error().message().find("past the end of the file"), std::string::npos) << r.error().to_string();
  // Exact cover with a zero-size tensor in the middle is fine; an empty data region with no tensors too.
  EXPECT_TRUE(parse(R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},"z":{"dtype":"F32","shape":[0],"data_offsets":[4,4]},)"
                    R"("b":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}})",
                    100, 108)
                  .ok());
  EXPECT_TRUE(parse(R"({"__metadata__":{"format":"pt"}})", 100, 100).ok());
}

TEST(Safetensors, RefusesATensorNamedTwice) {
  // The JSON parser keeps the last of two equal keys: another reader could keep the first.
  auto r = parse_safetensors_header("x.safetensors",
                                    R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},)"
                                    R"("a":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}})",
                                    8, 16, 0);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.error().message().find("tensor 'a' appears twice"), std::string::npos) << r.error().to_string();
}

TEST(Safetensors, RefusesAShapeWhoseByteSizeOverflows) {
  // [2^32, 2^32] U8: numel() wraps to 0 in int64, so offsets [0, 0] used to pass as an empty tensor.
  auto r = parse_safetensors_header("x.safetensors", R"({"a":{"dtype":"U8","shape":[4294967296,4294967296],"data_offsets":[0,0]}})",
                                    8, 8, 0);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.error().message().find("more bytes than fit in 64 bits"), std::string::npos) << r.error().to_string();
}

TEST(Safetensors, RefusesDeepNestingBeforeParsing) {
  const std::string deep = "{\"a\":" + std::string(100, '[') + std::string(100, ']') + "}";
  auto r = parse_safetensors_header("x.safetensors", deep, 8, 8, 0);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.error().message().find("nested deeper than 8 levels"), std::string::npos) << r.error().to_string();
  // Brackets inside strings do not count.
  const std::string in_string = R"({"__metadata__":{"note":"[[[[[[[[[[[[[[[[[[[[\"[[[[[[[[["}})";
  EXPECT_TRUE(parse_safetensors_header("x.safetensors", in_string, 8, 8, 0).ok());
}

}  // namespace
}  // namespace strata::io
