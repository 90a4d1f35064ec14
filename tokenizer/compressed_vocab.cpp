#include "tokenizer/compressed_vocab.h"

#include <utf8proc.h>

#include <cstdlib>
#include <memory>
#include <unordered_map>

#include "tokenizer/utf8.h"

namespace strata::tokenizer {

namespace {

// The normalizer's sentinel: a private-use character that shields a lone-space result from the
// final strip, then turns back into a space (so any U+E000 in a token also becomes a space, as in
// the reference).
constexpr char32_t kSentinel = 0xE000;

// Unicode White_Space (Rust char::is_whitespace), what HF's Strip normalizer removes.
bool is_white_space(char32_t c) {
  return (c >= 0x09 && c <= 0x0D) || c == 0x20 || c == 0x85 || c == 0xA0 || c == 0x1680 ||
         (c >= 0x2000 && c <= 0x200A) || c == 0x2028 || c == 0x2029 || c == 0x202F || c == 0x205F || c == 0x3000;
}

// utf8proc_map wrapped in a std::string; `options` selects the normal form.
Result<std::string> utf8proc_normal_form(std::string_view s, utf8proc_option_t options) {
  utf8proc_uint8_t* out = nullptr;
  const utf8proc_ssize_t n = utf8proc_map(reinterpret_cast<const utf8proc_uint8_t*>(s.data()),
                                          static_cast<utf8proc_ssize_t>(s.size()), &out, options);
  if (n < 0) return InvalidArgument(std::string("engram_normalize: ") + utf8proc_errmsg(n));
  std::unique_ptr<utf8proc_uint8_t, decltype(&std::free)> owned(out, &std::free);
  return std::string(reinterpret_cast<const char*>(out), static_cast<size_t>(n));
}

std::u32string to_code_points(std::string_view s) {
  std::u32string cps;
  cps.reserve(s.size());
  for (size_t i = 0; i < s.size();) {
    const Utf8Step st = utf8_step(s, i);
    cps.push_back(st.cp);
    i += st.len;
  }
  return cps;
}

}  // namespace

Result<std::string> engram_normalize(std::string_view text) {
  if (!is_valid_utf8(text)) return InvalidArgument("engram_normalize: ill-formed UTF-8 input");
  // NFKC then NFD (kept as two steps, as the reference does; STABLE = no unassigned code points change).
  STRATA_ASSIGN_OR_RETURN(
      const std::string nfkc,
      utf8proc_normal_form(text, utf8proc_option_t(UTF8PROC_STABLE | UTF8PROC_COMPOSE | UTF8PROC_COMPAT)));
  STRATA_ASSIGN_OR_RETURN(const std::string nfd,
                          utf8proc_normal_form(nfkc, utf8proc_option_t(UTF8PROC_STABLE | UTF8PROC_DECOMPOSE)));

  // StripAccents, Lowercase and Replace([ \t\r\n]+ -> " ") in one pass over code points.
  std::u32string cps;
  cps.reserve(nfd.size());
  bool in_space_run = false;
  for (const char32_t c : to_code_points(nfd)) {
    const utf8proc_category_t cat = utf8proc_category(static_cast<utf8proc_int32_t>(c));
    if (cat == UTF8PROC_CATEGORY_MN || cat == UTF8PROC_CATEGORY_MC || cat == UTF8PROC_CATEGORY_ME) continue;
    // Rust's to_lowercase uses the full mapping; the only unconditional multi-character lowercase
    // is U+0130 -> "i" U+0307 (utf8proc's simple mapping gives plain "i"). After NFD + mark
    // stripping U+0130 cannot occur here, but the rule is kept so the step stands on its own.
    char32_t lowered[2];
    int n_lowered = 1;
    if (c == 0x130) {
      lowered[0] = 'i';
      lowered[1] = 0x307;
      n_lowered = 2;
    } else {
      lowered[0] = static_cast<char32_t>(utf8proc_tolower(static_cast<utf8proc_int32_t>(c)));
    }
    for (int k = 0; k < n_lowered; ++k) {
      const char32_t l = lowered[k];
      if (l == ' ' || l == '\t' || l == '\r' || l == '\n') {
        if (!in_space_run) cps.push_back(' ');
        in_space_run = true;
      } else {
        cps.push_back(l);
        in_space_run = false;
      }
    }
  }
  // Replace(^ $ -> sentinel), Strip, Replace(sentinel -> " ").
  if (cps.size() == 1 && cps[0] == ' ') cps[0] = kSentinel;
  size_t b = 0, e = cps.size();
  while (b < e && is_white_space(cps[b])) ++b;
  while (e > b && is_white_space(cps[e - 1])) --e;
  std::string out;
  out.reserve(e - b);
  for (size_t i = b; i < e; ++i) append_utf8(&out, cps[i] == kSentinel ? U' ' : cps[i]);
  return out;
}

Result<CompressedVocab> build_compressed_vocab(const Tokenizer& tokenizer) {
  const int32_t n = tokenizer.vocab_size();
  CompressedVocab cv;
  cv.map.resize(n);
  std::unordered_map<std::string, uint32_t> key_to_class;
  key_to_class.reserve(n);
  for (int32_t id = 0; id < n; ++id) {
    const std::string text = to_valid_utf8_lossy(tokenizer.token_bytes(id));
    std::string key;
    if (text.find("\xEF\xBF\xBD") != std::string::npos) {  // U+FFFD: a piece of a character
      key = std::string(tokenizer.id_to_token(id));
    } else {
      STRATA_ASSIGN_OR_RETURN(key, engram_normalize(text));
      if (key.empty()) key = text;
    }
    const auto [it, inserted] = key_to_class.try_emplace(std::move(key), static_cast<uint32_t>(key_to_class.size()));
    cv.map[id] = it->second;
  }
  cv.n_classes = static_cast<uint32_t>(key_to_class.size());
  return cv;
}

}  // namespace strata::tokenizer
