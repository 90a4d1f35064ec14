// strata probe: measures the machine `strata plan` predicts for — cores, SIMD level, RAM, memory
// read bandwidth and strata's own kernel rates per thread count, disk sequential bandwidth and 4 KiB
// random-read IOPS (queue depth 1 and 32, O_DIRECT and buffered) for one directory, and GPUs.
//
// Everything `plan` uses is measured, not looked up: the kernel rates are those of the kernels this
// build runs at the dispatched SIMD level (kernels/linear.h, kernels/attention.h,
// kernels/indexer.h), and the disk numbers come from reading a
// temporary file in the model's directory through io_uring (liburing). A profile is saved as JSON
// with its date so later `plan` calls reuse it (MachineProfile::save / load).
// Thread safety: measure_machine uses the whole machine; run one at a time.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <vector>

#include "core/log.h"
#include "core/progress.h"
#include "core/status.h"
#include "tools/plan_sizes.h"

namespace strata::tools {

// strata's linear kernels at one thread count (kernels/linear.h, dispatched level).
// Matvec rates depend on the row length (the input size): short rows pay more per byte.
inline constexpr std::array<int, 4> kMatvecIn = {256, 1024, 4096, 16384};
inline constexpr std::array<int, 4> kMatmulRows = {8, 32, 128, 512};
// Weight shapes of the two matmul measurements (out x in).
inline constexpr int64_t kLargeMatmulOut = 2048, kLargeMatmulIn = 2048;
inline constexpr int64_t kSmallMatmulOut = 256, kSmallMatmulIn = 512;
// Least weight bytes of the two matvec measurements.
inline constexpr int64_t kSmallMatvecBytes = 1 << 20, kLargeMatvecBytes = 16 << 20;
struct KernelRates {
  // n = 1, weight GB/s (codes + scales) with the weights streamed from DRAM (>= 256 MiB working
  // set), for [out, kMatvecIn[i]] weights of >= kLargeMatvecBytes.
  std::array<double, 4> matvec_gbps{};
  // The same for weights of >= kSmallMatvecBytes, the size of a small model's decode pass (a 1-3 MB
  // projection): a pass that short from DRAM streams slower than a long one (the 8 GB checkpoint's
  // passes 28-34 GB/s against 60 for 16 MiB weights, docs/performance.md, issue 15 item 4).
  // Profiles written before it was measured load with it equal to matvec_gbps.
  std::array<double, 4> matvec_small_gbps{};
  // n = 1: fixed cost of one call (fork-join, activation preparation, split tail), measured on cold
  // 256 x 512 weights called one after another, less their streaming time at matvec_gbps_at (the
  // small-weight rate, for weights that size).
  double call_us = 0;
  // GFLOP/s (2 * n * out * in per call) at n = kMatmulRows[i], cache-resident 2048 x 2048 weight.
  std::array<double, 4> matmul_gflops{};
  // The same on a small kSmallMatmulOut x kSmallMatmulIn weight (a small model's routed expert or
  // projection): fewer weight tiles than threads x 4 and more x packing per FLOP, so slower. Profiles
  // written before it was measured load with it equal to matmul_gflops.
  std::array<double, 4> matmul_small_gflops{};
};
// Weight GB/s of a matvec with rows of `in` values over a weight of `bytes` (log-linear between the
// probed row lengths and between kSmallMatvecBytes and kLargeMatvecBytes, constant outside them;
// matvec_small_gbps all zero: the large rates throughout).
double matvec_gbps_at(const KernelRates& k, int64_t in, double bytes);
// ys at x, log-linear in x between the measured points xs (ascending), constant outside them; at
// least 1e-3 (a rate is never zero).
double log_interp(const std::array<int, 4>& xs, const std::array<double, 4>& ys, double x);

struct ThreadRates {
  int threads = 1;
  double mem_read_gbps = 0;                        // plain read of a 512 MiB buffer, GB/s (1e9)
  std::array<KernelRates, kLinearKinds> kernels{};  // indexed by LinearKind: use kernel(k)
  KernelRates& kernel(LinearKind k) { return kernels[static_cast<size_t>(k)]; }
  const KernelRates& kernel(LinearKind k) const { return kernels[static_cast<size_t>(k)]; }
  // kernels::sparse_attention of one query: time = attn_call_us + 4 heads entries head_dim / rate,
  // fitted from a large (64 heads x 512, 640 entries) and a small (32 x 128, 128 entries) query.
  double attn_gflops = 0, attn_call_us = 0;
  // kernels::index_scores of one query: time = index_call_us + 2 heads dim keys / rate, fitted from
  // 32 heads x 128 against 4096 and against 256 keys.
  double index_gflops = 0, index_call_us = 0;
  // Per key and dimension beyond the FLOPs: laying keys out in lanes (dominant with few heads; fitted
  // from 2 heads against 32), and decoding a packed FP4 key (once per chunk and index layer).
  // Profiles written before these were measured load them as 0.
  double index_key_ns = 0, key_decode_ns = 0;
  // One mHC sublayer's elementwise work per residual value (kernels hc_pre + rms_norm + hc_post over
  // [n, 4, dim]): ns per value at n = 64 (prefill) and n = 1 (decode).
  double sublayer_ns_prefill = 0, sublayer_ns_decode = 0;
  // kernels::swiglu: ns per hidden value at n = 64 rows.
  double swiglu_ns = 0;
  // The engine's time outside every modelled term above (routing and expert-row gathers, norms,
  // RoPE, query quantisation, copies, fork-join tails, in-situ cache misses of the kernels):
  // strata's forward pass run on a small synthetic checkpoint (synth preset "probe", dim 256: not
  // the demo), its measured prefill / decode time less the plan's prediction for that checkpoint,
  // both without the LM head, clamped at 0 (tools/probe_engine.cpp). Both in us per token and
  // layer. Prefill's was first charged per dim value too, but the residual it stands for hardly
  // grows with width: measured on one profile (2026-12-07, docs/performance.md) it was 25-50 us per
  // token and layer from dim 256 to 1024 (probe preset 32.5, 2 GB scaled at dim 384 25.2, demo at
  // 512 41.5, 8 GB scaled at 1024 49.8), where scaling by dim said 32.5 to 130: routing over the
  // experts, the window's attention entries and per-head work do not scale with dim. Decode: one
  // token's layer is fixed costs (pool hand-offs, short ops). 0 when not measured
  // (MachineProfile::engine_note says why). Loading rejects negative or non-finite values; a profile
  // of the older format (glue_ns_prefill, per dim value, measured at dim kProbeEngineDim) loads
  // converted.
  double glue_us_prefill = 0, glue_us_decode = 0;
};

// A directory's storage, read through a temporary file of `file_bytes`.
struct DiskProfile {
  bool measured = false;
  std::string dir;                     // the directory measured (the model's)
  uint64_t device = 0;                 // st_dev of dir (a cached profile applies to the same device)
  uint64_t file_bytes = 0;
  bool direct_supported = false;       // O_DIRECT opens and reads on this filesystem
  bool io_uring = false;               // false: a thread per queue slot issued pread instead
  double seq_gbps_direct = 0;          // 1 MiB reads, queue depth 8, GB/s
  double seq_gbps_buffered = 0;        // 1 MiB reads, queue depth 8, through the page cache (file evicted first)
  double seq_gbps_pread = 0;           // 1 MiB pread in order, one thread (how the resident store loads)
  double seq_gbps_load = 0;            // 8 MiB reads, 4 in flight, O_DIRECT where it works (how the resident
                                       // pass loads, store::ResidentTensors::read_all); 0 in older profiles
  double iops_qd1_direct = 0, iops_qd32_direct = 0;      // 4 KiB random reads
  double iops_qd1_buffered = 0, iops_qd32_buffered = 0;  // 4 KiB random reads, readahead off
  std::string note;                    // why something was not measured
};

struct GpuInfo {
  std::string name;
  uint64_t vram_total = 0, vram_free = 0;  // bytes
};

struct MachineProfile {
  // 3: + the bf16_any kernel; 4: call_us on cold small weights, small-weight matmul, indexer per-key
  // and key-decode costs; 5: the engine glue (strata plan measures again over an older profile;
  // strata bench says why it cannot load one and predicts nothing).
  static constexpr const char* kFormat = "strata-probe/5";
  std::string date;          // when measured, ISO 8601 UTC ("2026-11-29T19:30:00Z")
  std::string hostname, cpu_model, simd, kernel_level;
  int logical_cores = 0, physical_cores = 0;
  uint64_t ram_total = 0;      // bytes (MemTotal, or the cgroup limit when lower)
  uint64_t ram_available = 0;  // bytes (MemAvailable, capped by the cgroup's headroom)
  std::vector<ThreadRates> threads;  // ascending thread counts; threads[0] is 1 thread
  double topk_ns_per_elem = 0;  // kernels::topk_ascending over 4096 scores, k = 512: ns per score
  // std::vector<float> of 4 MiB allocated, zero-filled and freed in a loop (what the forward pass
  // does for its per-layer activations): GB/s of zero-filled bytes, one thread.
  double alloc_gbps = 0;
  DiskProfile disk;
  std::string engine_note;     // why the engine glue was not measured ("" when it was, or not asked)
  std::vector<GpuInfo> gpus;   // empty: no GPU (nvidia-smi absent or found none)

