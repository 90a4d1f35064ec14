// strata plan: placement and predicted speed (see plan.h).
#include "tools/plan.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdio>
#include <functional>
#include <nlohmann/json.hpp>
#include <sstream>

#include "io/file.h"

namespace strata::tools {

namespace {

using ojson = nlohmann::ordered_json;
constexpr double kGiB = 1024.0 * 1024.0 * 1024.0;

std::string fmt(const char* f, double v) {
  char buf[64];
  std::snprintf(buf, sizeof buf, f, v);
  return buf;
}

// "12,672"
std::string with_commas(uint64_t v) {
  std::string s = std::to_string(v), out;
  for (size_t i = 0; i < s.size(); ++i) {
    if (i > 0 && (s.size() - i) % 3 == 0) out += ',';
    out += s[i];
  }
  return out;
}

std::string params_str(double p) {
  if (p >= 1e9) return fmt("%.2f B", p / 1e9);
  if (p >= 1e6) return fmt("%.1f M", p / 1e6);
  if (p >= 1e3) return fmt("%.1f K", p / 1e3);
  return fmt("%.0f", p);
}

std::string tokens_str(int64_t t) {
  if (t >= (1 << 20) && t % (1 << 20) == 0) return std::to_string(t >> 20) + "M";
  if (t >= 1024 && t % 1024 == 0) return std::to_string(t >> 10) + "K";
  return std::to_string(t);
}

std::string rate_str(double tok_s) {
  if (tok_s >= 100) return fmt("%.0f", tok_s);
  if (tok_s >= 10) return fmt("%.1f", tok_s);
  return fmt("%.2f", tok_s);
}

std::string seconds_str(double s) {
  if (s < 1e-3) return fmt("%.0f us", s * 1e6);
  if (s < 1) return fmt("%.1f ms", s * 1e3);
  if (s < 120) return fmt("%.2f s", s);
  return fmt("%.1f min", s / 60);
}

// Activation scratch of one prefill chunk of n tokens (floats live at once in Model::forward and
// attention_forward, an estimate): the residual streams, sublayer in/out, queries and attention
// output, the MoE hidden rows, the grouped output and the candidate mask.
uint64_t scratch_bytes(const model::ModelConfig& c, int64_t n, int64_t context) {
  const double per_token = static_cast<double>(c.hc_mult * c.dim + 4 * c.dim + 2 * c.n_heads * c.head_dim +
                                               c.q_lora_rank + c.head_dim + 3 * c.moe_inter_dim +
                                               3 * c.moe_inter_dim + c.dim +  // the shared expert's own rows
                                               c.o_groups * c.o_lora_rank + c.index_n_heads * c.index_head_dim);
  double b = per_token * 4.0 * static_cast<double>(n);
  b += 4.0 * static_cast<double>(c.vocab_size);  // logits
  if (c.candidate_source_layer >= 0) b += static_cast<double>(n) * static_cast<double>(context);  // candidate mask
  return static_cast<uint64_t>(b);
}

// The expert cache's hit rate: given, from measured routing (the most picked experts fill the
// slots), or uniform routing (slots / experts).
double hit_rate(const PlanOptions& o, const Placement& pl) {
  if (o.expert_hit_rate >= 0) return o.expert_hit_rate;
  if (o.routing) return o.routing->coverage(pl.expert_slots);
  return static_cast<double>(pl.expert_slots) / static_cast<double>(std::max<int64_t>(1, pl.total_experts));
}

IoModel io_model(const Plan& p) {
  IoModel io;
  const Placement& pl = p.placement;
  const DiskProfile& d = p.machine.disk;
  io.expert_hit_rate = pl.expert_hit_rate;
  io.expert_read_gbps = p.options.disk_gbps > 0   ? p.options.disk_gbps
                        : pl.expert_direct_io ? d.seq_gbps_direct
                                              : d.seq_gbps_buffered;
  io.engram_from_disk = !pl.engram_resident;
  // Engram rows always go through the page cache, readahead off (store/engram_rows.h).
  io.engram_iops = p.options.iops > 0 ? p.options.iops : d.iops_qd32_buffered;
  io.overlap = p.options.overlap_io && pl.load_mode == "stream";
  return io;
}

ojson cost_json(const Cost& c) {
  ojson j;
  j["total_s"] = c.total_s;
  j["compute_s"] = c.compute_s;
  j["io_s"] = c.io_s;
  j["bottleneck"] = c.bottleneck;
  ojson t = ojson::object();
  for (const CostTerm& term : c.terms) t[term.name] = term.seconds;
  j["terms_s"] = t;
  return j;
}

}  // namespace

double RoutingCounts::coverage(int64_t slots) const {
  if (picks == 0) return 0;
  uint64_t covered = 0;
  for (size_t i = 0; i < counts.size() && static_cast<int64_t>(i) < slots; ++i) covered += counts[i];
  return std::min(1.0, static_cast<double>(covered) / static_cast<double>(picks));
}

Result<RoutingCounts> read_routing_counts(const std::string& path) {
  STRATA_ASSIGN_OR_RETURN(std::string text, io::read_file_to_string(path, 256u << 20));
  nlohmann::json j = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.is_object()) return InvalidArgument(path + ": not a JSON object (expected a strata calibrate hot file)");
  if (j.value("format", std::string()) != "strata-hot-experts")
    return InvalidArgument(path + ": field 'format' is not \"strata-hot-experts\" (write one with strata calibrate)");
  RoutingCounts r;
  r.source = path;
  auto picks = j.find("picks");
  auto tokens = j.find("tokens");
  auto experts = j.find("experts");
  if (picks == j.end() || !picks->is_number_unsigned()) return InvalidArgument(path + ": field 'picks' missing or not a count");
  if (tokens == j.end() || !tokens->is_number_integer()) return InvalidArgument(path + ": field 'tokens' missing or not an integer");
  if (experts == j.end() || !experts->is_array()) return InvalidArgument(path + ": field 'experts' missing or not an array");
  r.picks = picks->get<uint64_t>();
  r.tokens = tokens->get<int64_t>();
  uint64_t sum = 0;
  for (size_t i = 0; i < experts->size(); ++i) {
    const nlohmann::json& e = (*experts)[i];
    if (!e.is_array() || e.size() != 3 || !e[2].is_number_unsigned())
      return InvalidArgument(path + ": experts[" + std::to_string(i) + "] is not [layer, expert, count]");
    r.counts.push_back(e[2].get<uint64_t>());
    sum += r.counts.back();
  }
  if (sum != r.picks)
    return InvalidArgument(path + ": the expert counts add up to " + std::to_string(sum) + ", field 'picks' says " +
                           std::to_string(r.picks));
  std::sort(r.counts.begin(), r.counts.end(), std::greater<>());
  return r;
}

