#include "cli/placement_flags.h"

#include <cctype>
#include <cmath>
#include <cstdlib>

#include "tools/calibrate.h"

namespace strata::cli {

void add_placement_flags(CLI::App& app, PlacementFlags* f) {
  app.add_option("--ram-budget", f->ram_budget,
                 "RAM for weights: resident tensors + expert cache + Engram rows (SIZE like 18G or 512MiB; default: "
                 "available memory minus a margin, printed at start)");
  app.add_option("--load-mode", f->load_mode,
                 "auto (resident if the checkpoint fits the budget, else stream), resident, stream (experts and "
                 "Engram rows from SSD through a RAM cache) or mmap (naive baseline)");
  auto* direct = app.add_flag("--direct-io", f->direct_io,
                              "stream: read experts with O_DIRECT, an error where the file system refuses it (default: "
                              "O_DIRECT where every shard accepts it, else buffered)");
  app.add_flag("--buffered-io", f->buffered_io, "stream: read experts through the page cache")->excludes(direct);
  app.add_option("--hot", f->hot_file, "pin the top of this expert ranking (from strata calibrate) in the cache");
  app.add_option("--pin-layers", f->pin_layers, "keep every routed expert of layers A-B in RAM (e.g. 0-3)");
  app.add_option("--cache-policy", f->cache_policy, "expert cache eviction: lfu (default) or lru");
  app.add_flag("--no-prefetch", f->no_prefetch, "do not prefetch the next layer's predicted experts");
  app.add_option("--io-depth", f->io_depth, "io_uring queue depth (reads in flight)");
}

void warn_unused_placement_flags(const PlacementFlags& f, const store::WeightStore& store, Logger* log) {
  if (store.expert_reads() != store::ExpertReads::kNotStreamed) return;
  const PlacementFlags defaults;
  const std::pair<bool, const char*> given[] = {
      {!f.hot_file.empty(), "--hot"},
      {!f.pin_layers.empty(), "--pin-layers"},
      {f.cache_policy != defaults.cache_policy, "--cache-policy"},
      {f.no_prefetch, "--no-prefetch"},
      {f.io_depth != defaults.io_depth, "--io-depth"},
      {f.direct_io, "--direct-io"},
      {f.buffered_io, "--buffered-io"},
  };
  const std::string mode = store.describe().substr(0, store.describe().find(':'));
  for (const auto& [on, flag] : given)
    if (on)
      log_to(log, LogLevel::kWarn,
             std::string(flag) + " has no effect: the weights are " + mode +
                 " (routed experts are not streamed); it applies with --load-mode stream, or with auto when the "
                 "checkpoint is larger than --ram-budget");
}

Result<uint64_t> parse_byte_size(const std::string& s, const std::string& flag) {
  const char* p = s.c_str();
  char* end = nullptr;
  const double v = std::strtod(p, &end);
  if (end == p || !(v >= 0) || !std::isfinite(v))
    return InvalidArgument(flag + " '" + s + "': expected a size like 18G, 512MiB or 1.5GB");
  std::string suf(end);
  for (char& c : suf) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  double mul = 1;
  if (suf.empty() || suf == "B") mul = 1;
  else if (suf == "K" || suf == "KIB") mul = 1024.0;
  else if (suf == "M" || suf == "MIB") mul = 1024.0 * 1024;
  else if (suf == "G" || suf == "GIB") mul = 1024.0 * 1024 * 1024;
  else if (suf == "T" || suf == "TIB") mul = 1024.0 * 1024 * 1024 * 1024;
  else if (suf == "KB") mul = 1e3;
  else if (suf == "MB") mul = 1e6;
  else if (suf == "GB") mul = 1e9;
  else if (suf == "TB") mul = 1e12;
  else return InvalidArgument(flag + " '" + s + "': unknown unit '" + std::string(end) + "' (use K, M, G, T, KiB.., KB..)");
  const double bytes = v * mul;
  if (bytes >= 1.8e19) return InvalidArgument(flag + " '" + s + "' is too large");
  if (bytes < 1) return InvalidArgument(flag + " '" + s + "' must be at least one byte");
  return static_cast<uint64_t>(bytes);
}

Result<store::ExpertIo> expert_io_flags(bool direct_io, bool buffered_io, const std::string& load_mode) {
  if ((direct_io || buffered_io) && load_mode != "stream" && load_mode != "auto")
    return InvalidArgument(std::string(direct_io ? "--direct-io" : "--buffered-io") +
                           " applies to --load-mode stream, not " + load_mode);
  return direct_io ? store::ExpertIo::kDirect : buffered_io ? store::ExpertIo::kBuffered : store::ExpertIo::kAuto;
}

Result<store::PlacementOptions> placement_options(const PlacementFlags& f) {
  store::PlacementOptions o;
  if (!f.ram_budget.empty()) {
    STRATA_ASSIGN_OR_RETURN(o.ram_budget_bytes, parse_byte_size(f.ram_budget, "--ram-budget"));
  }
  auto mode = store::parse_load_mode(f.load_mode);
  if (!mode.ok()) return mode.error().with_context("--load-mode");
  o.mode = *mode;
  auto policy = store::parse_cache_policy(f.cache_policy);
  if (!policy.ok()) return policy.error().with_context("--cache-policy");
  o.policy = *policy;
  o.expert_io = *expert_io_flags(f.direct_io, f.buffered_io, "stream");  // the mode is checked below
  o.prefetch = !f.no_prefetch;
  o.queue_depth = f.io_depth;
  if (!f.pin_layers.empty()) {
    const std::string& s = f.pin_layers;
    const size_t dash = s.find('-');
    char* e1 = nullptr;
    char* e2 = nullptr;
    const long a = std::strtol(s.c_str(), &e1, 10);
    const long b = dash == std::string::npos ? a : std::strtol(s.c_str() + dash + 1, &e2, 10);
    const bool ok = e1 != s.c_str() && (dash == std::string::npos ? *e1 == '\0' : (e1 == s.c_str() + dash && e2 && *e2 == '\0' &&
                                                                                 e2 != s.c_str() + dash + 1));
    if (!ok || a < 0 || b < a || b > (1 << 20))
      return InvalidArgument("--pin-layers '" + s + "': expected A-B with 0 <= A <= B (or one layer A)");
    o.pin_first = static_cast<int>(a);
    o.pin_last = static_cast<int>(b);
  }
  if (!f.hot_file.empty()) {
    auto hot = tools::read_hot_file(f.hot_file);
    if (!hot.ok()) return hot.error().with_context("--hot");
    o.hot = std::move(*hot);
  }
  if (o.mode != store::LoadMode::kStream && o.mode != store::LoadMode::kAuto &&
      (!o.hot.empty() || o.pin_first >= 0 || o.expert_io != store::ExpertIo::kAuto))
    return InvalidArgument(std::string("--hot, --pin-layers, --direct-io and --buffered-io apply to --load-mode stream, not ") +
                           store::load_mode_name(o.mode));
  STRATA_RETURN_IF_ERROR(o.validate());
  return o;
}

}  // namespace strata::cli