  // The rates measured at the largest thread count <= `t` (threads[0] when t < 1).
  const ThreadRates& at_threads(int t) const;
  // Age in days relative to now (negative or huge when the date does not parse).
  double age_days() const;

  std::string to_json() const;
  [[nodiscard]] static Result<MachineProfile> from_json(const std::string& text, const std::string& what);
  // Writes atomically (temp file + rename), creating the parent directory.
  [[nodiscard]] Status save(const std::string& path) const;
  [[nodiscard]] static Result<MachineProfile> load(const std::string& path);
};

struct ProbeOptions {
  std::string disk_dir;             // directory whose storage to measure; empty = skip the disk
  uint64_t disk_file_bytes = 1ull << 30;  // temporary test file (capped at a quarter of free space)
  int max_threads = 0;              // 0 = every logical core
  double seconds_per_test = 0.25;   // target time of each kernel / memory measurement
  // Interleaved rounds of the memory-bound measurements (read bandwidth, matvec rates, call cost);
  // each value is the median of its rounds, so a burst of load from another process moves it less
  // (the matmuls are measured in the first round only).
  int rounds = 3;
  double disk_seconds = 1.0;        // cap of each random-read test
  bool kernels = true;              // kernel, attention and top-k rates (the slow part)
  // With `kernels`: run the engine on a synthetic checkpoint written to a temporary directory
  // (~0.2 GB under `engine_dir`; empty = the system's temporary directory) for the glue terms.
  bool engine = true;
  std::string engine_dir;
  ProgressFn progress;              // task "probe", unit "steps"
  const Logger* logger = nullptr;