std::string format_bytes(double b) {
  if (b < 1024) return fmt("%.0f B", b);
  if (b < 1024.0 * 1024) return fmt("%.1f KiB", b / 1024);
  if (b < kGiB) return fmt("%.1f MiB", b / (1024.0 * 1024));
  if (b < 10 * kGiB) return fmt("%.2f GiB", b / kGiB);
  return fmt("%.1f GiB", b / kGiB);
}

Result<uint64_t> parse_size(const std::string& text, const std::string& what) {
  const char* s = text.c_str();
  char* end = nullptr;
  const double v = std::strtod(s, &end);
  if (end == s || !(v >= 0) || !std::isfinite(v))
    return InvalidArgument(what + ": expected a size such as 24G, 512M or 1.5T, got '" + text + "'");
  std::string unit(end);
  for (char& ch : unit) ch = static_cast<char>(std::toupper(static_cast<unsigned char>(ch)));
  if (unit.size() >= 2 && unit.substr(unit.size() - 2) == "IB") unit = unit.substr(0, unit.size() - 2);
  else if (unit.size() >= 1 && unit.back() == 'B') unit.pop_back();
  double mult = 1;
  if (unit.empty()) mult = 1;
  else if (unit == "K") mult = 1024.0;
  else if (unit == "M") mult = 1024.0 * 1024;
  else if (unit == "G") mult = kGiB;
  else if (unit == "T") mult = kGiB * 1024;
  else return InvalidArgument(what + ": unknown unit in '" + text + "' (use K, M, G or T, binary multiples)");
  const double bytes = v * mult;
  if (bytes > 1.8e19) return InvalidArgument(what + ": '" + text + "' is too large");
  return static_cast<uint64_t>(bytes);
}

Status PlanOptions::validate() const {
  if (threads < 0 || threads > 256) return InvalidArgument("--threads must be in [0, 256]");
  if (context < 0) return InvalidArgument("--ctx must be >= 0");
  if (prompts.empty()) return InvalidArgument("--prompt needs at least one length");
  for (int n : parallel)
    if (n < 1 || n > 4096) return InvalidArgument("--parallel stream counts must be in [1, 4096], got " + std::to_string(n));
  for (int64_t p : prompts)
    if (p <= 0 || p > (1 << 24)) return InvalidArgument("--prompt lengths must be in [1, 16777216], got " + std::to_string(p));
  if (gen < 0 || gen > (1 << 24)) return InvalidArgument("--gen must be in [0, 16777216]");
  if (prefill_chunk <= 0) return InvalidArgument("prefill chunk must be positive");
  if (load_mode != "auto" && load_mode != "resident" && load_mode != "stream" && load_mode != "mmap")
    return InvalidArgument("--load-mode must be auto, resident, stream or mmap, got '" + load_mode + "'");
  if (expert_hit_rate > 1) return InvalidArgument("--hit-rate must be in [0, 1]");
  if (disk_gbps < 0 || iops < 0) return InvalidArgument("--disk-gbps and --iops must be >= 0");
  return Status();
}

