// runtime::JsonGrammar (schema -> byte automaton) and runtime::VocabTrie (the token mask): valid and
// invalid prefixes per keyword, and the trie walk against the per-token reference on random token
// sequences, whose complete documents must parse and validate (tests/support/schema_check.h).
#include "runtime/json_grammar.h"

#include <gtest/gtest.h>

#include <chrono>
#include <cmath>
#include <random>
#include <string>
#include <vector>

#include "runtime/token_mask.h"
#include "tests/support/schema_check.h"

namespace strata::runtime {
namespace {

using Json = nlohmann::ordered_json;

JsonGrammar compile(const char* schema) {
  auto g = JsonGrammar::from_schema(Json::parse(schema));
  EXPECT_TRUE(g.ok()) << (g.ok() ? "" : g.error().to_string());
  return g.ok() ? std::move(g.value()) : JsonGrammar::any_object();
}

// The bytes are a prefix of some accepted document.
bool prefix(const JsonGrammar& g, std::string_view text) {
  JsonGrammar::State s = g.start();
  return g.advance(&s, text);
}
// The bytes are a whole accepted document.
bool whole(const JsonGrammar& g, std::string_view text) {
  JsonGrammar::State s = g.start();
  return g.advance(&s, text) && g.can_end(s);
}

std::string compile_error(const char* schema) {
  auto g = JsonGrammar::from_schema(Json::parse(schema));
  return g.ok() ? std::string() : g.error().message();
}

TEST(JsonGrammar, ObjectPropertiesRequiredAndOrder) {
  const JsonGrammar g = compile(
      R"({"type":"object","properties":{"a":{"type":"integer"},"b":{"type":"string"},"c":{"type":"boolean"}},
          "required":["a","c"],"additionalProperties":false})");
  EXPECT_TRUE(whole(g, R"({"a":1,"c":true})"));
  EXPECT_TRUE(whole(g, R"({"a": 1, "b": "x", "c": false})"));
  EXPECT_FALSE(whole(g, R"({"a":1})"));        // c is required
  EXPECT_FALSE(prefix(g, R"({"c":true)"));     // a is required and comes first
  EXPECT_FALSE(prefix(g, R"({"a":1,"d")"));    // not a property
  EXPECT_FALSE(prefix(g, R"({"b":"x","a")"));  // declaration order
  EXPECT_FALSE(prefix(g, R"({ "a")"));         // no whitespace after '{'
  EXPECT_FALSE(prefix(g, R"({"a":  1)"));      // one optional space only
  EXPECT_TRUE(prefix(g, R"({"a":1,"c":tr)"));
  EXPECT_FALSE(whole(g, R"({"a":1,"c":true} )"));  // nothing after the document
  EXPECT_FALSE(whole(g, R"({"a":1,"c":true)"));
}

TEST(JsonGrammar, OptionalOnlyAndEmptyObject) {
  const JsonGrammar g = compile(R"({"type":"object","properties":{"x":{"type":"null"}},"additionalProperties":false})");
  EXPECT_TRUE(whole(g, "{}"));
  EXPECT_TRUE(whole(g, R"({"x":null})"));
  EXPECT_FALSE(prefix(g, R"({"x":null,)"));  // no property left after x
  const JsonGrammar none = compile(R"({"type":"object","additionalProperties":false})");
  EXPECT_TRUE(whole(none, "{}"));
  EXPECT_FALSE(prefix(none, R"({")"));
}

TEST(JsonGrammar, AnyObjectWhenNoProperties) {
  const JsonGrammar g = compile(R"({"type":"object"})");
  EXPECT_TRUE(whole(g, R"({"k":[1,{"z":null}],"s":"t"})"));
  EXPECT_FALSE(prefix(g, "["));
  const JsonGrammar j = JsonGrammar::any_object();
  EXPECT_TRUE(whole(j, R"({"a": {"b": [true, false, -1.5e3]}})"));
  EXPECT_TRUE(whole(j, "{}"));
  EXPECT_FALSE(prefix(j, R"("x")"));
  EXPECT_FALSE(prefix(j, R"({1:2})"));  // keys are strings
}

TEST(JsonGrammar, Strings) {
  const JsonGrammar g = compile(R"({"type":"string","minLength":2,"maxLength":3})");
  EXPECT_FALSE(whole(g, R"("a")"));
  EXPECT_TRUE(whole(g, R"("ab")"));
  EXPECT_TRUE(whole(g, R"("a\nb")"));              // an escape is one code point
  EXPECT_TRUE(whole(g, "\"\xC3\xA9t\xC3\xA9\""));  // "été": 3 code points, 5 bytes
  EXPECT_FALSE(prefix(g, R"("abcd)"));
  EXPECT_TRUE(whole(g, R"("\u00e9x")"));
  EXPECT_FALSE(prefix(g, R"("\ud800)"));  // no surrogate escapes
  EXPECT_FALSE(prefix(g, R"("\x)"));
  EXPECT_FALSE(prefix(g, "\"a\x01"));         // raw control byte
  EXPECT_FALSE(prefix(g, "\"\xC0\xAF"));      // overlong UTF-8
  EXPECT_FALSE(prefix(g, "\"\xED\xA0\x80"));  // a UTF-8 surrogate
  EXPECT_FALSE(prefix(g, "\"\xF5"));
  EXPECT_FALSE(whole(g, "\"a\xC3\""));  // a code point cut by the quote
}

TEST(JsonGrammar, Numbers) {
  const JsonGrammar n = compile(R"({"type":"number"})");
  for (const char* ok : {"0", "-0", "12", "-3.25", "1e5", "1E+5", "2.5e-10", "0.0"}) EXPECT_TRUE(whole(n, ok)) << ok;
  for (const char* bad : {"01", "-", "1.", "1e", "+1", ".5", "1.e3", "--1", "NaN"}) EXPECT_FALSE(whole(n, bad)) << bad;
  EXPECT_FALSE(prefix(n, "1234567890123456"));  // 16 integer digits
  EXPECT_TRUE(whole(n, "1e99"));
  EXPECT_FALSE(prefix(n, "1e100"));  // 3 exponent digits: could overflow a double
  const JsonGrammar i = compile(R"({"type":"integer"})");
  EXPECT_TRUE(whole(i, "-42"));
  EXPECT_FALSE(prefix(i, "4.2"));
  EXPECT_FALSE(prefix(i, "4e2"));
}

TEST(JsonGrammar, EnumConstBooleanNull) {
  const JsonGrammar e = compile(R"({"enum":["red","green",1,12,null]})");
  for (const char* ok : {R"("red")", R"("green")", "1", "12", "null"}) EXPECT_TRUE(whole(e, ok)) << ok;
  for (const char* bad : {R"("blue")", "2", "123", "true", R"("re")"}) EXPECT_FALSE(whole(e, bad)) << bad;
  const JsonGrammar c = compile(R"({"const":{"a":[1]}})");
  EXPECT_TRUE(whole(c, R"({"a":[1]})"));
  EXPECT_FALSE(whole(c, R"({"a": [1]})"));  // const is matched as its compact text
  const JsonGrammar b = compile(R"({"type":"boolean"})");
  EXPECT_TRUE(whole(b, "true"));
  EXPECT_TRUE(whole(b, "false"));
  EXPECT_FALSE(prefix(b, "tru "));
  const JsonGrammar z = compile(R"({"type":"null"})");
  EXPECT_TRUE(whole(z, "null"));
  EXPECT_FALSE(prefix(z, "nul0"));
}

TEST(JsonGrammar, ArraysAndNesting) {
  const JsonGrammar g = compile(R"({"type":"array","minItems":1,"maxItems":2,
      "items":{"type":"object","properties":{"v":{"type":"array","items":{"type":"integer"},"maxItems":1}},
               "required":["v"],"additionalProperties":false}})");
  EXPECT_FALSE(whole(g, "[]"));
  EXPECT_TRUE(whole(g, R"([{"v":[]}])"));
  EXPECT_TRUE(whole(g, R"([{"v":[1]}, {"v":[]}])"));
  EXPECT_FALSE(prefix(g, R"([{"v":[1,2)"));
  EXPECT_FALSE(prefix(g, R"([{"v":[]},{"v":[]},)"));
}

TEST(JsonGrammar, UnionsAndAnyOf) {
  const JsonGrammar t = compile(R"({"type":["string","null"],"maxLength":2})");
  EXPECT_TRUE(whole(t, "null"));
  EXPECT_TRUE(whole(t, R"("ab")"));
  EXPECT_FALSE(prefix(t, R"("abc)"));
  EXPECT_FALSE(prefix(t, "1"));
  const JsonGrammar a = compile(R"({"anyOf":[{"type":"integer"},{"type":"object","properties":{"x":{"const":1}},
      "required":["x"],"additionalProperties":false}]})");
  EXPECT_TRUE(whole(a, "7"));
  EXPECT_TRUE(whole(a, R"({"x":1})"));
  EXPECT_FALSE(prefix(a, R"("s)"));
}

TEST(JsonGrammar, UnsupportedKeywordsNameThePath) {
  EXPECT_NE(compile_error(R"({"type":"string","pattern":"^a"})").find("schema.pattern"), std::string::npos);
  EXPECT_NE(compile_error(R"({"type":"object","properties":{"d":{"type":"string","format":"date"}}})")
                .find("schema.properties.d.format: unsupported keyword 'format'"),
            std::string::npos);
  EXPECT_NE(compile_error(R"({"$ref":"#/$defs/x"})").find("'$ref'"), std::string::npos);
  EXPECT_NE(compile_error(R"({"type":"object","required":["q"],"properties":{}})").find("required"), std::string::npos);
  EXPECT_NE(compile_error(R"({"type":"strin"})").find("unknown type"), std::string::npos);
  EXPECT_NE(compile_error(R"({"anyOf":[{"type":"integer"},{"type":"number"}]})").find("same byte"), std::string::npos);
  EXPECT_NE(compile_error(R"({"type":"string","maxLength":-1})").find("maxLength"), std::string::npos);
  EXPECT_EQ(compile_error(R"({"type":"string","description":"d","title":"t"})"), "");
}

TEST(JsonGrammar, DsmlToolCall) {
  const std::vector<DsmlTool> tools = {
      {"get_weather", Json::parse(R"({"type":"object","properties":{"location":{"type":"string","maxLength":8},
          "unit":{"type":"string","enum":["celsius","fahrenheit"]},"days":{"type":"integer"}},"required":["location"]})")},
      {"noop", Json()}};
  auto named = JsonGrammar::dsml_call(std::span<const DsmlTool>(tools).first(1), /*named=*/true);
  ASSERT_TRUE(named.ok()) << named.error().to_string();
  const std::string loc = "<｜DSML｜ parameter name=\"location\" string=\"true\">Paris</｜DSML｜ parameter>\n";
  const std::string days = "<｜DSML｜ parameter name=\"days\" string=\"false\">3</｜DSML｜ parameter>\n";
  const std::string end = "</｜DSML｜ invoke>\n</｜DSML｜ calls>";
  EXPECT_TRUE(whole(*named, loc + end));
  EXPECT_TRUE(whole(*named, loc + days + end));
  EXPECT_FALSE(prefix(*named, end));  // location is required
  EXPECT_FALSE(prefix(*named, "<｜DSML｜ parameter name=\"location\" string=\"false\">"));
  EXPECT_FALSE(prefix(*named, "<｜DSML｜ parameter name=\"location\" string=\"true\">Pa<b"));
  EXPECT_FALSE(prefix(*named, "<｜DSML｜ parameter name=\"location\" string=\"true\">Parisienne"));  // maxLength 8
  EXPECT_TRUE(prefix(*named, loc + "<｜DSML｜ parameter name=\"unit\" string=\"true\">celsius</"));
  EXPECT_FALSE(prefix(*named, loc + "<｜DSML｜ parameter name=\"unit\" string=\"true\">kelvin"));
  auto choice = JsonGrammar::dsml_call(tools, /*named=*/false);
  ASSERT_TRUE(choice.ok());
  EXPECT_TRUE(whole(*choice, "<｜DSML｜ invoke name=\"noop\">\n" + end));
  EXPECT_TRUE(whole(*choice, "<｜DSML｜ invoke name=\"get_weather\">\n" + loc + end));
  EXPECT_FALSE(prefix(*choice, "<｜DSML｜ invoke name=\"other\""));
  const std::vector<DsmlTool> bad = {{"f", Json::parse(R"({"type":"object","properties":{"x":{"minimum":1}}})")}};
  auto e = JsonGrammar::dsml_call(bad, true);
  ASSERT_FALSE(e.ok());
  EXPECT_NE(e.error().message().find("tools[0].function.parameters.properties.x.minimum"), std::string::npos);
}

// A vocabulary for the random tests: every single byte but a few, JSON punctuation pairs, words,
// digits, multi-byte UTF-8 pieces (whole and cut), and the DSML tags in pieces.
std::vector<std::string> test_vocab() {
  std::vector<std::string> v;
  v.push_back("");  // id 0: never allowed (the end id is 1)
  v.push_back("");
  for (int b = 1; b < 256; ++b) v.push_back(std::string(1, static_cast<char>(b)));
  for (const char* s : {"{\"",          "\":",          "\": ",
                        "\",",          "\", \"",       "\"}",
                        "},",           "}]",           "]}",
                        "[{",           "[[",           "]]",
                        "true",         "false",        "null",
                        "nu",           "ll",           "tr",
                        "ue",           "12",           "3.5",
                        "e-",           "-0",           "00",
                        "\\n",          "\\u00",        "\\\"",
                        "abc",          "name",         "na",
                        "me",           "age",          "tags",
                        "\"name",       "\"age\":",     "red",
                        "green",        "\xC3\xA9",     "\xC3",
                        "\xE2\x82\xAC", "\xE2\x82",     "\xF0\x9F\x98\x80",
                        "<｜DSML｜",    "｜DSML｜",     " parameter",
                        " name=\"",     "\" string=\"", "true\">",
                        "false\">",     "</",           "｜ parameter>\n",
                        "｜ invoke>\n", "｜ calls>",    "location",
                        "unit",         "celsius",      "Paris",
                        ">\n"})
    v.push_back(s);
  return v;
}

// Random walks: at each step the trie mask must equal the reference mask; a random allowed token
// is then taken (the end id when the document may end, with probability 1/4). Returns how many
// walks reached a complete document (a failed assertion returns early).
int random_walks(const JsonGrammar& g, const Json* schema, int walks, uint64_t seed) {
  const std::vector<std::string> vocab = test_vocab();
  const VocabTrie trie(vocab);
  const std::vector<int32_t> end_ids = {1};
  std::mt19937_64 rng(seed);
  std::vector<uint8_t> fast, ref;
  std::vector<JsonGrammar::Frame> arena;
  int ended = 0;
  for (int w = 0; w < walks; ++w) {
    JsonGrammar::State s = g.start();
    std::string text;
    for (int step = 0; step < 400; ++step) {
      const size_t nf = trie.mask(g, s, end_ids, &fast, &arena);
      const size_t nr = reference_mask(g, s, vocab, end_ids, &ref);
      EXPECT_EQ(nf, nr) << "after '" << text << "'";
      EXPECT_EQ(fast, ref) << "after '" << text << "'";
      EXPECT_GT(nf, 0u) << "dead end after '" << text << "'";
      if (fast != ref || nf == 0) return ended;
      std::vector<int32_t> ok;
      for (size_t i = 0; i < fast.size(); ++i)
        if (fast[i]) ok.push_back(static_cast<int32_t>(i));
      int32_t pick = ok[rng() % ok.size()];
      if (fast[1] && rng() % 4 == 0) pick = 1;
      if (pick == 1) {
        ++ended;
        // A complete document: it parses and (with a schema) validates.
        const Json v = Json::parse(text, nullptr, false);
        EXPECT_FALSE(v.is_discarded()) << text;
        if (schema && !v.is_discarded()) EXPECT_EQ(test::schema_violation(v, *schema), "") << text;
        break;
      }
      EXPECT_TRUE(g.advance(&s, vocab[static_cast<size_t>(pick)]));
      text += vocab[static_cast<size_t>(pick)];
    }
  }
  return ended;
}

// Issue 20 item 4, break-in finding 7: an enum/const value outside the schema's type is refused.
TEST(JsonGrammar, EnumValueOutsideTheTypeIsRefused) {
  EXPECT_NE(compile_error(R"({"type":"string","enum":[1,2]})").find("schema.enum[0]: value 1"), std::string::npos);
  EXPECT_NE(compile_error(R"({"type":"integer","const":"a"})").find("schema.const:"), std::string::npos);
  EXPECT_EQ(compile_error(R"({"type":["string","null"],"enum":["a",null]})"), "");
  EXPECT_EQ(compile_error(R"({"type":"number","enum":[1,2.5]})"), "");
}

// Break-in finding 1: the documented limits, each a 400 naming the path; a schema at the limits
// compiles and masks in bounded time (the binary search over sorted literals).
TEST(JsonGrammar, EnumAndSchemaLimits) {
  auto enum_of = [](size_t n, size_t width) {
    Json e = Json::array();
    for (size_t i = 0; i < n; ++i) {
      std::string v = "v" + std::to_string(i);
      v.resize(std::max(v.size(), width), 'x');
      e.push_back(v);
    }
    return Json{{"type", "object"},
                {"properties", {{"e", {{"enum", e}}}}},
                {"required", {"e"}},
                {"additionalProperties", false}};
  };
  EXPECT_TRUE(JsonGrammar::from_schema(enum_of(JsonGrammar::kMaxEnumValues, 1)).ok());
  auto over = JsonGrammar::from_schema(enum_of(JsonGrammar::kMaxEnumValues + 1, 1));
  ASSERT_FALSE(over.ok());
  EXPECT_NE(over.error().message().find("schema.properties.e.enum: more than 1000"), std::string::npos);
  auto bytes = JsonGrammar::from_schema(Json{{"const", std::string(JsonGrammar::kMaxEnumBytes, 'x')}});
  ASSERT_FALSE(bytes.ok());  // the quotes make it two bytes over
  EXPECT_NE(bytes.error().message().find("schema.const: enum/const values longer than"), std::string::npos);
  EXPECT_TRUE(JsonGrammar::from_schema(Json{{"const", std::string(JsonGrammar::kMaxEnumBytes - 2, 'x')}}).ok());
  Json deep = Json{{"type", "integer"}};
  for (int i = 0; i < JsonGrammar::kMaxDepth; ++i) deep = Json{{"type", "array"}, {"items", deep}};
  auto d = JsonGrammar::from_schema(deep);
  ASSERT_FALSE(d.ok());
  EXPECT_NE(d.error().message().find("nested deeper than"), std::string::npos);

  // At the cap: 1000 values of 30 bytes; every mask step must agree with the reference and the
  // whole document's masks must come fast (the scan was O(values) per trie node).
  const Json schema = enum_of(JsonGrammar::kMaxEnumValues, 30);
  const JsonGrammar g = JsonGrammar::from_schema(schema).value();
  std::vector<std::string> vocab = {"", ""};
  for (int b = 1; b < 256; ++b) vocab.push_back(std::string(1, static_cast<char>(b)));
  for (int i = 0; i < 2000; ++i) vocab.push_back("v" + std::to_string(i));
  for (const char* t : {"{\"e\":", "{\"", "e\":\"", "xxxx", "xx", "\"}", "\""}) vocab.push_back(t);
  const VocabTrie trie(vocab);
  const std::string doc = "{\"e\":" + Json(schema["properties"]["e"]["enum"][777]).dump() + "}";
  JsonGrammar::State st = g.start();
  std::vector<uint8_t> fast, ref;
  std::vector<JsonGrammar::Frame> arena;
  const int32_t end_id = 1;
  const auto t0 = std::chrono::steady_clock::now();
  for (size_t i = 0; i <= doc.size(); ++i) {
    trie.mask(g, st, std::span<const int32_t>(&end_id, 1), &fast, &arena);
    reference_mask(g, st, vocab, std::span<const int32_t>(&end_id, 1), &ref);
    ASSERT_EQ(fast, ref) << i;
    if (i < doc.size()) ASSERT_TRUE(g.advance(&st, doc.substr(i, 1))) << i;
  }
  EXPECT_TRUE(g.can_end(st));
  EXPECT_LT(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(), 5.0);
}

// Break-in issue 20 item 4 finding 4: objects are no longer limited to 62 properties (a 64-bit
// candidate mask) nor forced calls to 62 tools: 1000 of each compile and constrain correctly, the
// trie walk agrees with the reference, and one more is refused naming the limit.
TEST(JsonGrammar, ThousandPropertiesAndTools) {
  auto object_of = [](size_t n, size_t required_at) {
    Json props = Json::object();
    for (size_t i = 0; i < n; ++i) props["p" + std::to_string(i)] = Json{{"type", "integer"}};
    return Json{{"type", "object"},
                {"properties", props},
                {"required", {"p" + std::to_string(required_at)}},
                {"additionalProperties", false}};
  };
  const size_t n = JsonGrammar::kMaxProperties;
  const Json schema = object_of(n, 700);
  auto g = JsonGrammar::from_schema(schema);
  ASSERT_TRUE(g.ok()) << g.error().to_string();
  EXPECT_TRUE(whole(*g, R"({"p700":1})"));
  EXPECT_TRUE(whole(*g, R"({"p0":1,"p63":2,"p64":3,"p699":4,"p700":5,"p999":6})"));
  EXPECT_FALSE(whole(*g, R"({"p999":6})"));           // p700 is required
  EXPECT_FALSE(prefix(*g, R"({"p701")"));            // p700 comes first
  EXPECT_FALSE(prefix(*g, R"({"p64":1,"p63")"));     // declaration order
  EXPECT_FALSE(prefix(*g, R"({"p1000")"));           // not a property
  EXPECT_FALSE(prefix(*g, R"({"p7":1,"p7")"));       // no property twice
  EXPECT_TRUE(prefix(*g, R"({"p7":1,"p70)"));
  // The trie walk against the reference along a document that crosses property 64.
  std::vector<std::string> vocab = {"", ""};
  for (int b = 1; b < 256; ++b) vocab.push_back(std::string(1, static_cast<char>(b)));
  for (int i = 0; i < 1100; ++i) vocab.push_back("\"p" + std::to_string(i) + "\":");
  for (const char* t : {"{\"", "\"p", "p1", "p70", "0\":", ",\"", "00"}) vocab.push_back(t);
  const VocabTrie trie(vocab);
  const std::string doc = R"({"p3":1,"p64":2,"p650":3,"p700":4,"p998":5})";
  JsonGrammar::State st = g->start();
  std::vector<uint8_t> fast, ref;
  std::vector<JsonGrammar::Frame> arena;
  const int32_t end_id = 1;
  for (size_t i = 0; i <= doc.size(); ++i) {
    trie.mask(*g, st, std::span<const int32_t>(&end_id, 1), &fast, &arena);
    reference_mask(*g, st, vocab, std::span<const int32_t>(&end_id, 1), &ref);
    ASSERT_EQ(fast, ref) << i;
    if (i < doc.size()) {
      ASSERT_TRUE(g->advance(&st, doc.substr(i, 1))) << i;
    }
  }
  EXPECT_TRUE(g->can_end(st));
  auto over = JsonGrammar::from_schema(object_of(n + 1, 0));
  ASSERT_FALSE(over.ok());
  EXPECT_NE(over.error().message().find("schema.properties: more than 1000 properties in one object"), std::string::npos)
      << over.error().message();

  // A forced call ("required") among 1000 tools; each with two optional parameters.
  std::vector<DsmlTool> tools;
  for (size_t i = 0; i < JsonGrammar::kMaxTools; ++i)
    tools.push_back({"tool_" + std::to_string(i),
                     Json::parse(R"({"type":"object","properties":{"a":{"type":"integer"},"b":{"type":"string"}}})")});
  auto choice = JsonGrammar::dsml_call(tools, /*named=*/false);
  ASSERT_TRUE(choice.ok()) << choice.error().to_string();
  const std::string end = "</｜DSML｜ invoke>\n</｜DSML｜ calls>";
  const std::string b = "<｜DSML｜ parameter name=\"b\" string=\"true\">x</｜DSML｜ parameter>\n";
  EXPECT_TRUE(whole(*choice, "<｜DSML｜ invoke name=\"tool_0\">\n" + end));
  EXPECT_TRUE(whole(*choice, "<｜DSML｜ invoke name=\"tool_999\">\n" + b + end));
  EXPECT_TRUE(whole(*choice, "<｜DSML｜ invoke name=\"tool_99\">\n" + end));
  EXPECT_FALSE(prefix(*choice, "<｜DSML｜ invoke name=\"tool_1000\""));
  EXPECT_FALSE(prefix(*choice, "<｜DSML｜ invoke name=\"tool_5\">\n" + b + "<｜DSML｜ parameter name=\"a\""));
  tools.push_back({"one_more", Json()});
  auto too_many = JsonGrammar::dsml_call(tools, /*named=*/false);
  ASSERT_FALSE(too_many.ok());
  EXPECT_NE(too_many.error().message().find("more than 1000 tools"), std::string::npos) << too_many.error().message();
}

// Break-in finding 2: in a DSML call a JSON value never holds '<' raw, so an enum value with the
// closing markup cannot end its parameter early; it is written with the \u003c escape.
TEST(JsonGrammar, DsmlJsonValuesNeverHoldAClosingTag) {
  const std::vector<DsmlTool> tools = {
      {"f", Json::parse(R"({"type":"object","properties":{"t":{"type":"string","enum":["x</｜DSML｜parameter>y"]},
          "o":{"type":"object","properties":{"s":{"type":"string"}},"required":["s"],"additionalProperties":false}},
          "required":["t","o"],"additionalProperties":false})")}};
  auto g = JsonGrammar::dsml_call(tools, /*named=*/true);
  ASSERT_TRUE(g.ok()) << g.error().to_string();
  const std::string t_open = "<｜DSML｜ parameter name=\"t\" string=\"false\">";
  EXPECT_FALSE(prefix(*g, t_open + "\"x<"));
  EXPECT_TRUE(prefix(*g, t_open + "\"x\\u003c/｜DSML｜parameter>y\"</｜DSML｜ parameter>\n"));
  const std::string o_open = "<｜DSML｜ parameter name=\"o\" string=\"false\">";
  const std::string t_done = t_open + "\"x\\u003c/｜DSML｜parameter>y\"</｜DSML｜ parameter>\n";
  EXPECT_FALSE(prefix(*g, t_done + o_open + "{\"s\":\"a<"));
  const std::string close = "</｜DSML｜ parameter>\n</｜DSML｜ invoke>\n</｜DSML｜ calls>";
  EXPECT_TRUE(whole(*g, t_done + o_open + "{\"s\":\"a\\u003c\"}" + close));
  // Outside DSML, '<' stays as it is.
  EXPECT_TRUE(whole(compile(R"({"enum":["a<b"]})"), "\"a<b\""));
}

TEST(TokenMask, TrieWalkMatchesReferenceOnSchemas) {
  const char* schemas[] = {
      R"({"type":"object","properties":{"name":{"type":"string","maxLength":6},"age":{"type":"integer"},
          "tags":{"type":"array","items":{"enum":["red","green"]},"maxItems":3}},
          "required":["name","age"],"additionalProperties":false})",
      R"({"type":"array","items":{"type":["number","null","boolean"]},"maxItems":4})",
      R"({"type":"object","properties":{"o":{"type":"object","properties":{"s":{"type":"string","maxLength":3}},
          "required":["s"],"additionalProperties":false}},"required":["o"],"additionalProperties":false})",
  };
  uint64_t seed = 1;
  for (const char* sc : schemas) {
    const Json schema = Json::parse(sc);
    const JsonGrammar g = compile(sc);
    EXPECT_GT(random_walks(g, &schema, 20, seed++), 0) << sc;  // some walks reached a complete document
  }
}

