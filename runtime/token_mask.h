// Token masks for constrained decoding (issue 20 item 4): which vocabulary ids may come next under
// a JsonGrammar (runtime/json_grammar.h), and the TokenConstraint the engine applies before sampling.
//
// VocabTrie holds every token's bytes once, as a byte trie laid out in preorder: node i's subtree is
// [i, subtree_end[i]). The mask walk visits the nodes in order with one grammar Cursor per trie
// depth; a byte the grammar refuses skips its whole subtree, so a prefix shared by many tokens is
// checked once, and where most bytes are refused (between JSON values) only a small part of the
// trie is visited. Inside a string nearly every byte is allowed and the walk visits most of the trie
// (the cost measured in docs/performance.md#structured-output).
// The caller owns tokenisation: runtime never includes the tokenizer, so the server passes each
// id's bytes down (an empty entry = never allowed: special tokens, tokens the parser would treat as
// markup).
// Thread safety: VocabTrie is immutable after construction; a GrammarConstraint belongs to one sequence.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "runtime/json_grammar.h"

namespace strata::runtime {

class VocabTrie {
 public:
  // token_bytes[id] = the bytes the id decodes to; "" = the id is never allowed by a grammar.
  explicit VocabTrie(std::span<const std::string> token_bytes);

  int32_t vocab_size() const { return vocab_size_; }
  size_t n_nodes() const { return byte_.size(); }
  size_t max_token_bytes() const { return max_depth_; }
  const std::string& bytes(int32_t id) const { return bytes_[static_cast<size_t>(id)]; }

  // Sets allowed[id] = 1 for every id whose bytes the grammar accepts from `s` (others 0; size
  // vocab_size()), and for each of `end_ids` when `s` may end. Returns the number of allowed ids.
  // `arena` is scratch (reused across calls: no allocation once warm).
  size_t mask(const JsonGrammar& g, const JsonGrammar::State& s, std::span<const int32_t> end_ids,
              std::vector<uint8_t>* allowed, std::vector<JsonGrammar::Frame>* arena) const;

 private:
  int32_t vocab_size_ = 0;
  std::vector<std::string> bytes_;    // per id
  // Preorder trie (the root is implicit): per node its byte, depth (>= 1), subtree end and the ids
  // ending there ids_[id_begin[i] .. id_begin[i + 1]).
  std::vector<uint8_t> byte_;
  std::vector<uint16_t> depth_;
  std::vector<uint32_t> subtree_end_;
  std::vector<uint32_t> id_begin_;
  std::vector<int32_t> ids_;
  size_t max_depth_ = 0;
};

// The reference for VocabTrie::mask: every id checked on its own, byte by byte (tests).
size_t reference_mask(const JsonGrammar& g, const JsonGrammar::State& s, std::span<const std::string> token_bytes,
                      std::span<const int32_t> end_ids, std::vector<uint8_t>* allowed);

// What the engine asks of a constraint on a sequence's next token (SequenceOptions::constraint).
class TokenConstraint {
 public:
  virtual ~TokenConstraint() = default;
  // Sets every logit of an id not allowed next to -infinity (logits: [vocab]). Returns the number
  // of allowed ids (0: nothing fits; the engine then samples unmasked, which a consistent grammar
  // never causes).
  virtual size_t apply(std::span<float> logits) = 0;
  // The sequence emitted `id`.
  virtual void accept(int32_t id) = 0;
};

// A JsonGrammar over a VocabTrie. With `activate_after` >= 0 the constraint waits until that id is
// emitted: the `</think>` that ends reasoning, so a thinking model reasons freely and its answer is
// constrained. While it waits, everything is allowed except `stop_ids` (the ids that would end the
// generation: EOS and the parser's defensive end ids), so the generation never ends before the
// answer has started (it reaches `</think>`, or max_tokens: finish "length"). After the grammar's
// document is complete only `end_ids` are allowed; a token the grammar refused (a scripted test)
// turns the constraint off.
class GrammarConstraint : public TokenConstraint {
 public:
  GrammarConstraint(std::shared_ptr<const JsonGrammar> grammar, std::shared_ptr<const VocabTrie> vocab,
                    std::vector<int32_t> end_ids, int32_t activate_after = -1, std::vector<int32_t> stop_ids = {});
  size_t apply(std::span<float> logits) override;
  void accept(int32_t id) override;
  bool active() const { return active_; }
  // Masks computed by walking the trie, and masks reused from the cache (tests, the bench).
  int64_t walks() const { return walks_; }
  int64_t reuses() const { return reuses_; }
  const JsonGrammar::State& state() const { return state_; }

 private:
  std::shared_ptr<const JsonGrammar> grammar_;
  std::shared_ptr<const VocabTrie> vocab_;
  std::vector<int32_t> end_ids_;
  int32_t activate_after_;
  std::vector<int32_t> stop_ids_;  // masked while waiting for activate_after_
  bool active_;
  bool broken_ = false;
  JsonGrammar::State state_;
  // The last mask and its State's cache key (JsonGrammar::cache_key): inside a long string every
  // token has the same key, so the trie is walked once per string instead of once per token.
  std::vector<uint8_t> allowed_;
  size_t n_allowed_ = 0;
  std::vector<JsonGrammar::Frame> key_, cached_key_;
  bool cached_ = false;
  int64_t walks_ = 0, reuses_ = 0;
  std::vector<JsonGrammar::Frame> arena_;
};

}  // namespace strata::runtime
