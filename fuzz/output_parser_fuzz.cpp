// Fuzz target: the V4.1 output parser (chat/output_parser.h): reasoning / content / DSML tool calls
// from generated text, fed piece by piece as a generation would.
//
// Input layout (0xFF, never a byte of UTF-8, separates the parts):
//   byte 0   options: bits 0-1 start (0 reasoning, 1 content, 2 tools, 3 content), bit 2 tools
//            rendered, bit 3 parallel_tool_calls, bit 4 raw, bit 5 feed token ids (the text pieces
//            tokenized with the tiny V4.1 tokenizer, special tokens allowed) instead of text, bit 6
//            finish with length (else stop), bit 7 forced tool (start = tools)
//   then     STOP 0xFF FORCED_TOOL 0xFF PIECE 0xFF PIECE ...
// Text pieces are made valid UTF-8 first (lossy), as the StreamDecoder guarantees in production.
// Properties (the header's promises): streamed reasoning / content deltas concatenate to
// reasoning() / content(); the argument fragments of each call concatenate to its final
// `arguments`; calls are complete JSON objects (Python json.dumps text, so NaN/Infinity allowed);
// raw mode produces content only; after finish() the parser is done and stays done.
#include <cstdint>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "chat/output_parser.h"
#include "fuzz/fuzz_support.h"
#include "tokenizer/utf8.h"

namespace {

using namespace strata;

std::vector<std::string_view> split(std::string_view s) {
  std::vector<std::string_view> parts;
  size_t start = 0;
  for (;;) {
    const size_t p = s.find('\xff', start);
    if (p == std::string_view::npos) {
      parts.push_back(s.substr(start));
      return parts;
    }
    parts.push_back(s.substr(start, p - start));
    start = p + 1;
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const uint8_t flags = data[0];
  const std::vector<std::string_view> parts = split(fuzz::as_text(data + 1, size - 1));

  chat::ParserOptions po;
  switch (flags & 3) {
    case 0: po.start = chat::ParseStart::kReasoning; break;
    case 2: po.start = chat::ParseStart::kTools; break;
    default: po.start = chat::ParseStart::kContent; break;
  }
  po.tools = (flags & 4) != 0;
  po.parallel_tool_calls = (flags & 8) != 0;
  po.raw = (flags & 16) != 0;
  const bool by_token = (flags & 32) != 0;
  const bool length = (flags & 64) != 0;
  if (!parts[0].empty()) po.stop.push_back(tokenizer::to_valid_utf8_lossy(parts[0].substr(0, 1024)));
  if ((flags & 128) && po.start == chat::ParseStart::kTools && parts.size() > 1 && !parts[1].empty())
    po.forced_tool = std::string(parts[1].substr(0, 64));
  int n_ids = 0;
  po.make_call_id = [&n_ids] { return "call_" + std::to_string(n_ids++); };
  const bool raw = po.raw && po.start == chat::ParseStart::kContent && !po.tools;

  const tokenizer::Tokenizer& tok = fuzz::tiny_tokenizer();
  chat::OutputParser parser(tok, po);
  std::vector<chat::Delta> out;
  bool ended = false;
  for (size_t i = 2; i < parts.size() && !ended; ++i) {
    const std::string text = tokenizer::to_valid_utf8_lossy(parts[i]);
    if (by_token) {
      for (int32_t id : tok.encode(text, /*allow_special=*/true))
        if ((ended = parser.push_token(id, &out))) break;
    } else {
      ended = parser.push_text(text, &out);
    }
    STRATA_FUZZ_CHECK(ended == parser.done(), "push result != done()");
  }
  parser.finish(length, &out);
  STRATA_FUZZ_CHECK(parser.done(), "not done after finish");
  std::vector<chat::Delta> after;
  STRATA_FUZZ_CHECK(parser.push_text("more", &after) && parser.push_token(300, &after) && after.empty(),
                    "output after the end");
  parser.finish(!length, &after);
  STRATA_FUZZ_CHECK(after.empty(), "finish is not idempotent");

  std::string reasoning, content;
  std::map<int, std::string> start_id, args;  // stream index -> call id, argument fragments
  for (const chat::Delta& d : out) {
    switch (d.kind) {
      case chat::Delta::Kind::kReasoning: reasoning += d.text; break;
      case chat::Delta::Kind::kContent: content += d.text; break;
      case chat::Delta::Kind::kToolCallStart:
        STRATA_FUZZ_CHECK(!start_id.count(d.index), "two starts for one index");
        STRATA_FUZZ_CHECK(!d.name.empty(), "a call without a name");
        start_id[d.index] = d.id;
        break;
      case chat::Delta::Kind::kToolCallArguments:
        STRATA_FUZZ_CHECK(start_id.count(d.index), "arguments before the call's start");
        args[d.index] += d.text;
        break;
    }
  }
  STRATA_FUZZ_CHECK(reasoning == parser.reasoning(), "streamed reasoning != reasoning()");
  STRATA_FUZZ_CHECK(content == parser.content(), "streamed content != content()");
  if (raw) STRATA_FUZZ_CHECK(reasoning.empty() && parser.tool_calls().empty(), "raw mode parsed markup");
  if (!po.tools && po.start != chat::ParseStart::kTools)
    STRATA_FUZZ_CHECK(parser.tool_calls().empty(), "tool calls without tools");
  for (const chat::ParsedToolCall& c : parser.tool_calls()) {
    int index = -1;
    for (const auto& [i, id] : start_id)
      if (id == c.id) index = i;
    STRATA_FUZZ_CHECK(index >= 0, "a final call that was never started: " + c.id);
    STRATA_FUZZ_CHECK(args[index] == c.arguments, "fragments != arguments for " + c.id);
    const auto j = nlohmann::json::parse(c.arguments, nullptr, /*allow_exceptions=*/false, /*ignore_comments=*/false);
    const bool non_finite = c.arguments.find("NaN") != std::string::npos || c.arguments.find("Infinity") != std::string::npos;
    STRATA_FUZZ_CHECK(non_finite || (!j.is_discarded() && j.is_object()), "arguments are not a JSON object: " + c.arguments);
  }
  if (!po.parallel_tool_calls) STRATA_FUZZ_CHECK(parser.tool_calls().size() <= 1, "two calls without parallel calls");
  return 0;
}
