// Assembles prompt token ids from the three kinds of pieces the V4.1 renderer produces
// (chat-and-api.md §1 "Tokenization rule"):
//   - special tokens, named by their text ("<｜User｜>") and looked up in the tokenizer;
//   - template text (the renderer's fixed strings), split at every added-token string it contains;
//   - client text (message content, reasoning, tool results), never scanned for added tokens.
// Adjacent text pieces of either kind are joined and BPE-encoded as one fragment, because HF splits
// only at special tokens and splitting elsewhere would change the ids.
// Ownership: borrows the Tokenizer, which must outlive the builder. Thread safety: one per request.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "core/status.h"
#include "tokenizer/tokenizer.h"

namespace strata::chat {

class PromptBuilder {
 public:
  explicit PromptBuilder(const tokenizer::Tokenizer& tokenizer) : tokenizer_(&tokenizer) {}

  // Appends the token whose text is `token_text`. kNotFound (naming it) if the tokenizer lacks it.
  [[nodiscard]] Status special(std::string_view token_text);
  // Appends a token by id (REQUIRES: 0 <= id < vocab_size()).
  void special_id(int32_t id);

  // Appends fixed template text; added-token strings inside it become their ids.
  void template_text(std::string_view text);
  // Appends client text; it is only ever BPE-encoded.
  void client_text(std::string_view text) { pending_text_ += text; }

  // The ids so far (flushes pending text). The builder can keep going afterwards.
  const std::vector<int32_t>& ids();

 private:
  void flush_text();

  const tokenizer::Tokenizer* tokenizer_;
  std::vector<int32_t> ids_;
  std::string pending_text_;  // text not yet encoded: joined until the next special token
};

}  // namespace strata::chat
