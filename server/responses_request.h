// POST /v1/responses (OpenAI Responses API) request parsing: the body is translated into the chat
// path's ChatRequest, so a Responses request is rendered, generated and parsed like a chat
// completion; only the response shape differs (server/responses_output.h).
//
// Translation (Responses -> chat):
//   instructions                              -> a leading system message (not carried over by
//                                                previous_response_id, as OpenAI does)
//   input: a string                           -> one user message
//   input items: message (role user, system, developer, assistant; content a string or
//     input_text / output_text parts)         -> the chat message of that role
//   reasoning item (reasoning_text content or summary_text) -> the reasoning of the assistant turn it opens
//   function_call (call_id, name, arguments)  -> a tool call of the current assistant turn
//   function_call_output (call_id, output)    -> a tool message
//   tools [{type: function, name, description, parameters}] -> function tools
//   tool_choice auto | none | required | {type: function, name} -> the same
//   reasoning.effort none | minimal..max | 1..100 -> thinking off | on at that effort; absent: the
//                                                chat rules (model alias, then the server default)
//   text.format json_object | json_schema    -> response_format (rendered as a hint)
//   max_output_tokens, temperature, top_p, parallel_tool_calls, stream -> the same
// Consecutive assistant-side items (reasoning, assistant message, function calls) form one
// assistant turn. previous_response_id's stored conversation goes between instructions and input:
// assemble_responses_conversation joins them and checks the result.
// Thread safety: pure functions.
#pragma once

#include <string>
#include <vector>

#include "server/api_error.h"
#include "server/chat_request.h"
#include "server/options.h"
#include "server/request_fields.h"

namespace strata::server {

struct ResponsesRequest {
  ChatRequest chat;                  // messages: the input items alone until assembled
  std::vector<chat::Message> input;  // the input items as messages (what a stored conversation adds)
  std::string instructions;          // "" = none
  std::string previous_response_id;  // "" = none
  bool store = true;                 // keep this response for a later previous_response_id
  Json echo;                         // request fields the response object repeats (tools, tool_choice, ...)
};

// Parses and checks a Responses body into `out` (out->chat.messages not yet assembled). Errors name
// the field path (e.g. "input[2].call_id").
[[nodiscard]] ApiError parse_responses_request(const std::string& body, const ServerOptions& options,
                                               ResponsesRequest* out);

// out->chat.messages = [instructions] + history + out->input, checked: every function_call_output
// answers a function_call before it, and the conversation ends with a user, system or tool message.
[[nodiscard]] ApiError assemble_responses_conversation(const std::vector<chat::Message>& history,
                                                       ResponsesRequest* out);

}  // namespace strata::server
