// ResidentTensors: the tensors a store keeps in RAM for the whole run (the tiered and mmap stores:
// everything but routed experts and Engram tables, ARCHITECTURE.md "Weights"; the resident store:
// those too), each read once with pread into 64-byte-aligned memory on first use. Shared by the resident, tiered and mmap stores. Also the Engram row gather
// that the in-memory stores share.
// Thread safety: get() is not thread-safe (stores call it while the model binds, on one thread).
#pragma once

#include <cstdint>
#include <map>
#include <span>
#include <string>

#include "core/aligned_buffer.h"
#include "core/status.h"
#include "core/tensor.h"
#include "io/checkpoint.h"

namespace strata::store {

class ResidentTensors {
 public:
  // The tensor `name` of `ck`, read on first use. Errors: kNotFound naming the checkpoint and
  // tensor; read errors from io::Checkpoint::read (file, offset).
  Result<TensorView> get(const io::Checkpoint& ck, const std::string& name);
  // Bytes held.
  uint64_t bytes() const { return bytes_; }

 private:
  std::map<std::string, AlignedBytes> loaded_;
  uint64_t bytes_ = 0;
};

// Copies Engram rows `rows` of a table held in memory: weight rows of `row_bytes` and scale rows of
// `scale_bytes` (both u8 storage) into weight_out [rows.size(), row_bytes] and scale_out
// [rows.size(), scale_bytes]. Errors: kInvalidArgument for a row outside [0, n_rows), naming `table`.
Status gather_engram_rows(const std::string& table, const uint8_t* weights, const uint8_t* scales, int64_t n_rows,
                          int64_t row_bytes, int64_t scale_bytes, std::span<const int64_t> rows, uint8_t* weight_out,
                          uint8_t* scale_out);

}  // namespace strata::store
