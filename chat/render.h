// The DeepSeek V4.1 chat renderer: conversation -> prompt token ids (chat-and-api.md §2.5, §3, §4).
// render_conversation is the full renderer (system prompts, history with reasoning and tool calls,
// tool results, tools, response_format, forced tool calls, continuation); its goldens are
// fixtures/chat/render_cases.json. render_single_turn is the one-message case `strata run` uses.
// Both build ids through PromptBuilder, so client text never turns into special tokens.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "chat/conversation.h"
#include "core/status.h"
#include "tokenizer/tokenizer.h"

namespace strata::chat {

// Default reasoning effort N when thinking is on (chat-and-api.md §3: absent -> 75).
inline constexpr int kDefaultReasoningEffort = 75;

// One user message with a generation prompt:
//   thinking off: <｜begin▁of▁sentence｜><｜User｜>TEXT<｜Assistant｜></think>
//   thinking on:  <｜begin▁of▁sentence｜><｜System｜>Reasoning Effort: N (range 1-100, the higher the
//                 value, the more thorough the reasoning)\n\n<｜User｜>TEXT<｜Assistant｜><think>
// `user_text` is client text: never scanned for special tokens. `effort` is used only when thinking.
// DECISION: with a tokenizer that has no "</think>" (the DeepSeek-V3 tokenizer of the tiny fixture
// checkpoint) thinking-off output ends at <｜Assistant｜>, which is what the V3 chat template
// renders (fixtures/v41-tiny/tokens.json).
// Errors: kInvalidArgument when effort is outside 1..100; kNotFound naming a token the tokenizer
// lacks (thinking on needs <｜System｜> and <think>, i.e. the V4.1 tokenizer).
[[nodiscard]] Result<std::vector<int32_t>> render_single_turn(const tokenizer::Tokenizer& tokenizer,
                                                              std::string_view user_text, bool thinking,
                                                              int effort = kDefaultReasoningEffort);

// Where generation starts, i.e. the output parser's initial state (chat-and-api.md §5).
enum class ParseStart {
  kReasoning,  // the prompt ends with <think> (or continues unfinished reasoning)
  kContent,    // the prompt ends with </think> (or continues content)
  kTools,      // a forced tool call: the prompt ends inside a <｜DSML｜ calls> block
};

struct RenderedPrompt {
  std::vector<int32_t> ids;   // BOS first
  std::string text;           // the same prompt as text, special tokens spelled out
  ParseStart start = ParseStart::kContent;
  bool tools_rendered = false;  // a TOOLS BLOCK is in the prompt: the parser looks for tool calls
  std::string forced_tool;      // a named forced call: the prompt ends inside this tool's invoke
};

// Renders `messages` (chat-and-api.md §2.5 merging of tool/user turns and tool-result reordering,
// §3 thinking/effort/drop_thinking, §4 rules 1-7). Messages are taken as checked by the caller;
// what the renderer still enforces returns kInvalidArgument naming `messages[i]` or the option:
// no messages, a tool message with no earlier assistant tool_calls, a final assistant message that
// is not a continuation (`prefix`) while a generation prompt is asked for, a continuation with tool
// calls, `prefix` on a message that is not the last, options failing RenderOptions::validate.
// kNotFound when the tokenizer lacks a V4.1 token (a V3 tokenizer.json).
[[nodiscard]] Result<RenderedPrompt> render_conversation(const tokenizer::Tokenizer& tokenizer,
                                                         std::span<const Message> messages,
                                                         const RenderOptions& options);

}  // namespace strata::chat
