// Importance matrices (llama.cpp's imatrix): for each linear that `strata quantize` can re-quantise,
// the sum over the calibration rows of x^2 per input column and the number of rows counted, so a
// quantiser can weight each column by its mean square activation (kernels/kquant.h
// quantize_row_weighted).
//
// What is counted (llama.cpp tools/imatrix/imatrix.cpp IMatrixCollector::collect_imatrix): every row
// that a matrix multiplies; for routed experts, per expert, only the rows routed to that expert
// (the stacked tensor has one in_sum2 row and one count per expert); for attention wo_a one row per
// (token, output group), as llama.cpp counts a 2-D weight under a 3-D activation. Rows are the
// matrix's real input (model/observer.h linear_input). DECISION: llama.cpp skips dense products of
// fewer than 16 rows; strata counts every row, so counts equal tokens (calibrate runs prompt chunks).
//
// File format, GGUF (llama.cpp's current one, read by llama-quantize --imatrix): general.type =
// "imatrix", imatrix.datasets (string array), imatrix.chunk_count and imatrix.chunk_size (u32); per
// entry, in name order, "<gguf weight name>.in_sum2" F32 ne = [n_cols, n_mats] and
// "<gguf weight name>.counts" F32 ne = [1, n_mats]; names are io/gguf_names.h's
// ("blk.3.ffn_gate_exps.weight", "output.weight"). Other tensors (llama.cpp's optional ".in_sum")
// are ignored on read. The legacy binary format (.dat, before GGUF) is read too: i32 n_entries, then
// per entry i32 name length, name, i32 ncall, i32 nval, f32 values[nval] (mean x^2 times ncall),
// then optionally i32 chunk count, i32 dataset length, dataset. A legacy entry becomes n_mats = 1,
// in_sum2 = values / ncall, count 1 (its shape per expert is unknown until a tensor asks:
// imatrix_weights).
// Thread safety: ImatrixCollector is called from the forward pass's thread only.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "core/status.h"
#include "io/env.h"
#include "model/config.h"
#include "model/observer.h"

namespace strata::tools {

struct ImatrixEntry {
  int64_t n_cols = 0;          // input columns of one matrix
  int64_t n_mats = 1;          // 1, or the routed experts of a stacked tensor
  std::vector<float> in_sum2;  // [n_mats, n_cols]  sum of x^2 over the counted rows
  std::vector<float> counts;   // [n_mats]          rows counted (f32, as llama.cpp stores them)
};

struct Imatrix {
  std::vector<std::string> datasets;            // imatrix.datasets: the calibration text(s)
  uint32_t chunk_count = 0;                     // imatrix.chunk_count: forward chunks run
  uint32_t chunk_size = 0;                      // imatrix.chunk_size: tokens per chunk
  std::map<std::string, ImatrixEntry> entries;  // GGUF weight name -> entry
  bool legacy = false;                          // read from the legacy .dat format
};

// Collects an Imatrix from the forward pass's linear_input reports (model/observer.h). Every routed
// expert tensor gets c.n_experts(layer) matrices; experts never routed to keep count 0.
class ImatrixCollector final : public model::Observer {
 public:
  explicit ImatrixCollector(const model::ModelConfig& c) : c_(c) {}
  void linear_input(std::string_view weight, int layer, int expert, std::span<const float> x, int64_t cols) override;
  // Counts one forward chunk (imatrix.chunk_count).
  void end_chunk() { ++chunks_; }
  // The sums so far (f64 accumulators rounded to f32), with the file's dataset list and chunk size.
  Imatrix result(std::vector<std::string> datasets, uint32_t chunk_size) const;

 private:
  struct Acc {
    std::string gguf;             // GGUF weight name
    int64_t n_cols = 0, n_mats = 1;
    std::vector<double> sum2;     // [n_mats, n_cols]
    std::vector<uint64_t> counts; // [n_mats]
  };
  const model::ModelConfig& c_;
  std::map<std::pair<int, std::string>, Acc> acc_;  // (layer, official weight within the layer)
  uint32_t chunks_ = 0;
};

// Writes `m` as a GGUF imatrix at `path` (atomically; an existing file is replaced, as llama-imatrix
// does). Errors: the writer's (io/gguf_writer.h), kInvalidArgument for an entry whose sizes disagree.
[[nodiscard]] Status write_imatrix(const Imatrix& m, const std::string& path, io::Env* env = nullptr);

// Reads a GGUF imatrix or a legacy .dat one (by its first four bytes). Errors name the file:
// kNotFound / kIOError from opening, kCorruption for bytes that do not parse (a truncated entry, a
// GGUF without the imatrix keys, an .in_sum2 without its .counts or of another shape, a count < 0).
[[nodiscard]] Result<Imatrix> read_imatrix(const std::string& path);

// The importance weights of `tensor` (a GGUF weight name) as quantize_row_weighted takes them:
// [n_mats, n_cols], in_sum2 / count per matrix, 1 for a matrix never counted (llama-quantize's
// load_imatrix). A legacy entry of n_mats * n_cols values is split per matrix. Returns an empty
// vector when the imatrix has no entry for `tensor`. kInvalidArgument naming `path` and `tensor`
// when the entry's columns (or matrices) disagree with the tensor's.
[[nodiscard]] Result<std::vector<float>> imatrix_weights(const Imatrix& m, const std::string& path,
                                                         const std::string& tensor, int64_t n_cols, int64_t n_mats);

}  // namespace strata::tools
