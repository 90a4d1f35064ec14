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
  // Set under mu_ when the load ends (kUnpacking -> kReady or kAbsent), for the acquirers that
  // waited on it: they hold this Load, as the entry may be read again before they wake.
  bool settled = false;
  Status result;
};

struct ExpertCache::Entry {
  // kUnpacking: the read ended and one thread, outside mu_, retries it if it failed and regroups
  // ggml MXFP4 (unpack_expert_slot); not evictable, and acquirers wait for it (settled_cv_).
  enum class State : uint8_t { kAbsent, kLoading, kUnpacking, kReady };
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
  std::shared_ptr<Load> load;  // while kLoading or kUnpacking
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
  out->prefetch_outstanding += s.prefetch_outstanding;
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
      drop_prediction_locked(v);
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
  e.predicted = predicted;  // the entry was absent, so not flagged before
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
  if (predicted) {
    ++stats_.prefetch_issued;
    ++stats_.prefetch_outstanding;
  }
  return true;
}

void ExpertCache::reap_locked(std::vector<int>* claimed) {
  size_t keep = 0;
  for (size_t i = 0; i < loading_.size(); ++i) {
    const int id = loading_[i];
    Entry& e = entries_[static_cast<size_t>(id)];
    if (e.state != Entry::State::kLoading || e.pins > 0 || !e.load->batch.done()) {
      if (e.state == Entry::State::kLoading) loading_[keep++] = id;
      continue;
    }
    if (e.load->batch.wait().ok()) {
      // A ggml MXFP4 expert is regrouped by the caller, after it lets go of mu_ (unpack_claimed).
      if (cat_.plan(id).ggml_mxfp4) {
        e.state = Entry::State::kUnpacking;
        ++n_unpacking_;
        claimed->push_back(id);
        continue;
      }
      e.state = Entry::State::kReady;
    } else {
      // A failed read-ahead: forget it; an acquire will read again and report what fails.
      e.state = Entry::State::kAbsent;
      slot_owner_[static_cast<size_t>(e.slot)] = -1;
      free_slots_.push_back(e.slot);
      e.slot = -1;
      drop_prediction_locked(e);
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
  // kUnpacking is a hit: the read has landed (a reap just before, as in prefetch, claims it) and
  // counting it a miss would make MXFP4 GGUFs' hit rates incomparable with safetensors'.
  if (e.state == Entry::State::kReady || e.state == Entry::State::kUnpacking) ++stats_.expert_hits;
  else if (e.state == Entry::State::kLoading) ++stats_.expert_inflight;
  else ++stats_.expert_misses;
  if (e.predicted && e.state != Entry::State::kAbsent) ++stats_.prefetch_used;
  drop_prediction_locked(e);
}

void ExpertCache::drop_prediction_locked(Entry& e) {
  if (!e.predicted) return;
  e.predicted = false;
  --stats_.prefetch_outstanding;
}

void ExpertCache::prefetch(std::span<const int> ids, PrefetchKind kind, std::span<const uint32_t> uses) {
  std::unique_lock<std::mutex> lk(mu_);
  std::vector<int> claimed;
  reap_locked(&claimed);
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
  unpack_claimed(lk, claimed);  // after the reads are started: they go on meanwhile
}

Status ExpertCache::reread(int id, uint8_t* base) {
  const ExpertPlan& p = cat_.plan(id);
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
  // Re-checked after every wait: another thread may start (or finish) this expert meanwhile.
  while (e.state == Entry::State::kAbsent) {
    std::vector<int> claimed;
    reap_locked(&claimed);  // finished reads become evictable
    if (!claimed.empty()) {
      unpack_claimed(lk, claimed);
      continue;
    }
    Status err;
    if (try_start_locked(id, false, /*steal=*/true, &err)) break;
    if (!err.ok()) return err;
    if (loading_.empty() && n_unpacking_ == 0)
      return ResourceExhausted("expert cache: all " + std::to_string(opt_.n_slots) +
                               " slots are pinned (leases or permanent); raise --ram-budget");
    wait_for_a_slot(lk);
  }
  if (e.state != Entry::State::kReady) {
    drop_prediction_locked(e);
    ++e.pins;
    Status s = settle_pinned(lk, id, e.load);
    if (!s.ok()) {
      --e.pins;
      start_deferred_locked();
      return s;  // names the tensor and offset (Checkpoint::read_range)
    }
    return std::unique_ptr<ExpertLease>(new Lease(view_of(id), this, id));
  }
  ++e.pins;
  return std::unique_ptr<ExpertLease>(new Lease(view_of(id), this, id));
}

void ExpertCache::wait_for_a_slot(std::unique_lock<std::mutex>& lk) {
  const uint64_t t0 = now_ns();
  if (!loading_.empty()) {
    // Every slot is busy reading: wait for the oldest read.
    std::shared_ptr<Load> other = entries_[static_cast<size_t>(loading_.front())].load;
    lk.unlock();
    (void)other->batch.wait();
    lk.lock();
  } else {
    // Only regroups are in flight, each on some thread outside mu_: wait for one to end.
    const uint64_t gen = settle_gen_;
    settled_cv_.wait(lk, [&] { return settle_gen_ != gen; });
  }
  stats_.expert_wait_ns += now_ns() - t0;
}

Status ExpertCache::settle_pinned(std::unique_lock<std::mutex>& lk, int id, std::shared_ptr<Load> ld) {
  Entry& e = entries_[static_cast<size_t>(id)];
  uint64_t t0 = now_ns();
  if (e.state == Entry::State::kLoading) {
    lk.unlock();
    (void)ld->batch.wait();
    lk.lock();
  }
  stats_.expert_wait_ns += now_ns() - t0;  // waits only: not this thread's own regroup
  // The first thread back with the read still kLoading claims it; two acquirers of one expert
  // may both get here.
  if (e.state == Entry::State::kLoading && e.load == ld) {
    e.state = Entry::State::kUnpacking;
    ++n_unpacking_;
    loading_.erase(std::find(loading_.begin(), loading_.end(), id));
    uint8_t* base = slot_ptr(e.slot);
    Status s = ld->batch.wait();  // done: returns at once
    if (s.ok() && !cat_.plan(id).ggml_mxfp4) {
      settle_locked(id, s);  // nothing to do outside mu_ (plain bytes, as safetensors)
      return ld->result;
    }
    lk.unlock();
    // Pinned and kUnpacking: nobody else writes this slot. A failed read is retried tensor by
    // tensor; reread gives official bytes, the batch the file's.
    s = s.ok() ? unpack_expert_slot(cat_.plan(id), base) : reread(id, base);
    lk.lock();
    settle_locked(id, s);
  } else {
    t0 = now_ns();
    settled_cv_.wait(lk, [&] { return ld->settled; });
    stats_.expert_wait_ns += now_ns() - t0;
  }
  return ld->result;
}

void ExpertCache::unpack_claimed(std::unique_lock<std::mutex>& lk, const std::vector<int>& ids) {
  if (ids.empty()) return;
  std::vector<uint8_t*> bases;  // kUnpacking: the slots stay put
  for (int id : ids) bases.push_back(slot_ptr(entries_[static_cast<size_t>(id)].slot));
  std::vector<Status> results;
  lk.unlock();
  for (size_t i = 0; i < ids.size(); ++i) results.push_back(unpack_expert_slot(cat_.plan(ids[i]), bases[i]));
  lk.lock();
  // A failed regroup goes absent like a failed read-ahead; an acquirer waiting on it gets the error.
  for (size_t i = 0; i < ids.size(); ++i) settle_locked(ids[i], results[i]);
}

void ExpertCache::settle_locked(int id, const Status& result) {
  Entry& e = entries_[static_cast<size_t>(id)];
  --n_unpacking_;
  ++settle_gen_;
  e.load->result = result;
  e.load->settled = true;
  e.load.reset();
  settled_cv_.notify_all();
  if (result.ok()) {
    e.state = Entry::State::kReady;
    return;
  }
  e.state = Entry::State::kAbsent;
  slot_owner_[static_cast<size_t>(e.slot)] = -1;
  free_slots_.push_back(e.slot);
  e.slot = -1;
  drop_prediction_locked(e);
}

void ExpertCache::release(int id) {
  std::unique_lock<std::mutex> lk(mu_);
  --entries_[static_cast<size_t>(id)].pins;
  std::vector<int> claimed;
  reap_locked(&claimed);
  start_deferred_locked();
  unpack_claimed(lk, claimed);
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
    if (e.state == Entry::State::kLoading || e.state == Entry::State::kUnpacking) {
      Status s = settle_pinned(lk, id, e.load);
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
