#include "tokenizer/utf8.h"

namespace strata::tokenizer {

namespace {

// Allowed range of the second byte given the lead byte (Unicode Table 3-7, well-formed sequences).
struct LeadInfo {
  uint32_t len;  // total sequence length, 0 for a byte that cannot start a sequence
  uint8_t lo;    // second byte range
  uint8_t hi;
};

LeadInfo lead_info(uint8_t b) {
  if (b < 0x80) return {1, 0, 0};
  if (b >= 0xC2 && b <= 0xDF) return {2, 0x80, 0xBF};
  if (b == 0xE0) return {3, 0xA0, 0xBF};
  if (b == 0xED) return {3, 0x80, 0x9F};  // excludes surrogates
  if (b >= 0xE1 && b <= 0xEF) return {3, 0x80, 0xBF};
  if (b == 0xF0) return {4, 0x90, 0xBF};
  if (b >= 0xF1 && b <= 0xF3) return {4, 0x80, 0xBF};
  if (b == 0xF4) return {4, 0x80, 0x8F};  // caps at U+10FFFF
  return {0, 0, 0};                       // 80..C1, F5..FF
}

}  // namespace

Utf8Step utf8_step(std::string_view s, size_t pos) {
  const auto* p = reinterpret_cast<const uint8_t*>(s.data());
  const size_t n = s.size();
  const uint8_t b0 = p[pos];
  const LeadInfo li = lead_info(b0);
  if (li.len == 1) return {b0, 1, true, false};
  if (li.len == 0) return {kReplacementChar, 1, false, false};
  char32_t cp = b0 & (li.len == 2 ? 0x1F : li.len == 3 ? 0x0F : 0x07);
  for (uint32_t k = 1; k < li.len; ++k) {
    if (pos + k >= n) return {kReplacementChar, k, false, true};
    const uint8_t b = p[pos + k];
    const bool ok = (k == 1) ? (b >= li.lo && b <= li.hi) : (b >= 0x80 && b <= 0xBF);
    if (!ok) return {kReplacementChar, k, false, false};
    cp = (cp << 6) | (b & 0x3F);
  }
  return {cp, li.len, true, false};
}

void append_utf8(std::string* out, char32_t cp) {
  if (cp < 0x80) {
    out->push_back(static_cast<char>(cp));
  } else if (cp < 0x800) {
    out->push_back(static_cast<char>(0xC0 | (cp >> 6)));
    out->push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else if (cp < 0x10000) {
    out->push_back(static_cast<char>(0xE0 | (cp >> 12)));
    out->push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out->push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else {
    out->push_back(static_cast<char>(0xF0 | (cp >> 18)));
    out->push_back(static_cast<char>(0x80 | ((cp >> 12) & 0x3F)));
    out->push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out->push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  }
}

bool is_valid_utf8(std::string_view s) {
  for (size_t i = 0; i < s.size();) {
    if (static_cast<uint8_t>(s[i]) < 0x80) {
      ++i;
      continue;
    }
    const Utf8Step st = utf8_step(s, i);
    if (!st.valid) return false;
    i += st.len;
  }
  return true;
}

std::string to_valid_utf8_lossy(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  for (size_t i = 0; i < s.size();) {
    if (static_cast<uint8_t>(s[i]) < 0x80) {
      out.push_back(s[i++]);
      continue;
    }
    const Utf8Step st = utf8_step(s, i);
    if (st.valid) {
      out.append(s.data() + i, st.len);
    } else {
      append_utf8(&out, kReplacementChar);
    }
    i += st.len;
  }
  return out;
}

size_t utf8_incomplete_tail(std::string_view s) {
  // A valid incomplete sequence is at most 3 bytes, so only the last 3 lead positions matter.
  const size_t n = s.size();
  for (size_t back = 1; back <= 3 && back <= n; ++back) {
    const size_t pos = n - back;
    const uint8_t b = static_cast<uint8_t>(s[pos]);
    if (b >= 0x80 && b <= 0xBF) continue;  // continuation byte: keep looking for its lead
    const Utf8Step st = utf8_step(s, pos);
    return (st.truncated && st.len == back) ? back : 0;
  }
  return 0;
}

}  // namespace strata::tokenizer
