#include "runtime/prefix_cache.h"

#include <algorithm>
#include <cstring>

namespace strata::runtime {

namespace {

// Polynomial prefix hash over token ids: h(i+1) = h(i) * kBase + (id + 1) mod 2^64. Equal prefixes
// hash equal; a match is confirmed with a full compare.
constexpr uint64_t kBase = 0x100000001B3ull;

uint64_t hash_tokens(std::span<const int32_t> t) {
  uint64_t h = 0;
  for (int32_t id : t) h = h * kBase + static_cast<uint64_t>(static_cast<uint32_t>(id)) + 1;
  return h;
}

// Bytes of a snapshot that are its own (not in shared pages).
uint64_t own_bytes(const Session& s) {
  uint64_t b = s.tokens().size() * sizeof(int32_t) + s.last_logits().size() * sizeof(float);
  for (const auto& l : s.cache().layers)
    b += l.window.size() + l.window_pos.size() * sizeof(int64_t) + (l.kv_state.size() + l.score_state.size()) * sizeof(float);
  return b;
}

template <class F>
void for_each_page(const Session& s, F&& f) {
  for (const auto& l : s.cache().layers)
    for (const model::PagedRows* rows : {&l.compressed, &l.index_keys})
      for (int p = 0; p < rows->n_pages(); ++p) f(rows->page(p), rows->page_bytes());
}

}  // namespace

Status PrefixCacheOptions::validate() const {
  if (min_recompute < 0) return InvalidArgument("prefix cache: min_recompute must be >= 0");
  return Status();
}

void PrefixCache::charge(const Session& s, int sign) {
  for_each_page(s, [&](const uint8_t* page, uint64_t bytes) {
    auto& [refs, b] = pages_[page];
    if (sign > 0) {
      if (refs++ == 0) {
        b = bytes;
        bytes_ += bytes;
      }
    } else if (--refs == 0) {
      bytes_ -= b;
      pages_.erase(page);
    }
  });
}

void PrefixCache::erase(std::list<Entry>::iterator it) {
  charge(it->snap, -1);
  bytes_ -= it->own_bytes;
  entries_.erase(it);
}

void PrefixCache::evict_to(uint64_t budget) {
  while (bytes_ > budget && !entries_.empty()) {
    auto lru = std::min_element(entries_.begin(), entries_.end(), [](const Entry& a, const Entry& b) { return a.tick < b.tick; });
    erase(lru);
    ++stats_.evictions;
  }
}

void PrefixCache::insert(const Session& s) {
  if (!s.valid() || s.n_past() == 0 || o_.budget_bytes == 0) return;
  const uint64_t own = own_bytes(s);
  uint64_t alone = own;
  for_each_page(s, [&](const uint8_t*, uint64_t b) { alone += b; });
  if (alone > o_.budget_bytes) return;
  const uint64_t h = hash_tokens(s.tokens());
  std::lock_guard<std::mutex> lock(mu_);
  for (auto it = entries_.begin(); it != entries_.end(); ++it)
    if (it->hash == h && it->snap.replayed() == s.replayed() && it->snap.tokens() == s.tokens()) {
      // Same history: keep the newer copy (it may have logits the older lacked).
      erase(it);
      break;
    }
  entries_.push_back(Entry{s, h, own, ++tick_});
  entries_.back().snap.set_undo_depth(0);  // not counted in own_bytes, and no restore rewinds (file comment)
  charge(entries_.back().snap, +1);
  bytes_ += own;
  ++stats_.inserts;
  evict_to(o_.budget_bytes);
}

int64_t PrefixCache::restore(std::span<const int32_t> tokens, PrefillMode mode, Session* s, int64_t longer_than) {
  const int64_t n = static_cast<int64_t>(tokens.size());
  std::vector<uint64_t> prefix(static_cast<size_t>(n + 1), 0);
  for (int64_t i = 0; i < n; ++i)
    prefix[static_cast<size_t>(i + 1)] =
        prefix[static_cast<size_t>(i)] * kBase + static_cast<uint64_t>(static_cast<uint32_t>(tokens[static_cast<size_t>(i)])) + 1;
  std::lock_guard<std::mutex> lock(mu_);
  ++stats_.lookups;
  Entry* best = nullptr;
  for (Entry& e : entries_) {
    const int64_t len = e.snap.n_past();
    if (len > n || len <= longer_than || (best && len <= best->snap.n_past())) continue;
    // An exact request never resumes a replayed state; a replay request may resume an exact one.
    if (mode == PrefillMode::kExact && e.snap.replayed()) continue;
    if (len == n ? e.snap.last_logits().empty() : n - len < o_.min_recompute) continue;
    if (prefix[static_cast<size_t>(len)] != e.hash) continue;
    if (!std::equal(e.snap.tokens().begin(), e.snap.tokens().end(), tokens.begin())) continue;
    best = &e;
  }
  if (!best) return 0;
  best->tick = ++tick_;
  *s = best->snap;
  ++stats_.hits;
  stats_.tokens_reused += best->snap.n_past();
  return best->snap.n_past();
}

PrefixCacheStats PrefixCache::stats() const {
  std::lock_guard<std::mutex> lock(mu_);
  PrefixCacheStats st = stats_;
  st.entries = static_cast<int64_t>(entries_.size());
  st.bytes = bytes_;
  return st;
}

Status prefill_with_cache(PrefixCache& cache, Session* s, std::span<const int32_t> tokens, const AppendOptions& o,
                          int64_t* reused) {
  if (s->n_past() != 0) return InvalidArgument("prefill_with_cache: the session is not empty");
  if (tokens.empty()) return InvalidArgument("prefill_with_cache: no tokens");
  STRATA_RETURN_IF_ERROR(o.validate());
  const int64_t got = cache.restore(tokens, o.mode, s);
  if (reused) *reused = got;
  if (got == static_cast<int64_t>(tokens.size())) return Status();
  AppendOptions ao = o;
  ao.on_boundary = [&](const Session& x) {
    cache.insert(x);
    if (o.on_boundary) o.on_boundary(x);
  };
  STRATA_RETURN_IF_ERROR(s->append(tokens.subspan(static_cast<size_t>(got)), ao));
  cache.insert(*s);
  return Status();
}

}  // namespace strata::runtime
