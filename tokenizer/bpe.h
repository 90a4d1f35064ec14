// The BPE model of a byte-level tokenizer: merge ranks over token ids, applied to one pre-token.
//
// Merging follows HF tokenizers' BPE (no dropout): repeatedly merge the adjacent pair with the
// lowest rank, the leftmost one among equal ranks, until no pair has a rank. A heap keeps each word
// O(n log n), so a long pre-token (a run of spaces, a CJK paragraph) stays cheap.
// Thread safety: immutable after build(); encode_word may run concurrently with separate scratch.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

#include "core/status.h"

namespace strata::tokenizer {

// Reusable buffers for BpeModel::encode_word (one per thread).
struct BpeScratch {
  struct Symbol {
    int32_t id;
    int32_t prev;  // index of the previous live symbol, -1 at the start
    int32_t next;  // index of the next live symbol, -1 at the end
    bool live;
  };
  struct Candidate {
    uint32_t rank;
    int32_t left;   // index of the left symbol when pushed
    int32_t right;  // index of the right symbol when pushed
    int32_t left_id, right_id, merged_id;
  };
  std::vector<Symbol> symbols;
  std::vector<Candidate> heap;
};

class BpeModel {
 public:
  BpeModel() = default;

  // Builds the model from the vocab (`token_of_id[id]` is the byte-level token string; ids are
  // dense) and the merges in rank order. Errors (kCorruption, prefixed by `where`): a merge
  // naming a token that is not in the vocab, a merge whose concatenation is not in the vocab, or a
  // byte whose one-character token is missing (a byte-level BPE needs all 256).
  [[nodiscard]] static Result<BpeModel> build(const std::unordered_map<std::string, int32_t>& vocab,
                                              const std::vector<std::pair<std::string, std::string>>& merges,
                                              std::string_view where);

  // Appends the ids of one pre-token given as raw bytes (non-empty).
  void encode_word(std::string_view bytes, BpeScratch* scratch, std::vector<int32_t>* out) const;

  size_t n_merges() const { return merges_.size(); }

 private:
  struct Merge {
    uint32_t rank;
    int32_t merged_id;
  };
  static uint64_t key(int32_t a, int32_t b) { return (uint64_t(uint32_t(a)) << 32) | uint32_t(b); }
  const Merge* find(int32_t a, int32_t b) const;

  std::array<int32_t, 256> byte_id_{};          // id of the one-byte token of each byte value
  std::unordered_map<uint64_t, Merge> merges_;  // (left id, right id) -> rank and result
};

}  // namespace strata::tokenizer
