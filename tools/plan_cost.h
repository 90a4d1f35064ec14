// The time model of `strata plan`: seconds per decode token and per prompt, from the model's
// footprint (tools/plan_sizes.h) and the measured rates of this machine (tools/probe.h).
//
// Every term is a measured rate times a count taken from the config:
//   linear       calls x (call_us + max(bytes / matvec GB/s, 2 n out in / matmul GFLOP/s at n rows))
//                per kernel kind (fp8, fp4, bf16, f32), with the kernel rates of this build; the
//                matvec and matmul rates also depend on the weight's size (probed on a small and
//                a large one; a short pass from DRAM streams slower)
//   routed MoE   decode: n_active experts per layer; prefill: a chunk of n tokens touches
//                E (1 - (1 - k/E)^n) experts (uniform routing) with n k / touched tokens each, and
//                model/moe.cpp runs each touched expert once over its tokens
//   attention    4 heads entries head_dim per query (entries = window + top-k compressed), at the
//                kernels::sparse_attention rate (prefill: one thread per query, all threads busy)
//   indexer      2 heads dim per visible key per query at index-source layers, at the
//                kernels::index_scores rate, plus a per key-dimension cost (keys laid out in lanes),
//                the decode of the packed keys once per chunk, and top-k selection at its
//                measured ns per score
//   elementwise  mHC sublayers, SwiGLU and activation buffers per token and layer at probed rates
//   engine glue  prefill: tokens x layers x glue_us_prefill; decode: layers x glue_us_decode
//                (tools/probe_engine.cpp): the
//                forward pass's time beyond every other term on a small synthetic checkpoint
//                (routing, gathers, norms, RoPE, query quantisation, copies, in-situ kernel losses)
//   expert I/O   routed expert misses x expert bytes / the disk's sequential read GB/s (O_DIRECT
//                or buffered, as the store reads them)
//   Engram I/O   rows from disk / 4 KiB random-read IOPS at queue depth 32 (rows of a token or chunk
//                are known before the first layer and issued together)
// Compute terms add up; I/O adds to them, or overlaps them when the store prefetches (IoModel::overlap).
// What is not modelled one by one (norms, RoPE, routing, copies, sampling) is inside the engine glue;
// the bench comparison in docs/performance.md shows what is left.
// Source: ARCHITECTURE.md §Attention, §MoE, §Memory math; model/moe.cpp, model/attention.cpp.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "model/config.h"
#include "tools/plan_sizes.h"
#include "tools/probe.h"

namespace strata::tools {

// Where routed experts and Engram rows come from during a run.
struct IoModel {
  double expert_hit_rate = 1.0;  // fraction of routed-expert uses served from RAM
  double expert_read_gbps = 0;   // disk GB/s for expert misses (needed when hit rate < 1)
  bool engram_from_disk = false; // Engram rows read from the disk per use
  double engram_iops = 0;        // 4 KiB random reads per second at depth 32
  bool overlap = false;          // I/O runs under compute (layer-ahead prefetch): max, not sum
};

struct CostTerm {
  std::string name;   // "fp8 linears", "routed experts (fp4)", "attention", "expert reads", ...
  double seconds = 0;
  bool io = false;
};

struct Cost {
  std::vector<CostTerm> terms;
  double compute_s = 0, io_s = 0;
  double total_s = 0;        // compute + io, or max(compute, io) with overlap
  std::string bottleneck;    // the largest term ("disk: expert reads" when I/O dominates under overlap)
  void add(const std::string& name, double s, bool io = false);
  void finish(bool overlap);
};

// One generated token with `context` tokens already in the cache, on `threads` threads.
Cost decode_token_cost(const model::ModelConfig& c, const ModelFootprint& f, const MachineProfile& m, int threads,
                       int64_t context, const IoModel& io);

// A whole prompt of `prompt` tokens prefilled in chunks of `chunk` (exact: every layer for every
// token; replay: encoder layers for every token, the decoder for the last window_size tokens), plus
// the head on the last token: the time to the first token.
Cost prefill_cost(const model::ModelConfig& c, const ModelFootprint& f, const MachineProfile& m, int threads,
                  int64_t prompt, int64_t chunk, bool replay, const IoModel& io);

// Aggregate decode of `streams` sequences batched into one forward per step (issue 14 items 3 and 7),
// predicted from the single-token cost `single` (decode_token_cost) by what each term reads:
//   once per step     non-routed linears and the LM head (dense weights: read once for all rows),
//                     call overhead
//   per distinct pick routed experts and their reads from disk: a step of N tokens touches
//                     E (1 - (1 - k/E)^N) experts per layer (uniform routing), each read once
//   per stream        attention, indexer, mHC, SwiGLU, buffers, engine glue, Engram reads
// Decode linears are bound by the weight bytes at these row counts (the matvec reads each weight
// once for all rows), so their compute beyond the read is left out: an upper bound that holds
// while N is far below the matmul crossover (kMatmulRows).
struct BatchedDecode {
  int streams = 1;
  double step_s = 0;            // one step: one token of every stream
  double aggregate_tok_s = 0;   // streams / step_s
  double per_stream_tok_s = 0;  // 1 / step_s
  double distinct_experts = 1;  // routed experts read per step / those of one token
};
BatchedDecode batched_decode(const Cost& single, const model::ModelConfig& c, const ModelFootprint& f, int streams,
                             bool overlap);

// Measured GFLOP/s of a kernel kind at n rows (log-linear between the probed row counts, constant
// outside them) for a weight of `elems` = out x in values: log-linear in elems between the small and
// the large probed weight, constant outside (0: the large weight's rate).
double matmul_gflops_at(const KernelRates& k, double n, double elems = 0);

}  // namespace strata::tools
