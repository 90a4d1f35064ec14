#include "server/messages_request.h"

#include <optional>
#include <set>

namespace strata::server {

namespace {

using chat::Message;
using chat::Role;

std::string at(const std::string& path, size_t i) { return path + "[" + std::to_string(i) + "]"; }

Message user_message(std::string text) {
  Message m;
  m.role = Role::kUser;
  m.content = std::move(text);
  return m;
}

void append(std::string* joined, const std::string& text) {
  if (!joined->empty()) *joined += "\n\n";
  *joined += text;
}

// A text block's text (type already read as "text").
ApiError read_text_block(const Json& b, const std::string& path, std::string* out) {
  const Json* t = field(b, "text");
  if (!t) return bad_request(path + ".text: required for a text block", path + ".text");
  if (ApiError e = read_string(b, "text", path + ".text", out); !e.ok()) return e;
  if (out->empty()) return bad_request(path + ".text: text content blocks must be non-empty", path + ".text");
  return {};
}

std::string unsupported_block(const std::string& type) {
  return "unsupported content block type '" + type + "' (strata serves text: text, thinking, tool_use, tool_result)";
}

// `system`: a string or an array of text blocks.
ApiError read_system(const Json& body, std::vector<Message>* out) {
  const Json* s = field(body, "system");
  if (!s) return {};
  Message m;
  m.role = Role::kSystem;
  if (s->is_string()) {
    m.content = s->get<std::string>();
  } else if (s->is_array()) {
    for (size_t k = 0; k < s->size(); ++k) {
      const std::string p = at("system", k);
      if (!(*s)[k].is_object()) return bad_request(p + ": expected a text block object", p);
      std::string type, text;
      if (ApiError e = read_string((*s)[k], "type", p + ".type", &type); !e.ok()) return e;
      if (type != "text") return bad_request(p + ".type: system blocks must be text, got '" + type + "'", p + ".type");
      if (ApiError e = read_text_block((*s)[k], p, &text); !e.ok()) return e;
      append(&m.content, text);
    }
  } else {
    return bad_request("system: expected a string or an array of text blocks", "system");
  }
  out->push_back(std::move(m));
  return {};
}

// A tool_result's `content`: a string, an array of text blocks, or absent.
ApiError read_tool_result_content(const Json& b, const std::string& path, std::string* out) {
  const Json* c = field(b, "content");
  if (!c) return {};
  if (c->is_string()) {
    *out = c->get<std::string>();
    return {};
  }
  if (!c->is_array()) return bad_request(path + ": expected a string or an array of text blocks", path);
  for (size_t k = 0; k < c->size(); ++k) {
    const std::string p = at(path, k);
    if (!(*c)[k].is_object()) return bad_request(p + ": expected a content block object", p);
    std::string type, text;
    if (ApiError e = read_string((*c)[k], "type", p + ".type", &type); !e.ok()) return e;
    if (type != "text") return bad_request(p + ".type: " + unsupported_block(type), p + ".type", "invalid_value");
    if (ApiError e = read_text_block((*c)[k], p, &text); !e.ok()) return e;
    append(out, text);
  }
  return {};
}

// A user message: text blocks become user content, tool_result blocks tool messages, in block order
// (the renderer merges them into one user turn, §2.5). `tool_ids` holds every earlier tool_use id.
ApiError read_user(const Json& content, const std::string& path, const std::set<std::string>& tool_ids,
                   std::vector<Message>* out) {
  if (content.is_string()) {
    out->push_back(user_message(content.get<std::string>()));
    return {};
  }
  if (!content.is_array()) return bad_request(path + ": expected a string or an array of content blocks", path);
  std::optional<Message> text;  // consecutive text blocks
  auto flush = [&] {
    if (text) out->push_back(std::move(*text));
    text.reset();
  };
  for (size_t k = 0; k < content.size(); ++k) {
    const Json& b = content[k];
    const std::string p = at(path, k);
    if (!b.is_object()) return bad_request(p + ": expected a content block object", p);
    std::string type;
    if (ApiError e = read_string(b, "type", p + ".type", &type); !e.ok()) return e;
    if (type == "text") {
      std::string t;
      if (ApiError e = read_text_block(b, p, &t); !e.ok()) return e;
      if (!text) text = user_message("");
      append(&text->content, t);
    } else if (type == "tool_result") {
      flush();
      Message m;
      m.role = Role::kTool;
      if (!field(b, "tool_use_id")) return bad_request(p + ".tool_use_id: required", p + ".tool_use_id");
      if (ApiError e = read_string(b, "tool_use_id", p + ".tool_use_id", &m.tool_call_id); !e.ok()) return e;
      if (!tool_ids.count(m.tool_call_id))
        return bad_request(
            p + ".tool_use_id: '" + m.tool_call_id + "' answers no tool_use block of an earlier assistant message",
            p + ".tool_use_id");
      if (ApiError e = read_tool_result_content(b, p + ".content", &m.content); !e.ok()) return e;
      bool is_error = false;
      if (ApiError e = read_bool(b, "is_error", p + ".is_error", &is_error); !e.ok()) return e;
      // DECISION: the renderer's tool result has no error flag; the text says it.
      if (is_error) m.content = "Error: " + m.content;
      out->push_back(std::move(m));
    } else if (type == "tool_use" || type == "thinking" || type == "redacted_thinking") {
      return bad_request(p + ".type: a " + type + " block belongs in an assistant message", p + ".type");
    } else {
      return bad_request(p + ".type: " + unsupported_block(type), p + ".type");
    }
  }
  flush();
  if (content.empty()) out->push_back(user_message(""));
  return {};
}

// An assistant message: text -> content, thinking -> reasoning, tool_use -> tool calls.
ApiError read_assistant(const Json& content, const std::string& path, std::set<std::string>* tool_ids,
                        std::vector<Message>* out) {
  Message m;
  m.role = Role::kAssistant;
  if (content.is_string()) {
    m.content = content.get<std::string>();
    out->push_back(std::move(m));
    return {};
  }
  if (!content.is_array()) return bad_request(path + ": expected a string or an array of content blocks", path);
  for (size_t k = 0; k < content.size(); ++k) {
    const Json& b = content[k];
    const std::string p = at(path, k);
    if (!b.is_object()) return bad_request(p + ": expected a content block object", p);
    std::string type;
    if (ApiError e = read_string(b, "type", p + ".type", &type); !e.ok()) return e;
    if (type == "text") {
      std::string t;
      if (ApiError e = read_text_block(b, p, &t); !e.ok()) return e;
      append(&m.content, t);
    } else if (type == "thinking") {
      std::string t;
      if (ApiError e = read_string(b, "thinking", p + ".thinking", &t); !e.ok()) return e;
      append(&m.reasoning, t);  // the signature is Anthropic's; nothing to verify here
    } else if (type == "redacted_thinking") {
      continue;  // encrypted reasoning of another model: nothing to render
    } else if (type == "tool_use") {
      chat::ToolCall call;
      if (!field(b, "id")) return bad_request(p + ".id: required", p + ".id");
      if (ApiError e = read_string(b, "id", p + ".id", &call.id); !e.ok()) return e;
      if (ApiError e = read_string(b, "name", p + ".name", &call.name); !e.ok()) return e;
      // Written into the DSML markup unescaped (as chat_request.cpp's tool-call names).
      if (call.name.empty() || call.name.find_first_of("\"<\n") != std::string::npos)
        return bad_request(
            p + ".name: '" + call.name + "' is not a tool name (non-empty, without '\"', '<' or line breaks)",
            p + ".name");
      const Json* input = field(b, "input");
      if (input && !input->is_object()) return bad_request(p + ".input: expected an object", p + ".input");
      call.arguments = input ? chat::Json(*input) : chat::Json::object();
      tool_ids->insert(call.id);
      m.tool_calls.push_back(std::move(call));
    } else if (type == "tool_result") {
      return bad_request(p + ".type: a tool_result block belongs in a user message", p + ".type");
    } else {
      return bad_request(p + ".type: " + unsupported_block(type), p + ".type");
    }
  }
  out->push_back(std::move(m));
  return {};
}

ApiError read_messages(const Json& body, std::vector<Message>* out) {
  const Json* ms = field(body, "messages");
  if (!ms) return bad_request("messages: required", "messages");
  if (!ms->is_array()) return bad_request("messages: expected an array of messages", "messages");
  if (ms->empty()) return bad_request("messages: at least one message is required", "messages");
  std::set<std::string> tool_ids;
  for (size_t i = 0; i < ms->size(); ++i) {
    const Json& m = (*ms)[i];
    const std::string p = at("messages", i);
    if (!m.is_object()) return bad_request(p + ": expected an object", p);
    std::string role;
    if (ApiError e = read_string(m, "role", p + ".role", &role); !e.ok()) return e;
    const Json* content = field(m, "content");
    if (!content) return bad_request(p + ".content: required", p + ".content");
    // As Anthropic: every message has content, but for a final assistant message (a prefill).
    const bool may_be_empty = role == "assistant" && i + 1 == ms->size();
    if (!may_be_empty && ((content->is_string() && content->get_ref<const std::string&>().empty()) ||
                          (content->is_array() && content->empty())))
      return bad_request(p + ".content: must not be empty (only a final assistant message may be)", p + ".content");
    if (role == "user") {
      if (ApiError e = read_user(*content, p + ".content", tool_ids, out); !e.ok()) return e;
    } else if (role == "assistant") {
      if (ApiError e = read_assistant(*content, p + ".content", &tool_ids, out); !e.ok()) return e;
      if (i + 1 == ms->size()) {
        // A final assistant message is prefilled output: the response continues it.
        if (!out->back().tool_calls.empty())
          return bad_request(p + ": a final assistant message (a continuation) cannot have tool_use blocks", p);
        out->back().prefix = true;
      }
    } else {
      return bad_request(p + ".role: '" + role +
                             "' is not one of user, assistant (system goes in the top-level "
                             "`system` field)",
                         p + ".role");
    }
  }
  return {};
}

// tools: custom tools {name, description?, input_schema} -> the renderer's function objects.
ApiError read_tools(const Json& body, chat::RenderOptions* r) {
  const Json* ts = field(body, "tools");
  if (!ts) return {};
  if (!ts->is_array()) return bad_request("tools: expected an array", "tools");
  std::set<std::string> names;
  for (size_t i = 0; i < ts->size(); ++i) {
    const Json& t = (*ts)[i];
    const std::string p = at("tools", i);
    if (!t.is_object()) return bad_request(p + ": expected an object", p);
    std::string type = "custom", name, description;
    if (ApiError e = read_string(t, "type", p + ".type", &type); !e.ok()) return e;
    if (type != "custom")
      return bad_request(p + ".type: '" + type +
                             "' is a server tool; strata serves custom tools only "
                             "({name, description, input_schema})",
                         p + ".type");
    if (ApiError e = read_string(t, "name", p + ".name", &name); !e.ok()) return e;
    if (!chat::is_valid_tool_name(name))
      return bad_request(p + ".name: '" + name + "' must match ^[A-Za-z0-9_.:-]{1,64}$", p + ".name");
    if (!names.insert(name).second)
      return bad_request(p + ".name: tool names must be unique, '" + name + "' appears twice", p + ".name");
    if (ApiError e = read_string(t, "description", p + ".description", &description); !e.ok()) return e;
    const Json* schema = field(t, "input_schema");
    if (!schema) return bad_request(p + ".input_schema: required", p + ".input_schema");
    if (!schema->is_object())
      return bad_request(p + ".input_schema: expected a JSON Schema object", p + ".input_schema");
    chat::Json f = chat::Json::object();
    f["name"] = name;
    if (field(t, "description")) f["description"] = description;
    f["parameters"] = chat::Json(*schema);
    r->tools.push_back(std::move(f));
  }
  return {};
}

ApiError read_tool_choice(const Json& body, chat::RenderOptions* r, bool* parallel) {
  const Json* tc = field(body, "tool_choice");
  if (!tc) return {};
  if (!tc->is_object())
    return bad_request("tool_choice: expected an object {\"type\": auto|any|tool|none}", "tool_choice");
  std::string type;
  if (ApiError e = read_string(*tc, "type", "tool_choice.type", &type); !e.ok()) return e;
  bool disable_parallel = false;
  if (ApiError e =
          read_bool(*tc, "disable_parallel_tool_use", "tool_choice.disable_parallel_tool_use", &disable_parallel);
      !e.ok())
    return e;
  *parallel = !disable_parallel;
  if (type == "auto") {
    r->tool_choice = chat::ToolChoice::kAuto;
  } else if (type == "none") {
    r->tool_choice = chat::ToolChoice::kNone;
  } else if (type == "any") {
    if (r->tools.empty()) return bad_request("tool_choice: \"any\" needs tools", "tool_choice.type");
    r->tool_choice = chat::ToolChoice::kRequired;
  } else if (type == "tool") {
    std::string name;
    if (ApiError e = read_string(*tc, "name", "tool_choice.name", &name); !e.ok()) return e;
    bool found = false;
    for (const chat::Json& f : r->tools) found = found || f.value("name", std::string()) == name;
    if (!found) return bad_request("tool_choice.name: '" + name + "' is not in tools", "tool_choice.name");
    r->tool_choice = chat::ToolChoice::kNamed;
    r->tool_choice_name = name;
  } else {
    return bad_request("tool_choice.type: '" + type + "' is not one of auto, any, tool, none", "tool_choice.type");
  }
  return {};
}

// thinking: {"type": "enabled", "budget_tokens": N} | {"type": "adaptive"} | {"type": "disabled"}.
ApiError read_thinking(const Json& body, std::optional<bool>* out) {
  const Json* t = field(body, "thinking");
  if (!t) return {};
  if (!t->is_object()) return bad_request("thinking: expected an object {\"type\": enabled|disabled}", "thinking");
  std::string type;
  if (ApiError e = read_string(*t, "type", "thinking.type", &type); !e.ok()) return e;
  if (type == "enabled" || type == "adaptive") {
    // DECISION: budget_tokens is checked but not enforced: V4.1 has no token budget for its
    // reasoning (effort is its knob), and the reasoning counts against max_tokens either way.
    int64_t budget = 0;
    if (ApiError e = read_int(*t, "budget_tokens", "thinking.budget_tokens", 1, INT32_MAX, &budget); !e.ok()) return e;
    *out = true;
  } else if (type == "disabled") {
    *out = false;
  } else {
    return bad_request("thinking.type: '" + type + "' is not one of enabled, adaptive, disabled", "thinking.type");
  }
  return {};
}

}  // namespace

ApiError parse_messages_request_json(const Json& body, const ServerOptions& o, MessagesRoute route, ChatRequest* out) {
  ChatRequest r;
  const Json* model = field(body, "model");
  if (!model) return bad_request("model: required", "model");
  if (!model->is_string()) return bad_request("model: expected a string", "model");
  r.model = model->get<std::string>();
  if (!o.any_model && r.model != o.model_id && r.model != "deepseek-flash" && r.model != "deepseek-chat" &&
      r.model != "deepseek-reasoner")
    return model_not_found(r.model);

  if (ApiError e = read_system(body, &r.messages); !e.ok()) return e;
  if (ApiError e = read_messages(body, &r.messages); !e.ok()) return e;
  if (route == MessagesRoute::kCreate) {
    if (!field(body, "max_tokens")) return bad_request("max_tokens: required", "max_tokens");
    if (ApiError e = read_int(body, "max_tokens", "max_tokens", 1, INT32_MAX, &r.max_tokens); !e.ok()) return e;
    if (ApiError e = read_bool(body, "stream", "stream", &r.stream); !e.ok()) return e;
  }
  if (ApiError e = read_sampling(body, &r.sampling); !e.ok()) return e;
  // Anthropic's ranges, narrower than the chat API's: temperature in [0, 1], top_k >= 0 (no -1),
  // stop_sequences an array only.
  if (const Json* t = field(body, "temperature"); t && t->get<double>() > 1)
    return bad_request("temperature: must be between 0 and 1, got " + t->dump(), "temperature");
  if (const Json* k = field(body, "top_k"); k && k->get<double>() < 0)
    return bad_request("top_k: must be at least 0, got " + k->dump(), "top_k");
  if (const Json* ss = field(body, "stop_sequences"); ss && !ss->is_array())
    return bad_request("stop_sequences: expected an array of strings", "stop_sequences");
  if (ApiError e = read_stop(body, "stop_sequences", "stop_sequences", &r.stop); !e.ok()) return e;
  if (ApiError e = read_tools(body, &r.render); !e.ok()) return e;
  if (ApiError e = read_tool_choice(body, &r.render, &r.parallel_tool_calls); !e.ok()) return e;

  std::optional<bool> explicit_thinking;
  if (ApiError e = read_thinking(body, &explicit_thinking); !e.ok()) return e;
  bool thinking = explicit_thinking.value_or(r.model == "deepseek-reasoner");
  const bool forced =
      r.render.tool_choice == chat::ToolChoice::kRequired || r.render.tool_choice == chat::ToolChoice::kNamed;
  if (forced) {
    // §4 rule 7, and Anthropic's own rule: a forced tool call cannot be combined with thinking.
    if (thinking && explicit_thinking)
      return bad_request(
          "thinking: a forced tool call (tool_choice any or tool) cannot be combined with thinking enabled",
          "thinking");
    thinking = false;
  }
  r.render.thinking = thinking;
  int effort = o.default_effort > 0 ? o.default_effort : (o.effort_table == EffortTable::kOfficial ? 75 : 50);
  if (const Json* oc = field(body, "output_config")) {  // Anthropic's effort: low | medium | high | max
    if (!oc->is_object()) return bad_request("output_config: expected an object", "output_config");
    if (const Json* ef = field(*oc, "effort"))
      if (ApiError e = parse_effort(*ef, o.effort_table, "output_config.effort", &effort); !e.ok()) return e;
  }
  r.render.reasoning_effort = effort;

  if (o.test_scripted_output) {
    if (ApiError e = read_string(body, "strata_test_output", "strata_test_output", &r.test_output); !e.ok()) return e;
    r.has_test_output = field(body, "strata_test_output") != nullptr;
  }
  *out = std::move(r);
  return {};
}

ApiError parse_messages_request(const std::string& body, const ServerOptions& options, MessagesRoute route,
                                ChatRequest* out) {
  Json j;
  if (ApiError e = parse_body(body, &j); !e.ok()) return e;
  return parse_messages_request_json(j, options, route, out);
}

}  // namespace strata::server
