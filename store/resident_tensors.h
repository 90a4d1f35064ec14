// ResidentTensors: the tensors a store keeps in RAM for the whole run (the tiered and mmap stores:
// everything but routed experts and Engram tables, ARCHITECTURE.md "Weights"; the resident store:
// those too). Shared by the resident, tiered and mmap stores. Also the Engram row gather that the
// in-memory stores share.
//
// Two ways in: read_all() reads a whole list at load, in parallel, near-sequentially per shard,
// into one arena per call (issue 15 item 2: the load was 10x below the disk's rate, one pread per
// tensor into a buffer zeroed first); get() reads a tensor nobody listed on its first use.
// Memory: each tensor starts on a 64-byte boundary (vector kernels use aligned loads). An arena of
// 2 MiB or more is 2 MiB aligned and advised MADV_HUGEPAGE: one fault per 2 MiB instead of 512 at
// load, and fewer TLB misses when decode streams the weights.
// Thread safety: get() and read_all() are not thread-safe (stores call them while the model binds,
// on one thread); read_all() runs its own reader threads inside.
#pragma once

#include <cstdint>
#include <cstdlib>
#include <functional>
#include <map>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "core/huge_pages.h"
#include "core/progress.h"
#include "core/status.h"
#include "core/tensor.h"
#include "io/checkpoint.h"

namespace strata::store {

struct BulkReadOptions {
  int readers = 4;                    // reads in flight (threads): a VM disk needs a queue to reach its rate
  uint64_t chunk_bytes = 8ull << 20;  // largest single read (a tensor is split into pieces this size)
  // O_DIRECT reads of whole file ranges (neighbouring tensors together) into a staging buffer per
  // reader, copied to their places: no page-cache copy of the checkpoint, so a load touches half
  // the fresh memory (on a VM the first touch of fresh memory is what a cold load pays most for,
  // docs/performance.md "Load"). kAuto reads buffered the shards at least half in the page cache
  // (a warm load copies from there faster than the disk would send it again); every mode reads
  // buffered, one piece at a time, the shards whose file system refuses O_DIRECT and files that are
  // not plain descriptors (fault-injection wrappers).
  enum class Direct { kAuto, kAlways, kNever };
  Direct direct = Direct::kAuto;
  [[nodiscard]] Status validate() const;
};

class ResidentTensors {
 public:
  // The tensor `name` of `ck`: the bytes read by read_all(), or read now on first use. Errors:
  // kNotFound naming the checkpoint and tensor; read errors from io::Checkpoint::read (file, offset).
  Result<TensorView> get(const io::Checkpoint& ck, const std::string& name);

  // Reads every tensor of `list` not already held, with o.readers threads, in (shard, offset)
  // order (O_DIRECT or not: BulkReadOptions::direct), reporting ProgressEvent{"load", "bytes"} from the calling thread. Duplicates in `list`
  // are read once. Errors: bad options; the first failed read (file, offset, tensor) — then none of
  // this call's tensors is kept. Source: issue 15 item 2.
  [[nodiscard]] Status read_all(const io::Checkpoint& ck, std::span<const io::TensorInfo* const> list,
                                const BulkReadOptions& o = {}, const ProgressFn& progress = {});

  // WeightStore::resident_relaid: the stored bytes of `name` (read now if not yet held) rearranged
  // by `relay` into an arena of their own, once per (name, layout); the stored bytes' whole 2 MiB
  // chunks go back to the system (madvise MADV_DONTNEED: the arena they share stays allocated,
  // those pages cost nothing until written; whole huge pages, so neighbours keep theirs) and the
  // name is dropped, so a later get() reads it again.
  // Errors: as get().
  using RelayFn = std::function<void(const uint8_t*, uint8_t*, const std::function<void(uint64_t)>&)>;
  Result<TensorView> relaid(const io::Checkpoint& ck, const std::string& name, const std::string& layout,
                            const RelayFn& relay);

  // Bytes held (relaid copies counted, released stored bytes not).
  uint64_t bytes() const { return bytes_; }

 private:
  using Arena = HugePageBytes;  // alloc_huge_page_bytes: see the header comment

  std::map<std::string, const uint8_t*> loaded_;  // tensor name -> its bytes in one of arenas_
  std::map<std::string, const uint8_t*> relaid_;  // name + '\n' + layout -> its copy in one of arenas_
  std::vector<Arena> arenas_;
  uint64_t bytes_ = 0;
};

// The tensors of `ck` for which `wanted` holds, leaving out routed experts and Engram tables unless
// `experts_and_engram` (the resident store keeps them; the tiered and mmap stores do not).
std::vector<const io::TensorInfo*> select_tensors(const io::Checkpoint& ck,
                                                  const std::function<bool(const io::TensorInfo&)>& wanted,
                                                  bool experts_and_engram);

// Copies Engram rows `rows` of a table held in memory: weight rows of `row_bytes` and scale rows of
// `scale_bytes` (both u8 storage) into weight_out [rows.size(), row_bytes] and scale_out
// [rows.size(), scale_bytes]; scale_bytes 0 (a block-format table: scales and scale_out may be
// null) copies weight rows only. Errors: kInvalidArgument for a row outside [0, n_rows), naming `table`.
Status gather_engram_rows(const std::string& table, const uint8_t* weights, const uint8_t* scales, int64_t n_rows,
                          int64_t row_bytes, int64_t scale_bytes, std::span<const int64_t> rows, uint8_t* weight_out,
                          uint8_t* scale_out);
// The same from an interleaved table (store/engram_layout.h): row r is `rows_base` + r * (row_bytes
// + scale_bytes), its first row_bytes to weight_out and the rest to scale_out.
Status gather_engram_rows_interleaved(const std::string& table, const uint8_t* rows_base, int64_t n_rows,
                                      int64_t row_bytes, int64_t scale_bytes, std::span<const int64_t> rows,
                                      uint8_t* weight_out, uint8_t* scale_out);

}  // namespace strata::store
