// strata bench: end-to-end speed of a checkpoint — prefill tok/s, time to first token and decode
// tok/s at several prompt lengths, cold (the checkpoint's pages evicted from the page cache first)
// and warm (repetitions after a warm-up, median and spread), with the counters that explain them
// and everything needed to reproduce the run (git commit, checkpoint identity, options, machine).
//
// A run: for each prompt length P, a fresh session prefills P tokens in chunks (as
// runtime::Generator does), samples greedily, then decodes `gen` tokens one at a time, ignoring end
// of sequence so every repetition does the same work. Prompt tokens are the given text tokenized and
// repeated to length, or (no text) seeded pseudo-random ids of ordinary tokens.
// Cold: the model is loaded after evicting the checkpoint's pages (posix_fadvise DONTNEED per file,
// then /proc/sys/vm/drop_caches where permitted if pages remain, else a fresh copy of the checkpoint
// written around the page cache), and each prompt length runs once. The fraction of the checkpoint in
// the page cache (mincore) is recorded before and after eviction.
// Warm: the model is loaded again (from the page cache) and each prompt length runs `reps` times
// after `warmup` unrecorded runs.
// Thread safety: runs one model at a time; uses the whole machine.
#pragma once

#include <atomic>
#include <cstdint>
#include <string>
#include <vector>

#include "core/log.h"
#include "core/progress.h"
#include "core/status.h"
#include "model/pipeline_part.h"
#include "runtime/speculation.h"
#include "store/placement_options.h"

namespace strata::model {
class ExpertPeers;
class Model;
}

namespace strata::tools {

struct BenchOptions {
  std::string model_dir;
  std::vector<int64_t> prompts = {512, 2048, 8192};  // prompt lengths in tokens
  int64_t gen = 128;                 // tokens generated per run
  int reps = 3;                      // recorded warm repetitions per prompt length
  int warmup = 1;                    // unrecorded warm runs before them
  int threads = 0;                   // 0 = physical cores
  int64_t prefill_chunk = 2048;      // tokens per prefill forward
  // --parallel 1,2,4,8: after the warm points, N concurrent greedy streams of the first prompt
  // length through one engine, per N (tools/bench_parallel.h). Empty: none.
  std::vector<int> parallel;
  int64_t batch_tokens = 2048;       // the engine's step budget in those runs (runtime::EngineOptions)
  std::string load_mode = "resident";  // auto | resident | stream | mmap (store::PlacementOptions)
  uint64_t ram_budget = 0;           // store RAM budget in bytes; 0 = available minus the margin
  store::ExpertIo expert_io = store::ExpertIo::kAuto;  // stream: expert reads (store::PlacementOptions)
  std::string cold = "auto";         // auto | fadvise | drop-caches | copy | none (skip the cold run)
  std::string text_file;             // prompt text (tokenized and repeated); empty = random ids
  uint64_t seed = 0;                 // random prompt ids
  // Speculative decoding of the runs (--spec ...). With a mode other than none every recorded warm
  // repetition is preceded by the same run with --spec none, and each point reports the pairs'
  // decode ratio (speculation / plain, measured side by side).
  runtime::SpecOptions spec;
  // With spec.mode kDraft: the draft checkpoint (--draft-model), loaded as the target is (load mode,
  // budget) after runtime::check_draft_checkpoint; spec.draft_model is set by run_bench.
  std::string draft_model_dir;
  // Expert parallelism (`bench --mpi`, model/expert_peers.h): every load of the target routes the
  // routed experts that peer ranks own through this; mpi_ranks (the job's size, recorded) > 1 then.
  // Null / 0: one process. Not owned.
  model::ExpertPeers* expert_peers = nullptr;
  // Pipeline parallelism (`bench --mpi-pipeline`, model/pipeline_part.h): rank 0's layers and the
  // stages after them, for every load of the target. Null: every layer here. Not owned.
  const model::PipelinePart* pipeline = nullptr;
  int mpi_ranks = 0;
  std::string git_commit;            // recorded as given (the CLI reads the source tree)
  std::string command;               // the command line, recorded as given
  ProgressFn progress;               // "load" (layers), "prefill" (tokens), "bench" (runs)
  const Logger* logger = nullptr;
  // May be null (not owned). Once set (`strata bench`'s Ctrl-C), run_bench stops at the next run,
  // prefill chunk, token or 8 MiB block of the cold copy and returns kCancelled; the cold copy, if
  // one was made, is removed on the way out (it is the checkpoint's size).
  const std::atomic<bool>* cancel = nullptr;

