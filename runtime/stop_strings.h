// StopStrings: finds caller-given stop strings in the text of generated tokens.
//
// runtime works on token ids only (the tokenizer is the caller's), so the caller supplies the text
// of each token through a hook (tokenizer::Tokenizer::decode of one id, say). The matcher keeps the
// last (longest stop - 1) bytes of text plus each new piece, so a stop string split across tokens is
// found; matching is on bytes (a piece may end inside a UTF-8 character). Trimming the stop string
// from the visible text is the caller's business (the server's chat::OutputParser holds back text
// for that; `strata run` has no stop strings).
// Thread safety: one matcher per sequence.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

namespace strata::runtime {

// Text of one token id (bytes, as the tokenizer decodes it).
using TokenTextFn = std::function<std::string(int32_t)>;

class StopStrings {
 public:
  // Empty strings in `stops` are ignored. REQUIRES token_text set when any stop is non-empty.
  StopStrings(std::vector<std::string> stops, TokenTextFn token_text);

  // Adds token `id`'s text; true when a stop string ends inside the text seen so far (and it was
  // not already found before this token).
  bool push(int32_t id);
  bool empty() const { return stops_.empty(); }

 private:
  std::vector<std::string> stops_;
  TokenTextFn token_text_;
  size_t keep_ = 0;  // longest stop - 1: bytes of earlier text a match may still start in
  std::string tail_;
};

}  // namespace strata::runtime