TEST(TokenMask, TrieWalkMatchesReferenceOnAnyObjectAndDsml) {
  random_walks(JsonGrammar::any_object(), nullptr, 10, 7);
  const std::vector<DsmlTool> tools = {{"get_weather", Json::parse(R"({"type":"object","properties":{
      "location":{"type":"string","maxLength":5},"unit":{"enum":["celsius","fahrenheit"]}},"required":["location"]})")}};
  auto g = JsonGrammar::dsml_call(tools, true);
  ASSERT_TRUE(g.ok());
  // DSML bodies are not JSON: compare the masks along random walks without parsing the result.
  const std::vector<std::string> vocab = test_vocab();
  const VocabTrie trie(vocab);
  std::mt19937_64 rng(3);
  std::vector<uint8_t> fast, ref;
  std::vector<JsonGrammar::Frame> arena;
  for (int w = 0; w < 10; ++w) {
    JsonGrammar::State s = g->start();
    for (int step = 0; step < 300 && !s.frames.empty(); ++step) {
      trie.mask(*g, s, std::vector<int32_t>{1}, &fast, &arena);
      reference_mask(*g, s, vocab, std::vector<int32_t>{1}, &ref);
      ASSERT_EQ(fast, ref);
      std::vector<int32_t> ok;
      for (size_t i = 2; i < fast.size(); ++i)
        if (fast[i]) ok.push_back(static_cast<int32_t>(i));
      if (ok.empty()) break;
      ASSERT_TRUE(g->advance(&s, vocab[static_cast<size_t>(ok[rng() % ok.size()])]));
    }
  }
}

