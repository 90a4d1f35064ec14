#include "tokenizer/token_trie.h"

namespace strata::tokenizer {

void TokenTrie::insert(std::string_view s, int32_t id) {
  if (s.empty()) return;
  first_byte_[static_cast<uint8_t>(s[0])] = true;
  int32_t node = 0;
  for (const char ch : s) {
    const auto b = static_cast<uint8_t>(ch);
    int32_t child = -1;
    for (const auto& [cb, ci] : nodes_[node].children) {
      if (cb == b) {
        child = ci;
        break;
      }
    }
    if (child < 0) {
      child = static_cast<int32_t>(nodes_.size());
      nodes_[node].children.emplace_back(b, child);
      nodes_.emplace_back();
    }
    node = child;
  }
  nodes_[node].id = id;
}

TokenTrie::Match TokenTrie::longest_at(std::string_view text, size_t pos) const {
  Match best{0, -1};
  int32_t node = 0;
  for (size_t i = pos; i < text.size(); ++i) {
    const auto b = static_cast<uint8_t>(text[i]);
    int32_t child = -1;
    for (const auto& [cb, ci] : nodes_[node].children) {
      if (cb == b) {
        child = ci;
        break;
      }
    }
    if (child < 0) break;
    node = child;
    if (nodes_[node].id >= 0) best = {i + 1 - pos, nodes_[node].id};
  }
  return best;
}

TokenTrie::Match TokenTrie::find_next(std::string_view text, size_t from, size_t* start) const {
  if (empty()) return {0, -1};
  for (size_t pos = from; pos < text.size(); ++pos) {
    if (!first_byte_[static_cast<uint8_t>(text[pos])]) continue;
    const Match m = longest_at(text, pos);
    if (m.len > 0) {
      *start = pos;
      return m;
    }
  }
  return {0, -1};
}

}  // namespace strata::tokenizer
