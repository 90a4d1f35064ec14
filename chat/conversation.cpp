#include "chat/conversation.h"

namespace strata::chat {

std::string_view role_name(Role r) {
  switch (r) {
    case Role::kSystem: return "system";
    case Role::kUser: return "user";
    case Role::kAssistant: return "assistant";
    case Role::kTool: return "tool";
  }
  return "?";
}

bool is_valid_tool_name(std::string_view name) {
  if (name.empty() || name.size() > 64) return false;
  for (const char c : name) {
    const bool ok = (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '_' ||
                    c == '.' || c == ':' || c == '-';
    if (!ok) return false;
  }
  return true;
}

Status RenderOptions::validate() const {
  if (reasoning_effort < 1 || reasoning_effort > 100)
    return InvalidArgument("reasoning_effort: " + std::to_string(reasoning_effort) + " is outside 1..100");
  for (size_t i = 0; i < tools.size(); ++i) {
    const Json& f = tools[i];
    const std::string where = "tools[" + std::to_string(i) + "].function";
    if (!f.is_object()) return InvalidArgument(where + ": expected an object");
    auto it = f.find("name");
    if (it == f.end() || !it->is_string() || !is_valid_tool_name(it->get_ref<const std::string&>()))
      return InvalidArgument(where + ".name: expected a string matching ^[A-Za-z0-9_.:-]{1,64}$");
  }
  if (tool_choice == ToolChoice::kNamed) {
    bool found = false;
    for (const Json& f : tools) found = found || f.value("name", std::string()) == tool_choice_name;
    if (!found) return InvalidArgument("tool_choice: names '" + tool_choice_name + "', which is not in tools");
  }
  if ((tool_choice == ToolChoice::kRequired || tool_choice == ToolChoice::kNamed) && tools.empty())
    return InvalidArgument("tool_choice: a forced tool call needs tools");
  if ((tool_choice == ToolChoice::kRequired || tool_choice == ToolChoice::kNamed) && thinking)
    return InvalidArgument("tool_choice: a forced tool call needs thinking off (chat-and-api.md §4 rule 7)");
  return Status();
}

Json tool_arguments_from_text(std::string_view text) {
  // Nesting deeper than kMaxJsonNesting counts as "not JSON": kept as the raw string.
  Json v = parse_json_bounded(text);
  if (v.is_string()) v = parse_json_bounded(v.get_ref<const std::string&>());
  if (v.is_object()) return v;
  Json wrapped = Json::object();
  wrapped["arguments"] = std::string(text);
  return wrapped;
}

}  // namespace strata::chat
