#include "store/expert_cache.h"

#include <sys/mman.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdlib>

namespace strata::store {

namespace {

uint64_t now_ns() {
  return static_cast<uint64_t>(
      std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now().time_since_epoch()).count());
}

constexpr uint64_t kArenaAlign = 2ull << 20;  // huge-page friendly

}  // namespace

struct ExpertCache::Load {
  io::ReadBatch batch;
};

struct ExpertCache::Entry {
  enum class State : uint8_t { kAbsent, kLoading, kReady };
  State state = State::kAbsent;
  bool permanent = false;  // hot set / pinned layer: never evicted
  bool wanted = false;     // named by the current kDemand hint, not acquired yet
  bool predicted = false;  // loaded by a kPredict hint and not used since
  bool counted = false;    // hit/miss already counted by a kDemand hint (not yet acquired)
  uint32_t uses = 1;       // weight of the next acquire (tokens it serves, from kDemand)
  int slot = -1;
  int pins = 0;            // live leases (and waiters)
  uint64_t last = 0;       // tick of the last use (or of the load)
  double freq = 0;         // kLfu: use count as of `last`
  std::shared_ptr<Load> load;  // while kLoading
};

class ExpertCache::Lease final : public ExpertLease {
 public:
  Lease(ExpertView v, ExpertCache* c, int id) : ExpertLease(v), cache_(c), id_(id) {}
  ~Lease() override { cache_->release(id_); }

 private:
  ExpertCache* cache_;
  int id_;
};

ExpertCache::ExpertCache(const io::Checkpoint& ck, const ExpertCatalog& catalog, io::UringReader& reader,
                         const std::vector<io::FdHandle>* direct_fds, const ExpertCacheOptions& options)
    : ck_(ck), cat_(catalog), reader_(reader), direct_fds_(direct_fds), opt_(options), slot_bytes_(catalog.slot_bytes()) {
  entries_.resize(static_cast<size_t>(catalog.size()));
}

ExpertCache::~ExpertCache() {
  // Reads in flight write into the arena: let them land first.
  for (Entry& e : entries_)
    if (e.load) (void)e.load->batch.wait();
  entries_.clear();
  std::free(arena_);
}

Status ExpertCache::allocate() {
  STRATA_CHECK(arena_ == nullptr, "ExpertCache::allocate twice");
  if (opt_.n_slots < 1) return ResourceExhausted("expert cache with no slots");
  arena_bytes_ = std::max<uint64_t>(kArenaAlign, (static_cast<uint64_t>(opt_.n_slots) * slot_bytes_ + kArenaAlign - 1) / kArenaAlign * kArenaAlign);
  arena_ = static_cast<uint8_t*>(std::aligned_alloc(kArenaAlign, arena_bytes_));
  if (!arena_)
    return ResourceExhausted("expert cache: cannot allocate " + format_bytes(arena_bytes_) + " (" +
                             std::to_string(opt_.n_slots) + " slots of " + format_bytes(slot_bytes_) +
                             "); give a smaller --ram-budget");
  // Fault every page in now. Otherwise the first read into each slot faults its pages in from the
  // io_uring submission on the forward pass's thread: measured 30 s of system time in a 64-token
  // prefill of the 48 GB benchmark model. No MADV_HUGEPAGE: with the kernel's default
  // defrag=madvise it compacts memory on every fault, 5x slower (42 s vs 8.6 s for 8 GiB here).
  if (::madvise(arena_, arena_bytes_, MADV_POPULATE_WRITE) != 0) {
    for (uint64_t off = 0; off < arena_bytes_; off += 4096) arena_[off] = 0;
  }
  slot_owner_.assign(static_cast<size_t>(opt_.n_slots), -1);
  free_slots_.clear();
  for (int64_t s = opt_.n_slots - 1; s >= 0; --s) free_slots_.push_back(static_cast<int>(s));
  return Status();
}

int64_t ExpertCache::n_permanent() const {
  std::lock_guard<std::mutex> lk(mu_);
  int64_t n = 0;
  for (const Entry& e : entries_) n += e.permanent ? 1 : 0;
  return n;
}

void ExpertCache::add_stats(PlacementStats* out) const {
  std::lock_guard<std::mutex> lk(mu_);
  const PlacementStats& s = stats_;
  out->expert_acquires += s.expert_acquires;
  out->expert_hits += s.expert_hits;
  out->expert_inflight += s.expert_inflight;
  out->expert_misses += s.expert_misses;
  out->expert_loads += s.expert_loads;
  out->expert_bytes_read += s.expert_bytes_read;
  out->expert_evictions += s.expert_evictions;
  out->prefetch_issued += s.prefetch_issued;
  out->prefetch_used += s.prefetch_used;
  out->expert_wait_ns += s.expert_wait_ns;
}

