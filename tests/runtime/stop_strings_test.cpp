// StopStrings (runtime/stop_strings.h): a stop string is found when it ends inside the newest
// token's text, also when it is split across tokens; it is reported once.
#include "runtime/stop_strings.h"

#include <gtest/gtest.h>

#include <map>

namespace strata::runtime {
namespace {

TEST(StopStrings, FoundAcrossTokensOnce) {
  const std::map<int32_t, std::string> text = {{1, "hel"}, {2, "lo wo"}, {3, "rld"}, {4, "!"}};
  StopStrings s({"o wor", ""}, [&](int32_t id) { return text.at(id); });
  EXPECT_FALSE(s.push(1));
  EXPECT_FALSE(s.push(2));
  EXPECT_TRUE(s.push(3));   // "o wo" + "r"
  EXPECT_FALSE(s.push(4));  // already reported
}

TEST(StopStrings, EmptyListNeverStops) {
  StopStrings s({}, nullptr);
  EXPECT_TRUE(s.empty());
  EXPECT_FALSE(s.push(1));
}

}  // namespace
}  // namespace strata::runtime