TEST(TokenMask, ConstraintMasksLogitsAndEndsWithEos) {
  const std::vector<std::string> vocab = {"", "", "{", "}", "{}", "x", "\"a\":1"};
  auto g = std::make_shared<const JsonGrammar>(
      compile(R"({"type":"object","properties":{"a":{"const":1}},"additionalProperties":false})"));
  GrammarConstraint c(g, std::make_shared<const VocabTrie>(vocab), {1});
  std::vector<float> logits(vocab.size(), 0.0f);
  EXPECT_EQ(c.apply(logits), 2u);  // "{" and "{}"
  EXPECT_EQ(logits[2], 0.0f);
  EXPECT_EQ(logits[4], 0.0f);
  EXPECT_TRUE(std::isinf(logits[1]) && std::isinf(logits[3]) && std::isinf(logits[5]));
  c.accept(4);
  std::fill(logits.begin(), logits.end(), 0.0f);
  EXPECT_EQ(c.apply(logits), 1u);  // only the end id
  EXPECT_EQ(logits[1], 0.0f);
  // Off until the activation id.
  GrammarConstraint later(g, std::make_shared<const VocabTrie>(vocab), {1}, /*activate_after=*/5);
  std::fill(logits.begin(), logits.end(), 0.0f);
  EXPECT_EQ(later.apply(logits), vocab.size());
  later.accept(5);
  EXPECT_EQ(later.apply(logits), 2u);
  // Issue 20 item 4 finding 2: while waiting for the activation id (reasoning), the stop ids are
  // masked, so a generation cannot end before its answer has started.
  GrammarConstraint waiting(g, std::make_shared<const VocabTrie>(vocab), {1}, /*activate_after=*/5, {1, 0});
  std::fill(logits.begin(), logits.end(), 0.0f);
  EXPECT_EQ(waiting.apply(logits), vocab.size() - 2);
  EXPECT_TRUE(std::isinf(logits[0]) && std::isinf(logits[1]));
  EXPECT_EQ(logits[5], 0.0f);
  waiting.accept(3);
  std::fill(logits.begin(), logits.end(), 0.0f);
  EXPECT_EQ(waiting.apply(logits), vocab.size() - 2);
  waiting.accept(5);
  std::fill(logits.begin(), logits.end(), 0.0f);
  EXPECT_EQ(waiting.apply(logits), 2u);  // the grammar: "{" and "{}"
  waiting.accept(4);
  std::fill(logits.begin(), logits.end(), 0.0f);
  EXPECT_EQ(waiting.apply(logits), 1u);  // complete: the end id only
  EXPECT_EQ(logits[1], 0.0f);
}

