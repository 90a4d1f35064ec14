#include "server/responses_output.h"

#include "server/responses.h"

namespace strata::server {

namespace {

Json reasoning_item(const std::string& id, const std::string& text) {
  Json content = Json::array();
  if (!text.empty()) content.push_back(Json{{"type", "reasoning_text"}, {"text", text}});
  return Json{{"type", "reasoning"}, {"id", id}, {"summary", Json::array()}, {"content", std::move(content)}};
}

Json output_text_part(const std::string& text) {
  return Json{{"type", "output_text"}, {"text", text}, {"annotations", Json::array()}};
}

Json message_item(const std::string& id, const char* status, Json content) {
  return Json{
      {"type", "message"}, {"id", id}, {"status", status}, {"role", "assistant"}, {"content", std::move(content)}};
}

Json function_call_item(const std::string& id, const std::string& call_id, const std::string& name,
                        const std::string& arguments, const char* status) {
  return Json{{"type", "function_call"}, {"id", id},        {"call_id", call_id}, {"name", name},
              {"arguments", arguments},  {"status", status}};
}

bool incomplete(const chat::OutputParser& p) { return p.finish_reason() == chat::FinishReason::kLength; }

// The response object around `output`.
Json response_object(const ResponsesHeader& h, const char* status, Json output, Json usage) {
  Json r;
  r["id"] = h.id;
  r["object"] = "response";
  r["created_at"] = h.created_at;
  r["status"] = status;
  r["error"] = nullptr;
  r["incomplete_details"] =
      std::string_view(status) == "incomplete" ? Json{{"reason", "max_output_tokens"}} : Json(nullptr);
  r["instructions"] = nullptr;
  r["max_output_tokens"] = nullptr;
  r["model"] = h.model;
  r["output"] = std::move(output);
  r["parallel_tool_calls"] = true;
  r["previous_response_id"] = nullptr;
  r["reasoning"] = Json{{"effort", nullptr}, {"summary", nullptr}};
  r["store"] = true;
  r["temperature"] = 1.0;
  r["text"] = Json{{"format", {{"type", "text"}}}};
  r["tool_choice"] = "auto";
  r["tools"] = Json::array();
  r["top_p"] = 0.95;
  r["truncation"] = "disabled";
  r["usage"] = std::move(usage);
  r["metadata"] = Json::object();
  if (h.echo.is_object())
    for (auto it = h.echo.begin(); it != h.echo.end(); ++it) r[it.key()] = it.value();
  return r;
}

}  // namespace

Json responses_usage_json(const JobStats& st, int64_t reasoning_tokens) {
  Json u;
  u["input_tokens"] = st.prompt_tokens;
  u["input_tokens_details"] = Json{{"cached_tokens", st.cached_tokens}};
  u["output_tokens"] = st.completion_tokens;
  u["output_tokens_details"] = Json{{"reasoning_tokens", reasoning_tokens}};
  u["total_tokens"] = st.prompt_tokens + st.completion_tokens;
  return u;
}

std::string responses_json(const ResponsesHeader& h, const chat::OutputParser& p, const JobStats& st,
                           int64_t reasoning_tokens) {
  Json output = Json::array();
  if (!p.reasoning().empty()) output.push_back(reasoning_item(random_id("rs_"), p.reasoning()));
  // A message the token limit cut is incomplete; one a (complete) tool call follows was finished.
  const char* message_status = incomplete(p) && p.tool_calls().empty() ? "incomplete" : "completed";
  if (!p.content().empty())
    output.push_back(message_item(random_id("msg_"), message_status, Json::array({output_text_part(p.content())})));
  for (const chat::ParsedToolCall& c : p.tool_calls())
    output.push_back(function_call_item(random_id("fc_"), c.id, c.name, c.arguments, "completed"));
  return dump_json(response_object(h, incomplete(p) ? "incomplete" : "completed", std::move(output),
                                   responses_usage_json(st, reasoning_tokens)));
}

chat::Message responses_output_message(const chat::OutputParser& p) {
  chat::Message m;
  m.role = chat::Role::kAssistant;
  m.reasoning = p.reasoning();
  m.content = p.content();
  for (const chat::ParsedToolCall& c : p.tool_calls())
    m.tool_calls.push_back(chat::ToolCall{c.id, c.name, chat::tool_arguments_from_text(c.arguments)});
  return m;
}

std::string ResponsesStream::event(std::string_view type, Json data) {
  Json j;
  j["type"] = type;
  for (auto it = data.begin(); it != data.end(); ++it) j[it.key()] = std::move(it.value());
  j["sequence_number"] = seq_++;
  return "event: " + std::string(type) + "\ndata: " + dump_json(j) + "\n\n";
}

std::string ResponsesStream::start() {
  const Json r = response_object(h_, "in_progress", Json::array(), nullptr);
  std::string out = event("response.created", Json{{"response", r}});  // sequence numbers in order
  return out + event("response.in_progress", Json{{"response", r}});
}

std::string ResponsesStream::open(Item kind, Json item) {
  std::string out = close();
  kind_ = kind;
  item_ = std::move(item);
  text_.clear();
  const size_t index = output_.size();
  out += event("response.output_item.added", Json{{"output_index", index}, {"item", item_}});
  const std::string id = item_["id"];
  if (kind == Item::kMessage)
    out += event("response.content_part.added",
                 Json{{"item_id", id}, {"output_index", index}, {"content_index", 0}, {"part", output_text_part("")}});
  if (kind == Item::kReasoning)
    out += event("response.content_part.added", Json{{"item_id", id},
                                                     {"output_index", index},
                                                     {"content_index", 0},
                                                     {"part", {{"type", "reasoning_text"}, {"text", ""}}}});
  return out;
}

std::string ResponsesStream::close(const char* status) {
  if (kind_ == Item::kNone) return "";
  const size_t index = output_.size();
  const std::string id = item_["id"];
  std::string out;
  Json done;
  switch (kind_) {
    case Item::kReasoning: {
      const Json part = Json{{"type", "reasoning_text"}, {"text", text_}};
      out += event("response.reasoning_text.done",
                   Json{{"item_id", id}, {"output_index", index}, {"content_index", 0}, {"text", text_}});
      out += event("response.content_part.done",
                   Json{{"item_id", id}, {"output_index", index}, {"content_index", 0}, {"part", part}});
      done = reasoning_item(id, text_);
      break;
    }
    case Item::kMessage: {
      out += event("response.output_text.done", Json{{"item_id", id},
                                                     {"output_index", index},
                                                     {"content_index", 0},
                                                     {"text", text_},
                                                     {"logprobs", Json::array()}});
      out += event(
          "response.content_part.done",
          Json{{"item_id", id}, {"output_index", index}, {"content_index", 0}, {"part", output_text_part(text_)}});
      done = message_item(id, status, Json::array({output_text_part(text_)}));
      break;
    }
    case Item::kFunctionCall:
      out += event("response.function_call_arguments.done",
                   Json{{"item_id", id}, {"output_index", index}, {"name", item_["name"]}, {"arguments", text_}});
      done = function_call_item(id, item_["call_id"], item_["name"], text_, "completed");
      break;
    case Item::kNone:
      break;
  }
  out += event("response.output_item.done", Json{{"output_index", index}, {"item", done}});
  output_.push_back(std::move(done));
  kind_ = Item::kNone;
  return out;
}

std::string ResponsesStream::delta(const chat::Delta& d) {
  std::string out;
  const char* type = nullptr;
  Json extra;
  switch (d.kind) {
    case chat::Delta::Kind::kReasoning:
      if (d.text.empty()) return "";
      if (kind_ != Item::kReasoning) out = open(Item::kReasoning, reasoning_item(random_id("rs_"), ""));
      type = "response.reasoning_text.delta";
      extra = Json{{"content_index", 0}};
      break;
    case chat::Delta::Kind::kContent:
      if (d.text.empty()) return "";
      if (kind_ != Item::kMessage)
        out = open(Item::kMessage, message_item(random_id("msg_"), "in_progress", Json::array()));
      type = "response.output_text.delta";
      extra = Json{{"content_index", 0}, {"logprobs", Json::array()}};
      break;
    case chat::Delta::Kind::kToolCallStart:
      return open(Item::kFunctionCall, function_call_item(random_id("fc_"), d.id, d.name, "", "in_progress"));
    case chat::Delta::Kind::kToolCallArguments:
      if (d.text.empty() || kind_ != Item::kFunctionCall) return "";
      type = "response.function_call_arguments.delta";
      break;
  }
  text_ += d.text;
  Json data = Json{{"item_id", item_["id"]}, {"output_index", output_.size()}};
  for (auto it = extra.begin(); it != extra.end(); ++it) data[it.key()] = it.value();
  data["delta"] = d.text;
  return out + event(type, std::move(data));
}

std::string ResponsesStream::finish(const chat::OutputParser& p, const JobStats& st, int64_t reasoning_tokens) {
  const bool inc = incomplete(p);
  std::string out = close(inc ? "incomplete" : "completed");
  const Json r =
      response_object(h_, inc ? "incomplete" : "completed", output_, responses_usage_json(st, reasoning_tokens));
  final_ = dump_json(r);
  return out + event(inc ? "response.incomplete" : "response.completed", Json{{"response", r}});
}

std::string ResponsesStream::error(const ApiError& e) {
  // OpenAI's error event fields, plus the chat API's `error` object: the SDK raises APIError on it.
  const Json err = Json::parse(e.to_json(), nullptr, /*allow_exceptions=*/false)["error"];
  return event("error",
               Json{{"code", err["code"]}, {"message", err["message"]}, {"param", err["param"]}, {"error", err}});
}

}  // namespace strata::server
