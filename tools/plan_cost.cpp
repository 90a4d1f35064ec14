// Time model of `strata plan` (see plan_cost.h for the terms and their sources).
#include "tools/plan_cost.h"

#include <algorithm>
#include <cmath>
#include <map>

namespace strata::tools {

namespace {

bool contains(const std::string& s, const char* part) { return s.find(part) != std::string::npos; }

const char* linear_term(const LinearUse& u) {
  if (u.layer < 0) return "LM head";
  if (u.routed) return "routed experts";
  if (u.block) return "block-format linears";
  switch (u.kind) {
    case LinearKind::kFp8: return "fp8 linears";
    case LinearKind::kFp4: return "fp4 linears";
    case LinearKind::kBf16: return "bf16 linears";
    case LinearKind::kF32: return "f32 linears (mHC)";
    case LinearKind::kBf16Any: return "bf16 linears (free order)";
    case LinearKind::kBf16E4m3: return "bf16 linears";  // attn.wo_a: the bf16 kernel on E4M3 codes
  }
  return "linears";
}

// Seconds of `calls` applications of a linear to `rows` rows (one weight read per application):
// the measured matvec rate at one row; from kMatmulRows[0] rows on, the slower of streaming the
// weight and the measured matmul rate; in between, linear in the row count. `passes`: pool passes
// the application costs (pool_passes); `sharing`: applications of this linear in those passes (a
// decode layer's routed experts: the touched ones, which go together), so that the matvec rate is
// the one of the bytes a pass streams (a short pass from DRAM streams slower: tools/probe.h).
double linear_seconds(const LinearUse& u, const KernelRates& k, double rows, double* overhead, double passes,
                      double sharing = 1) {
  const double calls = u.calls;
  *overhead += passes * k.call_us * 1e-6;
  const double bytes = static_cast<double>(u.bytes);
  // A linear that rides along another's pass (passes 0) is counted at its own bytes.
  const double pass_bytes = passes > 0 ? bytes * calls * sharing / passes : bytes;
  const double read = bytes / (matvec_gbps_at(k, u.in, pass_bytes) * 1e9);
  auto at = [&](double n) {
    const double elems = static_cast<double>(u.out * u.in);
    return std::max(read, 2.0 * n * elems / (matmul_gflops_at(k, n, elems) * 1e9));
  };
  const double n0 = kMatmulRows.front();
  double t;
  if (rows <= 1) t = read;
  else if (rows < n0) t = read + (at(n0) - read) * (rows - 1) / (n0 - 1);
  else t = at(rows);
  return calls * t;
}

bool ends_with(const std::string& s, const char* tail) {
  const size_t n = std::char_traits<char>::length(tail);
  return s.size() >= n && s.compare(s.size() - n, n, tail) == 0;
}

// Pool passes (fork-joins) one application of linear `u` costs when its calls run over `rows` rows
// (per routed expert: its tokens), as model/ shapes the calls: decode-sized calls of one sublayer
// share a pass (kernels::linear_*_batch): wkv rides with wq_a, the shared expert's w3 with its w1,
// the o_groups parts of wo_a go together at one token, and the routed experts' w1 and w3 of a layer
// share one pass and their w2 another; larger routed calls run one GEMM per touched expert.
double pool_passes(const LinearUse& u, double rows, int64_t n_tokens, double touched) {
  const bool small = rows < kMatmulRows.front();
  if (u.routed) return small ? (ends_with(u.name, ".w2") ? 1.0 : 0.5) : touched * u.calls;
  if (small && (ends_with(u.name, ".attn.wkv") || ends_with(u.name, ".shared_experts.w3"))) return 0;
  if (ends_with(u.name, ".attn.wo_a") && n_tokens == 1) return 1;
  return u.calls;
}

// Entries one query at `pos` attends to in `layer`: the window plus the selected compressed entries.
double attention_entries(const model::ModelConfig& c, int layer, int64_t pos) {
  double e = static_cast<double>(std::min<int64_t>(c.window_size, pos + 1));
  const int r = c.compress_ratio(layer);
  if (r > 0) e += static_cast<double>(std::min<int64_t>(c.index_topk, (pos + 1) / r));
  return e;
}

// Compute of `n` tokens at positions [start, start + n) through `layers` (all backbone layers when
// empty), `parallel_tokens` when the tokens are spread over the threads (prefill).
void layers_cost(const model::ModelConfig& c, const ModelFootprint& f, const MachineProfile& m, int threads,
                 const std::vector<bool>& run, const std::vector<bool>& compressor_only, int64_t n, int64_t start,
                 const IoModel& io, Cost* cost) {
  const ThreadRates& r = m.at_threads(threads);
  const ThreadRates& r1 = m.at_threads(1);
  const bool many = n > 1;
  // Attention / indexer rates: decode splits heads (keys) over the threads; prefill runs one query
  // per thread.
  const double attn_rate = (many ? r1.attn_gflops : r.attn_gflops) * 1e9;
  const double index_rate = (many ? r1.index_gflops : r.index_gflops) * 1e9;
  const double topk_div = many ? threads : 1;
  std::map<std::string, double> t;
  double overhead = 0;
  for (const LinearUse& u : f.linears) {
    if (u.layer < 0) continue;  // the head runs once per prompt / token, added by the caller
    const size_t l = static_cast<size_t>(u.layer);
    const bool comp = contains(u.name, ".compressor.") || contains(u.name, ".indexer.wk");
    if (!run[l] && !(compressor_only[l] && comp)) continue;
    const KernelRates& k = r.kernel(u.kind);
    if (u.routed) {
      const double E = f.experts_per_layer[l], K = c.n_active(u.layer);
      const double uses = static_cast<double>(n) * K;
      const double touched = n == 1 ? K : E * (1.0 - std::pow(1.0 - K / E, static_cast<double>(n)));
      t[linear_term(u)] += touched * linear_seconds(u, k, uses / touched, &overhead,
                                                    pool_passes(u, uses / touched, n, touched), touched);
      continue;
    }
    // Applications per chunk: once over n * per_token rows, or (decode of a linear that runs once per
    // compress_ratio tokens) a fraction of one single-row application.
    const double rows = static_cast<double>(n) * u.per_token;
    if (rows < 1) {
      double oh = 0;
      t[linear_term(u)] += rows * linear_seconds(u, k, 1, &oh, pool_passes(u, 1, n, 1));
      overhead += rows * oh;
    } else {
      t[linear_term(u)] += linear_seconds(u, k, rows, &overhead, pool_passes(u, rows, n, 1));
    }
  }
  // Attention and indexer: per query a fixed cost plus FLOPs at the measured rate.
  const double attn_call = (many ? r1.attn_call_us : r.attn_call_us) * 1e-6;
  const double index_call = (many ? r1.index_call_us : r.index_call_us) * 1e-6;
  double attn_flops = 0, index_flops = 0, topk_elems = 0, attn_queries = 0, index_queries = 0;
  double index_key_elems = 0, decoded_key_elems = 0;
  int layers_run = 0;
  for (int l = 0; l < c.n_layers; ++l) {
    if (!run[static_cast<size_t>(l)]) continue;
    ++layers_run;
    const int ratio = c.compress_ratio(l);
    attn_queries += static_cast<double>(n);
    if (ratio > 0 && c.is_index_source(l)) {
      index_queries += static_cast<double>(n);
      // The visible packed keys are decoded once per chunk and index layer.
      decoded_key_elems += static_cast<double>((start + n) / ratio) * static_cast<double>(c.index_head_dim);
    }
    for (int64_t p = start; p < start + n; ++p) {
      attn_flops += 4.0 * c.n_heads * static_cast<double>(c.head_dim) * attention_entries(c, l, p);
      if (ratio > 0 && c.is_index_source(l)) {
        const double keys = static_cast<double>((p + 1) / ratio);
        index_flops += 2.0 * c.index_n_heads * static_cast<double>(c.index_head_dim) * keys;
        index_key_elems += keys * static_cast<double>(c.index_head_dim);
        topk_elems += keys * (c.is_candidate_source(l) ? 2 : 1);  // block selection reads them again
      }
    }
  }
  const double par = many ? threads : 1;  // prefill spreads queries over the threads
  t["attention"] += (attn_queries * attn_call + attn_flops / attn_rate) / par;
  if (index_queries > 0) {
    const double key_ns = many ? r1.index_key_ns : r.index_key_ns;
    t["indexer"] += (index_queries * index_call + index_flops / index_rate + index_key_elems * key_ns * 1e-9) / par;
    // Before the queries, split over the pool (model/attention.cpp run_indexer).
    t["indexer"] += decoded_key_elems * r1.key_decode_ns * 1e-9 / threads;
  }
  if (topk_elems > 0) t["top-k"] += topk_elems * m.topk_ns_per_elem * 1e-9 / topk_div;
  // Elementwise work per token and layer: two mHC sublayers over the hc x dim residual streams,
  // SwiGLU over the routed + shared hidden rows, and the activation buffers each layer allocates
  // and zero-fills (u, f; q, kv, o and the grouped output; indexer queries; MoE rows).
  const double tokens_layers = static_cast<double>(n) * layers_run;
  const double sub_ns = many ? r.sublayer_ns_prefill : r.sublayer_ns_decode;
  t["mHC + norms"] += tokens_layers * 2.0 * c.hc_mult * static_cast<double>(c.dim) * sub_ns * 1e-9;
  const double hidden = static_cast<double>(c.moe_inter_dim) * (c.n_activated_experts + c.n_shared_experts);
  t["SwiGLU"] += tokens_layers * hidden * r.swiglu_ns * 1e-9;
  const double floats = 2.0 * c.dim + c.q_lora_rank + 2.0 * c.n_heads * c.head_dim + c.head_dim +
                        static_cast<double>(c.n_heads * c.head_dim) / c.o_groups + 2.0 * c.o_groups * c.o_lora_rank +
                        c.n_routed_experts + c.n_activated_experts * (2.0 * c.dim + 3.0 * c.moe_inter_dim) +
                        3.0 * c.moe_inter_dim + c.dim;
  if (m.alloc_gbps > 0) t["activation buffers"] += tokens_layers * floats * 4.0 / (m.alloc_gbps * 1e9);
  // Everything else the forward pass does, measured by the probe's engine run (tools/probe_engine.cpp).
  // Per token and layer, prefill and decode each their own (tools/probe.h).
  const double glue_s = (many ? r.glue_us_prefill : r.glue_us_decode) * 1e-6;
  if (glue_s > 0) t["engine glue"] += tokens_layers * glue_s;
  t["call overhead"] += overhead;
  for (const auto& [name, s] : t) cost->add(name, s);

  // Routed expert misses and Engram rows from disk.
  if (io.expert_hit_rate < 1.0) {
    double loads = 0;
    for (int l = 0; l < c.n_layers; ++l) {
      if (!run[static_cast<size_t>(l)]) continue;
      const double E = f.experts_per_layer[static_cast<size_t>(l)], K = c.n_active(l);
      loads += n == 1 ? K : E * (1.0 - std::pow(1.0 - K / E, static_cast<double>(n)));
    }
    const double bytes = loads * (1.0 - io.expert_hit_rate) * static_cast<double>(f.expert_bytes);
    cost->add("expert reads", io.expert_read_gbps > 0 ? bytes / (io.expert_read_gbps * 1e9) : 1e9, true);
  }
  if (io.engram_from_disk) {
    double rows = 0;
    for (int l : c.engram_layer_ids)
      if (run[static_cast<size_t>(l)]) rows += static_cast<double>(n) * c.engram_n_cols();
    cost->add("Engram reads", io.engram_iops > 0 ? rows / io.engram_iops : 1e9, true);
  }
}

LinearUse head_of(const ModelFootprint& f) {
  for (const LinearUse& u : f.linears)
    if (u.layer < 0) return u;
  return LinearUse{};
}

}  // namespace

void Cost::add(const std::string& name, double s, bool is_io) {
  for (CostTerm& t : terms)
    if (t.name == name) {
      t.seconds += s;
      return;
    }
  terms.push_back(CostTerm{name, s, is_io});
}

void Cost::finish(bool overlap) {
  compute_s = io_s = 0;
  const CostTerm* biggest = nullptr;
  const CostTerm* biggest_io = nullptr;
  const CostTerm* biggest_compute = nullptr;
  for (const CostTerm& t : terms) {
    (t.io ? io_s : compute_s) += t.seconds;
    if (!biggest || t.seconds > biggest->seconds) biggest = &t;
    const CostTerm*& side = t.io ? biggest_io : biggest_compute;
    if (!side || t.seconds > side->seconds) side = &t;
  }
  total_s = overlap ? std::max(compute_s, io_s) : compute_s + io_s;
  // With overlap the slower side sets the time: name its largest term.
  if (overlap && biggest_io && io_s > compute_s) bottleneck = "disk: " + biggest_io->name;
  else if (overlap && biggest_compute) bottleneck = biggest_compute->name;
  else bottleneck = biggest ? biggest->name : "";
  std::sort(terms.begin(), terms.end(), [](const CostTerm& a, const CostTerm& b) { return a.seconds > b.seconds; });
}


BatchedDecode batched_decode(const Cost& single, const model::ModelConfig& c, const ModelFootprint& f, int streams,
                             bool overlap) {
  BatchedDecode b;
  b.streams = std::max(1, streams);
  const double n = static_cast<double>(b.streams);
  double touched = 0, one = 0;
  for (int l = 0; l < c.n_layers; ++l) {
    const double E = f.experts_per_layer[static_cast<size_t>(l)], K = c.n_active(l);
    if (E <= 0 || K <= 0) continue;
    one += K;
    touched += E * (1.0 - std::pow(1.0 - K / E, n));
  }
  b.distinct_experts = one > 0 ? touched / one : 1;
  double compute = 0, io = 0;
  for (const CostTerm& t : single.terms) {
    double scale = n;  // per stream
    if (t.name == "routed experts" || t.name == "expert reads") {
      scale = b.distinct_experts;
    } else if (t.name == "LM head" || t.name == "call overhead" || t.name.find("linears") != std::string::npos) {
      scale = 1;
    }
    (t.io ? io : compute) += t.seconds * scale;
  }
  b.step_s = overlap ? std::max(compute, io) : compute + io;
  b.per_stream_tok_s = b.step_s > 0 ? 1.0 / b.step_s : 0;
  b.aggregate_tok_s = n * b.per_stream_tok_s;
  return b;
}

double matmul_gflops_at(const KernelRates& k, double n, double elems) {
  const double large = log_interp(kMatmulRows, k.matmul_gflops, n);
  if (elems <= 0) return large;
  const double small = log_interp(kMatmulRows, k.matmul_small_gflops, n);
  const double lo = static_cast<double>(kSmallMatmulOut * kSmallMatmulIn);
  const double hi = static_cast<double>(kLargeMatmulOut * kLargeMatmulIn);
  const double w = std::clamp(std::log(elems / lo) / std::log(hi / lo), 0.0, 1.0);
  return std::max(1e-3, small * (1 - w) + large * w);
}

Cost decode_token_cost(const model::ModelConfig& c, const ModelFootprint& f, const MachineProfile& m, int threads,
                       int64_t context, const IoModel& io) {
  Cost cost;
  const std::vector<bool> all(static_cast<size_t>(c.n_layers), true), none(static_cast<size_t>(c.n_layers), false);
  layers_cost(c, f, m, threads, all, none, 1, context, io, &cost);
  const LinearUse head = head_of(f);
  double overhead = 0;
  const KernelRates& k = m.at_threads(threads).kernel(head.kind);
  cost.add("LM head", linear_seconds(head, k, 1, &overhead, 1));
  cost.add("call overhead", overhead);
  cost.finish(io.overlap);
  return cost;
}

Cost prefill_cost(const model::ModelConfig& c, const ModelFootprint& f, const MachineProfile& m, int threads,
                  int64_t prompt, int64_t chunk, bool replay, const IoModel& io) {
  Cost cost;
  const size_t L = static_cast<size_t>(c.n_layers);
  std::vector<bool> enc(L, true), comp_only(L, false), none(L, false);
  const bool has_replay = replay && f.first_decoder_layer >= 0;
  if (has_replay) {
    for (size_t l = static_cast<size_t>(f.first_decoder_layer); l < L; ++l) enc[l] = false;
    comp_only[static_cast<size_t>(f.first_decoder_layer)] = true;
  }
  for (int64_t s = 0; s < prompt; s += chunk) {
    const int64_t n = std::min(chunk, prompt - s);
    layers_cost(c, f, m, threads, enc, comp_only, n, s, io, &cost);
  }
  if (has_replay) {
    // The decoder layers over the last window_size tokens only.
    std::vector<bool> dec(L, false);
    for (size_t l = static_cast<size_t>(f.first_decoder_layer); l < L; ++l) dec[l] = true;
    const int64_t n = std::min<int64_t>(c.window_size, prompt);
    layers_cost(c, f, m, threads, dec, none, n, prompt - n, io, &cost);
  }
  const LinearUse head = head_of(f);
  double overhead = 0;
  const KernelRates& k = m.at_threads(threads).kernel(head.kind);
  cost.add("LM head", linear_seconds(head, k, 1, &overhead, 1));
  cost.add("call overhead", overhead);
  cost.finish(io.overlap);
  return cost;
}

}  // namespace strata::tools
