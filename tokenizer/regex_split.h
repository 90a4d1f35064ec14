// One "Split" pre-tokenizer step of tokenizer.json (behavior Isolated): a PCRE2 regex whose
// matches, and the text between them, become separate pieces.
//
// tokenizer.json patterns are written for Oniguruma (what HF tokenizers uses). PCRE2 with UTF+UCP
// reads them the same way except for `\s`/`\S`: Oniguruma's Unicode `\s` also matches U+0085 (NEL),
// PCRE2's does not, so the pattern is rewritten with an explicit White_Space class before compiling.
// Thread safety: a compiled SplitRegex is immutable and may be shared; each thread passes its own
// RegexScratch.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "core/status.h"

namespace strata::tokenizer {

// A piece of the input: byte offset and length.
struct Span {
  uint32_t begin;
  uint32_t len;
};

// Per-thread matcher state (PCRE2 match data, and a JIT stack created only if a match needs one).
class RegexScratch {
 public:
  RegexScratch();
  ~RegexScratch();
  RegexScratch(const RegexScratch&) = delete;
  RegexScratch& operator=(const RegexScratch&) = delete;

 private:
  friend class SplitRegex;
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// Rewrites an Oniguruma pattern for PCRE2 (see the file comment). kNotSupported for `\S` inside a
// bracket class and for nested bracket classes, which have no direct PCRE2 spelling.
[[nodiscard]] Result<std::string> onig_to_pcre2_pattern(std::string_view pattern);

class SplitRegex {
 public:
  // Compiles `pattern` (a regex, or a literal string when `literal`). `where` names the JSON field
  // for error messages. kInvalidArgument when PCRE2 rejects the pattern (its message and offset).
  [[nodiscard]] static Result<SplitRegex> compile(std::string_view pattern, bool literal, std::string_view where);

  // Appends to `out` the pieces of text[piece] in order: each match and each non-empty gap.
  // Offsets are relative to `text`. The regex sees only the piece (no look-around past its ends),
  // as HF applies each Split to each piece of the previous step. Ill-formed UTF-8 never matches
  // and so ends up in the gaps, byte for byte.
  void split(std::string_view text, Span piece, RegexScratch* scratch, std::vector<Span>* out) const;

 private:
  std::shared_ptr<void> code_;  // pcre2_code_8, freed with pcre2_code_free_8
};

}  // namespace strata::tokenizer
