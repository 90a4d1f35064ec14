#include "cli/stats_report.h"

#include <sys/resource.h>

#include <nlohmann/json.hpp>

#include "store/placement_options.h"

namespace strata::cli {

namespace {

double s_of(uint64_t ns) { return static_cast<double>(ns) * 1e-9; }
double per(double a, double b) { return b > 0 ? a / b : 0; }

// What a routed-expert counter says when the store streams no experts (resident, mmap).
constexpr const char* kNotStreamed = "n/a (not streamed)";

double seconds(const timeval& t) { return static_cast<double>(t.tv_sec) + static_cast<double>(t.tv_usec) * 1e-6; }

}  // namespace

CpuTimes CpuTimes::now() {
  rusage ru{};
  ::getrusage(RUSAGE_SELF, &ru);
  return CpuTimes{seconds(ru.ru_utime), seconds(ru.ru_stime)};
}

PhaseStats phase_between(const std::string& name, const StatsMark& a, const StatsMark& b, int64_t tokens, double wall_s) {
  return PhaseStats{name,
                    tokens,
                    wall_s,
                    b.store.since(a.store),
                    b.profile.since(a.profile),
                    b.cpu.user_s - a.cpu.user_s,
                    b.cpu.sys_s - a.cpu.sys_s};
}

void print_stats(std::FILE* out, const std::vector<PhaseStats>& phases) {
  std::fprintf(out, "[strata] placement stats");
  for (const auto& p : phases) std::fprintf(out, " | %-22s", p.name.c_str());
  std::fprintf(out, "\n");
  auto row = [&](const char* label, auto fmt) {
    std::fprintf(out, "  %-24s", label);
    for (const auto& p : phases) std::fprintf(out, " | %-22s", fmt(p).c_str());
    std::fprintf(out, "\n");
  };
  auto f = [](const char* spec, double v) {
    char b[64];
    std::snprintf(b, sizeof b, spec, v);
    return std::string(b);
  };
  row("tokens", [&](const PhaseStats& p) { return std::to_string(p.tokens); });
  row("wall s (tok/s)", [&](const PhaseStats& p) { return f("%.3f", p.wall_s) + f(" (%.2f)", per(double(p.tokens), p.wall_s)); });
  row("bytes read (per token)", [&](const PhaseStats& p) {
    return store::format_bytes(p.store.bytes_read()) + " (" +
           store::format_bytes(static_cast<uint64_t>(per(double(p.store.bytes_read()), double(p.tokens)))) + ")";
  });
  row("OS disk reads", [&](const PhaseStats& p) { return store::format_bytes(p.store.os_read_bytes); });
  // A rate over nothing is "n/a", not 0.0%: resident and mmap stores count no expert acquires and
  // no prefetches, and "0.0%" there reads as a failing cache.
  row("expert hit rate", [&](const PhaseStats& p) {
    if (p.store.expert_uses() == 0) return std::string(kNotStreamed);
    return f("%.1f%%", 100 * p.store.expert_hit_rate()) + " of " + std::to_string(p.store.expert_uses());
  });
  row("expert loads (evictions)", [&](const PhaseStats& p) {
    if (p.store.expert_uses() == 0) return std::string(kNotStreamed);
    return std::to_string(p.store.expert_loads) + " (" + std::to_string(p.store.expert_evictions) + ")";
  });
  // "of N": the prefetches the phase could use, its own and those still outstanding at its start.
  row("prefetch hit rate", [&](const PhaseStats& p) {
    if (p.store.prefetch_usable() == 0)
      return std::string(p.store.expert_uses() == 0 ? kNotStreamed : "n/a (none issued)");
    return f("%.1f%%", 100 * p.store.prefetch_hit_rate()) + " of " + std::to_string(p.store.prefetch_usable());
  });
  row("prediction recall", [&](const PhaseStats& p) {
    if (p.store.predicted == 0) return std::string(p.store.expert_uses() == 0 ? kNotStreamed : "n/a (none predicted)");
    return f("%.1f%%", 100 * p.store.prediction_recall()) + " of " + std::to_string(p.store.predicted);
  });
  row("Engram rows (read)", [&](const PhaseStats& p) {
    return std::to_string(p.store.engram_rows_requested) + " (" + std::to_string(p.store.engram_rows_read) + ")";
  });
  row("Engram s (share)", [&](const PhaseStats& p) {
    return f("%.3f", s_of(p.profile.engram_ns)) + f(" (%.1f%%)", 100 * per(s_of(p.profile.engram_ns), p.wall_s));
  });
  row("Engram fetch / wait s", [&](const PhaseStats& p) {
    return f("%.3f", s_of(p.store.engram_fetch_ns)) + f(" / %.3f", s_of(p.store.engram_wait_ns));
  });
  row("MoE s (share)", [&](const PhaseStats& p) {
    return f("%.3f", s_of(p.profile.moe_ns)) + f(" (%.1f%%)", 100 * per(s_of(p.profile.moe_ns), p.wall_s));
  });
  row("attention s (share)", [&](const PhaseStats& p) {
    return f("%.3f", s_of(p.profile.attention_ns)) + f(" (%.1f%%)", 100 * per(s_of(p.profile.attention_ns), p.wall_s));
  });
  row("LM head s (share)", [&](const PhaseStats& p) {
    return f("%.3f", s_of(p.profile.head_ns)) + f(" (%.1f%%)", 100 * per(s_of(p.profile.head_ns), p.wall_s));
  });
  row("blocked on I/O s (share)", [&](const PhaseStats& p) {
    return f("%.3f", s_of(p.store.io_wait_ns())) + f(" (%.1f%%)", 100 * per(s_of(p.store.io_wait_ns()), p.wall_s));
  });
  row("CPU user / kernel s", [&](const PhaseStats& p) { return f("%.2f", p.cpu_user_s) + f(" / %.2f", p.cpu_sys_s); });
}

std::string stats_json(const std::vector<PhaseStats>& phases, const std::string& model_dir, const std::string& placement) {
  nlohmann::json j;
  j["model"] = model_dir;
  j["placement"] = placement;
  nlohmann::json ph = nlohmann::json::object();
  for (const auto& p : phases) {
    const store::PlacementStats& s = p.store;
    nlohmann::json o;
    o["tokens"] = p.tokens;
    o["wall_s"] = p.wall_s;
    o["tok_per_s"] = per(double(p.tokens), p.wall_s);
    o["bytes_read"] = s.bytes_read();
    o["bytes_read_per_token"] = per(double(s.bytes_read()), double(p.tokens));
    o["os_read_bytes"] = s.os_read_bytes;
    o["expert"] = {{"acquires", s.expert_acquires}, {"hits", s.expert_hits},         {"inflight", s.expert_inflight},
                   {"misses", s.expert_misses},     {"loads", s.expert_loads},       {"bytes_read", s.expert_bytes_read},
                   {"evictions", s.expert_evictions}, {"hit_rate", s.expert_hit_rate()}, {"wait_s", s_of(s.expert_wait_ns)}};
    o["prefetch"] = {{"issued", s.prefetch_issued},   {"used", s.prefetch_used},
                     {"outstanding_at_start", s.prefetch_outstanding_at_start},
                     {"hit_rate", s.prefetch_hit_rate()}, {"predicted", s.predicted},
                     {"predicted_correct", s.predicted_correct}, {"prediction_recall", s.prediction_recall()}};
    o["engram"] = {{"rows_requested", s.engram_rows_requested}, {"rows_unique", s.engram_rows_unique},
                   {"rows_cached", s.engram_rows_cached},       {"rows_read", s.engram_rows_read},
                   {"reads", s.engram_reads},                   {"bytes_read", s.engram_bytes_read},
                   {"row_bytes_read", s.engram_row_bytes_read},
                   {"fetch_s", s_of(s.engram_fetch_ns)},        {"busy_s", s_of(s.engram_busy_ns)},
                   {"wait_s", s_of(s.engram_wait_ns)},
                   {"time_s", s_of(p.profile.engram_ns)},       {"share_of_wall", per(s_of(p.profile.engram_ns), p.wall_s)}};
    o["io_wait_s"] = s_of(s.io_wait_ns());
    o["cpu"] = {{"user_s", p.cpu_user_s}, {"sys_s", p.cpu_sys_s}};
    o["profile"] = {{"forwards", p.profile.forwards}, {"forward_s", s_of(p.profile.forward_ns)},
                    {"moe_s", s_of(p.profile.moe_ns)}, {"engram_s", s_of(p.profile.engram_ns)},
                    {"attention_s", s_of(p.profile.attention_ns)}, {"head_s", s_of(p.profile.head_ns)}};
    ph[p.name] = std::move(o);
  }
  j["phases"] = std::move(ph);
  return j.dump(2, ' ', false, nlohmann::json::error_handler_t::replace) + "\n";
}

}  // namespace strata::cli
