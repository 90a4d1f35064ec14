// The response bodies of POST /v1/responses (OpenAI Responses API): the response object and the
// SSE events of a stream, from chat::OutputParser output.
//
// Output items: `reasoning` (id rs_..., content [{type: reasoning_text, text}], summary []) when
// reasoning was produced, `message` (id msg_..., content [{type: output_text, text, annotations}])
// when there is text (status incomplete when max_output_tokens cut it: the response is incomplete
// and no call follows it), and one `function_call` (id fc_..., call_id, name, arguments) per complete call.
// status: completed, or incomplete with incomplete_details.reason max_output_tokens (max_output_tokens
// or the context ran out). usage: input_tokens (+ input_tokens_details.cached_tokens), output_tokens
// (+ output_tokens_details.reasoning_tokens), total_tokens.
// A stream: response.created, response.in_progress, then per item response.output_item.added,
// (message: response.content_part.added, response.output_text.delta..., response.output_text.done,
// response.content_part.done; reasoning: the same with response.reasoning_text.*; function_call:
// response.function_call_arguments.delta..., response.function_call_arguments.done),
// response.output_item.done; then response.completed (or response.incomplete) with the whole
// response. Every event is "event: <type>\ndata: <json>\n\n" with type and a growing sequence_number;
// an error after the first byte is an `error` event carrying OpenAI's error object.
// Thread safety: pure functions; a ResponsesStream belongs to one stream.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <string_view>

#include "chat/conversation.h"
#include "chat/output_parser.h"
#include "server/api_error.h"
#include "server/request_fields.h"
#include "server/scheduler.h"

namespace strata::server {

// What every object of one response repeats.
struct ResponsesHeader {
  std::string id;          // resp_<32 hex>
  int64_t created_at = 0;  // unix seconds
  std::string model;
  Json echo;  // request fields the response object repeats (ResponsesRequest::echo)
};

// usage of a finished generation.
Json responses_usage_json(const JobStats& stats, int64_t reasoning_tokens);

// The non-streaming response object (output items from the parser, fresh item ids).
std::string responses_json(const ResponsesHeader& h, const chat::OutputParser& parser, const JobStats& stats,
                           int64_t reasoning_tokens);

// The assistant message a finished generation adds to the stored conversation (reasoning, text,
// complete tool calls with their call ids).
chat::Message responses_output_message(const chat::OutputParser& parser);

// Writes one stream's events, opening and closing output items as the parser's deltas change kind.
class ResponsesStream {
 public:
  explicit ResponsesStream(ResponsesHeader h) : h_(std::move(h)) {}

  // response.created and response.in_progress.
  std::string start();
  // The events of one parser delta ("" for an empty one).
  std::string delta(const chat::Delta& d);
  // Closes the open item, then response.completed / response.incomplete with the streamed items.
  std::string finish(const chat::OutputParser& parser, const JobStats& stats, int64_t reasoning_tokens);
  // An `error` event.
  std::string error(const ApiError& e);
  // The response object of response.completed / response.incomplete (JSON; empty before finish()).
  const std::string& final_response() const { return final_; }

 private:
  enum class Item { kNone, kReasoning, kMessage, kFunctionCall };
  std::string event(std::string_view type, Json data);
  std::string open(Item kind, Json item);
  // Closes the open item with `status` (items closed before the end are complete).
  std::string close(const char* status = "completed");

  ResponsesHeader h_;
  int64_t seq_ = 0;
  Json output_ = Json::array();  // finished items
  Item kind_ = Item::kNone;
  Json item_;         // the open item
  std::string text_;  // its text or arguments so far
  std::string final_;
};

}  // namespace strata::server
