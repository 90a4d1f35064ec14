#include "chat/prompt_builder.h"

namespace strata::chat {

Status PromptBuilder::special(std::string_view token_text) {
  const auto id = tokenizer_->token_to_id(token_text);
  if (!id) {
    return NotFound("chat: the tokenizer has no token '" + std::string(token_text) +
                    "' (a V3 tokenizer.json lacks the V4.1 tokens; see tokenizer/v41_tokenizer.h)");
  }
  special_id(*id);
  return Status();
}

void PromptBuilder::special_id(int32_t id) {
  STRATA_CHECK(id >= 0 && id < tokenizer_->vocab_size(), "PromptBuilder::special_id: id out of range");
  flush_text();
  ids_.push_back(id);
}

void PromptBuilder::template_text(std::string_view text) {
  for (const tokenizer::TextPiece& p : tokenizer_->split_added_tokens(text)) {
    if (p.id >= 0) {
      special_id(p.id);
    } else {
      pending_text_ += p.text;
    }
  }
}

void PromptBuilder::flush_text() {
  if (pending_text_.empty()) return;
  tokenizer_->encode_ordinary(pending_text_, &ids_);
  pending_text_.clear();
}

const std::vector<int32_t>& PromptBuilder::ids() {
  flush_text();
  return ids_;
}

}  // namespace strata::chat
