// The DeepSeek tokenizer of the fixture checkpoint against known ids: llama.cpp's deepseek-v3
// vocab test vectors, the spot vectors of chat-and-api.md §1, and round trips.
#include <gtest/gtest.h>

#include "tests/support/files.h"

#include <fstream>
#include <iterator>
#include <memory>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "tests/support/npy.h"
#include "tokenizer/stream_decoder.h"
#include "tokenizer/tokenizer.h"
#include "tokenizer/utf8.h"

namespace strata::tokenizer {
namespace {

using strata::testing::read_all;

using Ids = std::vector<int32_t>;

std::string fixture(const std::string& rel) { return strata::testing::fixtures_dir() + "/" + rel; }
const std::string kTokenizerJson = "v41-tiny/checkpoint/tokenizer.json";


Ids parse_ids(const std::string& line) {
  Ids ids;
  std::istringstream in(line);
  int64_t v;
  while (in >> v) ids.push_back(static_cast<int32_t>(v));
  return ids;
}

class DeepSeekTokenizer : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    const std::string path = fixture(kTokenizerJson);
    if (!std::ifstream(path)) return;
    auto t = Tokenizer::load(path);
    ASSERT_TRUE(t.ok()) << t.error().to_string();
    tok_ = std::make_unique<Tokenizer>(std::move(t).value());
  }
  static void TearDownTestSuite() { tok_.reset(); }
  void SetUp() override { STRATA_REQUIRE_FIXTURE(fixture(kTokenizerJson)); }
  static std::unique_ptr<Tokenizer> tok_;
};
std::unique_ptr<Tokenizer> DeepSeekTokenizer::tok_;

TEST_F(DeepSeekTokenizer, Sizes) {
  EXPECT_EQ(tok_->model_vocab_size(), 128000);
  EXPECT_EQ(tok_->n_merges(), 127741u);
  EXPECT_EQ(tok_->vocab_size(), 128815);  // HF get_vocab_size(with_added_tokens=True)
  EXPECT_EQ(tok_->id_to_token(0), "<｜begin▁of▁sentence｜>");
  EXPECT_EQ(tok_->token_to_id("<｜User｜>"), 128803);
  EXPECT_TRUE(tok_->is_special(0));
  EXPECT_FALSE(tok_->is_special(128803));
}

// llama.cpp test-tokenizer-0 format: inputs are the parts of the .inp file split at
// "\n__ggml_vocab_test__\n", the empty part after the final separator included; the .out file has one
// line of space-separated ids per part (an empty input gives a line with no ids).
TEST_F(DeepSeekTokenizer, LlamaCppVocabVectors) {
  const std::string inp_path = fixture("tokenizer/deepseek-v3.inp");
  const std::string out_path = fixture("tokenizer/deepseek-v3.out");
  STRATA_REQUIRE_FIXTURE(inp_path);
  STRATA_REQUIRE_FIXTURE(out_path);
  const std::string inp = read_all(inp_path);
  const std::string sep = "\n__ggml_vocab_test__\n";
  std::vector<std::string> inputs;
  for (size_t pos = 0;;) {
    const size_t next = inp.find(sep, pos);
    if (next == std::string::npos) {
      inputs.push_back(inp.substr(pos));  // "" in the file: its .out line is empty
      break;
    }
    inputs.push_back(inp.substr(pos, next - pos));
    pos = next + sep.size();
  }
  std::vector<std::string> lines;
  std::istringstream out(read_all(out_path));
  for (std::string line; std::getline(out, line);) lines.push_back(line);
  ASSERT_EQ(inputs.size(), lines.size());
  ASSERT_GE(inputs.size(), 40u);
  for (size_t i = 0; i < inputs.size(); ++i) {
    const Ids want = parse_ids(lines[i]);
    const Ids got = tok_->encode(inputs[i], /*allow_special=*/false);
    EXPECT_EQ(got, want) << "input " << i << ": \"" << inputs[i] << "\"";
    EXPECT_EQ(tok_->decode(got), inputs[i]) << "input " << i;
  }
}

TEST_F(DeepSeekTokenizer, SpotVectors) {
  EXPECT_EQ(tok_->encode("Hi", false), (Ids{23166}));
  EXPECT_EQ(tok_->encode("<tool_result>", false), (Ids{30, 72461, 46148, 32}));
  EXPECT_EQ(tok_->encode("<tool_result>", true), (Ids{30, 72461, 46148, 32}));  // plain text in the vocab
  EXPECT_EQ(tok_->encode("Reasoning Effort: 75 (range 1-100, the higher the value, the more thorough the "
                         "reasoning)\n\n",
                         false),
            (Ids{77666, 288, 9504, 482, 28,   223, 2402, 343, 16801, 223, 19,    15, 1457,
                 14,    270, 4077, 270, 1990, 14,  270,  850, 15146, 270, 22805, 868}));
}

