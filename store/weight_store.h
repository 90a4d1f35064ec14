// WeightStore: where a checkpoint's tensor bytes live while the model runs.
//
// The model binds every resident tensor (attention, norms, router, shared experts, embeddings,
// head, mHC, DSpark) once at load, and asks for the two kinds of weight that a tiered store keeps
// off the fast tier per use: routed experts (acquire_expert) and Engram table rows
// (start_engram_rows / read_engram_rows). Hints let a store read ahead: the experts a layer is
// about to use and those predicted for the next layer (prefetch_experts), and every Engram row of
// a chunk before the first layer runs (start_engram_rows). ResidentStore keeps everything in RAM;
// TieredStore streams experts and Engram rows from SSD through a RAM cache; MmapStore maps the
// shards (the naive baseline). store/open_store.h picks one from PlacementOptions.
// Layer ids are model layer ids: backbone 0..n_layers-1, DSpark stage s is n_layers + s (its
// tensors are named mtp.s.*).
// Thread safety: implementations document their own; ResidentStore is safe for concurrent reads
// after binding.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>

#include "core/progress.h"
#include "core/status.h"
#include "core/tensor.h"
#include "io/checkpoint.h"
#include "store/placement_options.h"
#include "store/placement_stats.h"

namespace strata::store {

// One routed expert's weights in stored format (MXFP4: packed e2m1 + e8m0 per 32).
struct ExpertView {
  TensorView w1, w1_scale;  // gate projection [inter, dim/2] I8, [inter, dim/32] E8M0
  TensorView w2, w2_scale;  // down projection [dim, inter/2], [dim, inter/32]
  TensorView w3, w3_scale;  // up projection   [inter, dim/2], [inter, dim/32]
};

// Pins an expert's bytes until destroyed (a tiered store must not evict them meanwhile).
class ExpertLease {
 public:
  ExpertLease() = default;
  explicit ExpertLease(ExpertView v) : view_(v) {}
  virtual ~ExpertLease() = default;
  const ExpertView& view() const { return view_; }

 protected:
  ExpertView view_;
};

// Engram rows of one layer requested ahead of use (WeightStore::start_engram_rows).
class EngramFetch {
 public:
  virtual ~EngramFetch() = default;
  // Blocks until the rows are in RAM, then copies them in request order: head_dim e4m3 codes per
  // row into weight_out[i * head_dim ...], head_dim/32 e8m0 codes into scale_out[i * head_dim/32 ...].
  // A block-format table (`strata quantize --engram T`) has no scales: each row is
  // dtype_nbytes(type, head_dim) bytes into weight_out[i * that ...] and scale_out is not written.
  // Errors: a failed read, naming the tensor and byte offset. Call at most once.
  [[nodiscard]] virtual Status wait(uint8_t* weight_out, uint8_t* scale_out) = 0;
};

// Why the model names experts ahead of acquire_expert.
enum class PrefetchKind {
  kDemand,   // the router chose them for the layer about to run: they will be acquired next
  kPredict,  // layer-ahead guess (next layer's router on this layer's input): may be wrong
};

class WeightStore {
 public:
  virtual ~WeightStore() = default;

  virtual const io::Checkpoint& checkpoint() const = 0;

  // Bytes of a resident tensor, valid for the store's lifetime. kNotFound names the tensor.
  [[nodiscard]] virtual Result<TensorView> resident(const std::string& name) = 0;

  // A kernel's own layout of a resident tensor: relay(src, dst, done) writes nbytes rearranged
  // bytes (e.g. the blocked BF16 layout of the LM head) from the stored ones, calling done(n) when
  // it no longer reads src[0, n) (optional; the store then gives those pages back at once, so the
  // two copies never coexist whole: the release's head is 1.3 GB). The first call for (name,
  // layout) runs it and gives the stored bytes' pages back to the system, so RAM holds one copy,
  // not two; later calls (a draft model sharing the tensor: store/shared_store.h) get the same
  // bytes. A later resident(name) reads the stored bytes again. Valid for the store's lifetime.
  // Errors: as resident(); kNotSupported where a store keeps no such copies (the default), and the
  // caller then uses resident(name) as stored.
  using RelayFn = std::function<void(const uint8_t* src, uint8_t* dst, const std::function<void(uint64_t)>& done)>;
  [[nodiscard]] virtual Result<TensorView> resident_relaid(const std::string& name, const std::string& layout,
                                                           const RelayFn& relay) {
    (void)name;
    (void)layout;
    (void)relay;
    return NotSupported("this store keeps tensors only as stored");
  }
  // Routed expert `expert` of layer `layer`, pinned while the lease lives.
  [[nodiscard]] virtual Result<std::unique_ptr<ExpertLease>> acquire_expert(int layer, int expert) = 0;

