// The byte-level alphabet of GPT-2 style BPE ("ByteLevel" pre-tokenizer and decoder in
// tokenizer.json): each of the 256 byte values is written as one printable code point, so a
// token string is text even when its bytes are not UTF-8.
//
// Printable Latin-1 bytes (0x21..0x7E, 0xA1..0xAC, 0xAE..0xFF) stand for themselves; the other
// 68 bytes, in increasing order, become U+0100, U+0101, ... (0x20 -> U+0120 'Ġ', 0x0A -> U+010A 'Ċ').
// Thread safety: pure functions over immutable tables.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

namespace strata::tokenizer {

// Code point that stands for byte `b`.
char32_t byte_to_char(uint8_t b);

// Byte that code point `cp` stands for, or -1 when `cp` is not in the alphabet.
int char_to_byte(char32_t cp);

// Appends the alphabet spelling of `bytes` (UTF-8) to `out`.
void append_byte_level(std::string_view bytes, std::string* out);

// The ByteLevel decoder for one token string: the bytes its characters stand for. A token with any
// character outside the alphabet (e.g. an added token such as "<｜User｜>") gives its own UTF-8
// bytes unchanged. The result may be ill-formed UTF-8 (a piece of a multi-byte character).
// Source: HF tokenizers ByteLevel decoder semantics, as restated in fixtures/README.md.
std::string byte_level_decode(std::string_view token);

}  // namespace strata::tokenizer
