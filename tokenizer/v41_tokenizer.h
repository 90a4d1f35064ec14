// Builds the DeepSeek V4.1 tokenizer.json from the DeepSeek-V3 one. V4.1 keeps V3's vocab and
// merges (128,000 / 127,741) and grows the added-token table to 129,280 ids
// (chat-and-api.md §1):
//   128799 <｜System｜>           (replaces V3's <｜place▁holder▁no▁799｜>)
//   128821 <think>, 128822 </think>, 128825 ｜DSML｜, 128828 <｜latest_reminder｜>,
//   129264 <｜deepseek_image｜>, and <｜place▁holder▁no▁N｜> (N = id - 128000) for every other
//   id in 128815..129279.
// Flags (DECISION: chat-and-api.md §1, following V3's own pattern): the role/markup tokens
// <｜System｜>, <think>, </think>, ｜DSML｜ and <｜latest_reminder｜> are `special: false,
// normalized: true` like V3's <｜User｜>/<｜Assistant｜>, so Tokenizer::decode with skip_special keeps
// them (the output parser needs </think> and ｜DSML｜ as text) and template text is split at them
// (split_added_tokens matches every added token, special or not). Placeholders and
// <｜deepseek_image｜> are `special: true, normalized: false` like V3's placeholders.
// The class count of the result is 99,092 (98,627 of V3 + 465 new ids), as config.json's
// engram_compressed_vocab_size says.
#pragma once

#include <string>
#include <string_view>

#include "core/status.h"

namespace strata::tokenizer {

// V4.1 vocabulary size (config.json vocab_size).
inline constexpr int kV41VocabSize = 129280;

// Returns the V4.1 tokenizer.json text. Checks that the input looks like V3's: JSON, 128,000
// model.vocab entries, added tokens up to 128814 with <｜place▁holder▁no▁799｜> at 128799
// (kCorruption / kInvalidArgument naming what differs otherwise).
[[nodiscard]] Result<std::string> make_v41_tokenizer_json(std::string_view v3_tokenizer_json);

}  // namespace strata::tokenizer
