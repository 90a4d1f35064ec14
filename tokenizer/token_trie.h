// A byte trie over added-token strings for leftmost-longest matching (what HF's added vocabulary
// does with Aho-Corasick in LeftmostLongest mode). Added tokens are few (hundreds) and mostly share
// the prefix "<｜", so a trie walk per candidate position is cheap; positions whose byte starts no
// token are skipped with one table lookup.
// Thread safety: immutable after construction.
#pragma once

#include <array>
#include <cstdint>
#include <string_view>
#include <vector>

namespace strata::tokenizer {

class TokenTrie {
 public:
  // Adds `s` (non-empty) with value `id`; a repeated string keeps the last id.
  void insert(std::string_view s, int32_t id);

  bool empty() const { return nodes_.size() <= 1; }

  struct Match {
    size_t len;  // 0 when nothing matches
    int32_t id;
  };
  // The longest inserted string that starts at text[pos].
  Match longest_at(std::string_view text, size_t pos) const;

  // The leftmost-longest match at or after `from`: its start in `*start`, or len 0 if none.
  Match find_next(std::string_view text, size_t from, size_t* start) const;

 private:
  struct Node {
    std::vector<std::pair<uint8_t, int32_t>> children;  // (byte, node index)
    int32_t id = -1;                                    // value if a string ends here
  };
  std::vector<Node> nodes_{Node{}};
  std::array<bool, 256> first_byte_{};
};

}  // namespace strata::tokenizer
