// Byte generators for `strata synth`: the random contents of each tensor, row by row.
//
// Every value is a pure function of (tensor key, row, position): each row has its own counter-based
// stream (splitmix64 keyed by the tensor's key and the row index), so rows can be generated in any
// order, on any thread, and the bytes never depend on the thread count or chunking.
// Normal variates are drawn by inverse-CDF lookup: 16 random bits pick one of 65,536 equal-probability
// quantiles of N(0, 1) (tails cut at +-4.32 sigma). That is plenty for weights stored in 8 bits or
// fewer, and ~10x cheaper than Box-Muller, which matters for a 48 GB benchmark checkpoint.
// Quantised weights are drawn directly as codes: per block the UE8M0 scale is 2^(e0 + d), where e0 is
// set by the tensor's std (the exponent a typical block amax would give) and d in {0, 1} is drawn per
// block (d = 1 for ~1/4 of the blocks, standing in for blocks with an outlier); the codes come from a
// table mapping 16 random bits to round(N(0, (std / scale)^2)) on the E4M3 or E2M1 grid (saturating),
// so dequantised values follow N(0, std^2) up to the format's rounding, as make_tiny_v41.py's
// quantised master weights do. The scale tensor recomputes the same d from the same key.
// Thread safety: FillTables is immutable after build(); fill_rows may run on many threads at once.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "tools/synth.h"

namespace strata::tools {

// Code tables for every quantised tensor of a plan, plus the normal quantile table.
class FillTables {
 public:
  // Builds the tables `tensors` need (one pair per distinct (format, std) combination).
  static FillTables build(std::span<const SynthTensor> tensors);

  // [65536] f32: the (u + 0.5) / 65536 quantile of N(0, 1).
  const float* normal_quantiles() const { return normal_.data(); }

  // Tables of tensor i (kFp8* / kFp4* only): codes for block offset d = 0 and d = 1, and e0.
  struct CodeTables {
    std::vector<uint8_t> d0, d1;  // [65536] codes
    int e0 = 0;                   // base scale exponent: scale = 2^(e0 + d)
  };
  const CodeTables& codes_of(size_t tensor_index) const { return codes_[static_cast<size_t>(table_of_[tensor_index])]; }

 private:
  std::vector<float> normal_;
  std::vector<CodeTables> codes_;
  std::vector<int> table_of_;  // per tensor: index into codes_ (-1 for kNormal)
};

// Rows of a tensor: rank-2 tensors have shape[0] rows, rank-1 tensors one row.
int64_t fill_n_rows(const SynthTensor& t);
// Stored bytes per row.
uint64_t fill_row_bytes(const SynthTensor& t);

// Writes rows [row_begin, row_end) of tensor `tensor_index` (stored bytes, row-major) into `out`
// (fill_row_bytes * (row_end - row_begin) bytes). Cannot fail; REQUIRES a valid row range.
void fill_rows(const SynthTensor& t, size_t tensor_index, const FillTables& tables, int64_t row_begin, int64_t row_end,
               uint8_t* out);

// Inverse of the standard normal CDF, |error| < 1e-12 for p in [1e-300, 1 - 1e-16]; used to build the
// quantile table. REQUIRES 0 < p < 1.
double normal_quantile(double p);

// The generator key of a name under `seed` (FNV-1a of the name mixed with the seed).
uint64_t fill_key(uint64_t seed, std::string_view name);

}  // namespace strata::tools
