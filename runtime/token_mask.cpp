#include "runtime/token_mask.h"

#include <algorithm>
#include <cmath>
#include <numeric>

namespace strata::runtime {

VocabTrie::VocabTrie(std::span<const std::string> token_bytes)
    : vocab_size_(static_cast<int32_t>(token_bytes.size())), bytes_(token_bytes.begin(), token_bytes.end()) {
  std::vector<int32_t> order;
  for (size_t id = 0; id < bytes_.size(); ++id)
    if (!bytes_[id].empty()) order.push_back(static_cast<int32_t>(id));
  // Sorted bytes (std::string compares as unsigned char) are the trie's preorder.
  std::sort(order.begin(), order.end(), [&](int32_t a, int32_t b) {
    const std::string& x = bytes_[static_cast<size_t>(a)];
    const std::string& y = bytes_[static_cast<size_t>(b)];
    return x < y || (x == y && a < b);
  });
  std::vector<uint32_t> path;  // node index at each depth - 1 of the current string
  std::vector<std::vector<int32_t>> node_ids;
  const std::string* prev = nullptr;
  for (const int32_t id : order) {
    const std::string& s = bytes_[static_cast<size_t>(id)];
    size_t lcp = 0;
    if (prev)
      while (lcp < prev->size() && lcp < s.size() && (*prev)[lcp] == s[lcp]) ++lcp;
    while (path.size() > lcp) {  // leave the nodes past the common prefix: their subtrees are done
      subtree_end_[path.back()] = static_cast<uint32_t>(byte_.size());
      path.pop_back();
    }
    for (size_t k = lcp; k < s.size(); ++k) {
      path.push_back(static_cast<uint32_t>(byte_.size()));
      byte_.push_back(static_cast<uint8_t>(s[k]));
      depth_.push_back(static_cast<uint16_t>(std::min<size_t>(k + 1, UINT16_MAX)));
      subtree_end_.push_back(0);
      node_ids.emplace_back();
    }
    node_ids[path.back()].push_back(id);
    max_depth_ = std::max(max_depth_, s.size());
    prev = &s;
  }
  while (!path.empty()) {
    subtree_end_[path.back()] = static_cast<uint32_t>(byte_.size());
    path.pop_back();
  }
  id_begin_.reserve(node_ids.size() + 1);
  for (const std::vector<int32_t>& v : node_ids) {
    id_begin_.push_back(static_cast<uint32_t>(ids_.size()));
    ids_.insert(ids_.end(), v.begin(), v.end());
  }
  id_begin_.push_back(static_cast<uint32_t>(ids_.size()));
}

size_t VocabTrie::mask(const JsonGrammar& g, const JsonGrammar::State& s, std::span<const int32_t> end_ids,
                       std::vector<uint8_t>* allowed, std::vector<JsonGrammar::Frame>* arena) const {
  allowed->assign(static_cast<size_t>(vocab_size_), 0);
  size_t n = 0;
  // One cursor per trie depth and the arena size it needs (frames above it belong to deeper nodes).
  std::vector<JsonGrammar::Cursor> cur(max_depth_ + 1);
  std::vector<size_t> arena_at(max_depth_ + 1);
  cur[0] = g.load(s, arena);
  arena_at[0] = arena->size();
  if (g.can_end(cur[0], *arena))
    for (const int32_t e : end_ids)
      if (e >= 0 && e < vocab_size_ && !(*allowed)[static_cast<size_t>(e)]) {
        (*allowed)[static_cast<size_t>(e)] = 1;
        ++n;
      }
  if (cur[0].depth == 0) return n;
  const size_t nodes = byte_.size();
  for (size_t i = 0; i < nodes;) {
    const size_t d = depth_[i];
    arena->resize(arena_at[d - 1]);
    JsonGrammar::Cursor c = cur[d - 1];
    if (!g.step(&c, byte_[i], arena)) {
      i = subtree_end_[i];  // no token below this byte fits
      continue;
    }
    cur[d] = c;
    arena_at[d] = arena->size();
    for (uint32_t k = id_begin_[i]; k < id_begin_[i + 1]; ++k) {
      uint8_t& a = (*allowed)[static_cast<size_t>(ids_[k])];
      if (!a) {
        a = 1;
        ++n;
      }
    }
    ++i;
  }
  return n;
}

size_t reference_mask(const JsonGrammar& g, const JsonGrammar::State& s, std::span<const std::string> token_bytes,
                      std::span<const int32_t> end_ids, std::vector<uint8_t>* allowed) {
  allowed->assign(token_bytes.size(), 0);
  size_t n = 0;
  for (size_t id = 0; id < token_bytes.size(); ++id) {
    if (token_bytes[id].empty()) continue;
    JsonGrammar::State t = s;
    if (g.advance(&t, token_bytes[id])) {
      (*allowed)[id] = 1;
      ++n;
    }
  }
  if (g.can_end(s))
    for (const int32_t e : end_ids)
      if (e >= 0 && static_cast<size_t>(e) < token_bytes.size() && !(*allowed)[static_cast<size_t>(e)]) {
        (*allowed)[static_cast<size_t>(e)] = 1;
        ++n;
      }
  return n;
}

GrammarConstraint::GrammarConstraint(std::shared_ptr<const JsonGrammar> grammar, std::shared_ptr<const VocabTrie> vocab,
                                     std::vector<int32_t> end_ids, int32_t activate_after,
                                     std::vector<int32_t> stop_ids)
    : grammar_(std::move(grammar)),
      vocab_(std::move(vocab)),
      end_ids_(std::move(end_ids)),
      activate_after_(activate_after),
      stop_ids_(std::move(stop_ids)),
      active_(activate_after < 0),
      state_(grammar_->start()) {}

size_t GrammarConstraint::apply(std::span<float> logits) {
  if (broken_) return logits.size();
  if (!active_) {
    // Reasoning: an end now would leave no answer (break-in issue 20 item 4, finding 2).
    size_t n = logits.size();
    for (const int32_t id : stop_ids_)
      if (id >= 0 && static_cast<size_t>(id) < logits.size() && logits[static_cast<size_t>(id)] != -INFINITY) {
        logits[static_cast<size_t>(id)] = -INFINITY;
        --n;
      }
    return n;
  }
  grammar_->cache_key(state_, vocab_->max_token_bytes(), &key_);
  if (cached_ && key_ == cached_key_) {
    ++reuses_;
  } else {
    n_allowed_ = vocab_->mask(*grammar_, state_, end_ids_, &allowed_, &arena_);
    cached_key_.swap(key_);
    cached_ = true;
    ++walks_;
  }
  const size_t n = n_allowed_;
  if (n == 0) return 0;
  const size_t v = std::min(logits.size(), allowed_.size());
  for (size_t i = 0; i < v; ++i)
    if (!allowed_[i]) logits[i] = -INFINITY;
  for (size_t i = v; i < logits.size(); ++i) logits[i] = -INFINITY;  // ids the vocabulary table lacks
  return n;
}

void GrammarConstraint::accept(int32_t id) {
  if (!active_) {
    active_ = id == activate_after_;
    return;
  }
  if (broken_ || std::find(end_ids_.begin(), end_ids_.end(), id) != end_ids_.end()) return;
  if (id < 0 || id >= vocab_->vocab_size() || vocab_->bytes(id).empty() ||
      !grammar_->advance(&state_, vocab_->bytes(id)))
    broken_ = true;
}

}  // namespace strata::runtime
