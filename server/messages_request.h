// POST /v1/messages and /v1/messages/count_tokens (Anthropic Messages API) request parsing: the
// Anthropic JSON is translated into the chat path's own ChatRequest (chat::Message list + render
// options + sampling and limits), so a Messages request is rendered, generated and parsed exactly
// as a chat completion is; only the response shape differs (server/anthropic_response.h).
//
// Translation (Anthropic -> chat):
//   system (string or text blocks)        -> a leading system message (blocks joined by "\n\n")
//   user text blocks                      -> user message content (joined by "\n\n")
//   user tool_result blocks               -> tool messages (tool_call_id = tool_use_id), in block order;
//                                            is_error results are prefixed "Error: "
//   assistant text / thinking / tool_use  -> content / reasoning / tool_calls (input = arguments)
//   a final assistant message             -> a continuation (the response extends it: prefix)
//   tools [{name, description, input_schema}] -> function tools {name, description, parameters}
//   tool_choice auto | any | tool | none  -> auto | required | named | none;
//                                            disable_parallel_tool_use -> parallel_tool_calls false
//   thinking enabled | adaptive | disabled -> V4.1 thinking on | on | off (budget_tokens checked, not
//                                            enforced); absent -> off unless the model is deepseek-reasoner
//   stop_sequences, max_tokens, temperature, top_p, top_k -> stop, max_tokens, sampling
// DECISION: an absent `thinking` means off, as in Anthropic's API (the chat path's default is on, as in
// DeepSeek's); Anthropic clients ask for thinking when they want thinking blocks.
// Thread safety: pure functions.
#pragma once

#include <string>

#include "server/api_error.h"
#include "server/chat_request.h"
#include "server/options.h"
#include "server/request_fields.h"

namespace strata::server {

// Which route a body came to: count_tokens takes the same body without max_tokens.
enum class MessagesRoute { kCreate, kCountTokens };

// Parses and checks an Anthropic Messages body into `out`. Errors name the field path
// (e.g. "messages[1].content[0].tool_use_id") and are meant for Anthropic's error envelope.
[[nodiscard]] ApiError parse_messages_request(const std::string& body, const ServerOptions& options,
                                              MessagesRoute route, ChatRequest* out);

// Same from an already parsed JSON object (tests).
[[nodiscard]] ApiError parse_messages_request_json(const Json& body, const ServerOptions& options, MessagesRoute route,
                                                   ChatRequest* out);

}  // namespace strata::server
