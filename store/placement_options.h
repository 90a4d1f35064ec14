// PlacementOptions: how a checkpoint's weights are placed in RAM and on disk (STYLE.md §3.8: one
// typed options struct per floor, validated; the CLI flags of `strata run/logits` map onto it).
//
// Modes:
//   resident  every tensor read into RAM at load (the checkpoint must fit);
//   stream    resident tensors in RAM; routed experts in a RAM cache of fixed-size aligned slots
//             filled from SSD through io_uring; Engram rows read on demand (store/tiered_store.h);
//   mmap      the shards mapped and paged by the kernel (the naive baseline, for comparison only);
//   auto      resident when the whole checkpoint fits the RAM budget, stream otherwise.
// The RAM budget covers what the store holds: resident tensors + expert cache + Engram row cache
// (+ Engram scales when kept in RAM). KV caches and activations live outside it, in the margin.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/status.h"

namespace strata::store {

enum class LoadMode { kAuto, kResident, kStream, kMmap };
// "auto", "resident", "stream", "mmap".
const char* load_mode_name(LoadMode m);
[[nodiscard]] Result<LoadMode> parse_load_mode(const std::string& s);

// Which unpinned expert the cache evicts.
enum class CachePolicy {
  kLru,  // least recently used
  kLfu,  // least frequently used, counts halving every `lfu_halflife_tokens` tokens (default)
};
const char* cache_policy_name(CachePolicy p);
[[nodiscard]] Result<CachePolicy> parse_cache_policy(const std::string& s);

// A routed expert: model layer id (DSpark stage s is n_layers + s) and expert index.
struct ExpertKey {
  int layer = 0;
  int expert = 0;
  bool operator==(const ExpertKey& o) const { return layer == o.layer && expert == o.expert; }
};

// How stream mode reads routed experts from the shards.
//   kAuto      O_DIRECT when every shard's file system accepts an aligned O_DIRECT read, else buffered;
//   kDirect    O_DIRECT (no page-cache copy, reads aligned to 4 KiB); an error where unsupported;
//   kBuffered  through the page cache.
// O_DIRECT is the default because the buffered path costs CPU the forward pass needs: copying each
// expert out of the page cache and zeroing the pages it evicts (docs/performance.md, the 48 GB
// checkpoint: prefill +20-28%, decode +7-13% with O_DIRECT on a 2-vCPU machine). kBuffered wins
// only when the whole checkpoint stays in the page cache beside the expert cache.
enum class ExpertIo { kAuto, kDirect, kBuffered };
// "auto", "direct", "buffered".
const char* expert_io_name(ExpertIo m);

// How a store did read routed experts once open (ExpertIo::kAuto resolved): held in RAM (resident,
// mmap), or streamed from the shards with O_DIRECT or through the page cache (TieredStore).
enum class ExpertReads { kNotStreamed, kDirect, kBuffered };
const char* expert_reads_name(ExpertReads r);  // "none" (not streamed), "direct" (O_DIRECT), "buffered"

// How Engram's per-row scale tensors (8 bytes per 256-byte row) are kept.
enum class EngramScales { kAuto, kResident, kDisk };

struct PlacementOptions {
  LoadMode mode = LoadMode::kAuto;
  // Bytes of RAM the store may hold. 0 = measured available memory minus the margin.
  uint64_t ram_budget_bytes = 0;
  // With ram_budget_bytes = 0: keep this fraction of available memory free for KV caches,
  // activations and the rest of the system, and at least margin_min_bytes.
  double margin_fraction = 0.10;
  uint64_t margin_min_bytes = 1ull << 30;
  // Expert reads in stream mode (see ExpertIo). Engram rows always go through the page cache with
  // readahead off (see tiered_store.h).
  ExpertIo expert_io = ExpertIo::kAuto;
  // io_uring queue depth (reads in flight).
  int queue_depth = 64;
  // Split expert reads into requests of this many bytes (several in flight per expert).
  uint64_t read_chunk_bytes = 1ull << 20;
  CachePolicy policy = CachePolicy::kLfu;
  // kLfu: use counts halve after this many tokens' worth of expert uses (~ how long a topic lasts).
  double lfu_halflife_tokens = 64;
  // Layer-ahead prefetch: apply layer L+1's router to layer L's input and start those reads.
  bool prefetch = true;
  // Experts to keep in RAM for the whole run, best first (`--hot FILE` from `strata calibrate`);
  // pinned from the top until hot_share of the expert cache is used.
  std::vector<ExpertKey> hot;
  double hot_share = 0.5;
  // Pin every expert of backbone layers [pin_first, pin_last] (`--pin-layers A-B`); -1 = none.
  int pin_first = -1, pin_last = -1;
  // Engram row cache capacity in rows (264 bytes each at the release shape); 0 = no row cache.
  int64_t engram_cache_rows = 1 << 16;
  // kAuto keeps the scales in RAM when they take at most 1/16 of the budget.
  EngramScales engram_scales = EngramScales::kAuto;

  // kInvalidArgument naming the field.
  [[nodiscard]] Status validate() const;
};

// "12.5 GiB"-style rendering of a byte count (for messages).
std::string format_bytes(uint64_t n);

}  // namespace strata::store
