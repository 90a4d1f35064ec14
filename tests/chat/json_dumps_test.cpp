// chat/json_dumps.h against Python's json.dumps(x, ensure_ascii=False) outputs (written down from
// CPython 3.11; the float cases are the ones chat-and-api.md §4 lists).
#include "chat/json_dumps.h"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>

namespace strata::chat {
namespace {

std::string dumps_of(const std::string& json_text) {
  Json v = Json::parse(json_text, nullptr, false);
  EXPECT_FALSE(v.is_discarded()) << json_text;
  return json_dumps(v);
}

TEST(JsonDumps, SeparatorsAndKeyOrder) {
  EXPECT_EQ(dumps_of(R"({"b":1,"a":[1,2,{"z":null,"y":true}],"c":false})"),
            R"({"b": 1, "a": [1, 2, {"z": null, "y": true}], "c": false})");
  EXPECT_EQ(dumps_of("{}"), "{}");
  EXPECT_EQ(dumps_of("[]"), "[]");
  EXPECT_EQ(dumps_of(R"({"properties": {}})"), R"({"properties": {}})");
}

TEST(JsonDumps, StringsEscapeOnlyWhatPythonEscapes) {
  EXPECT_EQ(dumps_of(R"("a\"b\\c\nd\re\tf\bg\fh")"), R"("a\"b\\c\nd\re\tf\bg\fh")");
  EXPECT_EQ(dumps_of(R"("\u0001\u001f\u007f")"), "\"\\u0001\\u001f\x7f\"");
  EXPECT_EQ(dumps_of(R"("°C 北京 😀 </script> & <")"), "\"°C 北京 😀 </script> & <\"");
  EXPECT_EQ(dumps_of(R"("\u00e9\u2028")"), "\"é\u2028\"");
  EXPECT_EQ(dumps_of(R"("/")"), "\"/\"");
}

TEST(JsonDumps, IntegersAsWritten) {
  EXPECT_EQ(dumps_of("[0, -0, 7, -12, 9007199254740993, 18446744073709551615, -9223372036854775808]"),
            "[0, 0, 7, -12, 9007199254740993, 18446744073709551615, -9223372036854775808]");
}

TEST(JsonDumps, FloatsAsPythonRepr) {
  EXPECT_EQ(dumps_of("[0.0, -0.0, 0.0001, 0.00001, 100000.0, 1e16, 1E16, 1.5e16, 1e15, 2.5]"),
            "[0.0, -0.0, 0.0001, 1e-05, 100000.0, 1e+16, 1e+16, 1.5e+16, 1000000000000000.0, 2.5]");
  EXPECT_EQ(dumps_of("[0.1, 1.0, 1e0, 3.14159, 1e-7, 123456789.125, 1e22, 1.7976931348623157e308, 5e-324]"),
            "[0.1, 1.0, 1.0, 3.14159, 1e-07, 123456789.125, 1e+22, 1.7976931348623157e+308, 5e-324]");
  EXPECT_EQ(dumps_of("[0.30000000000000004, -2.5e-5, 12345678901234567.0]"),
            "[0.30000000000000004, -2.5e-05, 1.2345678901234568e+16]");
  EXPECT_EQ(python_float_repr(std::numeric_limits<double>::infinity()), "Infinity");
  EXPECT_EQ(python_float_repr(-std::numeric_limits<double>::infinity()), "-Infinity");
  EXPECT_EQ(python_float_repr(std::nan("")), "NaN");
}

TEST(JsonDumps, BoundedParse) {
  EXPECT_EQ(json_dumps(parse_json_bounded(R"({"a": [1, {"b": "[[[["}]})")), R"({"a": [1, {"b": "[[[["}]})");
  EXPECT_TRUE(parse_json_bounded("{oops").is_discarded());
  // Depth counts arrays and objects, not brackets inside strings (escaped quotes included).
  EXPECT_FALSE(parse_json_bounded(std::string(3, '[') + std::string(3, ']'), 3).is_discarded());
  EXPECT_TRUE(parse_json_bounded(std::string(4, '[') + std::string(4, ']'), 3).is_discarded());
  EXPECT_FALSE(parse_json_bounded(R"([["\"[[[[[[", "]"]])", 2).is_discarded());
  EXPECT_TRUE(parse_json_bounded(std::string(100000, '[') + std::string(100000, ']')).is_discarded());
}

TEST(JsonDumps, DiffersFromNlohmannDump) {
  // The reason this serializer exists: nlohmann writes {"a":1.0e-05} style output.
  const Json v = Json::parse(R"({"a": 1e-05, "b": "é"})");
  EXPECT_NE(v.dump(), json_dumps(v));
  EXPECT_EQ(json_dumps(v), R"({"a": 1e-05, "b": "é"})");
}

}  // namespace
}  // namespace strata::chat