Result<Plan> make_plan(const model::ModelConfig& c, const VisionShape& vision, const MachineProfile& m,
                       const PlanOptions& o, const std::string& config_source) {
  STRATA_RETURN_IF_ERROR(o.validate());
  Plan p;
  p.config_source = config_source;
  p.config = c;
  p.options = o;
  p.machine = m;
  STRATA_ASSIGN_OR_RETURN(p.footprint, model_footprint(c, vision, o.quant));
  const ModelFootprint& f = p.footprint;
  {
    std::string block;
    for (const LinearUse& u : f.linears)
      if (u.block && block.find(dtype_name(*u.block)) == std::string::npos)
        block += (block.empty() ? "" : ", ") + std::string(dtype_name(*u.block));
    if (!block.empty())
      p.assumed_rates.push_back("block-format kernels (" + block +
                                "): the profile measures none; timed at the fp8 kernel's measured matvec GB/s "
                                "(weight bytes) and matmul GFLOP/s; there is no block-format GEMM (prefill runs the "
                                "matvec over its rows), so block-format prefill is optimistic (docs/gguf.md)");
  }
  p.threads = o.threads > 0 ? o.threads : std::max(1, m.physical_cores);
  if (p.threads > p.machine.threads.back().threads)
    p.placement.notes.push_back("the probe measured up to " + std::to_string(p.machine.threads.back().threads) +
                                " threads; rates for " + std::to_string(p.threads) + " use those");

  Placement& pl = p.placement;
  const int64_t longest = *std::max_element(o.prompts.begin(), o.prompts.end());
  pl.context = o.context > 0 ? o.context : longest + o.gen;
  const uint64_t ram = o.ram_bytes > 0 ? o.ram_bytes : m.ram_available;
  // The store's budget and margin (store/open_store.cpp): max(1 GiB, 10%) is left for KV caches,
  // activations and the system.
  pl.reserve_bytes = o.reserve_bytes > 0 ? o.reserve_bytes : std::max<uint64_t>(1ull << 30, ram / 10);
  pl.budget_bytes = ram > pl.reserve_bytes ? ram - pl.reserve_bytes : 0;
  // A given budget is the store's, whole, as run --ram-budget uses it (store/open_store.cpp takes no
  // margin off an explicit budget): KV and activations then need RAM beyond it.
  pl.budget_given = o.ram_budget_bytes > 0;
  if (pl.budget_given) {
    pl.budget_bytes = o.ram_budget_bytes;
    pl.reserve_bytes = o.reserve_bytes;
  }
  const uint64_t all_routed = f.routed_bytes + f.dspark_expert_bytes;
  pl.dense_bytes = f.text_bytes - all_routed - f.engram_table_bytes;
  pl.dense_ram_bytes = f.text_ram_bytes - all_routed - f.engram_table_bytes;
  pl.kv_bytes = f.kv.bytes_at(pl.context);
  pl.scratch_bytes = scratch_bytes(c, std::min(o.prefill_chunk, longest), pl.context);
  pl.engram_bytes = f.engram_table_bytes;
  for (int e : f.experts_per_layer) pl.total_experts += e;
  for (const GpuInfo& g : m.gpus) pl.vram_bytes += g.vram_total;
  if (o.vram_bytes > 0) pl.vram_bytes = o.vram_bytes;
  if (pl.vram_bytes > 0)
    pl.notes.push_back("VRAM " + format_bytes(static_cast<double>(pl.vram_bytes)) +
                       " not used: strata has no GPU backend yet (CPU plan)");

  std::string mode = o.load_mode;
  if (mode == "auto") mode = f.text_bytes <= pl.budget_bytes ? "resident" : "stream";
  pl.load_mode = mode;
  // As the store resolves ExpertIo::kAuto: O_DIRECT where the disk accepts it (open_store.cpp).
  pl.expert_direct_io = mode == "stream" && o.expert_io != store::ExpertIo::kBuffered &&
                        (o.expert_io == store::ExpertIo::kDirect || m.disk.direct_supported);
  if (mode == "resident") {
    pl.expert_slots = pl.total_experts;
    pl.expert_cache_bytes = f.routed_bytes;
    pl.expert_hit_rate = 1;
    pl.engram_resident = true;
    if (f.text_bytes > pl.budget_bytes) {
      pl.fits = false;
      pl.notes.push_back("load mode resident does not fit: the checkpoint holds " +
                         format_bytes(static_cast<double>(f.text_bytes)) + ", the RAM budget is " +
                         format_bytes(static_cast<double>(pl.budget_bytes)) + " (use --load-mode stream)");
    }
  } else if (mode == "stream") {
    const bool scales_resident = f.engram_scale_bytes * 16 <= pl.budget_bytes;
    pl.engram_ram_bytes = (scales_resident ? f.engram_scale_bytes : 0) +
                          (f.engram_table_bytes > 0 ? 65536ull * (f.engram_row_bytes + 16) : 0);
    const uint64_t fixed = pl.dense_bytes + pl.engram_ram_bytes;
    // As ExpertCatalog sizes slots (a GGUF, or what --quant would write, stacks experts per matrix).
    const uint64_t slot = expert_slot_bytes(f, pl.expert_direct_io, o.gguf_layout || o.quant.any());
    const uint64_t left = pl.budget_bytes > fixed ? pl.budget_bytes - fixed : 0;
    pl.expert_slots = std::min<int64_t>(pl.total_experts, static_cast<int64_t>(left / slot));
    pl.expert_cache_bytes = static_cast<uint64_t>(pl.expert_slots) * slot;
    if (pl.expert_slots < c.n_activated_experts) {
      pl.fits = false;
      pl.notes.push_back("does not fit: resident tensors " + format_bytes(static_cast<double>(pl.dense_bytes)) +
                         " + Engram " + format_bytes(static_cast<double>(pl.engram_ram_bytes)) + " + " +
                         std::to_string(c.n_activated_experts) + " experts of one layer need " +
                         format_bytes(static_cast<double>(fixed + c.n_activated_experts * slot)) +
                         ", the RAM budget is " + format_bytes(static_cast<double>(pl.budget_bytes)));
    }
    pl.expert_hit_rate = hit_rate(o, pl);
    // Whole layers that would fit pinned (--pin-layers 0-N), leaving two tokens' top-k experts of
    // every other layer to the cache (the one in use and a prefetch in flight).
    int64_t slots = pl.expert_slots;
    for (int l = 0; l < c.n_layers; ++l) {
      const int64_t keep = 2LL * c.n_active(l) * (c.n_layers - l - 1);
      if (slots - f.experts_per_layer[static_cast<size_t>(l)] < keep) break;
      slots -= f.experts_per_layer[static_cast<size_t>(l)];
      pl.pinned_layers = l + 1;
    }
  } else {  // mmap: the page cache holds what RAM allows, misses are page faults
    const uint64_t left = pl.budget_bytes > pl.dense_bytes ? pl.budget_bytes - pl.dense_bytes : 0;
    pl.expert_cache_bytes = std::min(left, f.routed_bytes);
    pl.expert_slots = static_cast<int64_t>(pl.expert_cache_bytes / std::max<uint64_t>(1, f.expert_bytes));
    pl.expert_hit_rate = hit_rate(o, pl);
    pl.notes.push_back("mmap: misses are page faults, no prefetch overlap");
  }
  if (o.routing && o.expert_hit_rate < 0 && pl.load_mode != "resident")
    pl.notes.push_back("expert hit rate from the routing of " + o.routing->source + " (" + std::to_string(o.routing->tokens) +
                       " tokens): the " + std::to_string(pl.expert_slots) + " most picked experts get " +
                       fmt("%.1f%%", 100 * pl.expert_hit_rate) + " of the picks");
  if (pl.expert_hit_rate < 1)
    pl.streams.push_back("routed experts: " + fmt("%.1f%%", 100 * (1 - pl.expert_hit_rate)) + " of uses read from disk (" +
                         (o.expert_hit_rate >= 0 ? std::string("given hit rate")
                          : o.routing ? "routing of " + o.routing->source + ", " + std::to_string(o.routing->tokens) + " tokens"
                                      : std::string("uniform routing estimate")) + ", " +
                         format_bytes(static_cast<double>(f.expert_bytes)) + " per expert, " +
                         (pl.expert_direct_io ? "O_DIRECT" : "through the page cache") + ")");
  if (pl.engram_bytes > 0 && !pl.engram_resident)
    pl.streams.push_back("Engram rows: " + std::to_string(f.engram_rows_per_token) + " per token, " +
                         std::to_string(f.engram_row_bytes) + " B each, 4 KiB reads through the page cache");
  {
    const double expert_disk = (1.0 - pl.expert_hit_rate) * static_cast<double>(f.decode.expert_bytes);
    const double engram = static_cast<double>(f.decode.engram_bytes);
    pl.decode_disk_bytes = expert_disk + (pl.engram_resident ? 0 : engram);
    pl.decode_ram_bytes = static_cast<double>(f.decode.weight_bytes) - expert_disk + (pl.engram_resident ? engram : 0);
  }
  if (!pl.budget_given && pl.kv_bytes + pl.scratch_bytes > pl.reserve_bytes)
    pl.notes.push_back("KV (" + format_bytes(static_cast<double>(pl.kv_bytes)) + ") + activations (" +
                       format_bytes(static_cast<double>(pl.scratch_bytes)) + ") exceed the margin of " +
                       format_bytes(static_cast<double>(pl.reserve_bytes)) + ": lower --ctx or raise --reserve");
  {
    const uint64_t loaded = mode == "resident" ? f.text_bytes : pl.dense_bytes;
    const double disk_gbps = !m.disk.measured                                            ? 0.0
                             : m.disk.seq_gbps_load > 0                                ? m.disk.seq_gbps_load
                             : m.disk.direct_supported && m.disk.seq_gbps_direct > 0   ? m.disk.seq_gbps_direct
                             : m.disk.seq_gbps_buffered > 0                            ? m.disk.seq_gbps_buffered
                                                                                       : m.disk.seq_gbps_pread;
    if (disk_gbps > 0)
      pl.load_cold_s = static_cast<double>(loaded) / (disk_gbps * 1e9) +
                       (m.alloc_gbps > 0 ? static_cast<double>(loaded) / (m.alloc_gbps * 1e9) : 0.0);
  }
  if (pl.dense_ram_bytes > pl.dense_bytes)
    pl.notes.push_back("attn.wo_a's copies for the kernels (its scales, the partial 2 MiB chunks of stored codes kept, at most 4 MiB a layer; a bf16 copy when widened): +" +
                       format_bytes(static_cast<double>(pl.dense_ram_bytes - pl.dense_bytes)) + " outside the store");
  pl.notes.push_back("KV at packed size (FP4/FP8 codes, " + fmt("%.0f", f.kv.bytes_per_token) + " B/token)");

  const IoModel io = io_model(p);
  if (io.expert_hit_rate < 1 && io.expert_read_gbps <= 0)
    pl.notes.push_back("no disk bandwidth measured: run `strata probe` with the model directory or pass --disk-gbps");
  for (int64_t prompt : o.prompts) {
    SpeedPrediction s;
    s.prompt = prompt;
    s.prefill = prefill_cost(c, f, p.machine, p.threads, prompt, o.prefill_chunk, o.replay, io);
    s.ttft_s = s.prefill.total_s;
    s.prefill_tok_s = static_cast<double>(prompt) / s.prefill.total_s;
    s.prefill_bottleneck = s.prefill.bottleneck;
    s.decode = decode_token_cost(c, f, p.machine, p.threads, prompt + o.gen / 2, io);
    s.decode_tok_s = 1.0 / s.decode.total_s;
    s.decode_bottleneck = s.decode.bottleneck;
    s.disk_unknown = (io.expert_hit_rate < 1 && io.expert_read_gbps <= 0) || (io.engram_from_disk && io.engram_iops <= 0);
    if (s.disk_unknown) s.prefill_bottleneck = s.decode_bottleneck = "disk (not measured)";
    p.speeds.push_back(std::move(s));
  }
  if (!p.speeds.empty())
    for (int n : o.parallel) p.batched.push_back(batched_decode(p.speeds.front().decode, c, f, n, io.overlap));
  if (!p.speeds.empty())
    for (size_t n = 1; n <= o.hosts.size(); ++n)
      p.expert_parallel.push_back(plan_expert_parallel(
          c, f, p.speeds.front().decode, pl.dense_ram_bytes,
          std::vector<Host>(o.hosts.begin(), o.hosts.begin() + static_cast<std::ptrdiff_t>(n))));
  return p;
}

