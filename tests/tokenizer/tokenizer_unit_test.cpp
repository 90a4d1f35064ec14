// Tokenizer behaviour on a small hand-built tokenizer.json: BPE merge order, added-token splitting,
// decode, streaming decode, and error reporting for bad input. Needs no fixture.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "tokenizer/byte_level.h"
#include "tokenizer/stream_decoder.h"
#include "tokenizer/tokenizer.h"
#include "tokenizer/utf8.h"

namespace strata::tokenizer {
namespace {

using Json = nlohmann::json;
using Ids = std::vector<int32_t>;

std::string spell(std::string_view bytes) {
  std::string s;
  append_byte_level(bytes, &s);
  return s;
}

// Ids 0..255: one token per byte value; then merged tokens; then added tokens.
Json tiny_tokenizer_json() {
  Json vocab = Json::object();
  for (int b = 0; b < 256; ++b) vocab[spell(std::string(1, static_cast<char>(b)))] = b;
  Json merges = Json::array();
  int next = 256;
  auto add_merge = [&](std::string_view a, std::string_view b) {
    merges.push_back(spell(a) + " " + spell(b));
    vocab[spell(std::string(a) + std::string(b))] = next++;
  };
  add_merge("l", "l");        // 256 "ll"
  add_merge("h", "e");        // 257 "he"
  add_merge("he", "ll");      // 258 "hell"
  add_merge("hell", "o");     // 259 "hello"
  add_merge(" ", "w");        // 260 " w"
  add_merge("a", "a");        // 261 "aa"
  add_merge("\xE4", "\xBD");  // 262: first two bytes of 你
  Json added = Json::array();
  auto add_token = [&](int id, const std::string& content, bool special, bool normalized) {
    added.push_back({{"id", id},
                     {"content", content},
                     {"single_word", false},
                     {"lstrip", false},
                     {"rstrip", false},
                     {"normalized", normalized},
                     {"special", special}});
  };
  add_token(263, "<s>", true, false);
  add_token(264, "<｜User｜>", false, true);
  add_token(265, "<｜User｜>x", false, true);  // longer token sharing a prefix
  Json pre = {
      {"type", "Sequence"},
      {"pretokenizers",
       {{{"type", "Split"}, {"pattern", {{"Regex", "\\p{N}{1,3}"}}}, {"behavior", "Isolated"}, {"invert", false}},
        {{"type", "Split"},
         {"pattern", {{"Regex", " ?\\p{L}+|\\s+(?!\\S)|\\s+|[^\\s\\p{L}]+"}}},
         {"behavior", "Isolated"},
         {"invert", false}},
        {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"trim_offsets", true}, {"use_regex", false}}}}};
  return {{"version", "1.0"},
          {"added_tokens", added},
          {"normalizer", {{"type", "Sequence"}, {"normalizers", Json::array()}}},
          {"pre_tokenizer", pre},
          {"decoder", {{"type", "ByteLevel"}, {"add_prefix_space", true}, {"trim_offsets", true}, {"use_regex", true}}},
          {"model",
           {{"type", "BPE"},
            {"dropout", nullptr},
            {"unk_token", nullptr},
            {"byte_fallback", false},
            {"vocab", vocab},
            {"merges", merges}}}};
}

Tokenizer tiny() {
  auto t = Tokenizer::from_json(tiny_tokenizer_json().dump(), "tiny");
  EXPECT_TRUE(t.ok()) << t.error().to_string();
  return std::move(t).value();
}

TEST(TokenizerUnit, SizesAndLookups) {
  const Tokenizer t = tiny();
  EXPECT_EQ(t.vocab_size(), 266);
  EXPECT_EQ(t.model_vocab_size(), 263);
  EXPECT_EQ(t.n_merges(), 7u);
  EXPECT_EQ(t.token_to_id("<｜User｜>"), 264);
  EXPECT_EQ(t.token_to_id(spell("hello")), 259);
  EXPECT_FALSE(t.token_to_id("nope").has_value());
  EXPECT_EQ(t.id_to_token(260), "\xC4\xA0w");
  EXPECT_EQ(t.id_to_token(9999), "");
  EXPECT_TRUE(t.is_special(263));
  EXPECT_FALSE(t.is_special(264));
  EXPECT_TRUE(t.is_added(264));
  EXPECT_FALSE(t.is_added(5));
}

TEST(TokenizerUnit, BpeMergesByRank) {
  const Tokenizer t = tiny();
  EXPECT_EQ(t.encode("hello", false), (Ids{259}));
  EXPECT_EQ(t.encode("hello world", false), (Ids{259, 260, 'o', 'r', 'l', 'd'}));
  // "aaa": the leftmost pair merges first.
  EXPECT_EQ(t.encode("aaa", false), (Ids{261, 'a'}));
  EXPECT_EQ(t.encode("aaaa", false), (Ids{261, 261}));
  // Digits split in groups of three by the first regex.
  EXPECT_EQ(t.encode("12345", false), (Ids{'1', '2', '3', '4', '5'}));
  EXPECT_TRUE(t.encode("", false).empty());
}

TEST(TokenizerUnit, AddedTokensOnlyWithAllowSpecial) {
  const Tokenizer t = tiny();
  EXPECT_EQ(t.encode("<s>hello", true), (Ids{263, 259}));
  // Leftmost-longest: "<｜User｜>x" beats "<｜User｜>".
  EXPECT_EQ(t.encode("<｜User｜>xy<｜User｜>", true), (Ids{265, 'y', 264}));
  // Client text: never scanned.
  const Ids plain = t.encode("<s>", false);
  EXPECT_EQ(plain, (Ids{'<', 's', '>'}));
  const auto pieces = t.split_added_tokens("a<s>b<｜User｜>");
  ASSERT_EQ(pieces.size(), 4u);
  EXPECT_EQ(pieces[0].text, "a");
  EXPECT_EQ(pieces[1].id, 263);
  EXPECT_EQ(pieces[2].text, "b");
  EXPECT_EQ(pieces[3].id, 264);
}

TEST(TokenizerUnit, DecodeAndSkipSpecial) {
  const Tokenizer t = tiny();
  const Ids ids = t.encode("<s>hello<｜User｜> world", true);
  EXPECT_EQ(t.decode(ids), "<s>hello<｜User｜> world");
  EXPECT_EQ(t.decode(ids, /*skip_special=*/true), "hello<｜User｜> world");  // <｜User｜> is not special
  EXPECT_EQ(t.decode(Ids{-1, 99999, 'a'}), "a");
}

TEST(TokenizerUnit, IllFormedUtf8RoundTrips) {
  const Tokenizer t = tiny();
  const std::string bad =
      "ab\xFF\xE4\xBD"
      "c\xC3";
  EXPECT_EQ(t.decode(t.encode(bad, false)), bad);
  EXPECT_EQ(t.decode(t.encode(bad, true)), bad);
}

TEST(TokenizerUnit, LongWordsAreLinearEnough) {
  const Tokenizer t = tiny();
  const std::string spaces(200000, ' ');
  const Ids ids = t.encode(spaces, false);
  EXPECT_EQ(ids.size(), spaces.size());  // no merge for "  " in this vocab
  const std::string as(100001, 'a');
  const Ids a_ids = t.encode(as, false);
  EXPECT_EQ(a_ids.size(), 50001u);
  EXPECT_EQ(t.decode(a_ids), as);
}

TEST(StreamDecoder, NeverSplitsACharacter) {
  const Tokenizer t = tiny();
  // 你 = E4 BD A0: token 262 holds E4 BD, then byte A0 alone.
  StreamDecoder d(t);
  EXPECT_EQ(d.push('a'), "a");
  EXPECT_EQ(d.push(262), "");
  EXPECT_EQ(d.pending_bytes(), 2u);
  EXPECT_EQ(d.push(0xA0), "\xE4\xBD\xA0");
  // An emoji fed byte by byte: 😁 = F0 9F 98 81.
  EXPECT_EQ(d.push(0xF0), "");
  EXPECT_EQ(d.push(0x9F), "");
  EXPECT_EQ(d.push(0x98), "");
  EXPECT_EQ(d.push(0x81), "\xF0\x9F\x98\x81");
  EXPECT_EQ(d.flush(), "");
}

TEST(StreamDecoder, InvalidBytesBecomeReplacementChars) {
  const Tokenizer t = tiny();
  StreamDecoder d(t);
  EXPECT_EQ(d.push(0xFF), "\xEF\xBF\xBD");  // can never start a character
  EXPECT_EQ(d.push(262), "");               // E4 BD held
  EXPECT_EQ(d.push('x'),
            "\xEF\xBF\xBD"
            "x");  // broken by 'x': one U+FFFD for E4 BD
  EXPECT_EQ(d.push(0xE4), "");
  EXPECT_EQ(d.flush(), "\xEF\xBF\xBD");  // unfinished at the end
  EXPECT_EQ(d.pending_bytes(), 0u);
}

TEST(StreamDecoder, MatchesLossyDecodeOfTheWhole) {
  const Tokenizer t = tiny();
  const std::string text = "h\xC3\xA9llo \xE4\xBD\xA0\xE5\xA5\xBD \xF0\x9F\x9A\x80\xFF\xE4\xBD end\xF0\x9F";
  const Ids ids = t.encode(text, false);
  StreamDecoder d(t);
  std::string streamed;
  for (const int32_t id : ids) {
    const std::string chunk = d.push(id);
    EXPECT_TRUE(is_valid_utf8(chunk));
    streamed += chunk;
  }
  streamed += d.flush();
  EXPECT_EQ(streamed, to_valid_utf8_lossy(text));
}

TEST(StreamDecoder, SkipSpecial) {
  const Tokenizer t = tiny();
  StreamDecoder d(t, /*skip_special=*/true);
  EXPECT_EQ(d.push(263), "");
  EXPECT_EQ(d.push(264), "<｜User｜>");
}

// ---- bad input: every error names the source and the field ----

TEST(TokenizerErrors, MissingFile) {
  const auto t = Tokenizer::load("/nonexistent/dir/tokenizer.json");
  ASSERT_FALSE(t.ok());
  EXPECT_EQ(t.error().code(), StatusCode::kNotFound);
  EXPECT_NE(t.error().message().find("/nonexistent/dir/tokenizer.json"), std::string::npos) << t.error().to_string();
}

TEST(TokenizerErrors, MalformedJson) {
  const auto t = Tokenizer::from_json("{\"model\": {", "bad.json");
  ASSERT_FALSE(t.ok());
  EXPECT_EQ(t.error().code(), StatusCode::kCorruption);
  EXPECT_NE(t.error().message().find("bad.json"), std::string::npos);
  EXPECT_NE(t.error().message().find("not valid JSON"), std::string::npos);
}

TEST(TokenizerErrors, MissingModelVocab) {
  Json j = tiny_tokenizer_json();
  j["model"].erase("vocab");
  const auto t = Tokenizer::from_json(j.dump(), "x/tokenizer.json");
  ASSERT_FALSE(t.ok());
  EXPECT_EQ(t.error().code(), StatusCode::kCorruption);
  EXPECT_NE(t.error().message().find("x/tokenizer.json"), std::string::npos);
  EXPECT_NE(t.error().message().find("model.vocab"), std::string::npos) << t.error().to_string();
}

TEST(TokenizerErrors, WrongTypes) {
  Json j = tiny_tokenizer_json();
  j["model"]["vocab"] = Json::array();
  EXPECT_NE(Tokenizer::from_json(j.dump(), "t").error().message().find("model.vocab"), std::string::npos);
  j = tiny_tokenizer_json();
  j["model"]["merges"][0] = 7;
  const auto t = Tokenizer::from_json(j.dump(), "t");
  ASSERT_FALSE(t.ok());
  EXPECT_NE(t.error().message().find("model.merges[0]"), std::string::npos) << t.error().to_string();
  j = tiny_tokenizer_json();
  j["pre_tokenizer"]["pretokenizers"][0]["type"] = 5;  // not a string: must not throw
  EXPECT_EQ(Tokenizer::from_json(j.dump(), "t").error().code(), StatusCode::kNotSupported);
  EXPECT_EQ(Tokenizer::from_json("[1,2]", "t").error().code(), StatusCode::kCorruption);
}

TEST(TokenizerErrors, MergeWithUnknownToken) {
  Json j = tiny_tokenizer_json();
  j["model"]["merges"].push_back("zz qq");
  const auto t = Tokenizer::from_json(j.dump(), "t");
  ASSERT_FALSE(t.ok());
  EXPECT_EQ(t.error().code(), StatusCode::kCorruption);
  EXPECT_NE(t.error().message().find("model.merges[7]"), std::string::npos) << t.error().to_string();
}

TEST(TokenizerErrors, IdGapsAndHugeIds) {
  Json j = tiny_tokenizer_json();
  j["added_tokens"][0]["id"] = 100000000;
  auto t = Tokenizer::from_json(j.dump(), "t");
  ASSERT_FALSE(t.ok());
  EXPECT_NE(t.error().message().find("added_tokens[0].id"), std::string::npos) << t.error().to_string();
  j = tiny_tokenizer_json();
  j["added_tokens"][2]["id"] = 266;  // 265 left empty; a repeat of <｜User｜> keeps the entry count
  j["added_tokens"].push_back(j["added_tokens"][1]);
  t = Tokenizer::from_json(j.dump(), "t");
  ASSERT_FALSE(t.ok());
  EXPECT_NE(t.error().message().find("token id 265"), std::string::npos) << t.error().to_string();
}

// Found by fuzz/tokenizer_fuzz: an id given two different strings was loaded, the later string
// winning, so "!" encoded to the id of "<｜▁pad▁｜>" and decoded as that. V3 lists BOS/EOS/pad in
// both model.vocab and added_tokens with the same text, which stays accepted.
TEST(TokenizerErrors, OneIdCannotNameTwoTokens) {
  Json j = tiny_tokenizer_json();
  j["added_tokens"][0]["id"] = 33;  // "<s>" onto the byte token "!"
  auto t = Tokenizer::from_json(j.dump(), "t");
  ASSERT_FALSE(t.ok());
  EXPECT_EQ(t.error().code(), StatusCode::kCorruption);
  EXPECT_NE(t.error().message().find("added_tokens[0].id"), std::string::npos) << t.error().to_string();
  EXPECT_NE(t.error().message().find("id 33 is already the token \"!\""), std::string::npos) << t.error().to_string();

  j = tiny_tokenizer_json();
  j["model"]["vocab"][spell("ll")] = 257;  // two vocab keys ("ll", "he") on one id
  j["model"]["vocab"][spell("zz")] = 256;  // keep the ids dense
  t = Tokenizer::from_json(j.dump(), "t");
  ASSERT_FALSE(t.ok());
  EXPECT_NE(t.error().message().find("one id cannot name two tokens"), std::string::npos) << t.error().to_string();

  j = tiny_tokenizer_json();
  j["added_tokens"][1]["id"] = 264;
  j["added_tokens"].push_back(j["added_tokens"][1]);  // the same token twice: accepted
  j["added_tokens"].push_back({{"id", 104}, {"content", spell("h")}});  // as V3's BOS: vocab and added agree
  t = Tokenizer::from_json(j.dump(), "t");
  ASSERT_TRUE(t.ok()) << t.error().to_string();
  EXPECT_EQ(t->decode(t->encode("!hh", false)), "!hh");
}

TEST(TokenizerErrors, UnsupportedPipelines) {
  Json j = tiny_tokenizer_json();
  j["normalizer"] = {{"type", "NFC"}};
  EXPECT_EQ(Tokenizer::from_json(j.dump(), "t").error().code(), StatusCode::kNotSupported);
  j = tiny_tokenizer_json();
  j["pre_tokenizer"]["pretokenizers"][0]["behavior"] = "Removed";
  EXPECT_EQ(Tokenizer::from_json(j.dump(), "t").error().code(), StatusCode::kNotSupported);
  j = tiny_tokenizer_json();
  j["decoder"] = nullptr;
  EXPECT_EQ(Tokenizer::from_json(j.dump(), "t").error().code(), StatusCode::kNotSupported);
  j = tiny_tokenizer_json();
  j["added_tokens"][0]["lstrip"] = true;
  EXPECT_EQ(Tokenizer::from_json(j.dump(), "t").error().code(), StatusCode::kNotSupported);
  j = tiny_tokenizer_json();
  j["pre_tokenizer"]["pretokenizers"][1]["pattern"]["Regex"] = "(unclosed";
  const auto t = Tokenizer::from_json(j.dump(), "t");
  EXPECT_EQ(t.error().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(t.error().message().find("pretokenizers[1].pattern"), std::string::npos) << t.error().to_string();
}

}  // namespace
}  // namespace strata::tokenizer
