#include "server/responses.h"

#include <random>

namespace strata::server {

namespace {

Json header_fields(const ResponseHeader& h, const char* object) {
  Json j;
  j["id"] = h.id;
  j["object"] = object;
  j["created"] = h.created;
  j["model"] = h.model;
  j["system_fingerprint"] = system_fingerprint();
  return j;
}

void put_reasoning(const ResponseHeader& h, Json* obj, const std::string& text) {
  if (h.reasoning_field != ReasoningField::kReasoning) (*obj)["reasoning_content"] = text;
  if (h.reasoning_field != ReasoningField::kReasoningContent) (*obj)["reasoning"] = text;
}

}  // namespace

std::string dump_json(const Json& j) { return j.dump(-1, ' ', false, Json::error_handler_t::replace); }

std::string random_id(const std::string& prefix) {
  thread_local std::mt19937_64 rng{std::random_device{}()};
  static constexpr char kHex[] = "0123456789abcdef";
  std::string s = prefix;
  for (int half = 0; half < 2; ++half) {
    const uint64_t v = rng();
    for (int i = 0; i < 16; ++i) s += kHex[(v >> (4 * i)) & 15];
  }
  return s;
}

std::string system_fingerprint() { return "strata-0.1.0"; }

Json usage_json(const JobStats& st, int64_t reasoning_tokens) {
  Json u;
  u["prompt_tokens"] = st.prompt_tokens;
  u["completion_tokens"] = st.completion_tokens;
  u["total_tokens"] = st.prompt_tokens + st.completion_tokens;
  u["prompt_tokens_details"] = Json{{"cached_tokens", st.cached_tokens}};
  u["completion_tokens_details"] = Json{{"reasoning_tokens", reasoning_tokens}};
  u["prompt_cache_hit_tokens"] = st.cached_tokens;
  u["prompt_cache_miss_tokens"] = st.prompt_tokens - st.cached_tokens;
  return u;
}

std::string chat_completion_json(const ResponseHeader& h, const chat::OutputParser& p, const JobStats& stats,
                                 int64_t reasoning_tokens, std::string_view finish_reason, const Json& logprobs) {
  Json j = header_fields(h, "chat.completion");
  Json msg;
  msg["role"] = "assistant";
  const auto& calls = p.tool_calls();
  // content is null only when there are tool calls and no text.
  if (!calls.empty() && p.content().empty()) {
    msg["content"] = nullptr;
  } else {
    msg["content"] = p.content();
  }
  if (h.thinking || p.saw_reasoning()) put_reasoning(h, &msg, p.reasoning());
  if (!calls.empty()) {
    Json tcs = Json::array();
    for (const chat::ParsedToolCall& c : calls) {
      Json tc;
      tc["id"] = c.id;
      tc["type"] = "function";
      tc["function"] = Json{{"name", c.name}, {"arguments", c.arguments}};
      tcs.push_back(std::move(tc));
    }
    msg["tool_calls"] = std::move(tcs);
  }
  Json choice;
  choice["index"] = 0;
  choice["finish_reason"] = std::string(finish_reason);
  choice["logprobs"] = logprobs;
  choice["message"] = std::move(msg);
  j["choices"] = Json::array({std::move(choice)});
  j["usage"] = usage_json(stats, reasoning_tokens);
  return dump_json(j);
}

Json chunk_delta(const ResponseHeader& h, const chat::Delta& d) {
  Json delta = Json::object();
  switch (d.kind) {
    case chat::Delta::Kind::kReasoning:
      put_reasoning(h, &delta, d.text);
      break;
    case chat::Delta::Kind::kContent:
      delta["content"] = d.text;
      break;
    case chat::Delta::Kind::kToolCallStart: {
      Json tc;
      tc["index"] = d.index;
      tc["id"] = d.id;
      tc["type"] = "function";
      tc["function"] = Json{{"name", d.name}, {"arguments", ""}};
      delta["tool_calls"] = Json::array({std::move(tc)});
      break;
    }
    case chat::Delta::Kind::kToolCallArguments: {
      Json tc;
      tc["index"] = d.index;
      tc["function"] = Json{{"arguments", d.text}};
      delta["tool_calls"] = Json::array({std::move(tc)});
      break;
    }
  }
  return delta;
}

std::string chat_chunk_json(const ResponseHeader& h, const Json& delta, std::string_view finish_reason,
                            const Json& logprobs) {
  Json j = header_fields(h, "chat.completion.chunk");
  Json choice;
  choice["index"] = 0;
  choice["delta"] = delta;
  choice["logprobs"] = logprobs;
  choice["finish_reason"] = finish_reason.empty() ? Json(nullptr) : Json(std::string(finish_reason));
  j["choices"] = Json::array({std::move(choice)});
  return dump_json(j);
}

std::string usage_chunk_json(const ResponseHeader& h, const char* object, const JobStats& stats,
                             int64_t reasoning_tokens) {
  Json j = header_fields(h, object);
  j["choices"] = Json::array();
  j["usage"] = usage_json(stats, reasoning_tokens);
  return dump_json(j);
}

std::string completion_json(const ResponseHeader& h, const std::string& text, const JobStats& stats,
                            std::string_view finish_reason, const Json& logprobs) {
  Json j = header_fields(h, "text_completion");
  Json choice;
  choice["index"] = 0;
  choice["text"] = text;
  choice["logprobs"] = logprobs;
  choice["finish_reason"] = std::string(finish_reason);
  j["choices"] = Json::array({std::move(choice)});
  j["usage"] = usage_json(stats, 0);
  return dump_json(j);
}

std::string completion_chunk_json(const ResponseHeader& h, const std::string& text, std::string_view finish_reason,
                                  const Json& logprobs) {
  Json j = header_fields(h, "text_completion");
  Json choice;
  choice["index"] = 0;
  choice["text"] = text;
  choice["logprobs"] = logprobs;
  choice["finish_reason"] = finish_reason.empty() ? Json(nullptr) : Json(std::string(finish_reason));
  j["choices"] = Json::array({std::move(choice)});
  return dump_json(j);
}

}  // namespace strata::server
