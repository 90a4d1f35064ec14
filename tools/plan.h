// strata plan: where each part of a V4.1 checkpoint goes on a machine and how fast it will run.
//
// Input: a config (config.json alone is enough: no weights are read), a measured machine
// (tools/probe.h, or its fields overridden: --ram, --vram, --disk-gbps, --iops) and options.
// Output: the footprint (tools/plan_sizes.h), a placement and predicted speeds (tools/plan_cost.h).
// The placement mirrors what store::open_store does with the same RAM (store/open_store.h):
//   budget      the given budget (--ram, the same number as run's --ram-budget: the store gets all of
//               it, KV caches and activations come on top), or the probe's available RAM minus a
//               margin of max(1 GiB, 10%) that KV caches and activations live in (run's default)
//   resident    when the whole checkpoint fits the budget (auto), every tensor in RAM
//   stream      resident tensors (everything but routed experts and Engram tables) + Engram scales
//               (when they take at most 1/16 of the budget) + the Engram row cache, and the rest
//               becomes expert-cache slots; misses stream from disk, Engram rows are read per use
//   mmap        the kernel pages the shards (no prefetch overlap)
// plus what the engine cannot choose itself: the layers whose experts would fit pinned whole
// (`--pin-layers`, encoder layers first: they run for every prompt token even under replay).
// Speeds: prefill tok/s and time to first token at each prompt length, decode tok/s at the context
// reached after the prompt, each with the bottleneck named.
// Expert hit rate under streaming assumes uniform routing (cache slots / experts), which real
// routing beats; PlanOptions::expert_hit_rate overrides it (e.g. measured by `strata bench`).
// Quantised checkpoints (PlanOptions::quant, `plan --quant` or `-m X.gguf`): sizes are exact from the
// tensor shapes and block sizes; the probe measures no block-format kernel, so their linears are
// timed at the fp8 kernel's measured rates, an assumption the output names (Plan::assumed_rates).
// No GPU backend exists yet: a given or probed VRAM size is reported, never used.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "core/status.h"
#include "model/config.h"
#include "store/placement_options.h"
#include "tools/plan_cost.h"
#include "tools/plan_hosts.h"
#include "tools/plan_sizes.h"
#include "tools/probe.h"

namespace strata::tools {

// How often the router picked each routed expert on some text: the counts of a `strata calibrate`
// hot file (tools/calibrate.h), highest first. With it the plan's expert hit rate is the share of
// picks that the experts fitting in the cache receive (a frequency-keeping cache holds the most
// picked ones), instead of the uniform-routing estimate.
struct RoutingCounts {
  std::string source;            // the hot file
  int64_t tokens = 0;            // tokens calibrated
  uint64_t picks = 0;            // all token-expert picks (counts sum to this)
  std::vector<uint64_t> counts;  // per (layer, expert), descending; never-picked experts omitted
  // Share of picks that the `slots` most picked experts receive, in [0, 1].
  double coverage(int64_t slots) const;
};
// Reads the counts of a hot file. Errors name the file and what is wrong.
[[nodiscard]] Result<RoutingCounts> read_routing_counts(const std::string& path);

struct PlanOptions {
  int threads = 0;                  // 0 = physical cores (the engine's default)
  uint64_t ram_bytes = 0;           // RAM strata may use; 0 = the probe's available RAM
  // The store's budget as `strata run --ram-budget` takes it (plan --ram): no margin is taken off it.
  // 0 = from ram_bytes minus the margin. Set, it wins over ram_bytes.
  uint64_t ram_budget_bytes = 0;
  uint64_t vram_bytes = 0;          // 0 = the probe's GPUs (reported only)
  uint64_t reserve_bytes = 0;       // margin outside the store's budget; 0 = max(1 GiB, 10% of the RAM)
  int64_t context = 0;              // tokens the KV cache must hold; 0 = longest prompt + gen
  std::vector<int64_t> prompts = {512, 2048, 8192};  // prompt lengths to predict
  int64_t gen = 128;                // generated tokens (decode is predicted at prompt + gen / 2)
  int64_t prefill_chunk = 2048;     // tokens per prefill forward (runtime::GenerateOptions)
  std::string load_mode = "auto";   // auto | resident | stream
  bool replay = false;              // bounded-replay prefill (encoder for all tokens)
  double expert_hit_rate = -1;      // < 0: from `routing` when given, else the uniform-routing estimate
  const RoutingCounts* routing = nullptr;  // measured routing (strata plan --hot); may be null
  double disk_gbps = 0;             // > 0 overrides the probed sequential read GB/s
  double iops = 0;                  // > 0 overrides the probed 4 KiB random-read IOPS at depth 32
  // Streamed expert reads: kAuto (the store's default) = O_DIRECT when the probed disk takes it.
  store::ExpertIo expert_io = store::ExpertIo::kAuto;
  bool overlap_io = true;           // the tiered store prefetches a layer ahead (I/O under compute)
  // --parallel N,...: aggregate decode of N concurrent streams batched per step, at the first
  // prompt length's decode context (tools/plan_cost.h batched_decode). Empty: none.
  std::vector<int> parallel;
  // --hosts FILE: expert parallelism over these machines, at the first prompt length's decode
  // context (tools/plan_hosts.h). Empty: none.
  std::vector<Host> hosts;
  // `strata quantize`'s dials (plan --quant experts=q4_k,engram=q4_k,...; `strata plan -m` a GGUF
  // reads them from the file's tensor types): every component sized as quantize writes it. All keep
  // = the official checkpoint (FP8 + E8M0, MXFP4, BF16).
  QuantChoice quant;
  // The checkpoint is a GGUF (set by `plan -m X.gguf`; --quant implies it): routed experts are
  // stacked per matrix, so each is read in up to six spans (expert_slot_bytes).
  bool gguf_layout = false;

