// Structured output on the chat path (issue 20 item 4): the grammar a request's generation is
// constrained by, and the vocabulary table grammars are walked over.
//   - a forced tool call (tool_choice "required" or named; Anthropic "any" / "tool"): the DSML body
//     of the call, its arguments following each tool's `parameters` schema (runtime/json_grammar.h);
//   - otherwise response_format json_object (any JSON object) or json_schema (its `schema`);
//     with thinking on, the grammar starts after the `</think>` token that ends the reasoning.
//     With tools and tool_choice "auto" that is a 400 (the grammar would rule out every call).
// Every API's request is translated into chat::RenderOptions first, so /v1/chat/completions,
// /v1/responses (text.format) and /v1/messages (tool_choice) share this code.
// Thread safety: pure functions.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "chat/conversation.h"
#include "runtime/json_grammar.h"
#include "server/api_error.h"
#include "tokenizer/tokenizer.h"

namespace strata::server {

struct RequestGrammar {
  std::shared_ptr<const runtime::JsonGrammar> grammar;  // null: generation is not constrained
  bool after_thinking = false;  // the grammar applies once reasoning has ended (</think>)
};

// The grammar of `r` (see the file comment). 400 naming the schema path of an unsupported keyword,
// e.g. param "response_format.json_schema.schema.properties.date.format".
[[nodiscard]] ApiError request_grammar(const chat::RenderOptions& r, RequestGrammar* out);

// Each id's bytes for runtime::VocabTrie: ordinary tokens' decoded bytes; "" (never allowed) for
// special tokens and for added tokens other than ｜DSML｜ (the parser would read them as markup:
// <think>, </think>, role tokens), so a constrained answer holds only text the parser keeps.
std::vector<std::string> grammar_token_bytes(const tokenizer::Tokenizer& tok);

}  // namespace strata::server
