// core/json_nesting.h: the linear scans that bound JSON before a parser sees it (issue 13 item 8,
// and the quadratic ordered_json insert found by the break-in review).
#include "core/json_nesting.h"

#include <gtest/gtest.h>

#include <string>

namespace strata {
namespace {

TEST(JsonNesting, DepthCountsBracketsOutsideStrings) {
  EXPECT_FALSE(json_nests_deeper_than(R"({"a":[1,{"b":2}]})", 3));
  EXPECT_TRUE(json_nests_deeper_than(R"({"a":[1,{"b":2}]})", 2));
  EXPECT_FALSE(json_nests_deeper_than(R"({"a":"[[[[[[\"[[["})", 1));  // inside a string, escaped quote
  EXPECT_TRUE(json_nests_deeper_than(std::string(100000, '['), 128));
}

TEST(JsonNesting, ObjectWidthCountsOneObjectsMembers) {
  std::string wide = "{";
  for (int i = 0; i < 5000; ++i) wide += (i ? ",\"k" : "\"k") + std::to_string(i) + "\":1";
  wide += "}";
  EXPECT_TRUE(json_object_wider_than(wide, 4096));
  EXPECT_FALSE(json_object_wider_than(wide, 5000));
  // Commas of arrays, nested objects and strings are not members of the outer object.
  const std::string arrays = R"({"a":[1,2,3,4,5,6,7,8],"b":{"x":1,"y":2,"z":3},"c":"1,2,3,4,5"})";
  EXPECT_FALSE(json_object_wider_than(arrays, 3));
  EXPECT_TRUE(json_object_wider_than(arrays, 2));
  EXPECT_FALSE(json_object_wider_than("[" + std::string(10000, '1') + "]", 1));
}

}  // namespace
}  // namespace strata