  [[nodiscard]] Status validate() const;
};

struct Placement {
  std::string load_mode;         // "resident" or "stream"
  bool fits = true;              // false: not even the resident set fits (why in `notes`)
  uint64_t budget_bytes = 0;     // RAM strata may use (after the reserve)
  uint64_t reserve_bytes = 0;    // the margin (KV and activations live here); 0 with a given budget
  bool budget_given = false;     // budget_bytes is PlanOptions::ram_budget_bytes (plan --ram), margin-free
  uint64_t dense_bytes = 0;      // resident tensors as stored (incl. DSpark's dense part)
  uint64_t dense_ram_bytes = 0;  // ... once loaded (+ attn.wo_a's copies outside the store)
  uint64_t engram_ram_bytes = 0; // stream: Engram scales (if resident) + row cache
  uint64_t kv_bytes = 0;         // packed KV at `context`
  uint64_t scratch_bytes = 0;    // activations of one prefill chunk (estimate)
  uint64_t expert_cache_bytes = 0;
  int64_t expert_slots = 0;      // experts the cache holds
  int64_t total_experts = 0;     // backbone routed experts
  int pinned_layers = 0;         // suggested --pin-layers 0..pinned_layers-1 (whole layers that fit)
  double expert_hit_rate = 1;
  bool engram_resident = false;  // Engram tables in RAM (resident mode) rather than read per use
  bool expert_direct_io = false; // stream: expert misses read with O_DIRECT (else through the page cache)
  uint64_t engram_bytes = 0;
  uint64_t vram_bytes = 0;       // reported, unused (no GPU backend)
  int64_t context = 0;
  // A cold load: the resident tensors at the disk's sequential rate as the resident pass reads them
  // (O_DIRECT where the probed file system takes it, else buffered), plus the first touch of the
  // memory they fill (alloc_gbps); process start, validation and binding are not modelled. 0: no
  // disk numbers. Source: issue 15 item 4; the pass is store::ResidentTensors::read_all.
  double load_cold_s = 0;
  // Weight bytes one decode token reads (the first prompt length's context is irrelevant: weights
  // only, no KV): from RAM (resident tensors, cached experts, Engram rows when resident) and from disk
  // (expert misses at the hit rate, Engram rows when on disk: the rows' bytes, before 4 KiB rounding).
  double decode_ram_bytes = 0;
  double decode_disk_bytes = 0;
  std::vector<std::string> streams;  // what is read from disk during a run
  std::vector<std::string> notes;
};

struct SpeedPrediction {
  int64_t prompt = 0;
  double prefill_tok_s = 0;
  double ttft_s = 0;
  std::string prefill_bottleneck;
  double decode_tok_s = 0;      // at context prompt + gen / 2
  std::string decode_bottleneck;
  // The prediction needs disk rates the profile lacks (no `strata probe -m DIR`, no --disk-gbps /
  // --iops): speeds are unknown (printed "n/a", JSON null) and the bottleneck says so.
  bool disk_unknown = false;
  Cost prefill, decode;
};

struct Plan {
  std::string config_source;    // the file the config came from
  model::ModelConfig config;
  ModelFootprint footprint;
  MachineProfile machine;       // as used (after overrides)
  PlanOptions options;
  int threads = 0;
  Placement placement;
  std::vector<SpeedPrediction> speeds;
  std::vector<BatchedDecode> batched;  // one per PlanOptions::parallel entry
  std::vector<ExpertParallelPlan> expert_parallel;  // with PlanOptions::hosts: 1..N of them (first n hosts)
  // Rates the profile does not measure and the prediction assumes (block-format kernels: the fp8
  // kernel's measured rates stand in); each is printed, and the speeds are labelled "assumed rate".
  std::vector<std::string> assumed_rates;
};

// Builds the plan. Errors: bad options (kInvalidArgument naming the flag), a config that fails
// validation.
[[nodiscard]] Result<Plan> make_plan(const model::ModelConfig& c, const VisionShape& vision, const MachineProfile& m,
                                     const PlanOptions& o, const std::string& config_source);

// The plan as text (what `strata plan` prints) and as JSON (`--json`).
std::string plan_text(const Plan& p);
std::string plan_json(const Plan& p);

// "475.2 GiB", "890 B", "12.4 KiB": binary units, 1 decimal above 1 KiB.
std::string format_bytes(double bytes);

// Parses "24G", "24GiB", "512M", "1.5T", "1000000" (bytes); binary multiples (G = GiB).
// kInvalidArgument naming `what` otherwise.
[[nodiscard]] Result<uint64_t> parse_size(const std::string& text, const std::string& what);

}  // namespace strata::tools
