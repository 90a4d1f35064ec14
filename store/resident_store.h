// ResidentStore: every tensor the model binds is read into RAM once with pread (never mmap).
//
// The model reads every tensor it binds before binding (load_resident: one parallel pass over the
// shards); a tensor nobody listed is read on its first request. Binding requests every tensor the
// forward pass reads, including the backbone's routed experts and Engram tables (preload_layer),
// so nothing is read during generation. Each tensor starts 64-byte aligned (ResidentTensors).
// Thread safety: resident() and resident_relaid() may load and must be called from one thread
// during binding; after every tensor is bound, concurrent calls of names still held only read (a
// relaid name is read again: bind it through resident_relaid). held_expert() and acquire_expert()
// lock their memo of expert views.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "core/aligned_buffer.h"
#include "store/resident_tensors.h"
#include "store/weight_store.h"

namespace strata::store {

class ResidentStore final : public WeightStore {
 public:
  // Takes ownership of an opened checkpoint. `n_layers` = backbone layers (to name DSpark stages).
  ResidentStore(std::unique_ptr<io::Checkpoint> ck, int n_layers);

  const io::Checkpoint& checkpoint() const override { return *ck_; }
  io::Checkpoint& mutable_checkpoint() { return *ck_; }
  Result<TensorView> resident(const std::string& name) override;
  Result<TensorView> resident_relaid(const std::string& name, const std::string& layout, const RelayFn& relay) override;
  Result<std::unique_ptr<ExpertLease>> acquire_expert(int layer, int expert) override;
  Result<std::optional<ExpertView>> held_expert(int layer, int expert) override;
  Status preload_layer(int layer, int n_experts, const std::function<bool(int)>& keep = {},
                       bool engram_table = true) override;
  Status load_resident(const std::function<bool(const io::TensorInfo&)>& wanted, const ProgressFn& progress) override;
  Status read_engram_rows(int layer, std::span<const int64_t> rows, uint8_t* weight_out,
                          uint8_t* scale_out) override;

  // Bytes held in RAM so far.
  uint64_t resident_bytes() const { return tensors_.bytes(); }

 private:
  std::unique_ptr<io::Checkpoint> ck_;
  int n_layers_;
  ResidentTensors tensors_;
  // Views of experts already bound, experts_[layer][expert]: decode asks for top-k experts per layer
  // per token, and building six tensor names and looking them up each time cost ~4% of a demo step.
  // A table, not a hash map: after a token's ~0.8 GB of weights the map's bucket, node and key were
  // three dependent DRAM misses a lookup, ~7 us of serial work per MoE layer on the 8 GB scaled
  // checkpoint (throwaway timers, 2 threads); here the inner vector's header stays cached.
  std::mutex experts_mu_;
  std::vector<std::vector<std::optional<ExpertView>>> experts_;
  // Each Engram layer's table as read_engram_rows gathers from it, memoised for the same reason
  // (a decode step asks twice per token; the names alone were heap strings).
  struct EngramTable {
    std::string name;                  // "<prefix>.engram.embed.weight", for errors
    TensorView w, s;                   // weights; scales (none: interleaved or block format)
    int64_t head_dim = 0, n_scales = 0;  // interleaved rows (ds4 / ik_llama.cpp): > 0
    bool block = false;                // `strata quantize --engram T`: block-format rows, no scales
  };
  std::mutex engram_mu_;
  std::unordered_map<int, EngramTable> engram_;
};

}  // namespace strata::store
