#include "server/chat_request.h"

#include <cmath>
#include <optional>

namespace strata::server {

namespace {

using chat::Message;
using chat::Role;

std::string at(const std::string& path, size_t i) { return path + "[" + std::to_string(i) + "]"; }

// §2.2: content is a string, an array of text parts, or null.
ApiError read_content(const Json& m, const std::string& path, std::string* out) {
  const Json* c = field(m, "content");
  if (!c) return {};
  if (c->is_string()) {
    *out = c->get<std::string>();
    return {};
  }
  if (!c->is_array()) return bad_request(path + ": expected a string, an array of content parts or null", path);
  std::string joined;
  for (size_t k = 0; k < c->size(); ++k) {
    const Json& part = (*c)[k];
    const std::string pp = at(path, k);
    if (part.is_string()) {  // tolerated: a bare string part
      if (k > 0) joined += "\n\n";
      joined += part.get<std::string>();
      continue;
    }
    if (!part.is_object()) return bad_request(pp + ": expected a content part object", pp);
    std::string type;
    if (ApiError e = read_string(part, "type", pp + ".type", &type); !e.ok()) return e;
    if (type == "text" || type == "input_text" || type == "output_text") {
      std::string text;
      if (!field(part, "text")) return bad_request(pp + ".text: required for a " + type + " part", pp + ".text");
      if (ApiError e = read_string(part, "text", pp + ".text", &text); !e.ok()) return e;
      if (k > 0) joined += "\n\n";
      joined += text;
    } else {
      return bad_request(pp + ".type: unsupported content type '" + type +
                             "' (strata serves text only: text, input_text, output_text)",
                         pp + ".type", "invalid_value");
    }
  }
  *out = std::move(joined);
  return {};
}

ApiError read_tool_calls(const Json& m, const std::string& path, std::vector<chat::ToolCall>* out) {
  const Json* tcs = field(m, "tool_calls");
  if (!tcs) return {};
  if (!tcs->is_array()) return bad_request(path + ": expected an array", path);
  for (size_t k = 0; k < tcs->size(); ++k) {
    const Json& tc = (*tcs)[k];
    const std::string p = at(path, k);
    if (!tc.is_object()) return bad_request(p + ": expected an object", p);
    chat::ToolCall call;
    if (ApiError e = read_string(tc, "id", p + ".id", &call.id); !e.ok()) return e;
    std::string type = "function";
    if (ApiError e = read_string(tc, "type", p + ".type", &type); !e.ok()) return e;
    if (type != "function") return bad_request(p + ".type: only \"function\" tool calls are supported", p + ".type");
    const Json* f = field(tc, "function");
    if (!f || !f->is_object()) return bad_request(p + ".function: expected an object with name and arguments", p + ".function");
    if (ApiError e = read_string(*f, "name", p + ".function.name", &call.name); !e.ok()) return e;
    // The name is written into the DSML markup unescaped, so it must not be able to end the tag. Any
    // name the output parser can return passes (a hallucinated name sent back must not fail the next
    // turn): non-empty, no '"', '<' or '\n' (chat::OutputParser's rule).
    if (call.name.empty() || call.name.find_first_of("\"<\n") != std::string::npos)
      return bad_request(p + ".function.name: '" + call.name +
                             "' is not a function name (non-empty, without '\"', '<' or line breaks)",
                         p + ".function.name");
    // §2.7: arguments as JSON text (or an object); the tolerance lives in chat::tool_arguments_from_text.
    const Json* a = field(*f, "arguments");
    if (!a) {
      call.arguments = chat::Json::object();
    } else if (a->is_object()) {
      call.arguments = *a;
    } else if (a->is_string()) {
      call.arguments = chat::tool_arguments_from_text(a->get_ref<const std::string&>());
    } else {
      return bad_request(p + ".function.arguments: expected a JSON string", p + ".function.arguments");
    }
    out->push_back(std::move(call));
  }
  return {};
}

ApiError read_messages(const Json& body, std::vector<Message>* out) {
  const Json* ms = field(body, "messages");
  if (!ms) return bad_request("messages: required", "messages");
  if (!ms->is_array()) return bad_request("messages: expected an array of messages", "messages");
  if (ms->empty()) return bad_request("messages: at least one message is required", "messages");
  bool seen_calls = false;
  for (size_t i = 0; i < ms->size(); ++i) {
    const Json& m = (*ms)[i];
    const std::string p = at("messages", i);
    if (!m.is_object()) return bad_request(p + ": expected an object", p);
    std::string role;
    if (ApiError e = read_string(m, "role", p + ".role", &role); !e.ok()) return e;
    Message msg;
    if (role == "system" || role == "developer") {
      msg.role = Role::kSystem;  // DECISION: chat-and-api.md §2.1 — developer is rendered as system
    } else if (role == "user") {
      msg.role = Role::kUser;
    } else if (role == "assistant") {
      msg.role = Role::kAssistant;
    } else if (role == "tool") {
      msg.role = Role::kTool;
    } else {
      return bad_request(p + ".role: '" + role + "' is not one of system, developer, user, assistant, tool",
                         p + ".role");
    }
    if (ApiError e = read_content(m, p + ".content", &msg.content); !e.ok()) return e;
    if (msg.role == Role::kAssistant) {
      // reasoning is accepted as an alias of reasoning_content (§2.2).
      if (ApiError e = read_string(m, "reasoning", p + ".reasoning", &msg.reasoning); !e.ok()) return e;
      if (ApiError e = read_string(m, "reasoning_content", p + ".reasoning_content", &msg.reasoning); !e.ok()) return e;
      if (ApiError e = read_tool_calls(m, p + ".tool_calls", &msg.tool_calls); !e.ok()) return e;
      if (ApiError e = read_bool(m, "prefix", p + ".prefix", &msg.prefix); !e.ok()) return e;
      if (!msg.tool_calls.empty()) seen_calls = true;
    }
    if (msg.role == Role::kTool) {
      if (ApiError e = read_string(m, "tool_call_id", p + ".tool_call_id", &msg.tool_call_id); !e.ok()) return e;
      if (!seen_calls)
        return bad_request(p + ": a tool message must follow an assistant message with tool_calls", p);
    }
    out->push_back(std::move(msg));
  }
  return {};
}

ApiError read_tools(const Json& body, chat::RenderOptions* r) {
  const Json* ts = field(body, "tools");
  if (!ts) return {};
  if (!ts->is_array()) return bad_request("tools: expected an array", "tools");
  for (size_t i = 0; i < ts->size(); ++i) {
    const Json& t = (*ts)[i];
    const std::string p = at("tools", i);
    if (!t.is_object()) return bad_request(p + ": expected an object", p);
    std::string type;
    if (ApiError e = read_string(t, "type", p + ".type", &type); !e.ok()) return e;
    if (type != "function") return bad_request(p + ".type: only \"function\" tools are supported, got '" + type + "'", p + ".type");
    const Json* f = field(t, "function");
    if (!f || !f->is_object()) return bad_request(p + ".function: expected an object", p + ".function");
    std::string name;
    if (ApiError e = read_string(*f, "name", p + ".function.name", &name); !e.ok()) return e;
    if (!chat::is_valid_tool_name(name))
      return bad_request(p + ".function.name: '" + name + "' must match ^[A-Za-z0-9_.:-]{1,64}$", p + ".function.name");
    // A call names its tool: two tools of one name could not be told apart (nor forced by name).
    for (const chat::Json& prev : r->tools)
      if (prev.value("name", std::string()) == name)
        return bad_request(p + ".function.name: tool names must be unique, '" + name + "' appears twice",
                           p + ".function.name");
    r->tools.push_back(*f);
  }
  return {};
}

ApiError read_tool_choice(const Json& body, chat::RenderOptions* r) {
  const Json* tc = field(body, "tool_choice");
  if (!tc) return {};
  if (tc->is_string()) {
    const std::string s = tc->get<std::string>();
    if (s == "auto") {
      r->tool_choice = chat::ToolChoice::kAuto;
    } else if (s == "none") {
      r->tool_choice = chat::ToolChoice::kNone;
    } else if (s == "required") {
      r->tool_choice = chat::ToolChoice::kRequired;
    } else {
      return bad_request("tool_choice: '" + s + "' is not one of none, auto, required", "tool_choice");
    }
  } else if (tc->is_object()) {
    const Json* f = field(*tc, "function");
    std::string name;
    if (f && f->is_object()) {
      if (ApiError e = read_string(*f, "name", "tool_choice.function.name", &name); !e.ok()) return e;
    }
    if (name.empty()) return bad_request("tool_choice: expected {\"type\": \"function\", \"function\": {\"name\": ...}}", "tool_choice");
    r->tool_choice = chat::ToolChoice::kNamed;
    r->tool_choice_name = name;
  } else {
    return bad_request("tool_choice: expected a string or an object", "tool_choice");
  }
  if (r->tool_choice == chat::ToolChoice::kRequired && r->tools.empty())
    return bad_request("tool_choice: \"required\" needs tools", "tool_choice");
  if (r->tool_choice == chat::ToolChoice::kNamed) {
    bool found = false;
    for (const chat::Json& f : r->tools) found = found || f.value("name", std::string()) == r->tool_choice_name;
    if (!found)
      return bad_request("tool_choice: names '" + r->tool_choice_name + "', which is not in tools", "tool_choice");
  }
  return {};
}

ApiError read_response_format(const Json& body, chat::RenderOptions* r) {
  const Json* rf = field(body, "response_format");
  if (!rf) return {};
  if (!rf->is_object()) return bad_request("response_format: expected an object", "response_format");
  std::string type;
  if (ApiError e = read_string(*rf, "type", "response_format.type", &type); !e.ok()) return e;
  if (type == "text" || type.empty()) return {};
  if (type != "json_object" && type != "json_schema")
    return bad_request("response_format.type: '" + type + "' is not one of text, json_object, json_schema",
                       "response_format.type");
  if (type == "json_schema") {
    const Json* js = field(*rf, "json_schema");
    if (js && js->is_object())
      if (ApiError e = check_json_schema_name(*js, "response_format.json_schema.name"); !e.ok()) return e;
  }
  r->response_format = *rf;
  return {};
}

// §3 thinking: an explicit value (rules 1-2), or nullopt.
ApiError read_thinking(const Json& body, const Json* kwargs, std::optional<bool>* out) {
  if (const Json* t = field(body, "thinking")) {
    if (t->is_boolean()) {
      *out = t->get<bool>();
      return {};
    }
    if (t->is_object()) {
      std::string type;
      if (ApiError e = read_string(*t, "type", "thinking.type", &type); !e.ok()) return e;
      if (type == "enabled") {
        *out = true;
      } else if (type == "disabled") {
        *out = false;
      } else {
        return bad_request("thinking.type: expected \"enabled\" or \"disabled\"", "thinking.type");
      }
      return {};
    }
    return bad_request("thinking: expected a boolean or {\"type\": \"enabled\"|\"disabled\"}", "thinking");
  }
  if (kwargs) {
    std::optional<bool> a, b;
    bool v = false;
    if (field(*kwargs, "thinking")) {
      if (ApiError e = read_bool(*kwargs, "thinking", "chat_template_kwargs.thinking", &v); !e.ok()) return e;
      a = v;
    }
    if (field(*kwargs, "enable_thinking")) {
      if (ApiError e = read_bool(*kwargs, "enable_thinking", "chat_template_kwargs.enable_thinking", &v); !e.ok()) return e;
      b = v;
    }
    if (a && b && *a != *b)
      return bad_request("chat_template_kwargs: thinking and enable_thinking disagree", "chat_template_kwargs.thinking");
    if (a) *out = a;
    else if (b) *out = b;
  }
  return {};
}

bool is_none(const Json* v) { return v && v->is_string() && v->get<std::string>() == "none"; }

}  // namespace

ApiError parse_messages_json(const Json& body, std::vector<chat::Message>* out) { return read_messages(body, out); }
ApiError parse_tools_json(const Json& body, chat::RenderOptions* out) { return read_tools(body, out); }

ApiError parse_effort(const Json& v, EffortTable table, const std::string& path, int* out) {
  auto bad = [&] {
    return bad_request(path + ": " + v.dump() + " is not an integer 1..100 or one of " +
                           (table == EffortTable::kOfficial ? "minimal, low, medium, high, xhigh, max, ultra"
                                                            : "low, high, xhigh, max (--effort-table vllm)"),
                       path);
  };
  if (v.is_number_integer()) {
    const int64_t n = v.get<int64_t>();
    if (v.is_number_unsigned() && v.get<uint64_t>() > 100) return bad();
    if (n < 1 || n > 100) return bad();
    *out = static_cast<int>(n);
    return {};
  }
  if (!v.is_string()) return bad();
  const std::string s = v.get<std::string>();
  if (!s.empty() && s.size() <= 3 && s.find_first_not_of("0123456789") == std::string::npos) {
    const int n = std::stoi(s);
    if (n < 1 || n > 100) return bad();
    *out = n;
    return {};
  }
  if (table == EffortTable::kOfficial) {
    // DECISION: chat-and-api.md §3 — the official encoder + DeepSeek API aliases.
    if (s == "minimal" || s == "low") *out = 50;
    else if (s == "medium" || s == "high" || s == "xhigh") *out = 75;
    else if (s == "max" || s == "ultra") *out = 100;
    else return bad();
  } else {
    if (s == "low") *out = 25;
    else if (s == "high") *out = 50;
    else if (s == "xhigh") *out = 75;
    else if (s == "max") *out = 100;
    else return bad();
  }
  return {};
}

ApiError parse_chat_request_json(const Json& body, const ServerOptions& o, ChatRequest* out) {
  ChatRequest r;
  const Json* model = field(body, "model");
  if (!model) return bad_request("model: required", "model");
  if (!model->is_string()) return bad_request("model: expected a string", "model");
  r.model = model->get<std::string>();
  const bool alias_chat = r.model == "deepseek-chat";
  const bool alias_reasoner = r.model == "deepseek-reasoner";
  if (!o.any_model && r.model != o.model_id && r.model != "deepseek-flash" && !alias_chat && !alias_reasoner)
    return model_not_found(r.model);

  if (ApiError e = check_unsupported(body, /*chat=*/true); !e.ok()) return e;
  if (ApiError e = read_logprobs(body, /*chat=*/true, &r.logprobs); !e.ok()) return e;
  if (ApiError e = read_messages(body, &r.messages); !e.ok()) return e;
  if (ApiError e = read_bool(body, "stream", "stream", &r.stream); !e.ok()) return e;
  if (const Json* so = field(body, "stream_options")) {
    if (!so->is_object()) return bad_request("stream_options: expected an object", "stream_options");
    if (ApiError e = read_bool(*so, "include_usage", "stream_options.include_usage", &r.include_usage); !e.ok()) return e;
  }
  int64_t mt = 0;
  if (ApiError e = read_int(body, "max_tokens", "max_tokens", 1, INT32_MAX, &mt); !e.ok()) return e;
  if (ApiError e = read_int(body, "max_completion_tokens", "max_completion_tokens", 1, INT32_MAX, &mt); !e.ok()) return e;
  r.max_tokens = mt;  // max_completion_tokens, read last, wins
  if (ApiError e = read_sampling(body, &r.sampling); !e.ok()) return e;
  if (ApiError e = read_stop(body, "stop", &r.stop); !e.ok()) return e;
  if (ApiError e = read_bool(body, "parallel_tool_calls", "parallel_tool_calls", &r.parallel_tool_calls); !e.ok()) return e;
  if (ApiError e = read_tools(body, &r.render); !e.ok()) return e;
  if (ApiError e = read_tool_choice(body, &r.render); !e.ok()) return e;
  if (ApiError e = read_response_format(body, &r.render); !e.ok()) return e;

  const Json* kwargs = field(body, "chat_template_kwargs");
  if (kwargs && !kwargs->is_object()) return bad_request("chat_template_kwargs: expected an object", "chat_template_kwargs");

  // §3 thinking, first rule that applies.
  std::optional<bool> explicit_thinking;
  if (ApiError e = read_thinking(body, kwargs, &explicit_thinking); !e.ok()) return e;
  const Json* effort_top = field(body, "reasoning_effort");
  const Json* effort_kw = kwargs ? field(*kwargs, "reasoning_effort") : nullptr;
  bool thinking = o.default_thinking;
  if (explicit_thinking) {
    thinking = *explicit_thinking;
  } else if (is_none(effort_top) || (!effort_top && is_none(effort_kw))) {
    thinking = false;
  } else if (alias_chat) {
    thinking = false;
  } else if (alias_reasoner) {
    thinking = true;
  }
  // Effort: top level overrides kwargs; checked even when thinking is off.
  int effort = o.default_effort > 0 ? o.default_effort : (o.effort_table == EffortTable::kOfficial ? 75 : 50);
  if (effort_top && !is_none(effort_top)) {
    if (ApiError e = parse_effort(*effort_top, o.effort_table, "reasoning_effort", &effort); !e.ok()) return e;
  } else if (!effort_top && effort_kw && !is_none(effort_kw)) {
    if (ApiError e = parse_effort(*effort_kw, o.effort_table, "chat_template_kwargs.reasoning_effort", &effort); !e.ok())
      return e;
  }
  // §4 rule 7: a forced tool call needs thinking off; an explicit "enabled" is an error.
  const bool forced = r.render.tool_choice == chat::ToolChoice::kRequired || r.render.tool_choice == chat::ToolChoice::kNamed;
  if (forced) {
    if (explicit_thinking && *explicit_thinking)
      return bad_request("tool_choice: a forced tool call (required or named) cannot be combined with thinking enabled",
                         "tool_choice");
    thinking = false;
  }
  r.render.thinking = thinking;
  r.render.reasoning_effort = effort;
  if (kwargs) {
    if (ApiError e = read_bool(*kwargs, "drop_thinking", "chat_template_kwargs.drop_thinking", &r.render.drop_thinking);
        !e.ok())
      return e;
  }

  // §2.6: the last message.
  bool cont = false;
  if (ApiError e = read_bool(body, "continue_final_message", "continue_final_message", &cont); !e.ok()) return e;
  Message& last = r.messages.back();
  const std::string last_path = at("messages", r.messages.size() - 1);
  if (last.role == Role::kAssistant) {
    if (cont) last.prefix = true;
    if (!last.prefix)
      return bad_request(last_path + ": the last message must be user, tool, developer or system; an assistant "
                             "message is only allowed as a continuation (\"prefix\": true or continue_final_message)",
                         last_path);
    if (!last.tool_calls.empty())
      return bad_request(last_path + ": an assistant continuation cannot have tool_calls", last_path);
  }
  for (size_t i = 0; i + 1 < r.messages.size(); ++i)
    if (r.messages[i].prefix)
      return bad_request(at("messages", i) + ".prefix: only the last message can be a continuation", at("messages", i) + ".prefix");

  if (o.test_scripted_output) {
    if (ApiError e = read_string(body, "strata_test_output", "strata_test_output", &r.test_output); !e.ok()) return e;
    r.has_test_output = field(body, "strata_test_output") != nullptr;
  }
  *out = std::move(r);
  return {};
}

ApiError parse_chat_request(const std::string& body, const ServerOptions& options, ChatRequest* out) {
  Json j;
  if (ApiError e = parse_body(body, &j); !e.ok()) return e;
  return parse_chat_request_json(j, options, out);
}

}  // namespace strata::server
