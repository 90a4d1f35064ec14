#include "store/shared_store.h"

#include <utility>

namespace strata::store {

SharedStore::SharedStore(std::unique_ptr<WeightStore> own, WeightStore& base, std::set<std::string> shared,
                         std::set<int> shared_engram)
    : own_(std::move(own)), base_(base), shared_(std::move(shared)), shared_engram_(std::move(shared_engram)) {
  const io::Checkpoint& ck = own_->checkpoint();
  for (const std::string& n : shared_)
    if (const io::TensorInfo* t = ck.find(n)) shared_bytes_ += t->nbytes;
}

Result<TensorView> SharedStore::resident(const std::string& name) {
  return shared_.count(name) ? base_.resident(name) : own_->resident(name);
}

Result<TensorView> SharedStore::resident_relaid(const std::string& name, const std::string& layout,
                                                const RelayFn& relay) {
  return shared_.count(name) ? base_.resident_relaid(name, layout, relay) : own_->resident_relaid(name, layout, relay);
}
Status SharedStore::read_engram_rows(int layer, std::span<const int64_t> rows, uint8_t* weight_out,
                                     uint8_t* scale_out) {
  return shared_engram_.count(layer) ? base_.read_engram_rows(layer, rows, weight_out, scale_out)
                                     : own_->read_engram_rows(layer, rows, weight_out, scale_out);
}

Result<std::unique_ptr<EngramFetch>> SharedStore::start_engram_rows(int layer, std::span<const int64_t> rows) {
  return shared_engram_.count(layer) ? base_.start_engram_rows(layer, rows) : own_->start_engram_rows(layer, rows);
}

Status SharedStore::preload_layer(int layer, int n_experts, const std::function<bool(int)>& keep, bool engram_table) {
  return own_->preload_layer(layer, n_experts, keep, engram_table && !shared_engram_.count(layer));
}

Status SharedStore::load_resident(const std::function<bool(const io::TensorInfo&)>& wanted, const ProgressFn& progress) {
  return own_->load_resident([&](const io::TensorInfo& t) { return !shared_.count(t.name) && (!wanted || wanted(t)); },
                             progress);
}

std::string SharedStore::describe() const {
  return own_->describe() + "; " + std::to_string(shared_.size()) + " tensors (" +
         std::to_string(shared_bytes_ / 1000000) + " MB) shared with the target";
}

}  // namespace strata::store
