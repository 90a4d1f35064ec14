#include "server/responses_request.h"

#include <optional>
#include <set>

namespace strata::server {

namespace {

using chat::Message;
using chat::Role;

std::string at(const std::string& path, size_t i) { return path + "[" + std::to_string(i) + "]"; }

// A message's content: a string or an array of text parts of the allowed types.
ApiError read_content(const Json& item, const std::string& path, bool assistant, std::string* out) {
  const Json* c = field(item, "content");
  if (!c) return bad_request(path + ": required", path);
  if (c->is_string()) {
    *out = c->get<std::string>();
    return {};
  }
  if (!c->is_array()) return bad_request(path + ": expected a string or an array of content parts", path);
  for (size_t k = 0; k < c->size(); ++k) {
    const Json& part = (*c)[k];
    const std::string p = at(path, k);
    if (!part.is_object()) return bad_request(p + ": expected a content part object", p);
    std::string type, text;
    if (ApiError e = read_string(part, "type", p + ".type", &type); !e.ok()) return e;
    const char* key = "text";
    if (type == "refusal" && assistant) {
      key = "refusal";
    } else if (type != "input_text" && type != "output_text" && type != "text") {
      return bad_request(
          p + ".type: unsupported content type '" + type + "' (strata serves text: input_text, output_text)",
          p + ".type");
    }
    if (!field(part, key)) return bad_request(p + "." + key + ": required", p + "." + key);
    if (ApiError e = read_string(part, key, p + "." + key, &text); !e.ok()) return e;
    if (!out->empty()) *out += "\n\n";
    *out += text;
  }
  return {};
}

// A reasoning item's text: its reasoning_text content, else its summary_text parts.
ApiError read_reasoning(const Json& item, const std::string& path, std::string* out) {
  for (const char* key : {"content", "summary"}) {
    const Json* parts = field(item, key);
    if (!parts) continue;
    if (!parts->is_array()) return bad_request(path + "." + key + ": expected an array", path + "." + key);
    std::string joined;
    for (size_t k = 0; k < parts->size(); ++k) {
      const std::string p = at(path + "." + key, k);
      if (!(*parts)[k].is_object()) return bad_request(p + ": expected an object", p);
      std::string text;
      if (ApiError e = read_string((*parts)[k], "text", p + ".text", &text); !e.ok()) return e;
      if (!joined.empty()) joined += "\n\n";
      joined += text;
    }
    if (!joined.empty()) {
      *out = std::move(joined);
      return {};
    }
  }
  return {};
}

// The input items -> messages; assistant-side items in a row form one assistant turn.
ApiError read_input(const Json& body, std::vector<Message>* out) {
  const Json* in = field(body, "input");
  if (!in) return bad_request("input: required", "input");
  if (in->is_string()) {
    Message m;
    m.role = Role::kUser;
    m.content = in->get<std::string>();
    out->push_back(std::move(m));
    return {};
  }
  if (!in->is_array()) return bad_request("input: expected a string or an array of items", "input");
  if (in->empty()) return bad_request("input: at least one item is required", "input");
  bool in_assistant_turn = false;  // out->back() is an assistant turn still taking items
  auto assistant_turn = [&]() -> Message& {
    if (!in_assistant_turn) {
      Message m;
      m.role = Role::kAssistant;
      out->push_back(std::move(m));
      in_assistant_turn = true;
    }
    return out->back();
  };
  for (size_t i = 0; i < in->size(); ++i) {
    const Json& item = (*in)[i];
    const std::string p = at("input", i);
    if (!item.is_object()) return bad_request(p + ": expected an object", p);
    std::string type = field(item, "role") ? "message" : "";
    if (ApiError e = read_string(item, "type", p + ".type", &type); !e.ok()) return e;
    if (type == "message") {
      std::string role;
      if (ApiError e = read_string(item, "role", p + ".role", &role); !e.ok()) return e;
      if (role == "assistant") {
        Message& m = assistant_turn();
        std::string text;
        if (ApiError e = read_content(item, p + ".content", true, &text); !e.ok()) return e;
        if (!m.content.empty() && !text.empty()) m.content += "\n\n";
        m.content += text;
        continue;
      }
      Message m;
      if (role == "user") {
        m.role = Role::kUser;
      } else if (role == "system" || role == "developer") {
        m.role = Role::kSystem;  // DECISION: chat-and-api.md §2.1, developer is rendered as system
      } else {
        return bad_request(p + ".role: '" + role + "' is not one of user, system, developer, assistant", p + ".role");
      }
      if (ApiError e = read_content(item, p + ".content", false, &m.content); !e.ok()) return e;
      out->push_back(std::move(m));
      in_assistant_turn = false;
    } else if (type == "reasoning") {
      // A reasoning item opens the assistant turn it belongs to.
      in_assistant_turn = in_assistant_turn && out->back().content.empty() && out->back().tool_calls.empty() &&
                          out->back().reasoning.empty();
      std::string text;
      if (ApiError e = read_reasoning(item, p, &text); !e.ok()) return e;
      assistant_turn().reasoning = std::move(text);
    } else if (type == "function_call") {
      chat::ToolCall call;
      if (!field(item, "call_id")) return bad_request(p + ".call_id: required", p + ".call_id");
      if (ApiError e = read_string(item, "call_id", p + ".call_id", &call.id); !e.ok()) return e;
      if (ApiError e = read_string(item, "name", p + ".name", &call.name); !e.ok()) return e;
      // Written into the DSML markup unescaped (as chat_request.cpp's tool-call names).
      if (call.name.empty() || call.name.find_first_of("\"<\n") != std::string::npos)
        return bad_request(
            p + ".name: '" + call.name + "' is not a function name (non-empty, without '\"', '<' or line breaks)",
            p + ".name");
      std::string arguments = "{}";
      if (ApiError e = read_string(item, "arguments", p + ".arguments", &arguments); !e.ok()) return e;
      call.arguments = chat::tool_arguments_from_text(arguments);
      assistant_turn().tool_calls.push_back(std::move(call));
    } else if (type == "function_call_output") {
      Message m;
      m.role = Role::kTool;
      if (!field(item, "call_id")) return bad_request(p + ".call_id: required", p + ".call_id");
      if (ApiError e = read_string(item, "call_id", p + ".call_id", &m.tool_call_id); !e.ok()) return e;
      const Json* o = field(item, "output");
      if (o && o->is_array()) {
        Json wrapped = Json::object();
        wrapped["content"] = *o;
        if (ApiError e = read_content(wrapped, p + ".output", false, &m.content); !e.ok()) return e;
      } else if (ApiError e = read_string(item, "output", p + ".output", &m.content); !e.ok()) {
        return e;
      }
      out->push_back(std::move(m));
      in_assistant_turn = false;
    } else {
      return bad_request(p + ".type: unsupported item type '" + type +
                             "' (strata serves message, reasoning, function_call, function_call_output)",
                         p + ".type");
    }
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
    std::string type, name, description;
    if (ApiError e = read_string(t, "type", p + ".type", &type); !e.ok()) return e;
    if (type != "function")
      return bad_request(p + ".type: only \"function\" tools are supported, got '" + type + "'", p + ".type");
    if (ApiError e = read_string(t, "name", p + ".name", &name); !e.ok()) return e;
    if (!chat::is_valid_tool_name(name))
      return bad_request(p + ".name: '" + name + "' must match ^[A-Za-z0-9_.:-]{1,64}$", p + ".name");
    for (const chat::Json& prev : r->tools)
      if (prev.value("name", std::string()) == name)
        return bad_request(p + ".name: tool names must be unique, '" + name + "' appears twice", p + ".name");
    if (ApiError e = read_string(t, "description", p + ".description", &description); !e.ok()) return e;
    chat::Json f = chat::Json::object();
    f["name"] = name;
    if (field(t, "description")) f["description"] = description;
    if (const Json* params = field(t, "parameters")) {
      if (!params->is_object()) return bad_request(p + ".parameters: expected a JSON Schema object", p + ".parameters");
      f["parameters"] = *params;
    }
    r->tools.push_back(std::move(f));
  }
  return {};
}

ApiError read_tool_choice(const Json& body, chat::RenderOptions* r) {
  const Json* tc = field(body, "tool_choice");
  if (!tc) return {};
  if (tc->is_string()) {
    const std::string s = tc->get<std::string>();
    if (s == "auto")
      r->tool_choice = chat::ToolChoice::kAuto;
    else if (s == "none")
      r->tool_choice = chat::ToolChoice::kNone;
    else if (s == "required")
      r->tool_choice = chat::ToolChoice::kRequired;
    else
      return bad_request("tool_choice: '" + s + "' is not one of none, auto, required", "tool_choice");
    if (r->tool_choice == chat::ToolChoice::kRequired && r->tools.empty())
      return bad_request("tool_choice: \"required\" needs tools", "tool_choice");
    return {};
  }
  if (!tc->is_object())
    return bad_request("tool_choice: expected a string or {\"type\": \"function\", \"name\": ...}", "tool_choice");
  std::string type, name;
  if (ApiError e = read_string(*tc, "type", "tool_choice.type", &type); !e.ok()) return e;
  if (type != "function") return bad_request("tool_choice.type: only \"function\" is supported", "tool_choice.type");
  if (ApiError e = read_string(*tc, "name", "tool_choice.name", &name); !e.ok()) return e;
  bool found = false;
  for (const chat::Json& f : r->tools) found = found || f.value("name", std::string()) == name;
  if (!found) return bad_request("tool_choice.name: '" + name + "' is not in tools", "tool_choice.name");
  r->tool_choice = chat::ToolChoice::kNamed;
  r->tool_choice_name = name;
  return {};
}

// text.format -> the chat path's response_format (json_schema's fields nested as chat expects).
ApiError read_text_format(const Json& body, chat::RenderOptions* r) {
  const Json* text = field(body, "text");
  if (!text) return {};
  if (!text->is_object()) return bad_request("text: expected an object", "text");
  const Json* f = field(*text, "format");
  if (!f) return {};
  if (!f->is_object()) return bad_request("text.format: expected an object", "text.format");
  std::string type;
  if (ApiError e = read_string(*f, "type", "text.format.type", &type); !e.ok()) return e;
  if (type == "text" || type.empty()) return {};
  if (type == "json_object") {
    r->response_format = chat::Json{{"type", "json_object"}};
  } else if (type == "json_schema") {
    if (ApiError e = check_json_schema_name(*f, "text.format.name"); !e.ok()) return e;
    chat::Json schema = chat::Json::object();
    for (const char* k : {"name", "description", "schema", "strict"})
      if (const Json* v = field(*f, k)) schema[k] = *v;
    r->response_format = chat::Json{{"type", "json_schema"}, {"json_schema", std::move(schema)}};
  } else {
    return bad_request("text.format.type: '" + type + "' is not one of text, json_object, json_schema",
                       "text.format.type");
  }
  return {};
}

// Fields strata does not implement are refused by name rather than ignored: a client that relies
// on one must not get an answer that silently differs from what it asked for.
ApiError check_responses_fields(const Json& body, const ServerOptions& o) {
  static const std::set<std::string> kUnsupported = {
      "conversation",  // OpenAI's server-side conversations (previous_response_id is served)
      "prompt",        // stored prompt templates
      "top_logprobs",  // logprobs are served on /v1/chat/completions and /v1/completions
      "max_tool_calls",
  };
  // Read below, or accepted without effect on the output: metadata is echoed; user,
  // safety_identifier, prompt_cache_key and service_tier are hints; include only asks for extra
  // fields (reasoning text is always returned in full); stream_options tunes event framing.
  static const std::set<std::string> kKnown = {"model",
                                               "input",
                                               "instructions",
                                               "previous_response_id",
                                               "store",
                                               "stream",
                                               "max_output_tokens",
                                               "temperature",
                                               "top_p",
                                               "top_k",
                                               "min_p",
                                               "seed",
                                               "presence_penalty",
                                               "frequency_penalty",
                                               "parallel_tool_calls",
                                               "tools",
                                               "tool_choice",
                                               "text",
                                               "reasoning",
                                               "metadata",
                                               "background",
                                               "truncation",
                                               "user",
                                               "safety_identifier",
                                               "prompt_cache_key",
                                               "service_tier",
                                               "include",
                                               "stream_options"};
  for (auto it = body.begin(); it != body.end(); ++it) {
    const std::string& k = it.key();
    if (kUnsupported.count(k))
      return bad_request(k + ": not supported by strata's /v1/responses", k, "unsupported_parameter");
    if (k == "strata_test_output" && o.test_scripted_output) continue;
    if (!kKnown.count(k)) return bad_request(k + ": unknown parameter", k, "unknown_parameter");
  }
  // truncation "auto" would drop the conversation's start to fit the context; strata answers 400.
  if (const Json* t = field(body, "truncation"); t && !(t->is_string() && t->get<std::string>() == "disabled"))
    return bad_request("truncation: only \"disabled\" is supported", "truncation", "unsupported_parameter");
  return {};
}

}  // namespace

ApiError parse_responses_request(const std::string& body_text, const ServerOptions& o, ResponsesRequest* out) {
  Json body;
  if (ApiError e = parse_body(body_text, &body); !e.ok()) return e;
  ResponsesRequest r;
  ChatRequest& c = r.chat;
  const Json* model = field(body, "model");
  if (!model) return bad_request("model: required", "model");
  if (!model->is_string()) return bad_request("model: expected a string", "model");
  c.model = model->get<std::string>();
  const bool alias_chat = c.model == "deepseek-chat", alias_reasoner = c.model == "deepseek-reasoner";
  if (!o.any_model && c.model != o.model_id && c.model != "deepseek-flash" && !alias_chat && !alias_reasoner)
    return model_not_found(c.model);
  if (ApiError e = check_responses_fields(body, o); !e.ok()) return e;
  bool background = false;
  if (ApiError e = read_bool(body, "background", "background", &background); !e.ok()) return e;
  if (background) return bad_request("background: not supported", "background", "unsupported_parameter");

  if (ApiError e = read_string(body, "instructions", "instructions", &r.instructions); !e.ok()) return e;
  if (ApiError e = read_input(body, &r.input); !e.ok()) return e;
  if (ApiError e = read_string(body, "previous_response_id", "previous_response_id", &r.previous_response_id); !e.ok())
    return e;
  if (field(body, "previous_response_id") && r.previous_response_id.empty())
    return bad_request("previous_response_id: must not be empty (omit it to start a new conversation)",
                       "previous_response_id");
  if (ApiError e = read_bool(body, "store", "store", &r.store); !e.ok()) return e;
  if (ApiError e = read_bool(body, "stream", "stream", &c.stream); !e.ok()) return e;
  if (ApiError e = read_int(body, "max_output_tokens", "max_output_tokens", 1, INT32_MAX, &c.max_tokens); !e.ok())
    return e;
  if (ApiError e = read_sampling(body, &c.sampling); !e.ok()) return e;
  if (ApiError e = read_bool(body, "parallel_tool_calls", "parallel_tool_calls", &c.parallel_tool_calls); !e.ok())
    return e;
  if (ApiError e = read_tools(body, &c.render); !e.ok()) return e;
  if (ApiError e = read_tool_choice(body, &c.render); !e.ok()) return e;
  if (ApiError e = read_text_format(body, &c.render); !e.ok()) return e;

  // Thinking: reasoning.effort "none" off, any other effort on; absent: the chat path's rules.
  bool thinking = alias_chat ? false : (alias_reasoner ? true : o.default_thinking);
  int effort = o.default_effort > 0 ? o.default_effort : (o.effort_table == EffortTable::kOfficial ? 75 : 50);
  if (const Json* rs = field(body, "reasoning")) {
    if (!rs->is_object()) return bad_request("reasoning: expected an object", "reasoning");
    if (const Json* ef = field(*rs, "effort")) {
      if (ef->is_string() && ef->get<std::string>() == "none") {
        thinking = false;
      } else {
        if (ApiError e = parse_effort(*ef, o.effort_table, "reasoning.effort", &effort); !e.ok()) return e;
        thinking = true;
      }
    }
  }
  // §4 rule 7: a forced tool call renders with thinking off.
  if (c.render.tool_choice == chat::ToolChoice::kRequired || c.render.tool_choice == chat::ToolChoice::kNamed)
    thinking = false;
  c.render.thinking = thinking;
  c.render.reasoning_effort = effort;

  for (const char* k : {"tools", "tool_choice", "parallel_tool_calls", "temperature", "top_p", "max_output_tokens",
                        "instructions", "previous_response_id", "metadata", "text", "reasoning", "store"})
    if (const Json* v = field(body, k)) r.echo[k] = *v;
  if (o.test_scripted_output) {
    if (ApiError e = read_string(body, "strata_test_output", "strata_test_output", &c.test_output); !e.ok()) return e;
    c.has_test_output = field(body, "strata_test_output") != nullptr;
  }
  *out = std::move(r);
  return {};
}

ApiError assemble_responses_conversation(const std::vector<chat::Message>& history, ResponsesRequest* r) {
  std::vector<Message>& ms = r->chat.messages;
  ms.clear();
  if (!r->instructions.empty()) {
    Message sys;
    sys.role = Role::kSystem;
    sys.content = r->instructions;
    ms.push_back(std::move(sys));
  }
  ms.insert(ms.end(), history.begin(), history.end());
  const size_t first_input = ms.size();
  ms.insert(ms.end(), r->input.begin(), r->input.end());
  std::set<std::string> call_ids;
  for (size_t i = 0; i < ms.size(); ++i) {
    for (const chat::ToolCall& c : ms[i].tool_calls) call_ids.insert(c.id);
    if (ms[i].role == Role::kTool && !call_ids.count(ms[i].tool_call_id)) {
      const std::string p = i >= first_input ? at("input", i - first_input) : std::string("previous_response_id");
      return bad_request(p + ": function_call_output for call_id '" + ms[i].tool_call_id +
                             "', which answers no function_call before it",
                         i >= first_input ? p + ".call_id" : p);
    }
  }
  if (ms.empty() || ms.back().role == Role::kAssistant)
    return bad_request("input: the conversation must end with a user, system or function_call_output item", "input");
  return {};
}

}  // namespace strata::server
