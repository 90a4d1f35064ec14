#include "store/placement_options.h"

#include <cstdio>

namespace strata::store {

const char* load_mode_name(LoadMode m) {
  switch (m) {
    case LoadMode::kAuto: return "auto";
    case LoadMode::kResident: return "resident";
    case LoadMode::kStream: return "stream";
    case LoadMode::kMmap: return "mmap";
  }
  return "?";
}

Result<LoadMode> parse_load_mode(const std::string& s) {
  if (s == "auto") return LoadMode::kAuto;
  if (s == "resident") return LoadMode::kResident;
  if (s == "stream") return LoadMode::kStream;
  if (s == "mmap") return LoadMode::kMmap;
  return InvalidArgument("load mode '" + s + "' is not one of auto, resident, stream, mmap");
}

const char* expert_io_name(ExpertIo m) {
  switch (m) {
    case ExpertIo::kAuto: return "auto";
    case ExpertIo::kDirect: return "direct";
    case ExpertIo::kBuffered: return "buffered";
  }
  return "?";
}

const char* expert_reads_name(ExpertReads r) {
  switch (r) {
    case ExpertReads::kDirect: return "direct";
    case ExpertReads::kBuffered: return "buffered";
    case ExpertReads::kNotStreamed: break;
  }
  return "none";
}

const char* cache_policy_name(CachePolicy p) { return p == CachePolicy::kLru ? "lru" : "lfu"; }

Result<CachePolicy> parse_cache_policy(const std::string& s) {
  if (s == "lru") return CachePolicy::kLru;
  if (s == "lfu") return CachePolicy::kLfu;
  return InvalidArgument("cache policy '" + s + "' is not one of lru, lfu");
}

Status PlacementOptions::validate() const {
  if (!(margin_fraction >= 0 && margin_fraction < 1))
    return InvalidArgument("RAM margin fraction " + std::to_string(margin_fraction) + " is outside [0, 1)");
  if (queue_depth < 1 || queue_depth > 4096)
    return InvalidArgument("io queue depth " + std::to_string(queue_depth) + " is outside [1, 4096]");
  if (read_chunk_bytes < 4096 || read_chunk_bytes % 4096 != 0 || read_chunk_bytes > (1ull << 30))
    return InvalidArgument("read chunk of " + std::to_string(read_chunk_bytes) +
                           " bytes: expected a multiple of 4096 up to 1 GiB");
  if (!(lfu_halflife_tokens > 0)) return InvalidArgument("LFU half-life must be > 0 tokens");
  if (!(hot_share >= 0 && hot_share <= 1)) return InvalidArgument("hot share must be in [0, 1]");
  if ((pin_first < 0) != (pin_last < 0) || pin_first > pin_last)
    return InvalidArgument("pinned layer range " + std::to_string(pin_first) + "-" + std::to_string(pin_last) +
                           " is not A-B with 0 <= A <= B");
  if (engram_cache_rows < 0) return InvalidArgument("Engram row cache size must be >= 0 rows");
  for (const ExpertKey& k : hot)
    if (k.layer < 0 || k.expert < 0)
      return InvalidArgument("hot expert (layer " + std::to_string(k.layer) + ", expert " + std::to_string(k.expert) +
                             ") has a negative index");
  return Status();
}

std::string format_bytes(uint64_t n) {
  char buf[64];
  const double v = static_cast<double>(n);
  if (n >= (1ull << 30)) std::snprintf(buf, sizeof buf, "%.2f GiB", v / double(1ull << 30));
  else if (n >= (1ull << 20)) std::snprintf(buf, sizeof buf, "%.1f MiB", v / double(1ull << 20));
  else if (n >= 1024) std::snprintf(buf, sizeof buf, "%.1f KiB", v / 1024.0);
  else std::snprintf(buf, sizeof buf, "%llu B", static_cast<unsigned long long>(n));
  return buf;
}

}  // namespace strata::store
