#include "store/resident_store.h"

#include "store/engram_layout.h"

#include <cstring>

namespace strata::store {

std::string layer_prefix(int layer, int n_layers) {
  return layer < n_layers ? "layers." + std::to_string(layer) : "mtp." + std::to_string(layer - n_layers);
}

ResidentStore::ResidentStore(std::unique_ptr<io::Checkpoint> ck, int n_layers) : ck_(std::move(ck)), n_layers_(n_layers) {}

Result<TensorView> ResidentStore::resident(const std::string& name) { return tensors_.get(*ck_, name); }

Status ResidentStore::load_resident(const std::function<bool(const io::TensorInfo&)>& wanted,
                                    const ProgressFn& progress) {
  return tensors_.read_all(*ck_, select_tensors(*ck_, wanted, true), BulkReadOptions{}, progress);
}

Result<std::unique_ptr<ExpertLease>> ResidentStore::acquire_expert(int layer, int expert) {
  const uint64_t key = (static_cast<uint64_t>(static_cast<uint32_t>(layer)) << 32) | static_cast<uint32_t>(expert);
  std::lock_guard<std::mutex> lock(experts_mu_);
  auto it = experts_.find(key);
  if (it == experts_.end()) {
    const std::string p = layer_prefix(layer, n_layers_) + ".ffn.experts." + std::to_string(expert) + ".";
    ExpertView v;
    STRATA_ASSIGN_OR_RETURN(v.w1, resident(p + "w1.weight"));
    STRATA_ASSIGN_OR_RETURN(v.w1_scale, resident(p + "w1.scale"));
    STRATA_ASSIGN_OR_RETURN(v.w2, resident(p + "w2.weight"));
    STRATA_ASSIGN_OR_RETURN(v.w2_scale, resident(p + "w2.scale"));
    STRATA_ASSIGN_OR_RETURN(v.w3, resident(p + "w3.weight"));
    STRATA_ASSIGN_OR_RETURN(v.w3_scale, resident(p + "w3.scale"));
    it = experts_.emplace(key, v).first;
  }
  return std::make_unique<ExpertLease>(it->second);
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
  const std::string p = layer_prefix(layer, n_layers_) + ".engram.embed.";
  STRATA_ASSIGN_OR_RETURN(TensorView w, resident(p + "weight"));
  int64_t hd = 0, ns = 0;
  if (engram_interleaved(*ck_->find(p + "weight"), &hd, &ns))  // ds4 / ik_llama.cpp rows of 264 bytes
    return gather_engram_rows_interleaved(p + "weight", w.as<uint8_t>(), w.shape[0], hd, ns, rows, weight_out, scale_out);
  if (dtype_is_block_quant(w.dtype)) {  // `strata quantize --engram T`: no scale tensor
    const int64_t rb = static_cast<int64_t>(dtype_nbytes(w.dtype, w.shape[1]));
    return gather_engram_rows(p + "weight", w.as<uint8_t>(), nullptr, w.shape[0], rb, 0, rows, weight_out, scale_out);
  }
  STRATA_ASSIGN_OR_RETURN(TensorView s, resident(p + "scale"));
  return gather_engram_rows(p + "weight", w.as<uint8_t>(), s.as<uint8_t>(), w.shape[0], w.shape[1], s.shape[1], rows,
                            weight_out, scale_out);
}

}  // namespace strata::store
