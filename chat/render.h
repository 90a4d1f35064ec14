// The DeepSeek V4.1 chat renderer: conversation -> prompt token ids (chat-and-api.md §4).
// For now only the single-turn case `strata run` needs; the full renderer (system prompts, history,
// tools, response_format; goldens in fixtures/chat/render_cases.json) builds on the same
// PromptBuilder and joins this header later.
#pragma once

#include <cstdint>
#include <string_view>
#include <vector>

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

}  // namespace strata::chat
