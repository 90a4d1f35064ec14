// Engram's compressed token map: token ids that look alike after normalization share one class id,
// and Engram hashes n-grams over class ids (ARCHITECTURE.md §Engram).
//
// For each id in [0, vocab_size()), in order: decode the single token (ByteLevel decoder, then
// lossy UTF-8). If that text contains U+FFFD the key is the raw token string; otherwise the key is
// engram_normalize(text), or the text itself when that is empty. Keys are numbered by first
// appearance. Source: engram.py / model.py `build_compressed_token_map` (the official Engram
// `CompressedTokenizer`), with HF normalizer semantics as described in fixtures/README.md.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "core/status.h"
#include "tokenizer/tokenizer.h"

namespace strata::tokenizer {

struct CompressedVocab {
  std::vector<uint32_t> map;  // [vocab_size] token id -> class id
  uint32_t n_classes = 0;     // config engram_compressed_vocab_size must equal this
};

// The Engram normalizer on valid UTF-8 `text`: NFKC, NFD, drop marks (General_Category M*),
// lowercase each code point on its own (Rust char::to_lowercase: full mappings, no final-sigma
// rule), runs of [ \t\r\n] -> one space, then strip Unicode White_Space at both ends, except that
// a result of exactly " " is kept. Unicode tables: utf8proc. kInvalidArgument on ill-formed UTF-8.
[[nodiscard]] Result<std::string> engram_normalize(std::string_view text);

// Builds the map over every id of `tokenizer` (~0.1 s for 129K tokens; runs at model load).
// Errors: only from engram_normalize, which cannot see ill-formed input here (such tokens take the
// U+FFFD path), so in practice it does not fail.
[[nodiscard]] Result<CompressedVocab> build_compressed_vocab(const Tokenizer& tokenizer);

}  // namespace strata::tokenizer
