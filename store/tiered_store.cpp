#include "store/tiered_store.h"

#include <algorithm>
#include <cstdio>

#include "store/system_memory.h"

namespace strata::store {

TieredStore::TieredStore(std::unique_ptr<io::Checkpoint> ck, ExpertCatalog catalog, const TieredConfig& config)
    : ck_(std::move(ck)), catalog_(std::move(catalog)), cfg_(config) {}

TieredStore::~TieredStore() {
  // The cache and the row store wait for their reads; the reader goes last.
  cache_.reset();
  engram_.reset();
}

Result<std::unique_ptr<TieredStore>> TieredStore::open(std::unique_ptr<io::Checkpoint> ck, ExpertCatalog catalog,
                                                       const TieredConfig& config) {
  auto s = std::unique_ptr<TieredStore>(new TieredStore(std::move(ck), std::move(catalog), config));
  io::UringReaderOptions ro;
  ro.queue_depth = config.queue_depth;
  STRATA_ASSIGN_OR_RETURN(s->reader_, io::UringReader::create(ro));
  if (config.direct_io) {
    for (int i = 0; i < s->ck_->n_shards(); ++i) {
      STRATA_ASSIGN_OR_RETURN(io::FdHandle fd, io::open_direct(s->ck_->shard(i).path()));
      s->direct_fds_.push_back(std::move(fd));
    }
  }
  s->cache_ = std::make_unique<ExpertCache>(*s->ck_, s->catalog_, *s->reader_,
                                            config.direct_io ? &s->direct_fds_ : nullptr, config.cache);
  STRATA_RETURN_IF_ERROR(s->cache_->allocate());
  STRATA_ASSIGN_OR_RETURN(s->engram_, EngramRowStore::create(*s->ck_, config.n_layers, *s->reader_, config.engram));
  if (!config.pinned_ids.empty()) STRATA_RETURN_IF_ERROR(s->cache_->pin_permanently(config.pinned_ids));
  return s;
}

Result<TensorView> TieredStore::resident(const std::string& name) { return tensors_.get(*ck_, name); }
Result<TensorView> TieredStore::resident_relaid(const std::string& name, const std::string& layout,
                                                const RelayFn& relay) {
  return tensors_.relaid(*ck_, name, layout, relay);
}

Status TieredStore::load_resident(const std::function<bool(const io::TensorInfo&)>& wanted, const ProgressFn& progress) {
  return tensors_.read_all(*ck_, select_tensors(*ck_, wanted, false), BulkReadOptions{}, progress);
}

Result<std::unique_ptr<ExpertLease>> TieredStore::acquire_expert(int layer, int expert) {
  const int id = catalog_.id(layer, expert);
  if (id < 0)
    return NotFound("routed expert " + std::to_string(expert) + " of layer " + std::to_string(layer) +
                    " is not in the checkpoint");
  return cache_->acquire(id);
}

void TieredStore::prefetch_experts(int layer, std::span<const int32_t> experts, PrefetchKind kind,
                                   std::span<const uint32_t> uses) {
  if (kind == PrefetchKind::kPredict && !cfg_.prefetch) return;
  ids_scratch_.clear();
  uses_scratch_.clear();
  for (size_t i = 0; i < experts.size(); ++i) {
    const int id = catalog_.id(layer, experts[i]);
    if (id < 0) continue;
    ids_scratch_.push_back(id);
    uses_scratch_.push_back(i < uses.size() ? std::max<uint32_t>(uses[i], 1) : 1);
  }
  cache_->prefetch(ids_scratch_, kind, uses_scratch_);
}

void TieredStore::record_prediction(uint64_t n_predicted, uint64_t n_correct) {
  predicted_.fetch_add(n_predicted, std::memory_order_relaxed);
  predicted_correct_.fetch_add(n_correct, std::memory_order_relaxed);
}

Status TieredStore::read_engram_rows(int layer, std::span<const int64_t> rows, uint8_t* weight_out,
                                     uint8_t* scale_out) {
  STRATA_ASSIGN_OR_RETURN(auto f, engram_->start(layer, rows));
  return f->wait(weight_out, scale_out);
}

Result<std::unique_ptr<EngramFetch>> TieredStore::start_engram_rows(int layer, std::span<const int64_t> rows) {
  return engram_->start(layer, rows);
}

PlacementStats TieredStore::stats() const {
  PlacementStats s;
  cache_->add_stats(&s);
  engram_->add_stats(&s);
  s.predicted = predicted_.load(std::memory_order_relaxed);
  s.predicted_correct = predicted_correct_.load(std::memory_order_relaxed);
  s.os_read_bytes = process_read_bytes();
  return s;
}

std::string TieredStore::describe() const {
  const uint64_t cache_bytes = static_cast<uint64_t>(cache_->n_slots()) * cache_->slot_bytes();
  char buf[512];
  std::snprintf(buf, sizeof buf,
                "stream: RAM budget %s%s; resident tensors %s; expert cache %lld slots x %s = %s (%lld of %d experts, "
                "%s, %lld pinned); Engram %s in RAM; io_uring depth %d, %s",
                format_bytes(cfg_.budget_bytes).c_str(), cfg_.budget_note.c_str(),
                format_bytes(tensors_.bytes()).c_str(), static_cast<long long>(cache_->n_slots()),
                format_bytes(cache_->slot_bytes()).c_str(), format_bytes(cache_bytes).c_str(),
                static_cast<long long>(std::min<int64_t>(cache_->n_slots(), catalog_.size())), catalog_.size(),
                cache_policy_name(cfg_.cache.policy), static_cast<long long>(cfg_.pinned_ids.size()),
                format_bytes(engram_->ram_bytes()).c_str(), reader_->queue_depth(),
                cfg_.direct_io ? "O_DIRECT" : "buffered");
  return buf;
}

}  // namespace strata::store