TEST_F(DeepSeekTokenizer, SpecialTokensSplitOnlyWhenAllowed) {
  const Ids with = tok_->encode("<｜begin▁of▁sentence｜><｜User｜>Hi<｜Assistant｜>", true);
  EXPECT_EQ(with, (Ids{0, 128803, 23166, 128804}));
  const Ids without = tok_->encode("<｜User｜>", false);
  EXPECT_GT(without.size(), 1u);
  for (const int32_t id : without) EXPECT_LT(id, 128000);
  EXPECT_EQ(tok_->decode(without), "<｜User｜>");
  EXPECT_EQ(tok_->decode(with, /*skip_special=*/true), "<｜User｜>Hi<｜Assistant｜>");
}

TEST_F(DeepSeekTokenizer, RoundTripsAssortedUnicode) {
  const char* texts[] = {
      "Hello, world! How are you?",
      "   leading and trailing spaces   ",
      "tabs\tand\nnewlines\r\n\r\nand \u00a0nbsp\u0085nel\u2028ls",
      "Ελληνικά, русский, עברית, العربية, हिन्दी, ไทย, 한국어, 日本語のテキスト, 中文文本",
      "emoji 👩‍👩‍👧‍👦 🇫🇷 🏳️‍🌈 ✅ 😁",
      "combining: e\u0301 a\u0308 Z\u0335\u0321\u0330",
      "math 𝔸𝔹ℂ ∀x∈ℝ: x²≥0; ½ ⅓ ① Ⅻ",
      "code: for (int i = 0; i < n; ++i) { x[i] += y[i]; }  // done\n\treturn 0;",
      "1234567890 3.14159 -42 1e-5",
      "\u200b\ufeffzero width",
      "",
  };
  for (const char* t : texts) {
    const Ids ids = tok_->encode(t, false);
    EXPECT_EQ(tok_->decode(ids), t);
    StreamDecoder d(*tok_);
    std::string streamed;
    for (const int32_t id : ids) {
      const std::string chunk = d.push(id);
      EXPECT_TRUE(is_valid_utf8(chunk));
      streamed += chunk;
    }
    streamed += d.flush();
    EXPECT_EQ(streamed, t);
  }
}

TEST_F(DeepSeekTokenizer, StreamingHoldsSplitCharacters) {
  // A CJK character with no token of its own is spelled by byte tokens: nothing comes out until it
  // is complete.
  const std::string ch = "\xF0\x9F\xA6\x99";  // 🦙
  const Ids ids = tok_->encode(ch, false);
  ASSERT_GT(ids.size(), 1u);
  StreamDecoder d(*tok_);
  for (size_t i = 0; i + 1 < ids.size(); ++i) EXPECT_EQ(d.push(ids[i]), "");
  EXPECT_EQ(d.push(ids.back()), ch);
}

// Arbitrary bytes (seeded): encode never loses a byte, and streaming equals lossy decoding.
TEST_F(DeepSeekTokenizer, RandomBytesRoundTrip) {
  std::mt19937 rng(12345);
  const std::string alphabet[] = {"a",  " ",        "\n",       "7",    "<",    "｜", "User",
                                  "你", "\xF0\x9F", "\x98\x81", "\xFF", "\x80", "é"};
  for (int round = 0; round < 200; ++round) {
    std::string text;
    const int n = static_cast<int>(rng() % 64);
    for (int i = 0; i < n; ++i) {
      if (rng() % 4 == 0) {
        text += static_cast<char>(rng() & 0xFF);
      } else {
        text += alphabet[rng() % std::size(alphabet)];
      }
    }
    for (const bool special : {false, true}) {
      const Ids ids = tok_->encode(text, special);
      ASSERT_EQ(tok_->decode(ids), text) << "round " << round;
      StreamDecoder d(*tok_);
      std::string streamed;
      for (const int32_t id : ids) streamed += d.push(id);
      streamed += d.flush();
      ASSERT_EQ(streamed, to_valid_utf8_lossy(text)) << "round " << round;
    }
  }
}

// The v41-tiny prompt: tokens.json "ids" are BOS <｜User｜> prompt <｜Assistant｜>, encoded with
// special-token splitting over the rendered text.
TEST_F(DeepSeekTokenizer, TinyPromptTokens) {
  const std::string tokens_path = fixture("v41-tiny/tokens.json");
  STRATA_REQUIRE_FIXTURE(tokens_path);
  const std::string js = read_all(tokens_path);
  // Minimal extraction of the "ids" array (the file is small and regular).
  const size_t b = js.find('[', js.find("\"ids\""));
  const size_t e = js.find(']', b);
  std::string body = js.substr(b + 1, e - b - 1);
  for (char& c : body) c = (c == ',') ? ' ' : c;
  const Ids want = parse_ids(body);
  ASSERT_EQ(want.size(), 197u);
  std::string prompt = read_all(fixture("v41-tiny/prompt.txt"));
  const std::string rendered = "<｜begin▁of▁sentence｜><｜User｜>" + prompt + "<｜Assistant｜>";
  EXPECT_EQ(tok_->encode(rendered, true), want);
}

}  // namespace
}  // namespace strata::tokenizer