ExpertView ExpertCache::view_of(int id) const {
  const ExpertPlan& p = cat_.plan(id);
  const uint8_t* base = slot_ptr(entries_[static_cast<size_t>(id)].slot);
  auto v = [&](int part) {
    const io::TensorInfo* t = p.tensors[static_cast<size_t>(part)];
    return TensorView{base + p.slot_offset[static_cast<size_t>(part)], t->dtype, t->shape};
  };
  ExpertView ev;
  ev.w1 = v(0);
  ev.w1_scale = v(1);
  ev.w2 = v(2);
  ev.w2_scale = v(3);
  ev.w3 = v(4);
  ev.w3_scale = v(5);
  return ev;
}

void ExpertCache::touch_locked(Entry& e) {
  ++tick_;
  if (opt_.policy == CachePolicy::kLfu)
    e.freq = e.freq * std::exp2(-static_cast<double>(tick_ - e.last) / opt_.halflife_acquires) + e.uses;
  e.last = tick_;
  e.uses = 1;
}

double ExpertCache::score_locked(const Entry& e) const {
  if (opt_.policy == CachePolicy::kLru) return static_cast<double>(e.last);
  return e.freq * std::exp2(-static_cast<double>(tick_ - e.last) / opt_.halflife_acquires);
}

int ExpertCache::take_slot_locked(bool steal) {
  if (!free_slots_.empty()) {
    const int s = free_slots_.back();
    free_slots_.pop_back();
    return s;
  }
  // Exact scan: a few thousand slots at most, against a multi-megabyte read per eviction.
  for (int pass = 0; pass < (steal ? 2 : 1); ++pass) {
    int best = -1;
    double best_score = 0;
    uint64_t best_last = 0;
    for (size_t s = 0; s < slot_owner_.size(); ++s) {
      const int id = slot_owner_[s];
      if (id < 0) continue;
      const Entry& e = entries_[static_cast<size_t>(id)];
      if (e.state != Entry::State::kReady || e.pins > 0 || e.permanent || (e.wanted && pass == 0)) continue;
      const double sc = score_locked(e);
      if (best < 0 || sc < best_score || (sc == best_score && e.last < best_last)) {
        best = static_cast<int>(s);
        best_score = sc;
        best_last = e.last;
      }
    }
    if (best >= 0) {
      Entry& v = entries_[static_cast<size_t>(slot_owner_[static_cast<size_t>(best)])];
      v.state = Entry::State::kAbsent;
      v.slot = -1;
      v.predicted = false;
      slot_owner_[static_cast<size_t>(best)] = -1;
      ++stats_.expert_evictions;
      return best;
    }
  }
  return -1;
}

bool ExpertCache::try_start_locked(int id, bool predicted, bool steal, Status* err) {
  const ExpertPlan& plan = cat_.plan(id);
  // A shard rewritten since load must not feed garbage into the cache.
  for (const ExpertSpan& sp : plan.spans) {
    const io::File& f = ck_.shard(sp.shard);
    auto now = f.current_size();
    if (!now.ok()) {
      *err = now.error();
      return false;
    }
    if (*now != f.size()) {
      *err = Corruption(f.path() + ": shard changed size since load (" + std::to_string(f.size()) + " -> " +
                        std::to_string(*now) + " bytes); reload the model");
      return false;
    }
  }
  const int slot = take_slot_locked(steal);
  if (slot < 0) return false;
  Entry& e = entries_[static_cast<size_t>(id)];
  e.slot = slot;
  slot_owner_[static_cast<size_t>(slot)] = id;
  e.state = Entry::State::kLoading;
  e.predicted = predicted;
  if (e.last == 0 || opt_.policy == CachePolicy::kLru) e.last = tick_;
  auto ld = std::make_shared<Load>();
  uint8_t* base = slot_ptr(slot);
  for (const ExpertSpan& sp : plan.spans) {
    const io::File& f = ck_.shard(sp.shard);
    const bool direct = direct_fds_ && !direct_fds_->empty() && f.native_fd() >= 0;
    const int fd = direct ? (*direct_fds_)[static_cast<size_t>(sp.shard)].get() : -1;
    for (uint64_t off = 0; off < sp.needed; off += opt_.read_chunk_bytes) {
      const uint64_t len = std::min<uint64_t>(opt_.read_chunk_bytes, sp.length - off);
      const uint64_t need = std::min<uint64_t>(len, sp.needed - off);
      ld->batch.add(f, sp.file_offset + off, static_cast<size_t>(direct ? len : need), base + sp.slot_offset + off, fd,
                    static_cast<size_t>(need));
    }
  }
  reader_.submit(&ld->batch);
  e.load = std::move(ld);
  loading_.push_back(id);
  ++stats_.expert_loads;
  stats_.expert_bytes_read += plan.read_bytes;
  if (predicted) ++stats_.prefetch_issued;
  return true;
}