std::string plan_text(const Plan& p) {
  const model::ModelConfig& c = p.config;
  const ModelFootprint& f = p.footprint;
  const Placement& pl = p.placement;
  std::ostringstream o;
  int n_window = 0, n_enc = 0, n_dec = 0;
  for (int l = 0; l < c.n_layers; ++l) {
    const int r = c.compress_ratio(l);
    (r == 0 ? n_window : r == 1 ? n_dec : n_enc)++;
  }
  o << "strata plan: " << p.config_source << "\n";
  o << "model: " << c.n_layers << " layers (" << n_window << " window-only, " << n_enc << " encoder, " << n_dec
    << " decoder) + " << c.n_mtp_layers << " DSpark stages; dim " << c.dim << "; " << c.n_routed_experts
    << " routed experts top-" << c.n_activated_experts << "\n";
  o << "checkpoint: " << format_bytes(static_cast<double>(f.checkpoint_bytes)) << " ("
    << fmt("%.1f", static_cast<double>(f.checkpoint_bytes) / 1e9) << " GB)";
  if (f.checkpoint_bytes != f.text_bytes)
    o << "; text model " << format_bytes(static_cast<double>(f.text_bytes)) << " in " << f.n_tensors
      << " tensors (what `strata synth` writes) + vision estimate";
  else
    o << " in " << f.n_tensors << " tensors";
  o << "\n";
  if (f.quant.any())
    o << "quantised as `strata quantize` writes it: " << f.quant.to_string()
      << " (sizes from the tensor shapes and block bytes)\n";
  for (const std::string& n : f.quant_notes) o << "  quant note: " << n << "\n";
  o << "\n";
  char line[256];
  std::snprintf(line, sizeof line, "  %-38s %11s %11s %10s  %s\n", "component", "on disk", "in RAM", "params",
                "by dtype");
  o << line;
  for (const ComponentSize& cs : f.components) {
    std::string dt;
    for (const auto& [t, b] : cs.bytes_by_dtype) {
      if (!dt.empty()) dt += ", ";
      dt += std::string(dtype_name(t) == "I8" ? "MXFP4(I8)" : dtype_name(t)) + " " + format_bytes(static_cast<double>(b));
    }
    std::snprintf(line, sizeof line, "  %-38s %11s %11s %10s  ", cs.name.c_str(),
                  format_bytes(static_cast<double>(cs.bytes)).c_str(), format_bytes(static_cast<double>(cs.ram_bytes)).c_str(),
                  params_str(static_cast<double>(cs.params)).c_str());
    o << line << dt << "\n";
  }
  o << "\n";
  o << "KV cache (packed): " << fmt("%.0f", f.kv.bytes_per_token) << " B/token = " << f.kv.main_sources.size()
    << " KV sources x " << f.kv.main_entry_bytes << " B + " << f.kv.key_owners.size() << " index-key owners x "
    << f.kv.index_entry_bytes << " B per entry, one entry per compress_ratio tokens; + "
    << format_bytes(static_cast<double>(f.kv.fixed_bytes)) << " per sequence (window rings, compressor state)\n";
  auto kv_at = [&](int64_t t) {
    const double b = static_cast<double>(f.kv.bytes_at(t));
    return b >= 0.1 * kGiB ? fmt("%.2f GiB", b / kGiB) : format_bytes(b);
  };
  o << "  at 8K: " << kv_at(8192) << "   128K: " << kv_at(131072) << "   1M: " << kv_at(1 << 20) << "\n";
  o << "Engram: " << f.engram_rows_per_token << " rows x " << f.engram_row_bytes << " B = "
    << with_commas(f.engram_bytes_per_token) << " B (" << fmt("%.1f", static_cast<double>(f.engram_bytes_per_token) / 1000)
    << " KB) read per token";
  if (f.engram_dtype) o << " (tables " << dtype_name(*f.engram_dtype) << ")";
  o << "\n";
  auto active = [&](const char* name, const ActivePerToken& a) {
    o << "  " << name << params_str(static_cast<double>(a.params)) << " params, "
      << format_bytes(static_cast<double>(a.weight_bytes)) << " of weights (routed experts "
      << format_bytes(static_cast<double>(a.expert_bytes)) << ") + " << a.engram_rows << " Engram rows\n";
  };
  o << "Active per token:\n";
  active("decode:                ", f.decode);
  active("prefill (exact):       ", f.prefill_exact);
  active("prefill (replay, enc.):", f.prefill_replay);
  o << "\n";

  const MachineProfile& m = p.machine;
  o << "machine: " << m.hostname << ", " << m.cpu_model << ", " << m.logical_cores << " logical / "
    << m.physical_cores << " physical cores, " << m.simd << " (kernels " << m.kernel_level << "), RAM "
    << format_bytes(static_cast<double>(m.ram_total)) << " (" << format_bytes(static_cast<double>(m.ram_available))
    << " available); probed " << m.date << "\n";
  const ThreadRates& r = m.at_threads(p.threads);
  o << "  " << r.threads << " threads: memory read " << fmt("%.1f", r.mem_read_gbps)
    << " GB/s; matvec GB/s at rows of 4096:";
  const std::pair<LinearKind, const char*> kinds[] = {
      {LinearKind::kFp8, "fp8"},
      {LinearKind::kFp4, "fp4"},
      {LinearKind::kBf16, "bf16"},
      {LinearKind::kF32, "f32"},
      {LinearKind::kBf16Any, "bf16 free-order (LM head)"},
      {LinearKind::kBf16E4m3, "bf16 on E4M3 codes (wo_a)"}};
  for (size_t i = 0; i < std::size(kinds); ++i)
    o << (i ? ", " : " ") << kinds[i].second << " " << fmt("%.1f", r.kernel(kinds[i].first).matvec_gbps[2]);
  o << "\n";
  if (m.engine_note.empty())
    o << "  engine glue (measured by strata probe), per token and layer: " << fmt("%.1f", r.glue_us_prefill)
      << " us prefill, " << fmt("%.1f", r.glue_us_decode) << " us decode\n";
  else
    o << "  " << m.engine_note << ": predictions are optimistic on small models\n";
  if (m.disk.measured)
    o << "  disk " << m.disk.dir << ": sequential " << fmt("%.2f", m.disk.seq_gbps_direct) << " GB/s O_DIRECT, "
      << fmt("%.2f", m.disk.seq_gbps_buffered) << " GB/s buffered, " << fmt("%.2f", m.disk.seq_gbps_pread)
    << " GB/s one pread at a time"
      << (m.disk.seq_gbps_load > 0 ? ", " + fmt("%.2f", m.disk.seq_gbps_load) + " GB/s as the load reads (8 MiB x 4)" : std::string())
      << "; 4 KiB random " << fmt("%.0f", m.disk.iops_qd1_direct)
      << " / " << fmt("%.0f", m.disk.iops_qd32_direct) << " IOPS at depth 1 / 32 (O_DIRECT)\n";
  else
    o << "  disk: not measured" << (m.disk.note.empty() ? "" : " (" + m.disk.note + ")") << "\n";
  if (m.gpus.empty()) o << "  GPU: none\n";
  for (const GpuInfo& g : m.gpus) o << "  GPU: " << g.name << ", " << format_bytes(static_cast<double>(g.vram_total)) << "\n";
  o << "\n";

  o << "placement: load mode " << pl.load_mode << (pl.fits ? "" : " (DOES NOT FIT)") << "\n";
  if (pl.budget_given)
    o << "  RAM budget " << format_bytes(static_cast<double>(pl.budget_bytes))
      << " for the store (--ram, as run --ram-budget); on top of it KV "
      << format_bytes(static_cast<double>(pl.kv_bytes)) << " (" << pl.context << " tokens) + activations "
      << format_bytes(static_cast<double>(pl.scratch_bytes)) << "\n";
  else
    o << "  RAM budget " << format_bytes(static_cast<double>(pl.budget_bytes)) << " for the store; margin "
      << format_bytes(static_cast<double>(pl.reserve_bytes)) << " holds KV "
      << format_bytes(static_cast<double>(pl.kv_bytes)) << " (" << pl.context << " tokens) + activations "
      << format_bytes(static_cast<double>(pl.scratch_bytes)) << "\n";
  o << "  resident tensors: " << format_bytes(static_cast<double>(pl.dense_bytes)) << " (backbone, embedding, head, DSpark)";
  if (pl.engram_ram_bytes > 0) o << " + Engram scales / row cache " << format_bytes(static_cast<double>(pl.engram_ram_bytes));
  o << "\n";
  o << "  routed experts: " << pl.expert_slots << " of " << pl.total_experts << " in RAM ("
    << format_bytes(static_cast<double>(pl.expert_cache_bytes)) << ")";
  if (pl.load_mode != "resident") o << "; hit rate " << fmt("%.1f%%", 100 * pl.expert_hit_rate);
  if (pl.load_mode == "stream")
    o << "\n  pinning: " << (pl.pinned_layers > 0 ? "--pin-layers 0-" + std::to_string(pl.pinned_layers - 1) +
                                                       " would fit (whole encoder-first layers; same hit rate under uniform routing)"
                                                 : std::string("no whole layer fits beside the working set"));
  if (pl.load_cold_s > 0)
    o << "\n  cold load: about " << seconds_str(pl.load_cold_s)
      << " (the resident tensors at the disk's sequential rate, O_DIRECT where it works, and the first touch of their "
         "memory; process start, validation and binding not modelled)";
  o << "\n  Engram tables: " << (pl.engram_bytes == 0 ? "none" : pl.engram_resident ? "in RAM" : "on disk")
    << "\n";
  o << "  per decode token: " << format_bytes(pl.decode_ram_bytes) << " of weights and Engram rows from RAM, "
    << format_bytes(pl.decode_disk_bytes) << " from disk\n";
  o << "  streams from disk:" << (pl.streams.empty() ? " nothing" : "") << "\n";
  for (const std::string& s : pl.streams) o << "    - " << s << "\n";
  for (const std::string& n : pl.notes) o << "  note: " << n << "\n";
  o << "\n";

  o << "predicted (" << p.threads << " threads, " << (p.options.replay ? "replay" : "exact") << " prefill, chunk "
    << p.options.prefill_chunk << (p.assumed_rates.empty() ? "" : "; ASSUMED RATES, see below") << "):\n";
  for (const std::string& a : p.assumed_rates) o << "  assumed rate: " << a << "\n";
  std::snprintf(line, sizeof line, "  %8s %12s %10s  %-24s %12s  %s\n", "prompt", "prefill t/s", "TTFT", "prefill bottleneck",
                "decode t/s", "decode bottleneck");
  o << line;
  for (const SpeedPrediction& s : p.speeds) {
    std::snprintf(line, sizeof line, "  %8s %12s %10s  %-24s %12s  %s\n", tokens_str(s.prompt).c_str(),
                  s.disk_unknown ? "n/a" : rate_str(s.prefill_tok_s).c_str(),
                  s.disk_unknown ? "n/a" : seconds_str(s.ttft_s).c_str(), s.prefill_bottleneck.c_str(),
                  s.disk_unknown ? "n/a" : rate_str(s.decode_tok_s).c_str(), s.decode_bottleneck.c_str());
    o << line;
  }
  if (!p.speeds.empty() && !p.speeds.front().disk_unknown) {
    const SpeedPrediction& s = p.speeds.front();
    o << "  decode time per token at " << tokens_str(s.prompt) << " (" << seconds_str(s.decode.total_s) << "): ";
    for (size_t i = 0; i < s.decode.terms.size() && i < 6; ++i)
      o << (i ? ", " : "") << s.decode.terms[i].name << " " << seconds_str(s.decode.terms[i].seconds);
    o << "\n";
  }
  if (!p.batched.empty() && !p.speeds.empty() && !p.speeds.front().disk_unknown) {
    o << "  batched decode at " << tokens_str(p.speeds.front().prompt)
      << " (dense weights once per step, routed experts per distinct pick):\n";
    std::snprintf(line, sizeof line, "  %8s %14s %16s %18s\n", "streams", "aggregate t/s", "per-stream t/s",
                  "experts read x1");
    o << line;
    for (const BatchedDecode& b : p.batched) {
      std::snprintf(line, sizeof line, "  %8d %14s %16s %18.2f\n", b.streams, rate_str(b.aggregate_tok_s).c_str(),
                    rate_str(b.per_stream_tok_s).c_str(), b.distinct_experts);
      o << line;
    }
  }
  if (!p.expert_parallel.empty() && !p.speeds.front().disk_unknown) {
    o << "  expert parallel over MPI (--hosts; decode at " << tokens_str(p.speeds.front().prompt)
      << ", every host computing at this machine's rates):\n";
    std::snprintf(line, sizeof line, "  %6s %10s %12s %14s %14s %12s  %s\n", "ranks", "decode t/s", "vs 1 rank",
                  "msgs/layer", "bytes/layer", "comm/token", "expert RAM hit rate per host");
    o << line;
    for (const ExpertParallelPlan& e : p.expert_parallel) {
      std::string hits;
      for (const HostShare& h : e.hosts) hits += (hits.empty() ? "" : ", ") + h.name + " " + fmt("%.2f", h.hit_rate);
      std::snprintf(line, sizeof line, "  %6d %10s %11.2fx %14.1f %14s %12s", e.ranks, rate_str(e.tok_s).c_str(),
                    p.expert_parallel.front().tok_s > 0 ? e.tok_s / p.expert_parallel.front().tok_s : 0.0,
                    e.messages_per_layer,
                    format_bytes(e.bytes_per_layer).c_str(), seconds_str(e.comm_s_per_token).c_str());
      o << line << "  " << hits << "\n";
    }
    for (const std::string& n : p.expert_parallel.back().notes) o << "  note: " << n << "\n";
  }
  return o.str();
}

