// chat/output_parser.h: the parse examples of chat-and-api.md §5, hold-back of partial markers and
// UTF-8, streamed tool-call arguments, stop strings, finish reasons and the §5 decisions.
#include "chat/output_parser.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <string>
#include <vector>

#include "tests/chat/v41_tokenizer.h"

namespace strata::chat {
namespace {

#define REQUIRE_TOKENIZER()                                                                    \
  if (testing::v41_tokenizer() == nullptr) GTEST_SKIP() << "fixture missing: " << testing::v3_tokenizer_path()

constexpr int32_t kEosId = 1;

// Everything a stream showed, put together.
struct Seen {
  std::string reasoning, content;
  std::map<int, std::string> args;  // index -> concatenated fragments
  std::map<int, std::string> names;
  std::vector<Delta> deltas;
  bool ended = false;
};

void collect(const std::vector<Delta>& ds, Seen* s) {
  for (const Delta& d : ds) {
    EXPECT_FALSE(d.text.empty() && d.kind != Delta::Kind::kToolCallStart) << "empty delta";
    switch (d.kind) {
      case Delta::Kind::kReasoning: s->reasoning += d.text; break;
      case Delta::Kind::kContent: s->content += d.text; break;
      case Delta::Kind::kToolCallStart:
        EXPECT_EQ(s->names.count(d.index), 0u);
        EXPECT_EQ(d.id.rfind("call_", 0), 0u);
        s->names[d.index] = d.name;
        break;
      case Delta::Kind::kToolCallArguments:
        EXPECT_EQ(s->names.count(d.index), 1u) << "arguments before the call start";
        s->args[d.index] += d.text;
        break;
    }
    s->deltas.push_back(d);
  }
}

// Feeds `text` in pieces of `step` bytes (the hold-back must make the result independent of it),
// then EOS unless `eos` is false (then finish(length)).
Seen run(OutputParser& p, std::string_view text, size_t step, bool eos = true) {
  Seen s;
  for (size_t i = 0; i < text.size() && !s.ended; i += step) {
    std::vector<Delta> out;
    s.ended = p.push_text(text.substr(i, step), &out);
    collect(out, &s);
  }
  std::vector<Delta> out;
  if (!s.ended) {
    if (eos) {
      s.ended = p.push_token(kEosId, &out);
      EXPECT_TRUE(s.ended);
    } else {
      p.finish(/*length=*/true, &out);
    }
  }
  collect(out, &s);
  EXPECT_TRUE(p.done());
  return s;
}

ParserOptions opts(ParseStart start, bool tools) {
  ParserOptions o;
  o.start = start;
  o.tools = tools;
  return o;
}

const size_t kSteps[] = {1, 2, 3, 5, 7, 1000};

TEST(OutputParser, ReasoningThenContent) {
  REQUIRE_TOKENIZER();
  for (const size_t step : kSteps) {
    OutputParser p(*testing::v41_tokenizer(), opts(ParseStart::kReasoning, true));
    const Seen s = run(p, "The tool reports 18 C, cloudy.</think>It is 18 C and cloudy in Paris.", step);
    EXPECT_EQ(s.reasoning, "The tool reports 18 C, cloudy.");
    EXPECT_EQ(s.content, "It is 18 C and cloudy in Paris.");
    EXPECT_EQ(p.reasoning(), s.reasoning);
    EXPECT_EQ(p.content(), s.content);
    EXPECT_TRUE(p.tool_calls().empty());
    EXPECT_EQ(p.finish_reason(), FinishReason::kStop);
  }
}

TEST(OutputParser, ToolCallAfterReasoning) {
  REQUIRE_TOKENIZER();
  const std::string text =
      "Need data.</think>\n\n<｜DSML｜ calls>\n<｜DSML｜ invoke name=\"get_weather\">\n<｜DSML｜ parameter "
      "name=\"location\" string=\"true\">Paris</｜DSML｜ parameter>\n<｜DSML｜ parameter name=\"days\" "
      "string=\"false\">3</｜DSML｜ parameter>\n</｜DSML｜ invoke>\n</｜DSML｜ calls>";
  for (const size_t step : kSteps) {
    OutputParser p(*testing::v41_tokenizer(), opts(ParseStart::kReasoning, true));
    const Seen s = run(p, text, step);
    EXPECT_TRUE(s.ended);
    EXPECT_EQ(s.reasoning, "Need data.");
    EXPECT_EQ(s.content, "");
    ASSERT_EQ(p.tool_calls().size(), 1u);
    EXPECT_EQ(p.tool_calls()[0].name, "get_weather");
    EXPECT_EQ(p.tool_calls()[0].arguments, R"({"location": "Paris", "days": 3})");
    EXPECT_EQ(s.args.at(0), p.tool_calls()[0].arguments);
    EXPECT_EQ(s.names.at(0), "get_weather");
    EXPECT_EQ(p.finish_reason(), FinishReason::kToolCalls);
  }
  // One fragment per completed parameter, then the closing brace.
  OutputParser p(*testing::v41_tokenizer(), opts(ParseStart::kReasoning, true));
  const Seen s = run(p, text, 1);
  std::vector<std::string> frags;
  for (const Delta& d : s.deltas)
    if (d.kind == Delta::Kind::kToolCallArguments) frags.push_back(d.text);
  EXPECT_EQ(frags, (std::vector<std::string>{R"({"location": "Paris")", R"(, "days": 3)", "}"}));
}

TEST(OutputParser, LengthInsideReasoning) {
  REQUIRE_TOKENIZER();
  OutputParser p(*testing::v41_tokenizer(), opts(ParseStart::kReasoning, false));
  const Seen s = run(p, "Let me think about", 4, /*eos=*/false);
  EXPECT_EQ(s.reasoning, "Let me think about");
  EXPECT_EQ(p.content(), "");
  EXPECT_EQ(p.finish_reason(), FinishReason::kLength);
}

TEST(OutputParser, PartialMarkersNeverLeak) {
  REQUIRE_TOKENIZER();
  OutputParser p(*testing::v41_tokenizer(), opts(ParseStart::kReasoning, true));
  std::vector<Delta> out;
  p.push_text("abc</thi", &out);
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(out[0].text, "abc");  // "</thi" held back
  out.clear();
  p.push_text("nk>x\n", &out);  // "\n" could start "\n\n<｜DSML｜ calls>"
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(out[0].kind, Delta::Kind::kContent);
  EXPECT_EQ(out[0].text, "x");
  out.clear();
  p.push_text("\n<｜DS", &out);
  EXPECT_TRUE(out.empty());
  p.push_text("ML｜ calls>", &out);
  EXPECT_TRUE(out.empty());
  EXPECT_EQ(p.content(), "x");  // the "\n\n" belongs to the block
}

TEST(OutputParser, TrailingWhitespaceIsKept) {
  REQUIRE_TOKENIZER();
  OutputParser p(*testing::v41_tokenizer(), opts(ParseStart::kContent, true));
  const Seen s = run(p, "Hi \n\n", 1);
  EXPECT_EQ(s.content, "Hi \n\n");
  EXPECT_EQ(p.finish_reason(), FinishReason::kStop);
}

TEST(OutputParser, ContentBeforeToolBlock) {
  REQUIRE_TOKENIZER();
  OutputParser p(*testing::v41_tokenizer(), opts(ParseStart::kContent, true));
  const Seen s = run(p,
                     "Checking.\n\n<｜DSML｜ calls>\n<｜DSML｜ invoke name=\"a\">\n</｜DSML｜ invoke>\n<｜DSML｜ invoke "
                     "name=\"b\">\n<｜DSML｜ parameter name=\"q\" string=\"true\">x \"y\"\nz</｜DSML｜ "
                     "parameter>\n</｜DSML｜ invoke>\n</｜DSML｜ calls>",
                     3);
  EXPECT_EQ(s.content, "Checking.");
  ASSERT_EQ(p.tool_calls().size(), 2u);
  EXPECT_EQ(p.tool_calls()[0].arguments, "{}");
  EXPECT_EQ(p.tool_calls()[1].arguments, R"({"q": "x \"y\"\nz"})");
  EXPECT_EQ(s.args.at(1), p.tool_calls()[1].arguments);
  EXPECT_NE(p.tool_calls()[0].id, p.tool_calls()[1].id);
  EXPECT_EQ(p.finish_reason(), FinishReason::kToolCalls);
}

TEST(OutputParser, ParameterValueForms) {
  REQUIRE_TOKENIZER();
  OutputParser p(*testing::v41_tokenizer(), opts(ParseStart::kContent, true));
  run(p,
      "<｜DSML｜ calls><｜DSML｜ invoke name=\"f\"><｜DSML｜ parameter name=\"s\">no flag</｜DSML｜ parameter>"
      "<｜DSML｜ parameter name=\"o\" string=\"false\">{\"b\":[1,2.50],\"a\":null}</｜DSML｜ parameter>"
      "<｜DSML｜ parameter name=\"bad\" string=\"false\">{oops</｜DSML｜ parameter>"
      "<｜DSML｜ parameter name=\"s\" string=\"true\">again</｜DSML｜ parameter></｜DSML｜ invoke></｜DSML｜ calls>",
      2);
  ASSERT_EQ(p.tool_calls().size(), 1u);
  // string missing = "true"; JSON values re-serialized json.dumps style; invalid JSON kept as a
  // string; a duplicate key is kept in order (JSON parsers take the last value).
  EXPECT_EQ(p.tool_calls()[0].arguments,
            R"({"s": "no flag", "o": {"b": [1, 2.5], "a": null}, "bad": "{oops", "s": "again"})");
  EXPECT_EQ(Json::parse(p.tool_calls()[0].arguments)["s"], "again");
}

// A string="false" value nested deeper than kMaxJsonNesting is kept as the raw text (a JSON string),
// never handed to the recursive serializer.
TEST(OutputParser, DeeplyNestedValueStaysText) {
  REQUIRE_TOKENIZER();
  const std::string deep = std::string(100000, '[') + std::string(100000, ']');
  OutputParser p(*testing::v41_tokenizer(), opts(ParseStart::kContent, true));
  run(p, "<｜DSML｜ calls><｜DSML｜ invoke name=\"f\"><｜DSML｜ parameter name=\"v\" string=\"false\">" + deep +
             "</｜DSML｜ parameter></｜DSML｜ invoke></｜DSML｜ calls>",
      4096);
  ASSERT_EQ(p.tool_calls().size(), 1u);
  EXPECT_EQ(p.tool_calls()[0].arguments, "{\"v\": \"" + deep + "\"}");
}

// A long argument value (a file an agent writes) split into many small pieces: the closing-tag
// search only looks at new bytes, so this stays linear (quadratic would take minutes here).
TEST(OutputParser, LongParameterValue) {
  REQUIRE_TOKENIZER();
  std::string value;
  for (int i = 0; value.size() < 400000; ++i) value += "line " + std::to_string(i) + " </｜DSML｜ param\n";
  OutputParser p(*testing::v41_tokenizer(), opts(ParseStart::kContent, true));
  const Seen s = run(p, "<｜DSML｜ calls><｜DSML｜ invoke name=\"write\"><｜DSML｜ parameter name=\"text\" string=\"true\">" +
                            value + "</｜DSML｜ parameter></｜DSML｜ invoke></｜DSML｜ calls>",
                     5);
  ASSERT_EQ(p.tool_calls().size(), 1u);
  EXPECT_EQ(Json::parse(p.tool_calls()[0].arguments)["text"], value);
  EXPECT_EQ(s.args.at(0), p.tool_calls()[0].arguments);
}

TEST(OutputParser, V4SpellingsAccepted) {
  REQUIRE_TOKENIZER();
  OutputParser p(*testing::v41_tokenizer(), opts(ParseStart::kContent, true));
  const Seen s = run(p,
                     "\n\n<｜DSML｜tool_calls>\n<｜DSML｜invoke name=\"f\">\n<｜DSML｜parameter name=\"k\" "
                     "string=\"false\">true</｜DSML｜parameter>\n</｜DSML｜invoke>\n</｜DSML｜tool_calls>",
                     4);
  EXPECT_EQ(s.content, "");
  ASSERT_EQ(p.tool_calls().size(), 1u);
  EXPECT_EQ(p.tool_calls()[0].arguments, R"({"k": true})");
}

TEST(OutputParser, UnparseableBlockBecomesContent) {
  REQUIRE_TOKENIZER();
  for (const size_t step : {size_t{1}, size_t{1000}}) {
    OutputParser p(*testing::v41_tokenizer(), opts(ParseStart::kContent, true));
    const std::string block = "\n\n<｜DSML｜ calls>\ngarbage here</｜DSML｜ calls>";
    const Seen s = run(p, "A" + block + " tail", step);
    EXPECT_EQ(s.content, "A" + block + " tail");
    EXPECT_TRUE(p.tool_calls().empty());
    EXPECT_EQ(p.finish_reason(), FinishReason::kStop);
  }
  // A missing name.
  OutputParser q(*testing::v41_tokenizer(), opts(ParseStart::kContent, true));
  const Seen s = run(q, "<｜DSML｜ calls><｜DSML｜ invoke name=\"\">", 1000);
  EXPECT_EQ(s.content, "<｜DSML｜ calls><｜DSML｜ invoke name=\"\">");
  EXPECT_TRUE(q.tool_calls().empty());
}

TEST(OutputParser, WithoutToolsDsmlIsContent) {
  REQUIRE_TOKENIZER();
  OutputParser p(*testing::v41_tokenizer(), opts(ParseStart::kContent, false));
  const std::string text = "x\n\n<｜DSML｜ calls>\n<｜DSML｜ invoke name=\"f\">\n</｜DSML｜ invoke>\n</｜DSML｜ calls>";
  const Seen s = run(p, text, 3);
  EXPECT_EQ(s.content, text);
  EXPECT_TRUE(p.tool_calls().empty());
}

// DECISION (§5): a tool block inside unclosed reasoning ends the reasoning and is parsed.
TEST(OutputParser, ToolBlockInsideReasoning) {
  REQUIRE_TOKENIZER();
  OutputParser p(*testing::v41_tokenizer(), opts(ParseStart::kReasoning, true));
  const Seen s = run(p, "thinking\n\n<｜DSML｜ calls>\n<｜DSML｜ invoke name=\"f\">\n</｜DSML｜ invoke>\n</｜DSML｜ calls>", 2);
  EXPECT_EQ(s.reasoning, "thinking");
  ASSERT_EQ(p.tool_calls().size(), 1u);
  EXPECT_EQ(p.finish_reason(), FinishReason::kToolCalls);
}

TEST(OutputParser, StopStringsInContentOnly) {
  REQUIRE_TOKENIZER();
  for (const size_t step : kSteps) {
    ParserOptions o = opts(ParseStart::kReasoning, true);
    o.stop = {"STOP", "zz"};
    OutputParser p(*testing::v41_tokenizer(), o);
    const Seen s = run(p, "no zz here</think>abc STOP def", step);
    EXPECT_TRUE(s.ended);
    EXPECT_EQ(s.reasoning, "no zz here");
    EXPECT_EQ(s.content, "abc ");
    EXPECT_EQ(p.finish_reason(), FinishReason::kStop);
    EXPECT_EQ(p.stop_sequence(), "STOP");  // the one that matched (Anthropic's stop_sequence)
  }
  // An end without a stop string names none.
  OutputParser eos(*testing::v41_tokenizer(), opts(ParseStart::kContent, false));
  run(eos, "abc", 1);
  EXPECT_EQ(eos.finish_reason(), FinishReason::kStop);
  EXPECT_EQ(eos.stop_sequence(), "");
  // Not in tool arguments either.
  ParserOptions o = opts(ParseStart::kContent, true);
  o.stop = {"Paris"};
  OutputParser p(*testing::v41_tokenizer(), o);
  run(p, "<｜DSML｜ calls><｜DSML｜ invoke name=\"f\"><｜DSML｜ parameter name=\"c\">Paris</｜DSML｜ parameter></｜DSML｜ invoke></｜DSML｜ calls>", 1);
  ASSERT_EQ(p.tool_calls().size(), 1u);
  EXPECT_EQ(p.tool_calls()[0].arguments, R"({"c": "Paris"})");
}

TEST(OutputParser, StrayThinkTagsInContent) {
  REQUIRE_TOKENIZER();
  OutputParser p(*testing::v41_tokenizer(), opts(ParseStart::kContent, false));
  EXPECT_EQ(run(p, "a</think>b", 1).content, "ab");
  OutputParser q(*testing::v41_tokenizer(), opts(ParseStart::kContent, false));
  const Seen s = run(q, "<think>r</think>c", 1);
  EXPECT_EQ(s.reasoning, "r");
  EXPECT_EQ(s.content, "c");
  OutputParser late(*testing::v41_tokenizer(), opts(ParseStart::kContent, false));
  EXPECT_EQ(run(late, "x<think>y", 1).content, "x<think>y");  // only at the very start
}

TEST(OutputParser, LengthInsideToolCallKeepsCompleteCalls) {
  REQUIRE_TOKENIZER();
  OutputParser p(*testing::v41_tokenizer(), opts(ParseStart::kContent, true));
  const Seen s = run(p,
                     "<｜DSML｜ calls><｜DSML｜ invoke name=\"a\"></｜DSML｜ invoke><｜DSML｜ invoke name=\"b\"><｜DSML｜ "
                     "parameter name=\"x\">1</｜DSML｜ parameter><｜DSML｜ parameter name=\"y\">2",
                     5, /*eos=*/false);
  ASSERT_EQ(p.tool_calls().size(), 1u);
  EXPECT_EQ(p.tool_calls()[0].name, "a");
  EXPECT_EQ(s.names.size(), 2u);              // b was started on the stream
  EXPECT_EQ(s.args.at(1), R"({"x": "1")");   // and stays incomplete there
  EXPECT_EQ(p.finish_reason(), FinishReason::kLength);
}

// Review finding 5 (issue 20): max_tokens cutting the tool-block start marker must not leak its
// first bytes into the text; the answer ends with finish_reason length and no call.
TEST(OutputParser, LengthInsideToolStartLeaksNoMarkup) {
  REQUIRE_TOKENIZER();
  for (const char* cut : {"Sure.\n\n<｜DSML｜ ca", "Sure.\n\n<", "Sure.\n\n", "Sure.<｜DS"}) {
    for (const size_t step : kSteps) {
      OutputParser p(*testing::v41_tokenizer(), opts(ParseStart::kContent, true));
      const Seen s = run(p, cut, step, /*eos=*/false);
      EXPECT_EQ(s.content, "Sure.") << cut;
      EXPECT_EQ(p.content(), "Sure.") << cut;
      EXPECT_TRUE(p.tool_calls().empty());
      EXPECT_EQ(p.finish_reason(), FinishReason::kLength);
    }
    OutputParser r(*testing::v41_tokenizer(), opts(ParseStart::kReasoning, true));
    const Seen s = run(r, std::string("think") + cut, 3, /*eos=*/false);
    EXPECT_EQ(s.reasoning, "thinkSure.") << cut;
  }
  // Without tools nothing is markup: the same text is content.
  OutputParser q(*testing::v41_tokenizer(), opts(ParseStart::kContent, false));
  EXPECT_EQ(run(q, "Sure.\n\n<｜DSML｜ ca", 2, /*eos=*/false).content, "Sure.\n\n<｜DSML｜ ca");
}

TEST(OutputParser, ParallelToolCallsFalseEndsAfterFirst) {
  REQUIRE_TOKENIZER();
  ParserOptions o = opts(ParseStart::kContent, true);
  o.parallel_tool_calls = false;
  OutputParser p(*testing::v41_tokenizer(), o);
  const Seen s = run(p, "<｜DSML｜ calls><｜DSML｜ invoke name=\"a\"></｜DSML｜ invoke><｜DSML｜ invoke name=\"b\"></｜DSML｜ invoke>", 1);
  EXPECT_TRUE(s.ended);
  ASSERT_EQ(p.tool_calls().size(), 1u);
  EXPECT_EQ(p.finish_reason(), FinishReason::kToolCalls);
}

TEST(OutputParser, ForcedNamedToolStartsInsideInvoke) {
  REQUIRE_TOKENIZER();
  ParserOptions o = opts(ParseStart::kTools, true);
  o.forced_tool = "get_weather";
  o.make_call_id = [] { return std::string("call_fixed"); };
  OutputParser p(*testing::v41_tokenizer(), o);
  const Seen s = run(p, "<｜DSML｜ parameter name=\"location\" string=\"true\">Oslo</｜DSML｜ parameter>\n</｜DSML｜ invoke>\n</｜DSML｜ calls>", 4);
  ASSERT_EQ(p.tool_calls().size(), 1u);
  EXPECT_EQ(p.tool_calls()[0].id, "call_fixed");
  EXPECT_EQ(p.tool_calls()[0].name, "get_weather");
  EXPECT_EQ(p.tool_calls()[0].arguments, R"({"location": "Oslo"})");
  EXPECT_EQ(s.content, "");
  EXPECT_EQ(p.finish_reason(), FinishReason::kToolCalls);
}

// Break-in finding 5 (issue 20): max_tokens cutting a forced call right after a token that holds
// only the first byte of a multi-byte character (the '｜' of a DSML tag): no raw markup and no
// U+FFFD in content, finish_reason length, the open call dropped.
TEST(OutputParser, LengthAfterAPartialCharacterInsideAForcedCallLeaksNothing) {
  REQUIRE_TOKENIZER();
  const tokenizer::Tokenizer& tok = *testing::v41_tokenizer();
  const auto lead = tok.token_to_id("\u00ef");  // byte-level BPE: the token of the single byte 0xEF
  ASSERT_TRUE(lead.has_value());
  ASSERT_EQ(tok.token_bytes(*lead), "\xef");
  for (const char* before : {"<｜DSML｜ parameter name=\"location\" string=\"true\">Oslo</｜DSML｜ parameter>\n<",
                             "<｜DSML｜ parameter name=\"location\" string=\"true\">Os", ""}) {
    ParserOptions o = opts(ParseStart::kTools, true);
    o.forced_tool = "get_weather";
    OutputParser p(tok, o);
    std::vector<Delta> out;
    p.push_text(before, &out);
    p.push_token(*lead, &out);
    p.finish(/*length=*/true, &out);
    Seen s;
    collect(out, &s);
    EXPECT_EQ(s.content, "") << before;
    EXPECT_EQ(p.content(), "") << before;
    EXPECT_TRUE(p.tool_calls().empty());
    EXPECT_EQ(p.finish_reason(), FinishReason::kLength);
  }
}

TEST(OutputParser, EosInsideBlockWithoutCallFallsBackToContent) {
  REQUIRE_TOKENIZER();
  OutputParser p(*testing::v41_tokenizer(), opts(ParseStart::kContent, true));
  const Seen s = run(p, "\n\n<｜DSML｜ calls>\n<｜DSML｜ inv", 3);
  EXPECT_EQ(s.content, "\n\n<｜DSML｜ calls>\n<｜DSML｜ inv");
  EXPECT_EQ(p.finish_reason(), FinishReason::kStop);
}

TEST(OutputParser, TokensUtf8AndEndIds) {
  REQUIRE_TOKENIZER();
  const auto& tok = *testing::v41_tokenizer();
  // Byte-level tokens of a 4-byte emoji and CJK text arrive in pieces; no piece is ever split.
  const std::string text = "天气😀晴";
  const std::vector<int32_t> ids = tok.encode(text, false);
  OutputParser p(tok, opts(ParseStart::kContent, false));
  std::string seen;
  for (const int32_t id : ids) {
    std::vector<Delta> out;
    EXPECT_FALSE(p.push_token(id, &out));
    for (const Delta& d : out) {
      EXPECT_EQ(d.text.find("\xEF\xBF\xBD"), std::string::npos) << "U+FFFD in a delta";
      seen += d.text;
    }
  }
  // A stray <｜User｜> ends generation and is not shown.
  std::vector<Delta> out;
  EXPECT_TRUE(p.push_token(*tok.token_to_id("<｜User｜>"), &out));
  for (const Delta& d : out) seen += d.text;
  EXPECT_EQ(seen, text);
  EXPECT_EQ(p.finish_reason(), FinishReason::kStop);
  // </think> as its own token id closes reasoning.
  OutputParser r(tok, opts(ParseStart::kReasoning, false));
  std::vector<Delta> o2;
  for (const int32_t id : tok.encode("why</think>so", true)) r.push_token(id, &o2);
  r.finish(false, &o2);
  EXPECT_EQ(r.reasoning(), "why");
  EXPECT_EQ(r.content(), "so");
  EXPECT_FALSE(r.in_reasoning());
}

// Break-in issue 20 item 4, findings 1 and 3: only the `</think>` token ends reasoning (the grammar
// of a constrained answer starts after that token too); `</think>` written in ordinary text tokens
// is text, in reasoning and in content; a stray `</think>` token in content is still dropped.
TEST(OutputParser, ThinkCloseTextIsTextOnlyTheTokenEndsReasoning) {
  REQUIRE_TOKENIZER();
  const auto& tok = *testing::v41_tokenizer();
  const int32_t close = *tok.token_to_id("</think>");
  auto feed = [&](OutputParser& p, const std::vector<int32_t>& ids, std::string* streamed) {
    for (const int32_t id : ids) {
      std::vector<Delta> out;
      p.push_token(id, &out);
      for (const Delta& d : out) *streamed += d.text;
    }
    std::vector<Delta> out;
    p.push_token(kEosId, &out);
    for (const Delta& d : out) *streamed += d.text;
  };
  {  // content (thinking off): the answer "</think>" as a JSON string stays whole
    const std::vector<int32_t> ids = tok.encode("\"</think>\"", /*allow_special=*/false);
    ASSERT_EQ(std::count(ids.begin(), ids.end(), close), 0);
    OutputParser p(tok, opts(ParseStart::kContent, false));
    std::string streamed;
    feed(p, ids, &streamed);
    EXPECT_EQ(p.content(), "\"</think>\"");
    EXPECT_EQ(streamed, "\"</think>\"");
    EXPECT_EQ(p.finish_reason(), FinishReason::kStop);
  }
  {  // reasoning: the text form does not end it; the token does
    std::vector<int32_t> ids = tok.encode("a</think>b", false);
    ids.push_back(close);
    for (const int32_t id : tok.encode("{}</think>", false)) ids.push_back(id);
    OutputParser p(tok, opts(ParseStart::kReasoning, false));
    std::string streamed;
    feed(p, ids, &streamed);
    EXPECT_EQ(p.reasoning(), "a</think>b");
    EXPECT_EQ(p.content(), "{}</think>");
    EXPECT_EQ(streamed, "a</think>b{}</think>");
  }
  {  // a stray </think> token in content is dropped; tool blocks still parse after the token
    std::vector<int32_t> ids = tok.encode("x", false);
    ids.push_back(close);
    for (const int32_t id : tok.encode("y", false)) ids.push_back(id);
    OutputParser p(tok, opts(ParseStart::kContent, false));
    std::string streamed;
    feed(p, ids, &streamed);
    EXPECT_EQ(p.content(), "xy");
  }
  {  // reasoning held back as a possible tool-block start is reasoning once </think> comes
    std::vector<int32_t> ids = tok.encode("r\n\n<", false);
    ids.push_back(close);
    for (const int32_t id : tok.encode("\n\n<｜DSML｜ calls>\n<｜DSML｜ invoke name=\"f\">\n</｜DSML｜ invoke>\n</｜DSML｜ calls>", true))
      ids.push_back(id);
    OutputParser p(tok, opts(ParseStart::kReasoning, true));
    std::string streamed;
    feed(p, ids, &streamed);
    EXPECT_EQ(p.reasoning(), "r\n\n<");
    EXPECT_EQ(p.content(), "");
    ASSERT_EQ(p.tool_calls().size(), 1u);
    EXPECT_EQ(p.tool_calls()[0].name, "f");
    EXPECT_EQ(p.finish_reason(), FinishReason::kToolCalls);
  }
}

}  // namespace
}  // namespace strata::chat