// The constraint's mask cache (JsonGrammar::cache_key): along random walks through schemas with
// long and bounded strings, every mask it applies equals the reference mask of its state, and
// inside strings it reuses masks instead of walking the trie.
TEST(TokenMask, CachedMasksEqualTheReference) {
  const std::vector<std::string> vocab = test_vocab();
  auto trie = std::make_shared<const VocabTrie>(vocab);
  const char* schemas[] = {
      R"({"type":"object","properties":{"a":{"type":"string"},"b":{"type":"string","minLength":3,"maxLength":20}},
          "required":["a","b"],"additionalProperties":false})",
      R"({"type":"array","items":{"type":"string","maxLength":5},"maxItems":4})"};
  std::mt19937_64 rng(11);
  int64_t reuses = 0;
  for (const char* sc : schemas) {
    auto g = std::make_shared<const JsonGrammar>(compile(sc));
    for (int w = 0; w < 10; ++w) {
      GrammarConstraint c(g, trie, {1});
      for (int step = 0; step < 200; ++step) {
        std::vector<float> logits(vocab.size(), 0.0f);
        const size_t n = c.apply(logits);
        std::vector<uint8_t> ref;
        ASSERT_EQ(n, reference_mask(*g, c.state(), vocab, std::vector<int32_t>{1}, &ref));
        std::vector<int32_t> ok;
        for (size_t i = 0; i < vocab.size(); ++i) {
          ASSERT_EQ(!std::isinf(logits[i]), ref[i] != 0) << "id " << i << " step " << step;
          if (ref[i] && i != 1) ok.push_back(static_cast<int32_t>(i));
        }
        if (ok.empty() || (ref[1] && rng() % 4 == 0)) break;
        c.accept(ok[rng() % ok.size()]);
      }
      reuses += c.reuses();
    }
  }
  EXPECT_GT(reuses, 0) << "the cache was never used: the test shows nothing";
}

}  // namespace
}  // namespace strata::runtime
