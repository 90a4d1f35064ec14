// A chat conversation as the V4.1 renderer takes it: messages whose fields are already checked and
// normalised by the caller (server/ turns OpenAI request JSON into these; chat-and-api.md §2), and
// the rendering options of §3-4 (thinking, effort, tools, response_format, tool_choice).
// Plain values; no I/O. Thread safety: values.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "chat/json_dumps.h"
#include "core/status.h"

namespace strata::chat {

// Roles after §2.1 mapping (`developer` arrives here as kSystem).
enum class Role { kSystem, kUser, kAssistant, kTool };

std::string_view role_name(Role r);

// One historical tool call of an assistant message.
struct ToolCall {
  std::string id;    // tool_call_id that tool messages answer ("" allowed)
  std::string name;  // function name
  Json arguments;    // a JSON object, keys in the order given (see tool_arguments_from_text)
};

struct Message {
  Role role = Role::kUser;
  std::string content;               // text parts joined by "\n\n"; null content is ""
  std::string reasoning;             // assistant reasoning_content ("" = none)
  std::vector<ToolCall> tool_calls;  // assistant only
  std::string tool_call_id;          // tool only
  bool prefix = false;               // assistant only: a continuation to extend (§2.6), last message only
};

enum class ToolChoice { kAuto, kNone, kRequired, kNamed };

// How to render (chat-and-api.md §3-4). Defaults: thinking on, effort 75, drop_thinking.
struct RenderOptions {
  bool thinking = true;             // T
  int reasoning_effort = 75;        // N in 1..100, rendered only when thinking
  bool drop_thinking = true;        // D; forced false when tools are rendered (§3)
  std::vector<Json> tools;          // the `function` objects of the request's tools, in order
  Json response_format;             // null = none; else the response_format object, rendered as json(...)
  ToolChoice tool_choice = ToolChoice::kAuto;
  std::string tool_choice_name;     // kNamed: the tool to call (must be in `tools`)
  bool add_generation_prompt = true;  // false: a finished transcript, no trailing assistant header

  // kInvalidArgument naming the field: effort outside 1..100, a tool without a valid name, a named
  // choice that names no tool, a forced call (required / named) with thinking on.
  [[nodiscard]] Status validate() const;
};

// §2.7: historical tool-call arguments given as JSON text. Parsed; a string result is parsed once
// more (double-encoded arguments); anything that is still not an object becomes
// {"arguments": <the raw text>} (vLLM's tolerance; the official encoder raises). So does text
// nested deeper than kMaxJsonNesting (the renderer recurses per level).
Json tool_arguments_from_text(std::string_view text);

// True when `name` matches ^[A-Za-z0-9_.:-]{1,64}$ (a tool name that cannot break the DSML markup).
bool is_valid_tool_name(std::string_view name);

}  // namespace strata::chat
