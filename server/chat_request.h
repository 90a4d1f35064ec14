// POST /v1/chat/completions request parsing (chat-and-api.md §2, §3, §6.1): OpenAI JSON in, a
// checked ChatRequest out (chat::Message list + chat::RenderOptions + sampling and limits), or an
// ApiError naming the field path. The prompt is rendered later, by the handler, with the tokenizer.
// Thread safety: pure functions.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "chat/conversation.h"
#include "server/api_error.h"
#include "server/options.h"
#include "server/request_fields.h"

namespace strata::server {

struct ChatRequest {
  std::string model;
  std::vector<chat::Message> messages;
  chat::RenderOptions render;       // thinking, effort, drop_thinking, tools, response_format, tool_choice
  bool stream = false;
  bool include_usage = false;       // stream_options.include_usage
  int64_t max_tokens = 0;           // explicit max_completion_tokens / max_tokens; 0 = default (§6.1)
  SamplingFields sampling;
  std::vector<std::string> stop;
  bool parallel_tool_calls = true;
  int logprobs = -1;                // -1 = off; else top_logprobs alternatives per token (read_logprobs)
  bool has_test_output = false;     // TEST ONLY: only read with ServerOptions::test_scripted_output
  std::string test_output;
};

// Parses and checks `body`. Every rule of §2 that needs no tokenizer is checked here (roles, content
// parts, tools, tool_choice, arguments, last message, thinking/effort resolution of §3).
[[nodiscard]] ApiError parse_chat_request(const std::string& body, const ServerOptions& options, ChatRequest* out);

// Same from an already parsed JSON object (tests and the render-case fixture).
[[nodiscard]] ApiError parse_chat_request_json(const Json& body, const ServerOptions& options, ChatRequest* out);

// The `messages` array of a body (§2.1-2.2, 2.7) and its `tools` (§2.3), alone: used by the
// request parser and by the render-case fixture test.
[[nodiscard]] ApiError parse_messages_json(const Json& body, std::vector<chat::Message>* out);
[[nodiscard]] ApiError parse_tools_json(const Json& body, chat::RenderOptions* out);

// §3 effort: an integer 1..100, a decimal string of one, or a name of `table`; "none" is handled
// by the caller. 400 with param `path` otherwise.
[[nodiscard]] ApiError parse_effort(const Json& v, EffortTable table, const std::string& path, int* out);

}  // namespace strata::server
