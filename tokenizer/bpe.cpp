#include "tokenizer/bpe.h"

#include <algorithm>

#include "tokenizer/byte_level.h"
#include "tokenizer/utf8.h"

namespace strata::tokenizer {

namespace {

// Heap order: lowest rank first, then leftmost (HF's tie-break on the symbol position).
bool after(const BpeScratch::Candidate& x, const BpeScratch::Candidate& y) {
  return x.rank != y.rank ? x.rank > y.rank : x.left > y.left;
}

}  // namespace

Result<BpeModel> BpeModel::build(const std::unordered_map<std::string, int32_t>& vocab,
                                 const std::vector<std::pair<std::string, std::string>>& merges,
                                 std::string_view where) {
  BpeModel m;
  for (int b = 0; b < 256; ++b) {
    std::string s;
    append_utf8(&s, byte_to_char(static_cast<uint8_t>(b)));
    const auto it = vocab.find(s);
    if (it == vocab.end()) {
      return Corruption(std::string(where) + ": model.vocab lacks the byte-level token '" + s + "' for byte " +
                        std::to_string(b) + " (a ByteLevel BPE needs all 256)");
    }
    m.byte_id_[b] = it->second;
  }
  m.merges_.reserve(merges.size());
  for (size_t rank = 0; rank < merges.size(); ++rank) {
    const auto& [a, b] = merges[rank];
    const auto ia = vocab.find(a);
    const auto ib = vocab.find(b);
    const auto im = vocab.find(a + b);
    if (ia == vocab.end() || ib == vocab.end() || im == vocab.end()) {
      const std::string& missing = ia == vocab.end() ? a : ib == vocab.end() ? b : a + b;
      return Corruption(std::string(where) + ": model.merges[" + std::to_string(rank) + "] '" + a + " " + b +
                        "': token '" + missing + "' is not in model.vocab");
    }
    // A repeated pair keeps its last rank, as HF's map construction does.
    m.merges_[key(ia->second, ib->second)] = Merge{static_cast<uint32_t>(rank), im->second};
  }
  return m;
}

const BpeModel::Merge* BpeModel::find(int32_t a, int32_t b) const {
  const auto it = merges_.find(key(a, b));
  return it == merges_.end() ? nullptr : &it->second;
}

void BpeModel::encode_word(std::string_view bytes, BpeScratch* scratch, std::vector<int32_t>* out) const {
  const int32_t n = static_cast<int32_t>(bytes.size());
  if (n == 1) {
    out->push_back(byte_id_[static_cast<uint8_t>(bytes[0])]);
    return;
  }
  auto& sym = scratch->symbols;
  auto& heap = scratch->heap;
  sym.resize(n);
  heap.clear();
  for (int32_t i = 0; i < n; ++i)
    sym[i] = {byte_id_[static_cast<uint8_t>(bytes[i])], i - 1, i + 1 < n ? i + 1 : -1, true};

  auto push_pair = [&](int32_t left, int32_t right) {
    if (left < 0 || right < 0) return;
    if (const Merge* m = find(sym[left].id, sym[right].id)) {
      heap.push_back({m->rank, left, right, sym[left].id, sym[right].id, m->merged_id});
      std::push_heap(heap.begin(), heap.end(), after);
    }
  };
  for (int32_t i = 0; i + 1 < n; ++i) push_pair(i, i + 1);

  while (!heap.empty()) {
    std::pop_heap(heap.begin(), heap.end(), after);
    const BpeScratch::Candidate c = heap.back();
    heap.pop_back();
    // Stale if either side was merged away or changed since the candidate was pushed.
    BpeScratch::Symbol& l = sym[c.left];
    if (!l.live || l.next != c.right || l.id != c.left_id || sym[c.right].id != c.right_id) continue;
    BpeScratch::Symbol& r = sym[c.right];
    l.id = c.merged_id;
    l.next = r.next;
    r.live = false;
    if (r.next >= 0) sym[r.next].prev = c.left;
    push_pair(l.prev, c.left);
    push_pair(c.left, l.next);
  }
  for (int32_t i = 0; i >= 0; i = sym[i].next) out->push_back(sym[i].id);
}

}  // namespace strata::tokenizer
