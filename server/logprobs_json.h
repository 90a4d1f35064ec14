// The `logprobs` objects of OpenAI's responses, from the engine's per-token reports
// (runtime/logprobs.h): the chat format, choices[].logprobs = {"content": [{token, logprob, bytes,
// top_logprobs: [{token, logprob, bytes}]}], "refusal": null} (plus "reasoning_content", the same
// list for reasoning tokens, when there are any: a strata extension), and the legacy completions
// format {tokens, token_logprobs, top_logprobs: [{token: logprob}], text_offset}.
// Which tokens are listed: those generated as content (chat: not reasoning, not inside a tool-call
// block) and, separately, as reasoning; special tokens (EOS) are never listed, as OpenAI lists no end
// token. `token` is the token's text: its bytes, with an incomplete UTF-8 character replaced by
// U+FFFD on the wire; `bytes` always has the exact bytes.
// Thread safety: pure functions.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "runtime/logprobs.h"
#include "server/request_fields.h"
#include "tokenizer/tokenizer.h"

namespace strata::server {

// One reported token, with its text and its alternatives' texts.
struct ApiTokenLogprob {
  std::string token;  // the token's bytes
  float logprob = 0;
  std::vector<std::pair<std::string, float>> top;  // most likely first
};

// The report with texts from `tok` (ids outside the tokenizer read as "").
ApiTokenLogprob api_token_logprob(const tokenizer::Tokenizer& tok, const runtime::TokenLogprob& report);

// Chat: the choices[].logprobs object (`reasoning` listed only when non-empty).
Json chat_logprobs_json(std::span<const ApiTokenLogprob> content, std::span<const ApiTokenLogprob> reasoning);

// Legacy completions: the choices[].logprobs object; text_offset counts characters of the
// generated text from `first_offset` (the characters of the tokens before these; see
// text_offset_chars).
Json completion_logprobs_json(std::span<const ApiTokenLogprob> tokens, int64_t first_offset);

// The characters `bytes` adds to text_offset: Unicode code points, as OpenAI's "character offset"
// is read by its Python client and computed by vLLM (len() of a Python str), not bytes and not
// UTF-16 units. A character split across tokens counts at the token holding its first byte (every
// byte but a UTF-8 continuation byte counts one), so the offsets sum to the text's code points.
int64_t text_offset_chars(std::string_view bytes);

}  // namespace strata::server
