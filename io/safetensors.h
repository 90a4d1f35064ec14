// safetensors: parse and validate a shard's header (https://github.com/huggingface/safetensors).
//
// Layout: u64 little-endian header length N, N bytes of JSON {name: {dtype, shape, data_offsets}},
// then the data region. Every entry is checked before use: known dtype, non-negative shape whose
// byte size equals the offset span, offsets inside the file. Sizes read from the file are checked
// against the file size before anything is allocated (a fuzzer will try).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/status.h"
#include "core/tensor.h"
#include "io/file.h"

namespace strata::io {

struct TensorInfo {
  std::string name;
  DType dtype = DType::kF32;
  Shape shape;
  int shard = 0;             // index into the checkpoint's shard list
  uint64_t offset = 0;       // absolute byte offset in the shard file
  uint64_t nbytes = 0;
  // kPlain: [offset, offset + nbytes) holds this tensor's bytes. Otherwise a routed expert's codes
  // or scales bound from a ggml MXFP4 slice (io/gguf_checkpoint.cpp): the codes' and the scales'
  // ranges tile that slice, whose 17-byte blocks hold both regrouped, so the file bytes of either
  // part alone are not its values. Checkpoint::read / read_range return the official bytes; a
  // store reading raw bytes (read_stored_range, io_uring) reads both parts and calls
  // io::unpack_ggml_mxfp4.
  enum class Packing : uint8_t { kPlain, kGgmlMxfp4Codes, kGgmlMxfp4Scales };
  Packing packing = Packing::kPlain;
};

// Largest header strata accepts: the safetensors library's own limit (MAX_HEADER_SIZE, 100 MB);
// the real shards' headers are well under 1 MiB.
inline constexpr uint64_t kMaxSafetensorsHeader = 100'000'000;
// Deepest nesting a header may have ({name: {shape: [...]}} is 3; __metadata__ 2).
inline constexpr int kMaxSafetensorsHeaderDepth = 8;

// Parses the header of `file`; entries get shard index `shard`. Errors (kCorruption) name the file
// and, where it applies, the tensor and field.
[[nodiscard]] Result<std::vector<TensorInfo>> read_safetensors_header(const File& file, int shard);

// Parses a header already in memory (`header_json`, data region starting at `data_start`, file of
// `file_size` bytes). `what` names the file in errors.
[[nodiscard]] Result<std::vector<TensorInfo>> parse_safetensors_header(const std::string& what,
                                                                       const std::string& header_json,
                                                                       uint64_t data_start, uint64_t file_size,
                                                                       int shard);

}  // namespace strata::io
