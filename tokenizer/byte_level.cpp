#include "tokenizer/byte_level.h"

#include <array>

#include "tokenizer/utf8.h"

namespace strata::tokenizer {

namespace {

struct Tables {
  std::array<char32_t, 256> to_char{};
  std::array<int16_t, 324> to_byte{};  // alphabet code points are all < 0x100 + 68
};

Tables make_tables() {
  Tables t;
  t.to_byte.fill(-1);
  char32_t next = 0x100;
  for (int b = 0; b < 256; ++b) {
    const bool printable = (b >= 0x21 && b <= 0x7E) || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
    const char32_t c = printable ? static_cast<char32_t>(b) : next++;
    t.to_char[b] = c;
    t.to_byte[c] = static_cast<int16_t>(b);
  }
  return t;
}

const Tables& tables() {
  static const Tables t = make_tables();  // immutable after first use
  return t;
}

}  // namespace

char32_t byte_to_char(uint8_t b) { return tables().to_char[b]; }

int char_to_byte(char32_t cp) {
  const auto& t = tables().to_byte;
  return cp < t.size() ? t[cp] : -1;
}

void append_byte_level(std::string_view bytes, std::string* out) {
  for (const char c : bytes) append_utf8(out, byte_to_char(static_cast<uint8_t>(c)));
}

std::string byte_level_decode(std::string_view token) {
  std::string out;
  out.reserve(token.size());
  for (size_t i = 0; i < token.size();) {
    const Utf8Step st = utf8_step(token, i);
    const int b = st.valid ? char_to_byte(st.cp) : -1;
    if (b < 0) return std::string(token);  // not a byte-level spelling: raw bytes
    out.push_back(static_cast<char>(b));
    i += st.len;
  }
  return out;
}

}  // namespace strata::tokenizer
