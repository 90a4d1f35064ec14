// UTF-8 helpers and the byte-level alphabet.
#include "tokenizer/utf8.h"

#include <gtest/gtest.h>

#include "tokenizer/byte_level.h"

namespace strata::tokenizer {
namespace {

TEST(Utf8, LossyReplacesMaximalSubparts) {
  EXPECT_EQ(to_valid_utf8_lossy("abc"), "abc");
  EXPECT_EQ(to_valid_utf8_lossy("\xE4\xBD\xA0"), "\xE4\xBD\xA0");  // 你
  // Truncated 3-byte sequence followed by ASCII: one U+FFFD for the two bytes.
  EXPECT_EQ(to_valid_utf8_lossy("\xE4\xBD"
                                "a"),
            "\xEF\xBF\xBD"
            "a");
  // Lone continuation bytes: one U+FFFD each.
  EXPECT_EQ(to_valid_utf8_lossy("\x80\x80"), "\xEF\xBF\xBD\xEF\xBF\xBD");
  // Overlong and surrogate forms are ill-formed from the second byte on.
  EXPECT_EQ(to_valid_utf8_lossy("\xC0\xAF"), "\xEF\xBF\xBD\xEF\xBF\xBD");
  EXPECT_EQ(to_valid_utf8_lossy("\xED\xA0\x80"), "\xEF\xBF\xBD\xEF\xBF\xBD\xEF\xBF\xBD");
  EXPECT_EQ(to_valid_utf8_lossy("\xF4\x90\x80\x80"), "\xEF\xBF\xBD\xEF\xBF\xBD\xEF\xBF\xBD\xEF\xBF\xBD");
  EXPECT_EQ(to_valid_utf8_lossy("\xFF"), "\xEF\xBF\xBD");
}

TEST(Utf8, IncompleteTail) {
  EXPECT_EQ(utf8_incomplete_tail(""), 0u);
  EXPECT_EQ(utf8_incomplete_tail("a"), 0u);
  EXPECT_EQ(utf8_incomplete_tail("a\xE4"), 1u);
  EXPECT_EQ(utf8_incomplete_tail("a\xE4\xBD"), 2u);
  EXPECT_EQ(utf8_incomplete_tail("a\xE4\xBD\xA0"), 0u);
  EXPECT_EQ(utf8_incomplete_tail("\xF0\x9F\x98"), 3u);
  EXPECT_EQ(utf8_incomplete_tail("\xF0\x9F\x98\x81"), 0u);
  EXPECT_EQ(utf8_incomplete_tail("\xE0\x80"), 0u);  // can never complete
  EXPECT_EQ(utf8_incomplete_tail("\x80"), 0u);
  EXPECT_EQ(utf8_incomplete_tail("\xFF"), 0u);
}

TEST(Utf8, Validity) {
  EXPECT_TRUE(is_valid_utf8("h\xC3\xA9llo \xF0\x9F\x98\x81"));
  EXPECT_FALSE(is_valid_utf8("\xC3"));
  EXPECT_FALSE(is_valid_utf8("\xC3\x28"));
}

TEST(ByteLevel, AlphabetIsABijection) {
  EXPECT_EQ(byte_to_char(' '), U'\u0120');   // Ġ
  EXPECT_EQ(byte_to_char('\n'), U'\u010A');  // Ċ
  EXPECT_EQ(byte_to_char('A'), U'A');
  EXPECT_EQ(byte_to_char(0xAD), U'\u0143');  // the last remapped byte
  for (int b = 0; b < 256; ++b) EXPECT_EQ(char_to_byte(byte_to_char(static_cast<uint8_t>(b))), b);
  EXPECT_EQ(char_to_byte(U'\uFF5C'), -1);
}

TEST(ByteLevel, DecodeToken) {
  EXPECT_EQ(byte_level_decode("\xC4\xA0the"), " the");           // "Ġthe"
  EXPECT_EQ(byte_level_decode("\xC3\xA4\xC2\xBD"), "\xE4\xBD");  // "ä½": half of 你
  // Any character outside the alphabet: the token's own bytes.
  EXPECT_EQ(byte_level_decode("<\xEF\xBD\x9CUser\xEF\xBD\x9C>"), "<\xEF\xBD\x9CUser\xEF\xBD\x9C>");
}

}  // namespace
}  // namespace strata::tokenizer
