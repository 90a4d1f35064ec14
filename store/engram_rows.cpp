#include "store/engram_rows.h"

#include <fcntl.h>

#include <algorithm>
#include <chrono>
#include <cstring>

#include "store/engram_layout.h"
#include "store/expert_catalog.h"

namespace strata::store {

namespace {

uint64_t now_ns() {
  return static_cast<uint64_t>(
      std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now().time_since_epoch()).count());
}

constexpr uint64_t kPage = 4096;
constexpr int kWays = 8;

uint64_t mix64(uint64_t x) {  // splitmix64 finaliser
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

// Engram tables of `ck`: (layer, weight, scale) for "<prefix>.engram.embed.weight".
std::vector<EngramTable> find_tables(const io::Checkpoint& ck, int n_layers) {
  std::vector<EngramTable> out;
  for (const auto& [name, t] : ck.tensors()) {
    static const std::string kSuffix = ".engram.embed.weight";
    if (name.size() <= kSuffix.size() || name.compare(name.size() - kSuffix.size(), kSuffix.size(), kSuffix) != 0)
      continue;
    if (!ExpertCatalog::is_engram_table(name)) continue;
    const std::string prefix = name.substr(0, name.size() - kSuffix.size());
    EngramTable tab;
    if (prefix.rfind("layers.", 0) == 0) tab.layer = std::atoi(prefix.c_str() + 7);
    else tab.layer = n_layers + std::atoi(prefix.c_str() + 4);
    tab.weight = &t;
    tab.scale = ck.find(prefix + ".engram.embed.scale");
    out.push_back(tab);
  }
  std::sort(out.begin(), out.end(), [](const EngramTable& a, const EngramTable& b) { return a.layer < b.layer; });
  return out;
}

}  // namespace

// One layer's rows for one chunk, in flight.
class EngramRowStore::Fetch final : public EngramFetch {
 public:
  Fetch(EngramRowStore* s, const EngramTable* t, size_t table_index) : store_(s), t_(t), tidx_(table_index) {}
  ~Fetch() override {
    if (!waited_) {  // abandoned (the forward failed first): still close its busy interval
      (void)batch_.wait();
      store_->fetch_done(batch_.submitted() ? batch_.finished_ns() : t_start_);
    }
  }
  Status wait(uint8_t* weight_out, uint8_t* scale_out) override;

  // A read request covering missing rows [first, first + n) of `miss_` (weights or scales).
  struct Group {
    uint64_t begin = 0, end = 0;  // absolute byte range in the shard
    uint64_t bounce = 0;          // where it lands in bounce_
    uint32_t first = 0, n = 0;    // slice of miss_
    bool scale = false;
  };