void ExpertCache::reap_locked() {
  size_t keep = 0;
  for (size_t i = 0; i < loading_.size(); ++i) {
    const int id = loading_[i];
    Entry& e = entries_[static_cast<size_t>(id)];
    if (e.state != Entry::State::kLoading || e.pins > 0 || !e.load->batch.done()) {
      if (e.state == Entry::State::kLoading) loading_[keep++] = id;
      continue;
    }
    // A finished read of a ggml MXFP4 expert is unpacked here, once, as it turns kReady (under mu_).
    if (e.load->batch.wait().ok() && unpack_expert_slot(cat_.plan(id), slot_ptr(e.slot)).ok()) {
      e.state = Entry::State::kReady;
    } else {
      // A failed read-ahead: forget it; an acquire will read again and report what fails.
      e.state = Entry::State::kAbsent;
      slot_owner_[static_cast<size_t>(e.slot)] = -1;
      free_slots_.push_back(e.slot);
      e.slot = -1;
      e.predicted = false;
    }
    e.load.reset();
  }
  loading_.resize(keep);
}

void ExpertCache::start_deferred_locked() {
  while (!deferred_.empty()) {
    const int id = deferred_.front();
    const Entry& e = entries_[static_cast<size_t>(id)];
    if (e.state != Entry::State::kAbsent || !e.wanted) {
      deferred_.pop_front();
      continue;
    }
    Status err;
    if (!try_start_locked(id, false, false, &err) && err.ok()) break;
    deferred_.pop_front();
  }
}

void ExpertCache::count_use_locked(Entry& e) {
  if (e.counted) {
    e.counted = false;
    return;
  }
  if (e.state == Entry::State::kReady) ++stats_.expert_hits;
  else if (e.state == Entry::State::kLoading) ++stats_.expert_inflight;
  else ++stats_.expert_misses;
  if (e.predicted && e.state != Entry::State::kAbsent) ++stats_.prefetch_used;
  e.predicted = false;
}

void ExpertCache::prefetch(std::span<const int> ids, PrefetchKind kind, std::span<const uint32_t> uses) {
  std::lock_guard<std::mutex> lk(mu_);
  reap_locked();
  if (kind == PrefetchKind::kDemand) {
    // A new layer's demand: the previous one's flags are stale.
    for (int w : wanted_) entries_[static_cast<size_t>(w)].wanted = entries_[static_cast<size_t>(w)].counted = false;
    wanted_.clear();
    deferred_.clear();
  }
  for (size_t i = 0; i < ids.size(); ++i) {
    const int id = ids[i];
    Entry& e = entries_[static_cast<size_t>(id)];
    if (kind == PrefetchKind::kDemand) {
      e.uses = i < uses.size() ? uses[i] : 1;
      e.wanted = true;
      wanted_.push_back(id);
      // Where the layer found its expert when it named it: that is the cache's hit or miss.
      if (!e.counted) {
        count_use_locked(e);
        e.counted = true;
      }
    }
    if (e.state != Entry::State::kAbsent) continue;
    Status err;
    if (try_start_locked(id, kind == PrefetchKind::kPredict, false, &err)) continue;
    if (!err.ok()) continue;  // the acquire reads again and reports it
    if (kind == PrefetchKind::kDemand) deferred_.push_back(id);
    else break;  // no slot for guesses without evicting what this layer needs
  }
}

Status ExpertCache::reread(int id) {
  const ExpertPlan& p = cat_.plan(id);
  uint8_t* base = slot_ptr(entries_[static_cast<size_t>(id)].slot);
  for (int part = 0; part < kExpertParts; ++part) {
    const io::TensorInfo* t = p.tensors[static_cast<size_t>(part)];
    STRATA_RETURN_IF_ERROR(ck_.read_stored_range(*t, 0, t->nbytes, base + p.slot_offset[static_cast<size_t>(part)]));
  }
  return unpack_expert_slot(p, base);
}

