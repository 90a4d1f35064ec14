// DeepSeek's byte-level BPE tokenizer, loaded from a Hugging Face tokenizer.json.
//
// Pipeline (what tokenizer.json describes, checked at load; anything else is kNotSupported):
//   1. added tokens: with allow_special, the text is split at added-token strings (leftmost-longest;
//      first the `normalized: false` tokens, then the others in what is left, as HF does);
//   2. pre-tokenizer: a Sequence of Split regexes (behavior Isolated), read from the JSON, then
//      ByteLevel (use_regex false, add_prefix_space false) which respells bytes as the GPT-2 alphabet;
//   3. BPE (tokenizer/bpe.h) on each piece;
//   decode: the ByteLevel decoder (tokenizer/byte_level.h), giving bytes.
// No BOS/EOS is ever added (the post-processor is not applied); the chat renderer writes BOS.
//
// Ids are dense: [0, vocab_size()) is the union of model.vocab and added_tokens (HF
// get_vocab_size(with_added_tokens=true)); load fails on a gap.
//
// Source: Hugging Face tokenizers semantics (AddedVocabulary, Split, ByteLevel, BPE), re-implemented;
// checked against llama.cpp's deepseek-v3 vocab vectors (tests/tokenizer).
// Ownership and thread safety: a Tokenizer is an immutable value after load (copies share the
// compiled regexes); every const method may be called from many threads at once.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "core/status.h"
#include "tokenizer/bpe.h"
#include "tokenizer/regex_split.h"
#include "tokenizer/token_trie.h"

namespace strata::tokenizer {

// A piece of text split at added tokens: either ordinary text or one added token's id.
struct TextPiece {
  std::string_view text;  // the input bytes this piece covers (the token's string for a token)
  int32_t id;             // >= 0 for an added token, -1 for ordinary text
};

class Tokenizer {
 public:
  // Reads and parses a tokenizer.json file. Errors name the file: kNotFound (missing file),
  // kCorruption (not JSON, missing or mistyped field such as model.vocab, merges naming unknown
  // tokens, id gaps), kNotSupported (a normalizer, pre-tokenizer, model or decoder other than the
  // byte-level BPE described above).
  [[nodiscard]] static Result<Tokenizer> load(const std::string& path);

  // The same from JSON text; `source` names it in error messages.
  [[nodiscard]] static Result<Tokenizer> from_json(std::string_view json, std::string_view source = "<json>");

  // Token ids of `text` (bytes; ill-formed UTF-8 is encoded byte for byte). With allow_special,
  // added-token strings in the text become their ids (template text); without, the text is never
  // scanned for them and "<｜User｜>" is ordinary bytes (client text, chat-and-api.md §1).
  // No BOS is added. Cannot fail. REQUIRES: text.size() < 4 GiB.
  std::vector<int32_t> encode(std::string_view text, bool allow_special) const;

  // Appends the ids of ordinary text (no added-token matching) to `out`.
  void encode_ordinary(std::string_view text, std::vector<int32_t>* out) const;

  // Splits `text` at added-token strings (leftmost-longest), in order; empty text pieces omitted.
  std::vector<TextPiece> split_added_tokens(std::string_view text) const;

  // The bytes of `ids` through the ByteLevel decoder, concatenated (may be ill-formed UTF-8; see
  // to_valid_utf8_lossy in tokenizer/utf8.h). With skip_special, tokens marked `special` are
  // dropped. Ids outside [0, vocab_size()) are skipped, as HF does.
  std::string decode(std::span<const int32_t> ids, bool skip_special = false) const;

  // The decoded bytes of one token ("" for an id out of range).
  std::string_view token_bytes(int32_t id) const;

  // The id of a token string (raw spelling: "Ġthe", "<｜User｜>"); added tokens win over the model vocab.
  std::optional<int32_t> token_to_id(std::string_view token) const;

  // The raw token string of `id` ("" for an id out of range).
  std::string_view id_to_token(int32_t id) const;

  // True for an added token marked `special` in tokenizer.json.
  bool is_special(int32_t id) const;
  // True for an id listed in added_tokens.
  bool is_added(int32_t id) const;

  // Size of the id space: union of model.vocab and added_tokens.
  int32_t vocab_size() const { return static_cast<int32_t>(token_offsets_.size()) - 1; }
  // Entries in model.vocab alone.
  int32_t model_vocab_size() const { return n_model_vocab_; }
  size_t n_merges() const { return bpe_.n_merges(); }

 private:
  enum Flags : uint8_t { kAdded = 1, kSpecial = 2 };

  static std::string_view slice(const std::string& arena, const std::vector<uint32_t>& off, int32_t id);

  // Token strings and decoded bytes of every id, in two arenas indexed by offsets (n + 1 each).
  std::string token_arena_;
  std::vector<uint32_t> token_offsets_;
  std::string bytes_arena_;
  std::vector<uint32_t> bytes_offsets_;
  std::vector<uint8_t> flags_;
  std::unordered_map<std::string, int32_t> token_to_id_;
  int32_t n_model_vocab_ = 0;

  TokenTrie raw_added_;         // added tokens with normalized: false (matched first)
  TokenTrie normalized_added_;  // the others
  std::vector<SplitRegex> splits_;
  BpeModel bpe_;
};

}  // namespace strata::tokenizer