  [[nodiscard]] Status validate() const;
};

// One run of one prompt length.
struct BenchRun {
  int64_t prompt = 0, gen = 0;
  double prefill_s = 0;     // all prefill chunks
  double ttft_s = 0;        // prefill + sampling the first token
  double decode_s = 0;      // the gen - 1 decode forwards (+ sampling)
  double prefill_tok_s() const { return prefill_s > 0 ? static_cast<double>(prompt) / prefill_s : 0; }
  double decode_tok_s() const { return decode_s > 0 && gen > 1 ? static_cast<double>(gen - 1) / decode_s : 0; }
  // Counters over the run.
  uint64_t os_read_bytes = 0;  // bytes the kernel read from storage for this process (/proc/self/io)
  uint64_t major_faults = 0;
  uint64_t kv_bytes = 0;       // the session's cache after the run
  runtime::SpecStats spec;     // speculation in this run (spec.active false: none)
  // The weight store's counters over the run (store::PlacementStats).
  uint64_t expert_acquires = 0, expert_hits = 0, expert_loads = 0;
  uint64_t prefill_expert_acquires = 0, prefill_expert_hits = 0;  // of which during prefill
  // Expert cache hit rate of the decode steps alone (1 when nothing was acquired: all resident).
  double decode_hit_rate() const {
    const uint64_t a = expert_acquires - prefill_expert_acquires;
    return a ? static_cast<double>(expert_hits - prefill_expert_hits) / static_cast<double>(a) : 1.0;
  }
  double prefill_hit_rate() const {
    return prefill_expert_acquires ? static_cast<double>(prefill_expert_hits) / static_cast<double>(prefill_expert_acquires)
                                   : 1.0;
  }
  uint64_t store_bytes_read = 0;   // expert + Engram bytes the store read from disk
  uint64_t engram_rows_read = 0;
  double io_wait_s = 0;            // time the forward pass was blocked on reads
  uint64_t prefetch_issued = 0, prefetch_used = 0;
  // Prefetches an earlier run left outstanding that this run could use (runs after the first share
  // the loaded model), and the hit rate used / (outstanding at start + issued) in [0, 1]: the one
  // definition, store::PlacementStats::prefetch_hit_rate, as `strata run --stats` prints it.
  uint64_t prefetch_outstanding_at_start = 0;
  double prefetch_hit_rate = 0;
  // Where the forward passes spent their time (model::ForwardProfile): MoE sublayers (router,
  // routed + shared experts, waits for expert reads) and Engram sublayers (incl. row reads), seconds.
  double prefill_moe_s = 0, prefill_engram_s = 0;
  double decode_moe_s = 0, decode_engram_s = 0;
  // Attention sublayers, final norm + LM head, and whole forward() calls (model::ForwardProfile),
  // seconds; forward minus the named parts is embedding, mHC, norms and buffers.
  double prefill_attention_s = 0, prefill_head_s = 0, prefill_forward_s = 0;
  double decode_attention_s = 0, decode_head_s = 0, decode_forward_s = 0;
};

// Median / min / max of a quantity over runs.
struct Spread {
  double median = 0, min = 0, max = 0;
};
Spread spread_of(std::vector<double> v);

// One `--parallel` measurement at N streams (tools/bench_parallel.h).
struct ParallelPoint {
  int streams = 0;
  int64_t prompt = 0, gen = 0;  // tokens per stream
  // Decode tokens of every stream / wall time of the steps that ran decode tokens only (after the
  // last prompt chunk), tokens per second.
  double aggregate_decode_tok_s = 0;
  Spread stream_decode_tok_s;   // per stream: (gen - 1) / its first token -> end
  double ttft_p50_s = 0, ttft_p95_s = 0;  // over streams, from the common start
  double wall_s = 0;            // the whole run
  int64_t steps = 0;            // engine steps (forwards)
};

struct BenchPoint {
  int64_t prompt = 0;
  bool cold = false;
  std::vector<BenchRun> runs;
  Spread prefill_tok_s, ttft_s, decode_tok_s;
  // With --spec (warm points): the --spec none run before each recorded one, and the per-pair
  // ratio of decode tok/s (speculation / plain).
  std::vector<BenchRun> plain_runs;
  Spread plain_decode_tok_s, spec_over_plain;
};

// What identifies a checkpoint: a 64-bit FNV-1a over config.json and the sorted tensor index
// (name, dtype, shape, bytes), plus sizes.
struct CheckpointId {
  std::string dir;
  std::string hash;      // 16 hex digits
  uint64_t tensor_bytes = 0;
  uint64_t file_bytes = 0;
  size_t n_tensors = 0;
  int n_shards = 0;
};
[[nodiscard]] Result<CheckpointId> checkpoint_identity(const std::string& dir);

struct BenchReport {
  std::string date, git_commit, command, hostname, cpu_model, simd;
  BenchOptions options;  // progress / logger dropped
  int threads = 0;
  CheckpointId checkpoint;
  // Cold start.
  std::string cold_method;        // what evicted the pages ("fadvise", "drop-caches", "copy", "none")
  double page_cache_before = 0;   // fraction of the checkpoint's bytes in the page cache before eviction
  double page_cache_after = 0;    // ... after eviction, just before the cold load
  double load_cold_s = 0, load_warm_s = 0;
  uint64_t load_cold_read_bytes = 0;  // storage bytes read by the cold load
  std::string store;              // the weight store as it describes itself
  store::ExpertReads expert_reads = store::ExpertReads::kNotStreamed;  // how that store read routed experts
  uint64_t peak_rss_bytes = 0;
  uint64_t draft_shared_bytes = 0;  // --spec draft: bytes the draft took from the target (not loaded twice)
  std::vector<BenchPoint> points;  // cold points first, then warm, each ascending by prompt
  std::vector<ParallelPoint> parallel;  // --parallel, in the order given
  std::vector<std::string> notes;

