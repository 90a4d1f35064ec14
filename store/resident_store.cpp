#include "store/resident_store.h"

#include "store/engram_layout.h"

#include <cstring>

namespace strata::store {

std::string layer_prefix(int layer, int n_layers) {
  return layer < n_layers ? "layers." + std::to_string(layer) : "mtp." + std::to_string(layer - n_layers);
}

ResidentStore::ResidentStore(std::unique_ptr<io::Checkpoint> ck, int n_layers) : ck_(std::move(ck)), n_layers_(n_layers) {}

Result<TensorView> ResidentStore::resident(const std::string& name) { return tensors_.get(*ck_, name); }
Result<TensorView> ResidentStore::resident_relaid(const std::string& name, const std::string& layout,
                                                  const RelayFn& relay) {
  return tensors_.relaid(*ck_, name, layout, relay);
}

Status ResidentStore::load_resident(const std::function<bool(const io::TensorInfo&)>& wanted,
                                    const ProgressFn& progress) {
  return tensors_.read_all(*ck_, select_tensors(*ck_, wanted, true), BulkReadOptions{}, progress);
}

Result<std::unique_ptr<ExpertLease>> ResidentStore::acquire_expert(int layer, int expert) {
  STRATA_ASSIGN_OR_RETURN(std::optional<ExpertView> v, held_expert(layer, expert));
  return std::make_unique<ExpertLease>(*v);
}

Result<std::optional<ExpertView>> ResidentStore::held_expert(int layer, int expert) {
  if (layer < 0 || expert < 0)
    return InvalidArgument("expert " + std::to_string(expert) + " of layer " + std::to_string(layer) + ": negative id");
  const auto l = static_cast<size_t>(layer), e = static_cast<size_t>(expert);
  std::lock_guard<std::mutex> lock(experts_mu_);
  if (l < experts_.size() && e < experts_[l].size() && experts_[l][e]) return experts_[l][e];
  // First use: the six tensors by name, and only then a slot (an id the checkpoint does not hold is
  // an error naming the tensor and grows nothing).
  const std::string p = layer_prefix(layer, n_layers_) + ".ffn.experts." + std::to_string(expert) + ".";
  ExpertView v;
  STRATA_ASSIGN_OR_RETURN(v.w1, resident(p + "w1.weight"));
  STRATA_ASSIGN_OR_RETURN(v.w1_scale, resident(p + "w1.scale"));
  STRATA_ASSIGN_OR_RETURN(v.w2, resident(p + "w2.weight"));
  STRATA_ASSIGN_OR_RETURN(v.w2_scale, resident(p + "w2.scale"));
  STRATA_ASSIGN_OR_RETURN(v.w3, resident(p + "w3.weight"));
  STRATA_ASSIGN_OR_RETURN(v.w3_scale, resident(p + "w3.scale"));
  if (l >= experts_.size()) experts_.resize(l + 1);
  if (e >= experts_[l].size()) experts_[l].resize(e + 1);
  experts_[l][e] = v;
  return std::optional<ExpertView>(v);
}

Status ResidentStore::preload_layer(int layer, int n_experts, const std::function<bool(int)>& keep, bool engram_table) {
  for (int e = 0; e < n_experts; ++e)
    if (!keep || keep(e)) STRATA_RETURN_IF_ERROR(acquire_expert(layer, e).status());
  const std::string p = layer_prefix(layer, n_layers_) + ".engram.embed.";
  if (engram_table && ck_->find(p + "weight") != nullptr) {
    STRATA_RETURN_IF_ERROR(resident(p + "weight").status());
    if (ck_->find(p + "scale") != nullptr) STRATA_RETURN_IF_ERROR(resident(p + "scale").status());
  }
  return Status();
}

Status ResidentStore::read_engram_rows(int layer, std::span<const int64_t> rows, uint8_t* weight_out,
                                       uint8_t* scale_out) {
  const EngramTable* t = nullptr;
  {
    std::lock_guard<std::mutex> lock(engram_mu_);
    auto it = engram_.find(layer);
    if (it == engram_.end()) {
      const std::string p = layer_prefix(layer, n_layers_) + ".engram.embed.";
      EngramTable e;
      e.name = p + "weight";
      STRATA_ASSIGN_OR_RETURN(e.w, resident(e.name));
      if (!engram_interleaved(*ck_->find(e.name), &e.head_dim, &e.n_scales)) {  // ds4 / ik_llama.cpp: 264-byte rows
        e.head_dim = e.n_scales = 0;
        e.block = dtype_is_block_quant(e.w.dtype);  // `strata quantize --engram T`: no scale tensor
        if (!e.block) {
          STRATA_ASSIGN_OR_RETURN(e.s, resident(p + "scale"));
        }
      }
      it = engram_.emplace(layer, std::move(e)).first;
    }
    t = &it->second;  // unordered_map nodes stay put
  }
  const TensorView& w = t->w;
  if (t->head_dim > 0)
    return gather_engram_rows_interleaved(t->name, w.as<uint8_t>(), w.shape[0], t->head_dim, t->n_scales, rows,
                                          weight_out, scale_out);
  if (t->block) {
    const int64_t rb = static_cast<int64_t>(dtype_nbytes(w.dtype, w.shape[1]));
    return gather_engram_rows(t->name, w.as<uint8_t>(), nullptr, w.shape[0], rb, 0, rows, weight_out, scale_out);
  }
  return gather_engram_rows(t->name, w.as<uint8_t>(), t->s.as<uint8_t>(), w.shape[0], w.shape[1], t->s.shape[1], rows,
                            weight_out, scale_out);
}

}  // namespace strata::store