  [[nodiscard]] Status validate() const;
};

// Measures this machine. Errors: bad options (kInvalidArgument); the disk directory missing or not
// writable (kNotFound / kIOError, naming it). A failed sub-measurement (e.g. O_DIRECT refused)
// is recorded in disk.note rather than failing the whole probe.
[[nodiscard]] Result<MachineProfile> measure_machine(const ProbeOptions& o);

// Parts of the probe, exposed for tests.
uint64_t read_meminfo_field(const std::string& meminfo_text, const std::string& field);  // bytes; 0 if absent
std::vector<GpuInfo> parse_nvidia_smi(const std::string& csv);  // "name, total MiB, free MiB" lines
std::vector<GpuInfo> detect_gpus();                              // runs nvidia-smi if present
// The synth preset "probe"'s dim (tools/synth_presets.cpp probe_config), the engine run's width.
inline constexpr int kProbeEngineDim = 256;
// Sets glue_us_prefill / glue_us_decode of every entry of m->threads (whose other rates must be
// measured): writes the synth preset "probe" (~0.2 GB) to a temporary directory under `dir` (empty:
// the system's temporary directory), loads it resident at each thread count, times a `prompt`-token
// prefill and `gen` decode steps (median of `reps` after one warm-up), and subtracts the plan's
// compute prediction (prefill_cost / decode_token_cost), the LM head left out on both sides. The
// directory is removed afterwards. Errors: no temporary directory, the directory not writable, a
// synth or load failure (kIOError / kResourceExhausted naming it), bad arguments (kInvalidArgument).
[[nodiscard]] Status measure_engine_glue(MachineProfile* m, const std::string& dir, int64_t prompt, int64_t gen,
                                         int reps);
[[nodiscard]] Result<DiskProfile> measure_disk(const std::string& dir, uint64_t file_bytes, double seconds,
                                               const Logger* logger);

}  // namespace strata::tools
