// EngramRowStore: Engram table rows read from SSD on demand; the tables are never loaded whole.
//
// A fetch takes the row ids of one Engram layer for a whole chunk (n_tokens x columns), sorts and
// deduplicates them, serves what it can from a small row cache, and reads the rest through
// io::UringReader at queue depth: rows whose bytes fall in the same or the next 4 KiB page share
// one request. The reads are in flight while the model computes the layers before the Engram layer;
// wait() scatters the rows back into request order. The per-row scales (8 bytes per 256-byte row
// at the release shape) are kept in RAM when `scales_resident` (then a row costs one read), else
// read like the rows. A table re-quantised by `strata quantize --engram T` (a ggml block format:
// Q8_0, Q6_K, Q4_K, IQ4_NL, Q3_K, Q2_K) has no scale tensor: its row is the type's bytes for
// head_dim values (dtype_nbytes), read and cached the same way (issue 16 item 4).
// DECISION: rows are read through the page cache with readahead off (POSIX_FADV_RANDOM on the
// shard descriptor), even with --direct-io: an O_DIRECT row read needs a 4 KiB bounce buffer per
// row (200+ MB for a 2048-token prefill chunk) for the same one-page device read.
// A failed read is retried row by row (pread) to name the tensor and byte offset that fail.
// Thread safety: start() and EngramFetch::wait() may run on any thread (the row cache has a mutex);
// a fetch must not outlive the store.
#pragma once

#include <cstdint>
#include <memory>
#include <mutex>
#include <span>
#include <vector>

#include "core/aligned_buffer.h"
#include "core/status.h"
#include "io/checkpoint.h"
#include "io/uring_reader.h"
#include "store/placement_stats.h"
#include "store/weight_store.h"

namespace strata::store {

struct EngramRowStoreOptions {
  int64_t cache_rows = 1 << 16;  // row cache capacity (0 = none)
  bool scales_resident = true;   // keep every table's scale tensor in RAM
};

// One Engram table as found in the checkpoint.
struct EngramTable {
  int layer = 0;                          // model layer id
  const io::TensorInfo* weight = nullptr; // [n_rows, head_dim] F8_E4M3, or a block format (kQ8_0..kIQ4_NL)
  const io::TensorInfo* scale = nullptr;  // [n_rows, head_dim / 32] F8_E8M0; null for a block format
  int64_t n_rows = 0, head_dim = 0, n_scales = 0;  // n_scales: scale bytes per row (0 for a block format)
  int64_t row_bytes = 0;                  // weight bytes per row: head_dim (FP8) or dtype_nbytes(dtype, head_dim)
  bool interleaved = false;               // ds4 / ik_llama.cpp U8 [n_rows, head_dim + n_scales] (store/engram_layout.h):
                                          // weight and scales of a row in one read; `scale` is null
  // Bytes of one row as stored in `weight` (a row read reads this many).
  int64_t stored_row_bytes() const { return interleaved ? row_bytes + n_scales : row_bytes; }
};

class EngramRowStore {
 public:
  // Finds "<prefix>.engram.embed.{weight,scale}" for every layer (a block-format weight has no
  // scale; an interleaved U8 table, store/engram_layout.h, neither: one read per row gives both). Errors: an FP8 table without its scale tensor (kNotFound), a dtype other than F8_E4M3
  // or a block format whose block divides head_dim, or shapes that disagree (kInvalidArgument
  // naming the tensor); reading resident scales.
  [[nodiscard]] static Result<std::unique_ptr<EngramRowStore>> create(const io::Checkpoint& ck, int n_layers,
                                                                      io::UringReader& reader,
                                                                      const EngramRowStoreOptions& options);
  ~EngramRowStore();

  // Scale bytes of all tables (what scales_resident keeps in RAM).
  static uint64_t scale_bytes(const io::Checkpoint& ck);
  // Bytes of one cached row at the widest table: head_dim + head_dim / 32 for FP8 (264 at the
  // release shape), dtype_nbytes(type, head_dim) for a block format (Q4_K: 144). 0 without tables.
  static uint64_t row_bytes(const io::Checkpoint& ck);

  bool has_layer(int layer) const { return table_of(layer) != nullptr; }
  // Closes a fetch's part of the busy interval (the rows were in RAM at `ready_ns`).
  void fetch_done(uint64_t ready_ns);
  // Starts the reads for `rows` of `layer`. kInvalidArgument for an unknown layer or a row id out
  // of range (naming the table); kCorruption for a shard that changed size since load.
  [[nodiscard]] Result<std::unique_ptr<EngramFetch>> start(int layer, std::span<const int64_t> rows);
  // RAM held: resident scales + row cache.
  uint64_t ram_bytes() const;
  void add_stats(PlacementStats* out) const;

 private:
  class Fetch;
  EngramRowStore(const io::Checkpoint& ck, io::UringReader& reader, const EngramRowStoreOptions& o)
      : ck_(ck), reader_(reader), opt_(o) {}
  const EngramTable* table_of(int layer) const;

  // Set-associative cache of rows (weight bytes then scale bytes), 8 ways, LRU within a set.
  bool cache_lookup(uint64_t key, uint8_t* out);
  void cache_insert(uint64_t key, const uint8_t* row);

  const io::Checkpoint& ck_;
  io::UringReader& reader_;
  EngramRowStoreOptions opt_;
  std::vector<EngramTable> tables_;
  std::vector<AlignedBytes> scales_;  // by table index, when resident
  size_t row_bytes_ = 0;              // cache row size (widest table)

  mutable std::mutex mu_;  // guards the cache and stats_
  int64_t n_sets_ = 0;
  std::vector<uint64_t> keys_;   // [n_sets * 8], UINT64_MAX = empty
  std::vector<uint64_t> ages_;   // [n_sets * 8] last use
  std::vector<uint8_t> data_;    // [n_sets * 8, row_bytes_]
  uint64_t clock_ = 0;
  PlacementStats stats_;  // engram_* fields
  int outstanding_ = 0;   // fetches started and not yet waited on
  uint64_t span_start_ = 0, span_end_ = 0;  // the current busy interval (engram_busy_ns)
};

}  // namespace strata::store
