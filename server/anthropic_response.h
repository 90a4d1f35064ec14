// The response bodies of POST /v1/messages (Anthropic Messages API): the non-streaming message
// object, and the SSE events of a stream with Anthropic's lifecycle:
//   message_start                                   (usage: input tokens, output 0)
//   per block: content_block_start, content_block_delta..., content_block_stop
//              (thinking: thinking_delta; text: text_delta; tool_use: input_json_delta)
//   message_delta                                   (stop_reason, stop_sequence, usage)
//   message_stop
// Every event is "event: <type>\ndata: <json>\n\n"; an error after the first byte is an `error`
// event in Anthropic's envelope. Blocks come from chat::OutputParser deltas: reasoning -> thinking,
// content -> text, tool calls -> tool_use (the concatenated input_json_delta fragments of a block are
// exactly its final input JSON, as the parser guarantees for OpenAI's argument fragments).
// usage: input_tokens = prompt tokens not reused from a cache, cache_read_input_tokens = reused ones
// (Anthropic's split: their sum is the prompt), cache_creation_input_tokens 0, output_tokens =
// every generated token (reasoning included).
// Thread safety: pure functions; an AnthropicStream belongs to one stream.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "chat/output_parser.h"
#include "server/api_error.h"
#include "server/request_fields.h"
#include "server/scheduler.h"

namespace strata::server {

// What every object of one response repeats.
struct AnthropicHeader {
  std::string id;     // msg_<32 hex>
  std::string model;  // the served model id
};

// stop_reason of a finished generation: tool_use (a tool call ended it), max_tokens (max_tokens or
// the context ran out), stop_sequence (a stop_sequences entry matched), end_turn (EOS).
std::string_view anthropic_stop_reason(const chat::OutputParser& parser);

// The usage object from prompt, reused and generated token counts.
Json anthropic_usage_json(int64_t prompt_tokens, int64_t cached_tokens, int64_t output_tokens);

// The non-streaming message: content blocks thinking (when reasoning was produced), text (when
// there is text), tool_use (one per complete call, input parsed from its arguments).
std::string anthropic_message_json(const AnthropicHeader& h, const chat::OutputParser& parser, const JobStats& stats);

// The {"input_tokens": N} body of POST /v1/messages/count_tokens.
std::string anthropic_count_tokens_json(int64_t input_tokens);

// Writes one stream's events, opening and closing content blocks as the parser's deltas change kind.
class AnthropicStream {
 public:
  explicit AnthropicStream(AnthropicHeader h) : h_(std::move(h)) {}

  // message_start, once the prompt's reused length is known (the job was admitted).
  std::string start(int64_t prompt_tokens, int64_t cached_tokens) const;
  // The events for one parser delta: a content_block_stop / content_block_start when the block
  // changes, then its content_block_delta ("" for an empty delta).
  std::string delta(const chat::Delta& d);
  // Closes the open block, then message_delta (stop_reason, stop_sequence, usage) and message_stop.
  std::string finish(const chat::OutputParser& parser, const JobStats& stats);
  // An `error` event in Anthropic's envelope.
  static std::string error(const ApiError& e);

 private:
  enum class Block { kNone, kThinking, kText, kToolUse };
  std::string open(Block b, const Json& content_block);
  std::string close();

  AnthropicHeader h_;
  Block block_ = Block::kNone;
  int index_ = -1;  // index of the open (or last) block
};

// One SSE event: "event: <type>\ndata: <json>\n\n".
std::string sse_event(std::string_view type, const Json& data);

}  // namespace strata::server