  // The view of an expert this store holds for its whole lifetime (in RAM from binding to the
  // end: no lease to pin it, and none to allocate per layer and token), or nullopt where experts
  // come and go (the default: tiered stores), which are then acquired. Errors as acquire_expert.
  [[nodiscard]] virtual Result<std::optional<ExpertView>> held_expert(int layer, int expert) {
    (void)layer;
    (void)expert;
    return std::optional<ExpertView>();
  }

  // Copies Engram table rows of `layer` (the model layer id): for each row id, head_dim e4m3 codes
  // into weight_out[i * head_dim ...] and head_dim/32 e8m0 codes into scale_out[i * head_dim/32 ...].
  // Row ids must be < the table's row count (checked: kInvalidArgument).
  [[nodiscard]] virtual Status read_engram_rows(int layer, std::span<const int64_t> rows, uint8_t* weight_out,
                                                uint8_t* scale_out) = 0;

  // Starts reading Engram rows of `layer` (the ids are copied) and returns the handle to wait on.
  // Out-of-range ids fail with kInvalidArgument naming the table (here or in wait()). The default
  // reads nothing until wait(), then calls read_engram_rows.
  [[nodiscard]] virtual Result<std::unique_ptr<EngramFetch>> start_engram_rows(int layer,
                                                                               std::span<const int64_t> rows);

  // Called once per layer while binding, after the experts' headers were validated: a store that
  // holds every routed expert and Engram table in RAM reads experts [0, n_experts) of `layer` and
  // the layer's Engram table (if any) now, so generation never waits for a first use
  // (ResidentStore); with `keep`, only the experts it returns true for (expert parallelism: the
  // ones this process computes); without `engram_table`, not the Engram table (a draft that
  // shares the target's: store/shared_store.h). Default: nothing (tiered stores read on demand).
  [[nodiscard]] virtual Status preload_layer(int layer, int n_experts, const std::function<bool(int)>& keep = {},
                                             bool engram_table = true) {
    return Status();
  }
  // Called once before binding: reads every tensor this store keeps in RAM for which `wanted` is
  // true (the model's choice: e.g. no DSpark tensors when it does not run DSpark) in one parallel,
  // near-sequential pass (ResidentTensors::read_all), so binding finds them in RAM. The resident
  // store keeps every tensor; the tiered and mmap stores all but routed experts and Engram tables.
  // Reports ProgressEvent{"load", "bytes"}. Errors: the first failed read (file, offset, tensor).
  // Default: nothing (tensors are read on first use). Source: issue 15 item 2.
  [[nodiscard]] virtual Status load_resident(const std::function<bool(const io::TensorInfo&)>& wanted,
                                             const ProgressFn& progress) {
    return Status();
  }

  // Non-blocking hint that `experts` of `layer` will (kDemand) or may (kPredict) be acquired soon;
  // a store with a slower tier starts reading them. `uses` (kDemand, optional): how many tokens
  // each expert serves, so a frequency-based cache counts a prefill chunk's heavy experts as such
  // (empty: one each). Default: ignored.
  virtual void prefetch_experts(int layer, std::span<const int32_t> experts, PrefetchKind kind,
                                std::span<const uint32_t> uses = {}) {}
  // True when prefetch hints pay off; the model skips computing layer-ahead predictions otherwise.
  virtual bool wants_prefetch() const { return false; }
  // Adds layer-ahead prediction outcomes: `n_predicted` token-expert picks were predicted,
  // `n_correct` of them the router then chose.
  virtual void record_prediction(uint64_t n_predicted, uint64_t n_correct) {}
  // Counters since the store was created.
  virtual PlacementStats stats() const;
  // One line describing the placement (mode, budget, cache), printed at start by the CLI.
  virtual std::string describe() const { return "resident: every tensor in RAM"; }
  // How routed experts are read (bench compares it with what the plan assumed).
  virtual ExpertReads expert_reads() const { return ExpertReads::kNotStreamed; }
};

// Checkpoint name prefix of a model layer: "layers.L" or "mtp.S".
std::string layer_prefix(int layer, int n_layers);

}  // namespace strata::store