Result<std::unique_ptr<ExpertLease>> ExpertCache::acquire(int id) {
  std::unique_lock<std::mutex> lk(mu_);
  Entry& e = entries_[static_cast<size_t>(id)];
  ++stats_.expert_acquires;
  e.wanted = false;
  touch_locked(e);
  count_use_locked(e);
  if (e.state == Entry::State::kReady) {
    ++e.pins;
    return std::unique_ptr<ExpertLease>(new Lease(view_of(id), this, id));
  }
  if (e.state == Entry::State::kAbsent) {
    for (;;) {
      reap_locked();  // finished reads become evictable
      Status err;
      if (try_start_locked(id, false, /*steal=*/true, &err)) break;
      if (!err.ok()) return err;
      if (loading_.empty())
        return ResourceExhausted("expert cache: all " + std::to_string(opt_.n_slots) +
                                 " slots are pinned (leases or permanent); raise --ram-budget");
      // Every slot is busy reading: wait for the oldest read, then look again.
      std::shared_ptr<Load> other = entries_[static_cast<size_t>(loading_.front())].load;
      lk.unlock();
      const uint64_t t0 = now_ns();
      (void)other->batch.wait();
      const uint64_t waited = now_ns() - t0;
      lk.lock();
      stats_.expert_wait_ns += waited;
    }
  }
  e.predicted = false;
  ++e.pins;
  std::shared_ptr<Load> ld = e.load;
  lk.unlock();
  const uint64_t t0 = now_ns();
  Status s = ld->batch.wait();
  const uint64_t waited = now_ns() - t0;
  const bool stored_bytes = s.ok();  // the slot holds the file's bytes (reread gives official ones)
  if (!s.ok()) s = reread(id);  // pinned and still kLoading: nobody else touches this slot
  lk.lock();
  stats_.expert_wait_ns += waited;
  if (e.state == Entry::State::kLoading) {
    // Unpacked once, by whoever turns it kReady: two acquirers of one expert both get here.
    if (stored_bytes) s = unpack_expert_slot(cat_.plan(id), slot_ptr(e.slot));
    finish_load_locked(id, s.ok());
  }
  if (!s.ok()) {
    --e.pins;
    start_deferred_locked();
    return s;  // names the tensor and offset (Checkpoint::read_range)
  }
  return std::unique_ptr<ExpertLease>(new Lease(view_of(id), this, id));
}

void ExpertCache::finish_load_locked(int id, bool ok) {
  Entry& e = entries_[static_cast<size_t>(id)];
  loading_.erase(std::find(loading_.begin(), loading_.end(), id));
  e.load.reset();
  if (ok) {
    e.state = Entry::State::kReady;
    return;
  }
  e.state = Entry::State::kAbsent;
  slot_owner_[static_cast<size_t>(e.slot)] = -1;
  free_slots_.push_back(e.slot);
  e.slot = -1;
}

void ExpertCache::release(int id) {
  std::lock_guard<std::mutex> lk(mu_);
  --entries_[static_cast<size_t>(id)].pins;
  reap_locked();
  start_deferred_locked();
}

Status ExpertCache::pin_permanently(std::span<const int> requested) {
  std::unique_lock<std::mutex> lk(mu_);
  std::vector<int> ids;  // marked permanent and pinned by this call
  Status first;
  for (int id : requested) {
    Entry& e = entries_[static_cast<size_t>(id)];
    if (e.permanent) continue;
    ids.push_back(id);
    e.permanent = true;
    ++e.pins;
    if (e.state == Entry::State::kAbsent) {
      Status err;
      if (!try_start_locked(id, false, false, &err)) {
        first = !err.ok() ? err
                          : ResourceExhausted("expert cache: no slot left to pin layer " +
                                              std::to_string(cat_.plan(id).key.layer) + " expert " +
                                              std::to_string(cat_.plan(id).key.expert));
        break;
      }
    }
  }
  // Settle every read in flight, in order (after a failure too: they write into their slots).
  for (int id : ids) {
    Entry& e = entries_[static_cast<size_t>(id)];
    if (e.state == Entry::State::kLoading) {
      std::shared_ptr<Load> ld = e.load;
      lk.unlock();
      Status s = ld->batch.wait();
      const bool stored_bytes = s.ok();  // unpacked below (reread gives official bytes)
      if (!s.ok()) s = reread(id);  // pinned and kLoading: nobody else writes this slot
      lk.lock();
      // Not settled meanwhile by an acquire of the same id:
      if (e.state == Entry::State::kLoading) {
        if (stored_bytes) s = unpack_expert_slot(cat_.plan(id), slot_ptr(e.slot));
        finish_load_locked(id, s.ok());
      }
      if (!s.ok() && first.ok())
        first = s.with_context("pinning routed expert " + std::to_string(cat_.plan(id).key.expert) + " of layer " +
                               std::to_string(cat_.plan(id).key.layer));
    }
    --e.pins;
    // Only bytes that arrived are kept for good: an expert whose read and retry both failed (or
    // that never got a slot) is not permanent and not ready, so no acquire can take its slot's
    // stale or zeroed bytes for a hit (issue 13 item 9).
    if (e.state != Entry::State::kReady) e.permanent = false;
  }
  return first;
}

}  // namespace strata::store
