#include "server/anthropic_response.h"

#include "server/responses.h"

namespace strata::server {

namespace {

// A tool call's input object from its arguments JSON text (the parser writes valid JSON objects).
Json tool_input(const std::string& arguments) {
  Json j = Json::parse(arguments, nullptr, /*allow_exceptions=*/false);
  return j.is_object() ? j : Json::object();
}

Json stop_sequence_json(const chat::OutputParser& p) {
  return p.stop_sequence().empty() ? Json(nullptr) : Json(p.stop_sequence());
}

}  // namespace

std::string sse_event(std::string_view type, const Json& data) {
  return "event: " + std::string(type) + "\ndata: " + dump_json(data) + "\n\n";
}

std::string_view anthropic_stop_reason(const chat::OutputParser& p) {
  switch (p.finish_reason()) {
    case chat::FinishReason::kToolCalls:
      return "tool_use";
    case chat::FinishReason::kLength:
      return "max_tokens";
    case chat::FinishReason::kStop:
      break;
  }
  return p.stop_sequence().empty() ? "end_turn" : "stop_sequence";
}

Json anthropic_usage_json(int64_t prompt_tokens, int64_t cached_tokens, int64_t output_tokens) {
  Json u;
  u["input_tokens"] = prompt_tokens - cached_tokens;
  u["cache_creation_input_tokens"] = 0;
  u["cache_read_input_tokens"] = cached_tokens;
  u["output_tokens"] = output_tokens;
  return u;
}

std::string anthropic_message_json(const AnthropicHeader& h, const chat::OutputParser& p, const JobStats& st) {
  Json content = Json::array();
  if (!p.reasoning().empty()) content.push_back({{"type", "thinking"}, {"thinking", p.reasoning()}, {"signature", ""}});
  if (!p.content().empty()) content.push_back({{"type", "text"}, {"text", p.content()}});
  for (const chat::ParsedToolCall& c : p.tool_calls())
    content.push_back({{"type", "tool_use"}, {"id", c.id}, {"name", c.name}, {"input", tool_input(c.arguments)}});
  Json j;
  j["id"] = h.id;
  j["type"] = "message";
  j["role"] = "assistant";
  j["model"] = h.model;
  j["content"] = std::move(content);
  j["stop_reason"] = std::string(anthropic_stop_reason(p));
  j["stop_sequence"] = stop_sequence_json(p);
  j["usage"] = anthropic_usage_json(st.prompt_tokens, st.cached_tokens, st.completion_tokens);
  return dump_json(j);
}

std::string anthropic_count_tokens_json(int64_t input_tokens) {
  return dump_json(Json{{"input_tokens", input_tokens}});
}

std::string AnthropicStream::start(int64_t prompt_tokens, int64_t cached_tokens) const {
  Json m;
  m["id"] = h_.id;
  m["type"] = "message";
  m["role"] = "assistant";
  m["model"] = h_.model;
  m["content"] = Json::array();
  m["stop_reason"] = nullptr;
  m["stop_sequence"] = nullptr;
  m["usage"] = anthropic_usage_json(prompt_tokens, cached_tokens, 0);
  return sse_event("message_start", Json{{"type", "message_start"}, {"message", std::move(m)}});
}

std::string AnthropicStream::open(Block b, const Json& content_block) {
  std::string out = close();
  block_ = b;
  ++index_;
  out += sse_event("content_block_start",
                   Json{{"type", "content_block_start"}, {"index", index_}, {"content_block", content_block}});
  return out;
}

std::string AnthropicStream::close() {
  if (block_ == Block::kNone) return "";
  block_ = Block::kNone;
  return sse_event("content_block_stop", Json{{"type", "content_block_stop"}, {"index", index_}});
}

std::string AnthropicStream::delta(const chat::Delta& d) {
  std::string out;
  Json delta;
  switch (d.kind) {
    case chat::Delta::Kind::kReasoning:
      if (d.text.empty()) return "";
      if (block_ != Block::kThinking)
        out = open(Block::kThinking, Json{{"type", "thinking"}, {"thinking", ""}, {"signature", ""}});
      delta = Json{{"type", "thinking_delta"}, {"thinking", d.text}};
      break;
    case chat::Delta::Kind::kContent:
      if (d.text.empty()) return "";
      if (block_ != Block::kText) out = open(Block::kText, Json{{"type", "text"}, {"text", ""}});
      delta = Json{{"type", "text_delta"}, {"text", d.text}};
      break;
    case chat::Delta::Kind::kToolCallStart:
      // Each call is its own block, even right after another call.
      return open(Block::kToolUse,
                  Json{{"type", "tool_use"}, {"id", d.id}, {"name", d.name}, {"input", Json::object()}});
    case chat::Delta::Kind::kToolCallArguments:
      if (d.text.empty() || block_ != Block::kToolUse) return "";
      delta = Json{{"type", "input_json_delta"}, {"partial_json", d.text}};
      break;
  }
  out += sse_event("content_block_delta",
                   Json{{"type", "content_block_delta"}, {"index", index_}, {"delta", std::move(delta)}});
  return out;
}

std::string AnthropicStream::finish(const chat::OutputParser& p, const JobStats& st) {
  std::string out = close();
  Json delta;
  delta["stop_reason"] = std::string(anthropic_stop_reason(p));
  delta["stop_sequence"] = stop_sequence_json(p);
  out += sse_event("message_delta",
                   Json{{"type", "message_delta"},
                        {"delta", std::move(delta)},
                        {"usage", anthropic_usage_json(st.prompt_tokens, st.cached_tokens, st.completion_tokens)}});
  out += sse_event("message_stop", Json{{"type", "message_stop"}});
  return out;
}

std::string AnthropicStream::error(const ApiError& e) {
  return "event: error\ndata: " + e.to_anthropic_json() + "\n\n";
}

}  // namespace strata::server
