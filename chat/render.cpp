#include "chat/render.h"

#include <string>

#include "chat/prompt_builder.h"

namespace strata::chat {

namespace {

// Token texts of chat-and-api.md §1.
constexpr std::string_view kBos = "<｜begin▁of▁sentence｜>";
constexpr std::string_view kSystem = "<｜System｜>";
constexpr std::string_view kUser = "<｜User｜>";
constexpr std::string_view kAssistant = "<｜Assistant｜>";
constexpr std::string_view kThinkOpen = "<think>";
constexpr std::string_view kThinkClose = "</think>";

// §4 rule 1: the effort line that opens the system turn in thinking mode.
std::string effort_line(int effort) {
  return "Reasoning Effort: " + std::to_string(effort) +
         " (range 1-100, the higher the value, the more thorough the reasoning)\n\n";
}

}  // namespace

Result<std::vector<int32_t>> render_single_turn(const tokenizer::Tokenizer& tokenizer, std::string_view user_text,
                                                bool thinking, int effort) {
  PromptBuilder b(tokenizer);
  STRATA_RETURN_IF_ERROR(b.special(kBos));
  if (thinking) {
    if (effort < 1 || effort > 100) {
      return InvalidArgument("chat: reasoning effort " + std::to_string(effort) + " outside 1..100");
    }
    STRATA_RETURN_IF_ERROR(b.special(kSystem));
    b.template_text(effort_line(effort));
  }
  STRATA_RETURN_IF_ERROR(b.special(kUser));
  b.client_text(user_text);
  STRATA_RETURN_IF_ERROR(b.special(kAssistant));
  if (thinking) {
    STRATA_RETURN_IF_ERROR(b.special(kThinkOpen));
  } else if (tokenizer.token_to_id(kThinkClose)) {
    b.special_id(*tokenizer.token_to_id(kThinkClose));
  }
  return b.ids();
}

}  // namespace strata::chat
