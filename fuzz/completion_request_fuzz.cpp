// Fuzz target: POST /v1/completions bodies (server/completion_request.h), then what the handler does
// with an accepted request before any model runs: tokenize the prompt with special tokens allowed
// (tiny V4.1 tokenizer), prepend BOS, and run the raw-mode output parser over the scripted output.
//
// The input is the request body, parsed with the default ServerOptions and with every switch the
// other way (any model, scripted output on). An accepted request holds what the parser promises:
// a non-empty prompt, ids in [0, 2^31), max_tokens >= 1, bounded stop strings, sampling in range.
#include <cstdint>
#include <string>
#include <vector>

#include "chat/output_parser.h"
#include "fuzz/fuzz_support.h"
#include "server/completion_request.h"

namespace {

using namespace strata;

void check_and_run(const server::CompletionRequest& r) {
  if (r.has_ids) {
    STRATA_FUZZ_CHECK(!r.prompt_ids.empty() && r.prompt_text.empty(), "id prompt");
    for (int32_t id : r.prompt_ids) STRATA_FUZZ_CHECK(id >= 0, "negative prompt id");
  } else {
    STRATA_FUZZ_CHECK(!r.prompt_text.empty(), "empty text prompt");
  }
  STRATA_FUZZ_CHECK(r.max_tokens >= 1, "max_tokens");
  STRATA_FUZZ_CHECK(r.stop.size() <= 16, "more than 16 stop strings");
  for (const std::string& s : r.stop)
    STRATA_FUZZ_CHECK(!s.empty() && s.size() <= server::kMaxStopBytes, "stop string size");
  STRATA_FUZZ_CHECK(r.sampling.temperature >= 0 && r.sampling.temperature <= 2, "temperature");
  STRATA_FUZZ_CHECK(r.sampling.top_p > 0 && r.sampling.top_p <= 1, "top_p");
  STRATA_FUZZ_CHECK(r.sampling.min_p >= 0 && r.sampling.min_p < 1, "min_p");
  STRATA_FUZZ_CHECK(r.sampling.presence_penalty >= -2 && r.sampling.presence_penalty <= 2, "presence_penalty");
  STRATA_FUZZ_CHECK(r.sampling.frequency_penalty >= -2 && r.sampling.frequency_penalty <= 2, "frequency_penalty");

  const tokenizer::Tokenizer& tok = fuzz::tiny_tokenizer();
  if (!r.has_ids) {
    std::vector<int32_t> ids = tok.encode(r.prompt_text, /*allow_special=*/true);
    for (int32_t id : ids) STRATA_FUZZ_CHECK(id >= 0 && id < tok.vocab_size(), "prompt id out of range");
    STRATA_FUZZ_CHECK(tok.decode(ids) == r.prompt_text, "prompt does not round-trip");
  }
  chat::ParserOptions po;
  po.start = chat::ParseStart::kContent;
  po.raw = true;
  po.stop = r.stop;
  po.make_call_id = [] { return std::string("call_0"); };
  chat::OutputParser parser(tok, std::move(po));
  std::vector<chat::Delta> out;
  if (r.has_test_output)
    for (int32_t id : tok.encode(r.test_output, /*allow_special=*/true))
      if (parser.push_token(id, &out)) break;
  parser.finish(/*length=*/false, &out);
  std::string streamed;
  for (const chat::Delta& d : out) {
    STRATA_FUZZ_CHECK(d.kind == chat::Delta::Kind::kContent, "raw mode produced a non-content delta");
    streamed += d.text;
  }
  STRATA_FUZZ_CHECK(streamed == parser.content(), "streamed content != final content");
  STRATA_FUZZ_CHECK(parser.tool_calls().empty() && parser.reasoning().empty(), "raw mode parsed markup");
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string body(reinterpret_cast<const char*>(data), size);
  server::ServerOptions plain;
  server::ServerOptions other;
  other.any_model = true;
  other.test_scripted_output = true;
  for (const server::ServerOptions* o : {&plain, &other}) {
    server::CompletionRequest r;
    server::ApiError e = server::parse_completion_request(body, *o, &r);
    if (!e.ok()) {
      STRATA_FUZZ_CHECK(e.status >= 400 && e.status < 500, "a request error that is not 4xx: " + e.to_json());
      continue;
    }
    check_and_run(r);
  }
  return 0;
}
