// Fuzz target: POST /v1/chat/completions bodies (server/chat_request.h), then what the handler does
// with an accepted request before any model runs: render the conversation (chat/render.h) with the
// tiny V4.1 tokenizer and set up the output parser as http_server.cpp does, feeding it the request's
// strata_test_output text (the scripted-output path) token by token.
//
// The input is the request body. It is parsed twice: with the default ServerOptions and with every
// switch the other way (vLLM effort table, any model, thinking off by default, scripted output on).
// An accepted request must hold what the parser promises (stop strings bounded, sampling in range,
// effort 1..100); a rendered prompt starts with BOS and holds only ids of the vocabulary.
#include <cstdint>
#include <string>
#include <vector>

#include "chat/output_parser.h"
#include "chat/render.h"
#include "fuzz/fuzz_support.h"
#include "server/chat_request.h"

namespace {

using namespace strata;

void check_request(const server::ChatRequest& r) {
  STRATA_FUZZ_CHECK(!r.messages.empty(), "accepted without messages");
  STRATA_FUZZ_CHECK(r.stop.size() <= 16, "more than 16 stop strings");
  for (const std::string& s : r.stop)
    STRATA_FUZZ_CHECK(!s.empty() && s.size() <= server::kMaxStopBytes, "stop string size");
  STRATA_FUZZ_CHECK(r.sampling.temperature >= 0 && r.sampling.temperature <= 2, "temperature");
  STRATA_FUZZ_CHECK(r.sampling.top_p > 0 && r.sampling.top_p <= 1, "top_p");
  STRATA_FUZZ_CHECK(r.sampling.min_p >= 0 && r.sampling.min_p < 1, "min_p");
  STRATA_FUZZ_CHECK(r.sampling.top_k >= 0, "top_k");
  STRATA_FUZZ_CHECK(r.max_tokens >= 0, "max_tokens");
  if (r.render.thinking)
    STRATA_FUZZ_CHECK(r.render.reasoning_effort >= 1 && r.render.reasoning_effort <= 100, "effort");
}

void render_and_parse(const server::ChatRequest& r) {
  const tokenizer::Tokenizer& tok = fuzz::tiny_tokenizer();
  auto rendered = chat::render_conversation(tok, r.messages, r.render);
  if (!rendered.ok()) return;  // the handler answers 400 with the renderer's message
  STRATA_FUZZ_CHECK(!rendered->ids.empty(), "empty prompt");
  STRATA_FUZZ_CHECK(rendered->ids.front() == *tok.token_to_id("<｜begin▁of▁sentence｜>"), "prompt without BOS");
  for (int32_t id : rendered->ids) STRATA_FUZZ_CHECK(id >= 0 && id < tok.vocab_size(), "prompt id out of range");

  chat::ParserOptions po;
  po.start = rendered->start;
  po.tools = rendered->tools_rendered;
  po.forced_tool = rendered->forced_tool;
  po.stop = r.stop;
  po.parallel_tool_calls = r.parallel_tool_calls;
  int n_ids = 0;
  po.make_call_id = [&n_ids] { return "call_" + std::to_string(n_ids++); };  // deterministic ids
  chat::OutputParser parser(tok, std::move(po));
  std::vector<chat::Delta> out;
  if (r.has_test_output) {
    for (int32_t id : tok.encode(r.test_output, /*allow_special=*/true))
      if (parser.push_token(id, &out)) break;
  }
  parser.finish(/*length=*/true, &out);
  STRATA_FUZZ_CHECK(parser.done(), "parser not done after finish");
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string body(reinterpret_cast<const char*>(data), size);
  server::ServerOptions plain;
  server::ServerOptions other;
  other.effort_table = server::EffortTable::kVllm;
  other.any_model = true;
  other.default_thinking = false;
  other.default_effort = 33;
  other.test_scripted_output = true;
  for (const server::ServerOptions* o : {&plain, &other}) {
    server::ChatRequest r;
    server::ApiError e = server::parse_chat_request(body, *o, &r);
    if (!e.ok()) {
      STRATA_FUZZ_CHECK(e.status >= 400 && e.status < 500, "a request error that is not 4xx: " + e.to_json());
      (void)e.to_json();
      continue;
    }
    check_request(r);
    render_and_parse(r);
  }
  return 0;
}
