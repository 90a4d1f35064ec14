// Fuzz target: POST /v1/messages (Anthropic) and /v1/responses (OpenAI Responses) bodies
// (server/messages_request.h, server/responses_request.h), then what the handler does with an
// accepted request before any model runs: render the translated conversation (chat/render.h) with the
// tiny V4.1 tokenizer. Every input goes through both parsers (the Messages create and count_tokens
// routes, and Responses with and without a stored conversation before it).
//
// An accepted request must hold what the translation promises: messages, stop strings bounded,
// sampling in range, effort 1..100, a Messages request's max_tokens >= 1, tool messages answering a
// known call; a rendered prompt starts with BOS and holds only ids of the vocabulary. Errors are 4xx
// and serialise in both envelopes.
#include <cstdint>
#include <set>
#include <string>
#include <vector>

#include "chat/render.h"
#include "fuzz/fuzz_support.h"
#include "server/messages_request.h"
#include "server/responses_request.h"

namespace {

using namespace strata;

void check_chat(const server::ChatRequest& r) {
  STRATA_FUZZ_CHECK(!r.messages.empty(), "accepted without messages");
  STRATA_FUZZ_CHECK(r.stop.size() <= 16, "more than 16 stop strings");
  for (const std::string& s : r.stop)
    STRATA_FUZZ_CHECK(!s.empty() && s.size() <= server::kMaxStopBytes, "stop string size");
  STRATA_FUZZ_CHECK(r.sampling.temperature >= 0 && r.sampling.temperature <= 2, "temperature");
  STRATA_FUZZ_CHECK(r.sampling.top_p > 0 && r.sampling.top_p <= 1, "top_p");
  STRATA_FUZZ_CHECK(r.max_tokens >= 0, "max_tokens");
  STRATA_FUZZ_CHECK(r.render.reasoning_effort >= 1 && r.render.reasoning_effort <= 100, "effort");
  std::set<std::string> calls;
  for (const chat::Message& m : r.messages) {
    for (const chat::ToolCall& c : m.tool_calls) calls.insert(c.id);
    if (m.role == chat::Role::kTool) STRATA_FUZZ_CHECK(calls.count(m.tool_call_id), "a tool result answers no call");
  }
  const tokenizer::Tokenizer& tok = fuzz::tiny_tokenizer();
  auto rendered = chat::render_conversation(tok, r.messages, r.render);
  if (!rendered.ok()) return;  // the handler answers 400 with the renderer's message
  STRATA_FUZZ_CHECK(!rendered->ids.empty(), "empty prompt");
  STRATA_FUZZ_CHECK(rendered->ids.front() == *tok.token_to_id("<｜begin▁of▁sentence｜>"), "prompt without BOS");
  for (int32_t id : rendered->ids) STRATA_FUZZ_CHECK(id >= 0 && id < tok.vocab_size(), "prompt id out of range");
}

void check_error(const server::ApiError& e) {
  STRATA_FUZZ_CHECK(e.status >= 400 && e.status < 500, "a request error that is not 4xx: " + e.to_json());
  (void)e.to_json();
  (void)e.to_anthropic_json();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string body(reinterpret_cast<const char*>(data), size);
  server::ServerOptions o;
  o.test_scripted_output = true;
  for (const server::MessagesRoute route : {server::MessagesRoute::kCreate, server::MessagesRoute::kCountTokens}) {
    server::ChatRequest r;
    const server::ApiError e = server::parse_messages_request(body, o, route, &r);
    if (!e.ok()) {
      check_error(e);
      continue;
    }
    if (route == server::MessagesRoute::kCreate) STRATA_FUZZ_CHECK(r.max_tokens >= 1, "max_tokens required");
    check_chat(r);
  }
  // A stored conversation that ends in a tool call, as previous_response_id would give.
  std::vector<chat::Message> stored(2);
  stored[0].role = chat::Role::kUser;
  stored[0].content = "Weather?";
  stored[1].role = chat::Role::kAssistant;
  stored[1].tool_calls.push_back(chat::ToolCall{"call_1", "get_weather", chat::Json::object()});
  for (const bool with_history : {false, true}) {
    server::ResponsesRequest r;
    server::ApiError e = server::parse_responses_request(body, o, &r);
    if (e.ok()) e = server::assemble_responses_conversation(with_history ? stored : std::vector<chat::Message>{}, &r);
    if (!e.ok()) {
      check_error(e);
      continue;
    }
    check_chat(r.chat);
  }
  return 0;
}
