#include "tokenizer/regex_split.h"

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include "tokenizer/utf8.h"

namespace strata::tokenizer {

namespace {

// Unicode White_Space, which is what Oniguruma's `\s` matches on UTF-8 input.
constexpr std::string_view kWhiteSpaceItems =
    "\\x{9}-\\x{D}\\x{20}\\x{85}\\x{A0}\\x{1680}\\x{2000}-\\x{200A}\\x{2028}\\x{2029}\\x{202F}\\x{205F}\\x{3000}";

// A JIT stack for the rare pattern/subject that overflows PCRE2's default 32 KiB machine stack.
constexpr size_t kJitStackMax = 8u << 20;

pcre2_code* code_of(const std::shared_ptr<void>& p) { return static_cast<pcre2_code*>(p.get()); }

}  // namespace

struct RegexScratch::Impl {
  pcre2_match_data* md = nullptr;
  pcre2_match_context* ctx = nullptr;
  pcre2_jit_stack* jit_stack = nullptr;
  ~Impl() {
    if (md) pcre2_match_data_free(md);
    if (ctx) pcre2_match_context_free(ctx);
    if (jit_stack) pcre2_jit_stack_free(jit_stack);
  }
};

RegexScratch::RegexScratch() : impl_(std::make_unique<Impl>()) {
  impl_->md = pcre2_match_data_create(1, nullptr);
  STRATA_CHECK(impl_->md != nullptr, "pcre2_match_data_create failed (out of memory)");
}

RegexScratch::~RegexScratch() = default;

Result<std::string> onig_to_pcre2_pattern(std::string_view p) {
  std::string out;
  out.reserve(p.size() + 64);
  bool in_class = false;
  for (size_t i = 0; i < p.size(); ++i) {
    const char c = p[i];
    if (c == '\\' && i + 1 < p.size()) {
      const char e = p[i + 1];
      ++i;
      if (e == 's') {
        if (in_class) {
          out += kWhiteSpaceItems;
        } else {
          out += '[';
          out += kWhiteSpaceItems;
          out += ']';
        }
      } else if (e == 'S') {
        if (in_class) return NotSupported("regex pattern: \\S inside a bracket class has no PCRE2 equivalent");
        out += "[^";
        out += kWhiteSpaceItems;
        out += ']';
      } else {
        out += c;
        out += e;
      }
      continue;
    }
    if (c == '[') {
      if (in_class) {
        // POSIX classes like [:alpha:] are fine; a nested set is Oniguruma-only.
        if (i + 1 < p.size() && p[i + 1] == ':') {
          const size_t close = p.find(":]", i + 2);
          if (close == std::string_view::npos) return NotSupported("regex pattern: unterminated [: class");
          out.append(p.substr(i, close + 2 - i));
          i = close + 1;
          continue;
        }
        return NotSupported("regex pattern: nested bracket classes are not supported");
      }
      in_class = true;
      out += c;
      // A ']' right after '[' or '[^' is a literal, not the end of the class.
      if (i + 1 < p.size() && p[i + 1] == '^') out += p[++i];
      if (i + 1 < p.size() && p[i + 1] == ']') out += p[++i];
      continue;
    }
    if (c == ']' && in_class) in_class = false;
    out += c;
  }
  return out;
}

Result<SplitRegex> SplitRegex::compile(std::string_view pattern, bool literal, std::string_view where) {
  std::string translated;
  if (literal) {
    translated = std::string(pattern);
  } else {
    auto t = onig_to_pcre2_pattern(pattern);
    if (!t.ok()) return t.error().with_context(where);
    translated = std::move(t).value();
  }
  uint32_t options = PCRE2_UTF | PCRE2_UCP | PCRE2_MATCH_INVALID_UTF;
  if (literal) options |= PCRE2_LITERAL;
  int err = 0;
  PCRE2_SIZE err_off = 0;
  pcre2_code* code = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(translated.data()), translated.size(), options, &err,
                                   &err_off, nullptr);
  if (code == nullptr) {
    PCRE2_UCHAR buf[256];
    pcre2_get_error_message(err, buf, sizeof(buf));
    return InvalidArgument(std::string(where) + ": regex does not compile at offset " + std::to_string(err_off) + ": " +
                           reinterpret_cast<const char*>(buf));
  }
  // JIT is an optimisation only: without it (e.g. an unsupported platform) matching still works.
  (void)pcre2_jit_compile(code, PCRE2_JIT_COMPLETE);
  SplitRegex r;
  r.code_ = std::shared_ptr<void>(code, [](void* c) { pcre2_code_free(static_cast<pcre2_code*>(c)); });
  return r;
}

void SplitRegex::split(std::string_view text, Span piece, RegexScratch* scratch, std::vector<Span>* out) const {
  RegexScratch::Impl& s = *scratch->impl_;
  const auto* subject = reinterpret_cast<PCRE2_SPTR>(text.data() + piece.begin);
  const size_t n = piece.len;
  size_t start = 0;  // where the next search begins
  size_t last = 0;   // end of the last emitted piece
  while (start <= n) {
    int rc = pcre2_match(code_of(code_), subject, n, start, 0, s.md, s.ctx);
    if (rc == PCRE2_ERROR_JIT_STACKLIMIT && s.jit_stack == nullptr) {
      s.jit_stack = pcre2_jit_stack_create(64u << 10, kJitStackMax, nullptr);
      s.ctx = pcre2_match_context_create(nullptr);
      STRATA_CHECK(s.jit_stack != nullptr && s.ctx != nullptr, "pcre2 JIT stack allocation failed");
      pcre2_jit_stack_assign(s.ctx, nullptr, s.jit_stack);
      rc = pcre2_match(code_of(code_), subject, n, start, 0, s.md, s.ctx);
    }
    // No match, or a matcher limit: the rest is one gap (still byte-exact, just not split further).
    if (rc < 0) break;
    const PCRE2_SIZE* ov = pcre2_get_ovector_pointer(s.md);
    const size_t mb = ov[0], me = ov[1];
    if (me == mb) {
      // Empty match: emits nothing; move on by one character so the loop ends.
      if (mb >= n) break;
      start = mb + utf8_step(std::string_view(text.data() + piece.begin, n), mb).len;
      continue;
    }
    if (mb > last) out->push_back({piece.begin + static_cast<uint32_t>(last), static_cast<uint32_t>(mb - last)});
    out->push_back({piece.begin + static_cast<uint32_t>(mb), static_cast<uint32_t>(me - mb)});
    last = start = me;
  }
  if (n > last) out->push_back({piece.begin + static_cast<uint32_t>(last), static_cast<uint32_t>(n - last)});
}

}  // namespace strata::tokenizer