  std::string to_json() const;
  std::string to_text() const;
};

// `n` prompt ids: `text_ids` repeated to length, or (text_ids empty) ids drawn uniformly from
// [100, id_limit) by a xorshift generator seeded with `seed` (the same ids on every machine).
std::vector<int32_t> bench_prompt(const std::vector<int32_t>& text_ids, int64_t n, uint64_t seed, int32_t id_limit);

// One timed run on a loaded model: `prompt` prefilled in chunks of `chunk` tokens through a fresh
// runtime::Session (logits of the last position only), the first token sampled greedily, then gen - 1
// greedy decode steps; the counters of the store and the forward profile over the run. Errors: those
// of Session::append (e.g. a prompt beyond the model's context).
// `spec`: speculative decoding of the generation (runtime/speculation.h; default none). `cancel`
// (may be null): once set, the run stops at its next prefill chunk or token with kCancelled.
[[nodiscard]] Result<BenchRun> run_once(model::Model& m, const std::vector<int32_t>& prompt, int64_t gen, int64_t chunk,
                                        const ProgressFn& progress = {}, const runtime::SpecOptions& spec = {},
                                        const std::atomic<bool>* cancel = nullptr);

// Runs the benchmark. Errors: bad options (kInvalidArgument), load failures, a prompt + gen beyond
// the model's context (kInvalidArgument, before any run).
[[nodiscard]] Result<BenchReport> run_bench(const BenchOptions& o);

// Page cache of a checkpoint (every regular file of a directory; a GGUF file, or every file of its
// gguf-split set), exposed for tests.
// Fraction of its bytes resident in the page cache (mincore), in [0, 1].
[[nodiscard]] Result<double> page_cache_fraction(const std::string& dir);
// Asks the kernel to drop its clean pages (posix_fadvise DONTNEED per file).
[[nodiscard]] Status evict_page_cache(const std::string& dir);
// sync + echo 1 > /proc/sys/vm/drop_caches: kIOError (EACCES / EROFS) when not permitted.
[[nodiscard]] Status drop_all_page_caches();
// Copies every file of checkpoint `src` (as above) into the new directory `dst`, writing around the page cache
// (O_DIRECT where allowed, else fdatasync + DONTNEED), so reading `dst` is a cold read.
[[nodiscard]] Status copy_uncached(const std::string& src, const std::string& dst,
                                   const std::atomic<bool>* cancel = nullptr);

}  // namespace strata::tools
