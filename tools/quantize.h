// `strata quantize`: an official-format checkpoint directory -> one GGUF with ggml block formats.
//
// Each selected weight is dequantised exactly to f32 (FP8 [32, 32] blocks, MXFP4 experts, BF16) and
// re-quantised by the reference quantisers (kernels/kquant.h quantize_row_ref, byte-identical to
// ggml's quantize_row_*_ref). Three dials pick the formats:
//   experts  routed experts w1/w2/w3 (MXFP4 in the release), of every layer and DSpark stage;
//   dense    every other FP8-stored linear: attention wq_a/wq_b/wkv/wo_a/wo_b, indexer wq_b, shared
//            experts, Engram wkv, DSpark main_proj;
//   head     the LM head (BF16);
//   engram   the Engram tables (F8_E4M3 [rows, head_dim] + E8M0 scale per 32 in the release): each
//            becomes one block-format tensor [rows, head_dim] without a scale tensor, quantised
//            from the exactly dequantised FP8 values (e4m3 * e8m0), streamed in chunks of rows (the
//            release tables are ~100 GB each). Every row must be whole blocks: a type whose block
//            does not divide head_dim is refused (kInvalidArgument naming the table). The model
//            reads such rows per row from disk as it does FP8 rows (store/engram_rows.h).
// "Keep" (nullopt) writes the official bytes unchanged (FP8/E8M0/E2M1 as ggml I8 listed in
// strata.raw_dtypes, BF16/F32 as themselves), so a keep/keep/keep GGUF runs bit-identically to its
// source. A dense or head matrix whose rows are not a whole number of blocks is kept; a routed-expert
// matrix takes llama.cpp's fallback type instead (tools/quant_choice.h expert_quant_type), and only
// when that does not fit either are all experts kept; each said so in the report (and on_note).
// With an importance matrix (`imatrix`, tools/imatrix.h: llama-imatrix's GGUF or legacy .dat, or
// strata calibrate --imatrix) every matrix going to Q2_K, Q3_K, Q4_K, Q6_K or IQ4_NL is quantised by
// kernels/kquant.h quantize_row_weighted with its entry's in_sum2 / counts per column (per expert
// for the stacked routed experts): the bytes llama-quantize writes with the same imatrix. Q8_0 and
// the Engram tables ignore it. A matrix without an entry is quantised unweighted, with a note; an
// entry whose columns disagree with its matrix is kInvalidArgument naming the file and tensor.
// The GGUF then carries llama-quantize's quantize.imatrix.{file, dataset, entries_count,
// chunks_count}.
// Never quantised: norms, mHC, sinks, router, compressor/indexer BF16 projections and embeddings;
// the Engram tables are copied as two tensors (docs/gguf.md) unless `engram` is set.
// Output: tensor names of docs/gguf.md (io/gguf_names.h), config.json and tokenizer.json embedded as
// strata.config_json / strata.tokenizer_json, written atomically by io::GgufWriter (an existing
// OUT is refused). Memory: one source tensor (f32) and its output at a time.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "core/dtype.h"
#include "core/progress.h"
#include "core/status.h"
#include "io/env.h"
#include "tools/quant_choice.h"

namespace strata::tools {

struct QuantizeOptions {
  std::string src_dir;               // official-format checkpoint directory (config.json, shards, tokenizer.json)
  std::string out_path;              // the GGUF to write (must not exist)
  std::optional<DType> experts;      // block format for routed experts; nullopt = keep
  // With experts kept: write them as ggml MXFP4 (type 39, `--experts mxfp4`), the layout the
  // llama.cpp forks' V4.1 GGUFs use, instead of strata's codes + ".scale" I8 tensors. Lossless:
  // the same codes and scales regrouped into 17-byte blocks (io/ggml_mxfp4.h).
  bool experts_ggml_mxfp4 = false;
  std::optional<DType> dense;        // for the other FP8 linears; nullopt = keep
  std::optional<DType> head;         // for the LM head; nullopt = keep
  std::optional<DType> engram;       // for the Engram tables; nullopt = keep (official FP8 + scales)
  std::string imatrix;               // importance matrix file; empty = none (unweighted quantisers)
  // Most tensor bytes per file (--split-max-size): > 0 writes a gguf-split set
  // OUT-0000N-of-0000M.gguf (io/gguf_split_writer.h); 0 = one file at out_path.
  uint64_t split_max_bytes = 0;
  int n_threads = 0;                 // quantiser threads (0 = one per core)
  bool fsync = true;
  io::Env* env = nullptr;            // null = io::default_env()
  // Set (e.g. by Ctrl-C) -> the conversion stops between tensors / row chunks with kCancelled and
  // removes its temporary file. Null = never.
  const std::atomic<bool>* cancel = nullptr;
  // Called with each note (a matrix kept or given llama.cpp's fallback because of its shape) as it
  // is decided, before any tensor is written; the notes are in the report too.
  std::function<void(const std::string&)> on_note;
};

struct QuantizeReport {
  uint64_t n_tensors = 0;            // GGUF tensors written
  uint64_t n_quantized = 0;          // source matrices re-quantised
  uint64_t n_weighted = 0;           // GGUF tensors quantised with imatrix weights
  uint64_t src_bytes = 0, file_bytes = 0;
  std::vector<std::string> files;    // the files written (one, or the splits in order)
  std::vector<std::string> notes;    // matrices kept because of their shape, and similar
  // Engram tables as written (0 when the checkpoint has none).
  uint64_t engram_table_bytes = 0;   // all tables, scales included (keep) or the block-format tensors
  uint64_t engram_row_bytes = 0;     // bytes of one row (widest table): head_dim + head_dim/32 (keep), or
                                     // the type's bytes for head_dim values (Q4_K at 256: 144)
  int engram_rows_per_token = 0;     // rows one token reads: engram layers x (max_ngram - 1) x heads
  uint64_t engram_bytes_per_token() const { return engram_rows_per_token * engram_row_bytes; }
  double seconds = 0;
};

// parse_quant_choice / quant_choice_name and the dials' rules: tools/quant_choice.h.

// Runs the conversion; progress as ProgressEvent{"quantize", "bytes"} over source bytes.
// Errors: the source's (missing config.json, tensors), kInvalidArgument for an existing out_path or
// an `engram` type whose block does not divide head_dim (naming the table), the imatrix's (a file
// that does not read or parse: read_imatrix; an entry of the wrong width: imatrix_weights), the writer's I/O
// errors, kCancelled when `cancel` was set (no partial file is left in any of these).
[[nodiscard]] Result<QuantizeReport> quantize_checkpoint(const QuantizeOptions& o, const ProgressFn& progress = {});

}  // namespace strata::tools
