// Fuzz target: tokenizer.json (tokenizer/tokenizer.h, Tokenizer::from_json), then the loaded
// tokenizer at work.
//
// The input is tokenizer.json text. A tokenizer that loads must: give ids inside [0, vocab_size);
// round-trip any bytes (decode(encode(text)) == text: the loader insists on all 256 byte tokens and
// ByteLevel splitting loses nothing); decode added tokens back to their text when special tokens are
// allowed; stream-decode to the lossy UTF-8 of the whole decode; and build the Engram compressed
// vocabulary or refuse with an error. Texts encoded: a few fixed ones (markup, CJK, broken UTF-8)
// and the input itself (bytes the fuzzer controls).
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "fuzz/fuzz_support.h"
#include "tokenizer/compressed_vocab.h"
#include "tokenizer/stream_decoder.h"
#include "tokenizer/tokenizer.h"
#include "tokenizer/utf8.h"

namespace {

using strata::tokenizer::Tokenizer;

void check_text(const Tokenizer& tok, std::string_view text) {
  const int32_t n = tok.vocab_size();
  std::vector<int32_t> ids = tok.encode(text, /*allow_special=*/false);
  for (int32_t id : ids) STRATA_FUZZ_CHECK(id >= 0 && id < n, "id " + std::to_string(id) + " out of range");
  STRATA_FUZZ_CHECK(tok.decode(ids) == text, "decode(encode(text)) != text");

  std::vector<int32_t> sp = tok.encode(text, /*allow_special=*/true);
  for (int32_t id : sp) STRATA_FUZZ_CHECK(id >= 0 && id < n, "id " + std::to_string(id) + " out of range (special)");

  // Streaming detokenization gives the lossy UTF-8 of the whole decode, whatever the chunking.
  for (bool skip : {false, true}) {
    strata::tokenizer::StreamDecoder sd(tok, skip);
    std::string streamed;
    for (int32_t id : sp) {
      std::string piece = sd.push(id);
      STRATA_FUZZ_CHECK(strata::tokenizer::is_valid_utf8(piece), "stream decoder emitted invalid UTF-8");
      streamed += piece;
    }
    streamed += sd.flush();
    STRATA_FUZZ_CHECK(streamed == strata::tokenizer::to_valid_utf8_lossy(tok.decode(sp, skip)),
                      "stream decode != lossy decode");
  }
  size_t covered = 0;
  for (const auto& piece : tok.split_added_tokens(text)) {
    STRATA_FUZZ_CHECK(piece.id < n, "added-token piece id out of range");
    covered += piece.text.size();
  }
  STRATA_FUZZ_CHECK(covered == text.size(), "split_added_tokens lost bytes");
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  auto r = Tokenizer::from_json(strata::fuzz::as_text(data, size), "fuzz_tokenizer.json");
  if (!r.ok()) return 0;
  const Tokenizer& tok = *r;
  const int32_t n = tok.vocab_size();
  STRATA_FUZZ_CHECK(n > 0 && tok.model_vocab_size() <= n, "vocab sizes");
  for (int32_t id = -1; id <= n; ++id) {  // every id, and one past each end
    const std::string_view t = tok.id_to_token(id);
    (void)tok.token_bytes(id);
    (void)tok.is_special(id);
    if (id >= 0 && id < n) {
      auto back = tok.token_to_id(t);
      STRATA_FUZZ_CHECK(back.has_value(), "token " + std::to_string(id) + " has no id");
    }
  }
  static const char* kTexts[] = {
      "Hello, world! 123456 numbers\n\n  spaces\t\ttabs",
      "<｜begin▁of▁sentence｜><｜User｜>hi<｜Assistant｜></think>",
      "中文字符 ひらがな カタカナ 😀 é",
      "\xff\xfe broken \xe4\xb8 utf8 \xc0\x80",
  };
  for (const char* t : kTexts) check_text(tok, t);
  check_text(tok, strata::fuzz::as_text(data, std::min<size_t>(size, 512)));
  auto cv = strata::tokenizer::build_compressed_vocab(tok);
  if (cv.ok()) {
    STRATA_FUZZ_CHECK(cv->map.size() == static_cast<size_t>(n), "compressed map size");
    for (uint32_t c : cv->map) STRATA_FUZZ_CHECK(c < cv->n_classes, "class out of range");
  }
  return 0;
}
