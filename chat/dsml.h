// The V4.1 output markup shared by the renderer and the output parser (chat-and-api.md §1, §4):
// the special-token texts, the DSML tool-call tags and the tools instructions of the system prompt.
// `｜` is U+FF5C and `▁` U+2581; `｜DSML｜` is one token (id 128825) while the `<`, `/` and tag word
// around it are ordinary text.
// Source: DeepSeek V4.1 encoding/encoding.py (constants and TOOLS_TEMPLATE), re-typed.
#pragma once

#include <string_view>

namespace strata::chat::dsml {

inline constexpr std::string_view kBos = "<｜begin▁of▁sentence｜>";
inline constexpr std::string_view kEos = "<｜end▁of▁sentence｜>";
inline constexpr std::string_view kSystem = "<｜System｜>";
inline constexpr std::string_view kUser = "<｜User｜>";
inline constexpr std::string_view kAssistant = "<｜Assistant｜>";
inline constexpr std::string_view kThinkOpen = "<think>";
inline constexpr std::string_view kThinkClose = "</think>";

// V4.1 tags.
inline constexpr std::string_view kCallsOpen = "<｜DSML｜ calls>";
inline constexpr std::string_view kCallsClose = "</｜DSML｜ calls>";
inline constexpr std::string_view kInvokeOpen = "<｜DSML｜ invoke name=\"";  // + NAME + "\">"
inline constexpr std::string_view kInvokeClose = "</｜DSML｜ invoke>";
inline constexpr std::string_view kParamOpen = "<｜DSML｜ parameter name=\"";  // + KEY + "\" string=\"S\">"
inline constexpr std::string_view kParamClose = "</｜DSML｜ parameter>";

// V4 spellings, accepted by the parser as a fallback (§5).
inline constexpr std::string_view kCallsOpenV4 = "<｜DSML｜tool_calls>";
inline constexpr std::string_view kCallsCloseV4 = "</｜DSML｜tool_calls>";
inline constexpr std::string_view kInvokeOpenV4 = "<｜DSML｜invoke name=\"";
inline constexpr std::string_view kInvokeCloseV4 = "</｜DSML｜invoke>";
inline constexpr std::string_view kParamOpenV4 = "<｜DSML｜parameter name=\"";
inline constexpr std::string_view kParamCloseV4 = "</｜DSML｜parameter>";

// The tools instructions up to the schemas, and the closing line (§4 TOOLS BLOCK).
inline constexpr std::string_view kToolsHeader =
    "## Tools\n\n"
    "You have access to a set of tools to help answer the user's question. You can invoke tools by writing a "
    "\"<｜DSML｜ calls>\" block like the following:\n\n"
    "<｜DSML｜ calls>\n"
    "<｜DSML｜ invoke name=\"$TOOL_NAME\">\n"
    "<｜DSML｜ parameter name=\"$PARAMETER_NAME\" string=\"true|false\">$PARAMETER_VALUE</｜DSML｜ parameter>\n"
    "...\n"
    "</｜DSML｜ invoke>\n"
    "<｜DSML｜ invoke name=\"$TOOL_NAME2\">\n"
    "...\n"
    "</｜DSML｜ invoke>\n"
    "</｜DSML｜ calls>\n\n"
    "String parameters should be specified as is and set `string=\"true\"`. For all other types (numbers, "
    "booleans, arrays, objects), pass the value in JSON format and set `string=\"false\"`.\n\n"
    "If thinking_mode is enabled (triggered by <think>), you MUST output your complete reasoning inside "
    "<think>...</think> BEFORE any tool calls or final response.\n\n"
    "Otherwise, output directly after </think> with tool calls or final response.\n\n"
    "### Available Tool Schemas\n\n";
inline constexpr std::string_view kToolsFooter =
    "\n\nYou MUST strictly follow the above defined tool name and parameter schemas to invoke tool calls.\n";

inline constexpr std::string_view kResponseFormatHeader =
    "## Response Format:\n\nYou MUST strictly adhere to the following schema to reply:\n";

}  // namespace strata::chat::dsml