std::string plan_json(const Plan& p) {
  const ModelFootprint& f = p.footprint;
  const Placement& pl = p.placement;
  ojson j;
  j["config"] = p.config_source;
  j["checkpoint_bytes"] = f.checkpoint_bytes;
  j["text_bytes"] = f.text_bytes;
  j["text_ram_bytes"] = f.text_ram_bytes;
  j["quant"] = {{"experts", quant_choice_name(f.quant.experts)},
                {"dense", quant_choice_name(f.quant.dense)},
                {"head", quant_choice_name(f.quant.head)},
                {"engram", quant_choice_name(f.quant.engram)},
                {"notes", f.quant_notes}};
  j["n_tensors"] = f.n_tensors;
  ojson comps = ojson::array();
  for (const ComponentSize& cs : f.components) {
    ojson cj;
    cj["name"] = cs.name;
    cj["group"] = cs.group;
    cj["bytes"] = cs.bytes;
    cj["ram_bytes"] = cs.ram_bytes;
    cj["params"] = cs.params;
    cj["estimated"] = cs.estimated;
    ojson d = ojson::object();
    for (const auto& [t, b] : cs.bytes_by_dtype) d[std::string(dtype_name(t))] = b;
    cj["bytes_by_dtype"] = d;
    comps.push_back(cj);
  }
  j["components"] = comps;
  j["kv"] = {{"bytes_per_token", f.kv.bytes_per_token},
             {"main_entry_bytes", f.kv.main_entry_bytes},
             {"index_entry_bytes", f.kv.index_entry_bytes},
             {"fixed_bytes", f.kv.fixed_bytes},
             {"bytes_at_8k", f.kv.bytes_at(8192)},
             {"bytes_at_128k", f.kv.bytes_at(131072)},
             {"bytes_at_1m", f.kv.bytes_at(1 << 20)}};
  j["engram"] = {{"rows_per_token", f.engram_rows_per_token},
                 {"row_bytes", f.engram_row_bytes},
                 {"bytes_per_token", f.engram_bytes_per_token},
                 {"table_bytes", f.engram_table_bytes},
                 {"dtype", f.engram_dtype ? std::string(dtype_name(*f.engram_dtype)) : std::string("F8_E4M3")}};
  auto active = [](const ActivePerToken& a) {
    return ojson{{"params", a.params},
                 {"weight_bytes", a.weight_bytes},
                 {"expert_bytes", a.expert_bytes},
                 {"engram_rows", a.engram_rows},
                 {"engram_bytes", a.engram_bytes}};
  };
  j["active_per_token"] = {{"decode", active(f.decode)},
                           {"prefill_exact", active(f.prefill_exact)},
                           {"prefill_replay", active(f.prefill_replay)}};
  j["expert_bytes"] = f.expert_bytes;
  j["machine"] = nlohmann::ordered_json::parse(p.machine.to_json());
  ojson pj;
  pj["load_mode"] = pl.load_mode;
  pj["fits"] = pl.fits;
  pj["budget_bytes"] = pl.budget_bytes;
  pj["budget_given"] = pl.budget_given;
  pj["reserve_bytes"] = pl.reserve_bytes;
  pj["dense_bytes"] = pl.dense_bytes;
  pj["dense_ram_bytes"] = pl.dense_ram_bytes;
  pj["engram_ram_bytes"] = pl.engram_ram_bytes;
  pj["kv_bytes"] = pl.kv_bytes;
  pj["context"] = pl.context;
  pj["scratch_bytes"] = pl.scratch_bytes;
  pj["load_cold_s"] = pl.load_cold_s;
  pj["expert_cache_bytes"] = pl.expert_cache_bytes;
  pj["expert_slots"] = pl.expert_slots;
  pj["total_experts"] = pl.total_experts;
  pj["pinned_layers"] = pl.pinned_layers;
  pj["expert_hit_rate"] = pl.expert_hit_rate;
  pj["expert_direct_io"] = pl.expert_direct_io;
  pj["engram_resident"] = pl.engram_resident;
  pj["decode_ram_bytes"] = pl.decode_ram_bytes;
  pj["decode_disk_bytes"] = pl.decode_disk_bytes;
  pj["vram_bytes"] = pl.vram_bytes;
  pj["streams"] = pl.streams;
  pj["notes"] = pl.notes;
  j["placement"] = pj;
  j["threads"] = p.threads;
  j["prefill_mode"] = p.options.replay ? "replay" : "exact";
  j["prefill_chunk"] = p.options.prefill_chunk;
  j["gen"] = p.options.gen;
  ojson sp = ojson::array();
  for (const SpeedPrediction& s : p.speeds) {
    ojson sj;
    sj["prompt"] = s.prompt;
    sj["disk_unknown"] = s.disk_unknown;
    auto num = [&](double v) { return s.disk_unknown ? ojson(nullptr) : ojson(v); };
    sj["prefill_tok_s"] = num(s.prefill_tok_s);
    sj["ttft_s"] = num(s.ttft_s);
    sj["prefill_bottleneck"] = s.prefill_bottleneck;
    sj["decode_tok_s"] = num(s.decode_tok_s);
    sj["decode_context"] = s.prompt + p.options.gen / 2;
    sj["decode_bottleneck"] = s.decode_bottleneck;
    sj["prefill"] = cost_json(s.prefill);
    sj["decode"] = cost_json(s.decode);
    sp.push_back(sj);
  }
  j["predicted"] = sp;
  j["rates_assumed"] = !p.assumed_rates.empty();
  j["assumed_rates"] = p.assumed_rates;
  ojson bj = ojson::array();
  const bool unknown = p.speeds.empty() || p.speeds.front().disk_unknown;
  for (const BatchedDecode& b : p.batched)
    bj.push_back({{"streams", b.streams},
                  {"context", p.speeds.empty() ? 0 : p.speeds.front().prompt + p.options.gen / 2},
                  {"aggregate_decode_tok_s", unknown ? ojson(nullptr) : ojson(b.aggregate_tok_s)},
                  {"per_stream_decode_tok_s", unknown ? ojson(nullptr) : ojson(b.per_stream_tok_s)},
                  {"distinct_experts", b.distinct_experts}});
  j["batched_decode"] = bj;
  ojson ej = ojson::array();
  for (const ExpertParallelPlan& e : p.expert_parallel) {
    ojson hj = ojson::array();
    for (const HostShare& h : e.hosts)
      hj.push_back({{"name", h.name}, {"experts", h.experts}, {"expert_bytes", h.expert_bytes}, {"hit_rate", h.hit_rate}});
    ej.push_back({{"ranks", e.ranks},
                  {"decode_tok_s", unknown ? ojson(nullptr) : ojson(e.tok_s)},
                  {"single_decode_tok_s", unknown ? ojson(nullptr) : ojson(e.single_tok_s)},
                  {"messages_per_layer", e.messages_per_layer},
                  {"bytes_per_layer", e.bytes_per_layer},
                  {"comm_s_per_token", e.comm_s_per_token},
                  {"token_s", unknown ? ojson(nullptr) : ojson(e.token_s)},
                  {"hosts", hj},
                  {"notes", e.notes}});
  }
  j["expert_parallel"] = ej;
  return j.dump(2, ' ', false, nlohmann::json::error_handler_t::replace) + "\n";
}

}  // namespace strata::tools