  EngramRowStore* store_;
  const EngramTable* t_;
  size_t tidx_;
  uint64_t t_start_ = 0;
  std::vector<int64_t> uniq_;    // sorted unique row ids
  std::vector<uint32_t> uidx_;   // per requested row: index into uniq_
  std::vector<uint32_t> miss_;   // indices into uniq_ not in the row cache, ascending
  std::vector<uint8_t> staging_; // [uniq, row_bytes + n_scales]
  std::vector<Group> groups_;
  AlignedBytes bounce_;
  io::ReadBatch batch_;
  bool waited_ = false;
};

EngramRowStore::~EngramRowStore() = default;

const EngramTable* EngramRowStore::table_of(int layer) const {
  for (const EngramTable& t : tables_)
    if (t.layer == layer) return &t;
  return nullptr;
}

uint64_t EngramRowStore::scale_bytes(const io::Checkpoint& ck) {
  uint64_t n = 0;
  for (const EngramTable& t : find_tables(ck, 1 << 20))
    if (t.scale) n += t.scale->nbytes;
  return n;
}

uint64_t EngramRowStore::row_bytes(const io::Checkpoint& ck) {
  uint64_t n = 0;
  for (const EngramTable& t : find_tables(ck, 1 << 20)) {
    if (t.weight->shape.rank != 2) continue;
    const int64_t hd = t.weight->shape[1];
    const uint64_t hdu = static_cast<uint64_t>(hd);
    int64_t ihd = 0, ins = 0;
    if (engram_interleaved(*t.weight, &ihd, &ins)) n = std::max(n, static_cast<uint64_t>(ihd + ins));
    else n = std::max(n, dtype_is_block_quant(t.weight->dtype) ? dtype_nbytes(t.weight->dtype, hd) : hdu + (hdu + 31) / 32);
  }
  return n;
}

Result<std::unique_ptr<EngramRowStore>> EngramRowStore::create(const io::Checkpoint& ck, int n_layers,
                                                               io::UringReader& reader,
                                                               const EngramRowStoreOptions& options) {
  auto s = std::unique_ptr<EngramRowStore>(new EngramRowStore(ck, reader, options));
  s->tables_ = find_tables(ck, n_layers);
  for (EngramTable& t : s->tables_) {
    const std::string& wn = t.weight->name;
    const Shape& ws = t.weight->shape;
    int64_t ihd = 0, ins = 0;
    if (engram_interleaved(*t.weight, &ihd, &ins)) {  // ds4 / ik_llama.cpp: 264-byte rows, scales inside
      t.scale = nullptr;
      t.interleaved = true;
      t.n_rows = ws[0];
      t.head_dim = ihd;
      t.n_scales = ins;
      t.row_bytes = ihd;
      s->row_bytes_ = std::max<size_t>(s->row_bytes_, static_cast<size_t>(ihd + ins));
      const int fd = ck.shard(t.weight->shard).native_fd();
      if (fd >= 0) (void)::posix_fadvise(fd, 0, 0, POSIX_FADV_RANDOM);
      continue;
    }
    if (dtype_is_block_quant(t.weight->dtype)) {  // `strata quantize --engram T`: the scales are in the blocks
      const int64_t be = dtype_block(t.weight->dtype).elems;
      if (ws.rank != 2 || ws[1] <= 0 || ws[1] % be != 0)
        return InvalidArgument("tensor '" + wn + "': " + std::string(dtype_name(t.weight->dtype)) + " " + ws.to_string() +
                               ", expected [rows, head_dim] with head_dim a multiple of the block of " + std::to_string(be));
      t.scale = nullptr;
      t.n_rows = ws[0];
      t.head_dim = ws[1];
      t.n_scales = 0;
      t.row_bytes = static_cast<int64_t>(dtype_nbytes(t.weight->dtype, ws[1]));
      s->row_bytes_ = std::max<size_t>(s->row_bytes_, static_cast<size_t>(t.row_bytes));
      const int fd = ck.shard(t.weight->shard).native_fd();
      if (fd >= 0) (void)::posix_fadvise(fd, 0, 0, POSIX_FADV_RANDOM);
      continue;
    }
    if (!t.scale) return NotFound("tensor '" + wn.substr(0, wn.size() - 6) + "scale' is missing (Engram row scales)");
    const Shape& ss = t.scale->shape;
    if (ws.rank != 2 || ws[1] <= 0 || ws[1] % 32 != 0 || t.weight->dtype != DType::kF8E4M3)
      return InvalidArgument("tensor '" + wn + "': " + std::string(dtype_name(t.weight->dtype)) + " " + ws.to_string() +
                             ", expected F8_E4M3 [rows, head_dim] with head_dim a multiple of 32 (or a ggml block format)");
    if (ss.rank != 2 || ss[0] != ws[0] || ss[1] != ws[1] / 32 || t.scale->dtype != DType::kF8E8M0)
      return InvalidArgument("tensor '" + t.scale->name + "': " + std::string(dtype_name(t.scale->dtype)) + " " +
                             ss.to_string() + ", expected F8_E8M0 [" + std::to_string(ws[0]) + ", " +
                             std::to_string(ws[1] / 32) + "] (one scale per 32 of '" + wn + "')");
    t.n_rows = ws[0];
    t.head_dim = ws[1];
    t.n_scales = ss[1];
    t.row_bytes = t.head_dim;
    s->row_bytes_ = std::max<size_t>(s->row_bytes_, static_cast<size_t>(t.head_dim + t.n_scales));
    // Row reads are random: readahead would turn each 256-byte row into 128 KiB of I/O.
    for (const io::TensorInfo* ti : {t.weight, t.scale}) {
      const int fd = ck.shard(ti->shard).native_fd();
      if (fd >= 0) (void)::posix_fadvise(fd, 0, 0, POSIX_FADV_RANDOM);
    }
  }
  if (options.scales_resident) {
    for (const EngramTable& t : s->tables_) {
      AlignedBytes b(t.scale ? static_cast<size_t>(t.scale->nbytes) : 0);  // empty for a block format
      if (t.scale) STRATA_RETURN_IF_ERROR(ck.read(*t.scale, b.data()));
      s->scales_.push_back(std::move(b));
    }
  }
  if (options.cache_rows > 0 && s->row_bytes_ > 0) {
    s->n_sets_ = (options.cache_rows + kWays - 1) / kWays;
    const size_t n = static_cast<size_t>(s->n_sets_ * kWays);
    s->keys_.assign(n, UINT64_MAX);
    s->ages_.assign(n, 0);
    s->data_.assign(n * s->row_bytes_, 0);
  }
  return s;
}

uint64_t EngramRowStore::ram_bytes() const {
  uint64_t n = data_.size() + keys_.size() * 16;
  for (const AlignedBytes& b : scales_) n += b.size();
  return n;
}

void EngramRowStore::add_stats(PlacementStats* out) const {
  std::lock_guard<std::mutex> lk(mu_);
  out->engram_rows_requested += stats_.engram_rows_requested;
  out->engram_rows_unique += stats_.engram_rows_unique;
  out->engram_rows_cached += stats_.engram_rows_cached;
  out->engram_rows_read += stats_.engram_rows_read;
  out->engram_reads += stats_.engram_reads;
  out->engram_bytes_read += stats_.engram_bytes_read;
  out->engram_row_bytes_read += stats_.engram_row_bytes_read;
  out->engram_fetch_ns += stats_.engram_fetch_ns;
  out->engram_busy_ns += stats_.engram_busy_ns;
  out->engram_wait_ns += stats_.engram_wait_ns;
}

void EngramRowStore::fetch_done(uint64_t ready_ns) {
  std::lock_guard<std::mutex> lk(mu_);
  span_end_ = std::max(span_end_, ready_ns);
  if (--outstanding_ == 0) {
    stats_.engram_busy_ns += span_end_ > span_start_ ? span_end_ - span_start_ : 0;
    span_end_ = 0;
  }
}

bool EngramRowStore::cache_lookup(uint64_t key, uint8_t* out) {
  if (n_sets_ == 0) return false;
  const size_t base = static_cast<size_t>(mix64(key) % static_cast<uint64_t>(n_sets_)) * kWays;
  for (int w = 0; w < kWays; ++w) {
    if (keys_[base + w] != key) continue;
    ages_[base + w] = ++clock_;
    std::memcpy(out, data_.data() + (base + w) * row_bytes_, row_bytes_);
    return true;
  }
  return false;
}

void EngramRowStore::cache_insert(uint64_t key, const uint8_t* row) {
  if (n_sets_ == 0) return;
  const size_t base = static_cast<size_t>(mix64(key) % static_cast<uint64_t>(n_sets_)) * kWays;
  size_t victim = base;
  for (int w = 0; w < kWays; ++w) {
    if (keys_[base + w] == key) return;
    if (ages_[base + w] < ages_[victim]) victim = base + w;
  }
  keys_[victim] = key;
  ages_[victim] = ++clock_;
  std::memcpy(data_.data() + victim * row_bytes_, row, row_bytes_);
}

Result<std::unique_ptr<EngramFetch>> EngramRowStore::start(int layer, std::span<const int64_t> rows) {
  const EngramTable* t = table_of(layer);
  if (!t) return InvalidArgument("layer " + std::to_string(layer) + " has no Engram table in the checkpoint");
  for (int64_t r : rows)
    if (r < 0 || r >= t->n_rows)
      return InvalidArgument("Engram row " + std::to_string(r) + " out of range for '" + t->weight->name + "' with " +
                             std::to_string(t->n_rows) + " rows");
  const size_t tidx = static_cast<size_t>(t - tables_.data());
  auto f = std::make_unique<Fetch>(this, t, tidx);
  f->t_start_ = now_ns();
  {
    std::lock_guard<std::mutex> lk(mu_);
    if (outstanding_++ == 0) span_start_ = f->t_start_;
  }
  f->uniq_.assign(rows.begin(), rows.end());
  std::sort(f->uniq_.begin(), f->uniq_.end());
  f->uniq_.erase(std::unique(f->uniq_.begin(), f->uniq_.end()), f->uniq_.end());
  f->uidx_.resize(rows.size());
  for (size_t i = 0; i < rows.size(); ++i)
    f->uidx_[i] = static_cast<uint32_t>(std::lower_bound(f->uniq_.begin(), f->uniq_.end(), rows[i]) - f->uniq_.begin());

  const uint64_t hd = static_cast<uint64_t>(t->row_bytes), ns = static_cast<uint64_t>(t->n_scales);
  const uint64_t rb = hd + ns;
  f->staging_.resize(f->uniq_.size() * rb);
  // The cache stores rows of the widest table; a narrower table's row is a prefix of that slot.
  std::vector<uint8_t> tmp(row_bytes_);
  {
    std::lock_guard<std::mutex> lk(mu_);
    for (size_t u = 0; u < f->uniq_.size(); ++u) {
      const uint64_t key = (static_cast<uint64_t>(tidx) << 48) | static_cast<uint64_t>(f->uniq_[u]);
      if (cache_lookup(key, tmp.data())) std::memcpy(f->staging_.data() + u * rb, tmp.data(), rb);
      else f->miss_.push_back(static_cast<uint32_t>(u));
    }
    stats_.engram_rows_requested += rows.size();
    stats_.engram_rows_unique += f->uniq_.size();
    stats_.engram_rows_cached += f->uniq_.size() - f->miss_.size();
    stats_.engram_rows_read += f->miss_.size();
    stats_.engram_row_bytes_read += f->miss_.size() * rb;
  }
  const bool resident_scales = !scales_.empty() && !t->interleaved;  // interleaved rows carry their scales
  if (resident_scales && ns > 0)
    for (uint32_t u : f->miss_)
      std::memcpy(f->staging_.data() + u * rb + hd, scales_[tidx].data() + static_cast<uint64_t>(f->uniq_[u]) * ns, ns);

  // Coalesce: a row whose bytes start in the page after the previous request's last page joins it.
  auto plan = [&](const io::TensorInfo* ti, uint64_t len, bool scale) {
    for (size_t m = 0; m < f->miss_.size(); ++m) {
      const uint64_t b = ti->offset + static_cast<uint64_t>(f->uniq_[f->miss_[m]]) * len, e = b + len;
      if (!f->groups_.empty() && f->groups_.back().scale == scale && b / kPage <= (f->groups_.back().end - 1) / kPage + 1) {
        f->groups_.back().end = e;
        ++f->groups_.back().n;
      } else {
        f->groups_.push_back(Fetch::Group{b, e, 0, static_cast<uint32_t>(m), 1, scale});
      }
    }
  };
  plan(t->weight, static_cast<uint64_t>(t->stored_row_bytes()), false);
  if (!resident_scales && ns > 0 && !t->interleaved) plan(t->scale, ns, true);
  uint64_t total = 0;
  for (auto& g : f->groups_) {
    g.bounce = total;
    total += g.end - g.begin;
  }
  if (!f->groups_.empty()) {
    for (const io::TensorInfo* ti : {t->weight, t->scale}) {
      if (!ti) continue;  // a block-format table has no scale tensor
      const io::File& file = ck_.shard(ti->shard);
      STRATA_ASSIGN_OR_RETURN(uint64_t now, file.current_size());
      if (now != file.size())
        return Corruption(file.path() + ": shard changed size since load (" + std::to_string(file.size()) + " -> " +
                          std::to_string(now) + " bytes); reload the model");
    }
    f->bounce_.resize(static_cast<size_t>(total));
    for (const auto& g : f->groups_) {
      const io::File& file = ck_.shard((g.scale ? t->scale : t->weight)->shard);
      f->batch_.add(file, g.begin, static_cast<size_t>(g.end - g.begin), f->bounce_.data() + g.bounce);
    }
    std::lock_guard<std::mutex> lk(mu_);
    stats_.engram_reads += f->groups_.size();
    stats_.engram_bytes_read += total;
  }
  reader_.submit(&f->batch_);
  return std::unique_ptr<EngramFetch>(std::move(f));
}

Status EngramRowStore::Fetch::wait(uint8_t* weight_out, uint8_t* scale_out) {
  STRATA_CHECK(!waited_, "EngramFetch::wait called twice");
  waited_ = true;
  const uint64_t t0 = now_ns();
  Status s = batch_.wait();
  const uint64_t t1 = now_ns();
  const uint64_t hd = static_cast<uint64_t>(t_->row_bytes), ns = static_cast<uint64_t>(t_->n_scales), rb = hd + ns;
  if (!s.ok()) {
    // Re-read each row of every failed request on its own to name what fails (a transient error heals).
    for (size_t i = 0; i < groups_.size(); ++i) {
      if (batch_.status(i).ok()) continue;
      const Group& g = groups_[i];
      const io::TensorInfo* ti = g.scale ? t_->scale : t_->weight;
      const uint64_t len = g.scale ? ns : static_cast<uint64_t>(t_->stored_row_bytes());
      for (uint32_t m = g.first; m < g.first + g.n; ++m) {
        const int64_t row = uniq_[miss_[m]];
        const uint64_t b = ti->offset + static_cast<uint64_t>(row) * len;
        Status r = store_->ck_.read_range(*ti, static_cast<uint64_t>(row) * len, len, bounce_.data() + g.bounce + (b - g.begin));
        if (!r.ok()) return r.with_context("Engram row " + std::to_string(row) + " of layer " + std::to_string(t_->layer));
      }
    }
  }
  for (const Group& g : groups_) {
    const io::TensorInfo* ti = g.scale ? t_->scale : t_->weight;
    const uint64_t len = g.scale ? ns : static_cast<uint64_t>(t_->stored_row_bytes());
    for (uint32_t m = g.first; m < g.first + g.n; ++m) {
      const uint64_t b = ti->offset + static_cast<uint64_t>(uniq_[miss_[m]]) * len;
      std::memcpy(staging_.data() + miss_[m] * rb + (g.scale ? hd : 0), bounce_.data() + g.bounce + (b - g.begin), len);
    }
  }
  {
    std::lock_guard<std::mutex> lk(store_->mu_);
    if (store_->n_sets_ > 0) {
      std::vector<uint8_t> tmp(store_->row_bytes_, 0);
      for (uint32_t u : miss_) {
        std::memcpy(tmp.data(), staging_.data() + u * rb, rb);
        store_->cache_insert((static_cast<uint64_t>(tidx_) << 48) | static_cast<uint64_t>(uniq_[u]), tmp.data());
      }
    }
    store_->stats_.engram_wait_ns += t1 - t0;
    const uint64_t ready = batch_.submitted() && batch_.done() && s.ok() ? batch_.finished_ns() : t1;
    store_->stats_.engram_fetch_ns += ready > t_start_ ? ready - t_start_ : 0;
  }
  store_->fetch_done(batch_.submitted() && batch_.done() && s.ok() ? batch_.finished_ns() : t1);
  for (size_t i = 0; i < uidx_.size(); ++i) {
    const uint8_t* src = staging_.data() + uidx_[i] * rb;
    std::memcpy(weight_out + i * hd, src, hd);
    if (ns > 0) std::memcpy(scale_out + i * ns, src + hd, ns);
  }
  return Status();
}

}  // namespace strata::store
