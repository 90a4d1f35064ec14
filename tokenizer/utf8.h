// UTF-8 helpers shared by the tokenizer, the stream decoder and the Engram compressed vocab.
//
// Invalid input is never an error here: decoding follows the Unicode "maximal subpart" practice
// (what Rust's String::from_utf8_lossy and Python's errors="replace" do), so each maximal prefix of
// a would-be sequence that cannot be completed becomes one U+FFFD.
// Thread safety: pure functions.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace strata::tokenizer {

inline constexpr char32_t kReplacementChar = 0xFFFD;

// Result of looking at the UTF-8 sequence that starts at one byte.
struct Utf8Step {
  char32_t cp;     // the code point, or kReplacementChar when !valid
  uint32_t len;    // bytes consumed (>= 1; for an invalid sequence, the maximal subpart)
  bool valid;      // a complete, well-formed sequence
  bool truncated;  // !valid only because the input ended: the bytes are a valid prefix
};

// Decodes the sequence at s[pos] (REQUIRES: pos < s.size()).
Utf8Step utf8_step(std::string_view s, size_t pos);

// Appends the UTF-8 encoding of `cp` (REQUIRES: cp <= 0x10FFFF, not a surrogate).
void append_utf8(std::string* out, char32_t cp);

// True when `s` is well-formed UTF-8.
bool is_valid_utf8(std::string_view s);

// `s` with every ill-formed subpart replaced by U+FFFD (from_utf8_lossy semantics).
std::string to_valid_utf8_lossy(std::string_view s);

// Number of trailing bytes of `s` that form a valid but incomplete sequence (0..3): the bytes a
// streaming decoder must hold back until more input arrives.
size_t utf8_incomplete_tail(std::string_view s);

}  // namespace strata::tokenizer
