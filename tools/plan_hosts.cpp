#include "tools/plan_hosts.h"

#include <algorithm>
#include <cmath>
#include <sstream>

#include "io/file.h"
#include "model/expert_peers.h"
#include "tools/plan.h"

namespace strata::tools {

Result<std::vector<Host>> parse_hosts(const std::string& text, const std::string& source) {
  std::vector<Host> hosts;
  std::istringstream in(text);
  std::string line;
  int n = 0;
  while (std::getline(in, line)) {
    ++n;
    if (auto hash = line.find('#'); hash != std::string::npos) line.resize(hash);
    std::istringstream words(line);
    std::string word;
    if (!(words >> word)) continue;
    const std::string where = source + " line " + std::to_string(n);
    Host h;
    h.name = word;
    bool ram = false, link = false, lat = false;
    while (words >> word) {
      const auto eq = word.find('=');
      if (eq == std::string::npos)
        return InvalidArgument(where + ": '" + word + "' is not KEY=VALUE (keys: ram, disk_gbps, link_gbps, latency_us)");
      const std::string key = word.substr(0, eq), value = word.substr(eq + 1);
      if (key == "ram") {
        STRATA_ASSIGN_OR_RETURN(h.ram_bytes, parse_size(value, where + " ram"));
        ram = true;
        continue;
      }
      char* end = nullptr;
      const double v = std::strtod(value.c_str(), &end);
      if (value.empty() || *end != '\0' || !std::isfinite(v) || v < 0)
        return InvalidArgument(where + ": " + key + " must be a number >= 0, got '" + value + "'");
      if (key == "disk_gbps") h.disk_gbps = v;
      else if (key == "link_gbps") h.link_gbps = v, link = true;
      else if (key == "latency_us") h.latency_us = v, lat = true;
      else return InvalidArgument(where + ": unknown key '" + key + "' (keys: ram, disk_gbps, link_gbps, latency_us)");
    }
    if (!ram || !link || !lat)
      return InvalidArgument(where + " (" + h.name + "): ram=, link_gbps= and latency_us= are required");
    if (h.link_gbps <= 0) return InvalidArgument(where + ": link_gbps must be > 0");
    hosts.push_back(h);
  }
  if (hosts.empty()) return InvalidArgument(source + ": no hosts (one per line: NAME ram=SIZE link_gbps=X latency_us=X [disk_gbps=X])");
  if (hosts.size() > 64) return InvalidArgument(source + ": " + std::to_string(hosts.size()) + " hosts, at most 64 are planned");
  return hosts;
}

Result<std::vector<Host>> read_hosts(const std::string& path) {
  STRATA_ASSIGN_OR_RETURN(std::string text, io::read_file_to_string(path, 1u << 20));
  return parse_hosts(text, path);
}

namespace {

// Calls f(counts, probability) for every way k picks fall on ranks with probabilities p.
template <class F>
void for_each_outcome(const std::vector<double>& p, int k, F&& f) {
  std::vector<int> counts(p.size(), 0);
  std::vector<double> logfact(static_cast<size_t>(k) + 1, 0.0);
  for (int i = 1; i <= k; ++i) logfact[static_cast<size_t>(i)] = logfact[static_cast<size_t>(i) - 1] + std::log(i);
  auto rec = [&](auto&& self, size_t r, int left, double logp) -> void {
    if (r + 1 == p.size()) {
      counts[r] = left;
      if (left > 0 && p[r] <= 0) return;
      const double lp = logp + (left > 0 ? left * std::log(p[r]) : 0.0) - logfact[static_cast<size_t>(left)];
      f(counts, std::exp(lp + logfact[static_cast<size_t>(k)]));
      return;
    }
    for (int c = 0; c <= left; ++c) {
      if (c > 0 && p[r] <= 0) break;
      counts[r] = c;
      self(self, r + 1, left - c, logp + (c > 0 ? c * std::log(p[r]) : 0.0) - logfact[static_cast<size_t>(c)]);
    }
  };
  rec(rec, 0, k, 0.0);
}

}  // namespace

ExpertParallelPlan plan_expert_parallel(const model::ModelConfig& c, const ModelFootprint& f, const Cost& single,
                                        uint64_t dense_bytes, const std::vector<Host>& hosts) {
  ExpertParallelPlan ep;
  const int N = static_cast<int>(hosts.size());
  ep.ranks = N;
  ep.single_tok_s = single.total_s > 0 ? 1.0 / single.total_s : 0;
  double routed_s = 0, reads_s = 0;
  for (const CostTerm& t : single.terms) {
    if (t.name == "routed experts") routed_s += t.seconds;
    if (t.name == "expert reads") reads_s += t.seconds;
  }
  // Everything but the routed experts and their reads, compute and I/O added (no overlap assumed).
  const double base_s = std::max(0.0, single.compute_s - routed_s) + std::max(0.0, single.io_s - reads_s);
  int moe_layers = 0, picks = 0;
  for (int l = 0; l < c.n_layers; ++l)
    if (c.n_active(l) > 0) ++moe_layers, picks += c.n_active(l);
  const double t_expert = picks > 0 ? routed_s / picks : 0;  // compute per pick
  const int E = c.n_routed_experts, k = std::max(1, c.n_activated_experts);
  // Shares: contiguous ranges weighted as `--mpi` weighs its ranks (dist::MpiJob::agree_partition):
  // model::capacity_weights of each host's RAM and disk rate, rank 0 holding the resident set.
  std::vector<model::RankCapacity> caps;
  for (const Host& h : hosts)
    caps.push_back(model::RankCapacity{h.ram_bytes, static_cast<uint64_t>(std::max(0.0, h.disk_gbps) * 1e9)});
  const std::vector<uint64_t> weights = model::capacity_weights(caps, f.routed_bytes, dense_bytes);
  std::vector<int32_t> bounds(static_cast<size_t>(N) + 1, 0);
  if (auto b = model::weighted_expert_ranges(std::max(1, E), weights); b.ok()) bounds = std::move(*b);
  std::vector<double> share(static_cast<size_t>(N));
  std::vector<double> miss_s(static_cast<size_t>(N));
  for (int r = 0; r < N; ++r) {
    const int64_t lo = E > 0 ? bounds[static_cast<size_t>(r)] : 0, hi = E > 0 ? bounds[static_cast<size_t>(r) + 1] : 0;
    HostShare hs;
    hs.name = hosts[static_cast<size_t>(r)].name;
    hs.experts = (hi - lo) * moe_layers;
    hs.expert_bytes = static_cast<uint64_t>(hs.experts) * f.expert_bytes;
    const uint64_t ram = hosts[static_cast<size_t>(r)].ram_bytes;
    const uint64_t left = r == 0 ? (ram > dense_bytes ? ram - dense_bytes : 0) : ram;
    hs.hit_rate = hs.expert_bytes > 0 ? std::min(1.0, static_cast<double>(left) / static_cast<double>(hs.expert_bytes)) : 1;
    const double disk = hosts[static_cast<size_t>(r)].disk_gbps;
    miss_s[static_cast<size_t>(r)] =
        hs.hit_rate >= 1 ? 0 : (disk > 0 ? (1 - hs.hit_rate) * static_cast<double>(f.expert_bytes) / (disk * 1e9) : 1e9);
    if (hs.hit_rate < 1 && disk <= 0)
      ep.notes.push_back(hs.name + ": its experts do not fit its RAM and no disk_gbps is given (misses counted as 1e9 s)");
    share[static_cast<size_t>(r)] = E > 0 ? static_cast<double>(hi - lo) / E : 0;
    ep.hosts.push_back(hs);
  }
  const Host& h0 = hosts.front();
  const double dim = static_cast<double>(c.dim);
  double layer_s = 0, comm_s = 0, msgs = 0, bytes = 0;
  for_each_outcome(share, k, [&](const std::vector<int>& counts, double prob) {
    double t = counts[0] * (t_expert + miss_s[0]);
    double crit_comm = 0;
    for (int r = 1; r < N; ++r) {
      const int cr = counts[static_cast<size_t>(r)];
      if (cr == 0) continue;
      const Host& h = hosts[static_cast<size_t>(r)];
      const double b = 8.0 * (2 + 3 * cr) + 4.0 * cr * (dim + 1) + 4.0 * cr * dim;
      const double link = std::min(h.link_gbps, h0.link_gbps) * 1e9 / 8;
      const double comm = 2 * std::max(h.latency_us, h0.latency_us) * 1e-6 + b / link;
      msgs += prob * 3;
      bytes += prob * b;
      const double tr = comm + cr * (t_expert + miss_s[static_cast<size_t>(r)]);
      if (tr > t) {
        t = tr;
        crit_comm = comm;
      }
    }
    layer_s += prob * t;
    comm_s += prob * crit_comm;
  });
  ep.messages_per_layer = msgs;
  ep.bytes_per_layer = bytes;
  ep.comm_s_per_token = comm_s * moe_layers;
  ep.routed_s_per_token = layer_s * moe_layers;
  ep.token_s = base_s + ep.routed_s_per_token;
  ep.tok_s = ep.token_s > 0 ? 1.0 / ep.token_s : 0;
  return ep;
}

}  // namespace strata::tools
