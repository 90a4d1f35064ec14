// Weight-placement flags shared by `strata run`, `strata logits` and `strata calibrate`, mapped onto
// store::PlacementOptions (STYLE.md §3.8: flags are parsed only in cli/).
//   --ram-budget SIZE    RAM the store may hold (default: available memory minus a margin)
//   --load-mode MODE     auto | resident | stream | mmap
//   --direct-io          O_DIRECT expert reads (default: O_DIRECT where the file system takes it)
//   --buffered-io        expert reads through the page cache
//   --hot FILE           pin the top of a `strata calibrate` ranking
//   --pin-layers A-B     pin every expert of layers A..B
//   --cache-policy P     lfu | lru
//   --no-prefetch        no layer-ahead expert prefetch
//   --io-depth N         io_uring queue depth
#pragma once

#include <CLI/CLI.hpp>
#include <cstdint>
#include <string>

#include "core/log.h"
#include "core/status.h"
#include "store/placement_options.h"
#include "store/weight_store.h"

namespace strata::cli {

struct PlacementFlags {
  std::string ram_budget;
  std::string load_mode = "auto";
  bool direct_io = false;
  bool buffered_io = false;
  std::string hot_file;
  std::string pin_layers;
  std::string cache_policy = "lfu";
  bool no_prefetch = false;
  int io_depth = 64;
};

void add_placement_flags(CLI::App& app, PlacementFlags* f);

// Warns (one line per flag, through `log`) for each placement flag given that has no effect because
// `store` does not stream routed experts (resident or mmap): --hot, --pin-layers, --cache-policy,
// --no-prefetch, --io-depth, --direct-io, --buffered-io. Silence would read as "pinned" or "tuned".
void warn_unused_placement_flags(const PlacementFlags& f, const store::WeightStore& store, Logger* log);

// Validates the flags and reads --hot. Errors name the flag.
[[nodiscard]] Result<store::PlacementOptions> placement_options(const PlacementFlags& f);

// --direct-io / --buffered-io (CLI11 lets at most one through) as a store::ExpertIo, for commands
// with their own --load-mode string (plan, bench). kInvalidArgument naming the flag when
// `load_mode` is neither stream nor auto.
[[nodiscard]] Result<store::ExpertIo> expert_io_flags(bool direct_io, bool buffered_io, const std::string& load_mode);

// "18G", "512MiB", "1.5GB", "1000000": bytes; K/M/G/T and KiB/MiB/GiB/TiB are powers of 1024,
// KB/MB/GB/TB powers of 1000. kInvalidArgument naming `flag` otherwise.
[[nodiscard]] Result<uint64_t> parse_byte_size(const std::string& s, const std::string& flag);

}  // namespace strata::cli
