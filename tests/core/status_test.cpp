#include "core/status.h"

#include <gtest/gtest.h>

namespace strata {
namespace {

Result<int> parse_positive(int v) {
  if (v <= 0) return InvalidArgument("value " + std::to_string(v) + ", expected > 0");
  return v;
}

Status use(int v, int* out) {
  STRATA_ASSIGN_OR_RETURN(int x, parse_positive(v));
  *out = x * 2;
  return Status();
}

TEST(Status, OkAndError) {
  Status ok;
  EXPECT_TRUE(ok.ok());
  EXPECT_EQ(ok.to_string(), "OK");
  Status e = NotFound("tensor 'x'");
  EXPECT_FALSE(e.ok());
  EXPECT_EQ(e.code(), StatusCode::kNotFound);
  EXPECT_EQ(e.to_string(), "NotFound: tensor 'x'");
  EXPECT_EQ(e.with_context("shard.safetensors").message(), "shard.safetensors: tensor 'x'");
}

TEST(Status, ResultPropagation) {
  int out = 0;
  EXPECT_TRUE(use(3, &out).ok());
  EXPECT_EQ(out, 6);
  Status s = use(-1, &out);
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("expected > 0"), std::string::npos);
}

TEST(Status, IOErrorCarriesErrno) {
  Status s = IOError("read model.safetensors", 5);
  EXPECT_EQ(s.code(), StatusCode::kIOError);
  EXPECT_NE(s.message().find("Input/output error"), std::string::npos);
}

}  // namespace
}  // namespace strata
