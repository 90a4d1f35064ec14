// The interleaved Engram row layout of ds4 / ik_llama.cpp GGUFs ("e4m3_e8m0_32_row264").
//
// Those files store each Engram table as one ggml I8 tensor ne = [head_dim + head_dim / 32, rows]:
// each row is the head_dim E4M3 bytes, then its head_dim / 32 E8M0 scales (264 bytes at the release's
// head_dim 256), copied losslessly from the official two tensors. io::Checkpoint::open_gguf shows it as
// "layers.L.engram.embed.weight" U8 [rows, row_bytes] with no ".scale" tensor; the stores read one
// row in one read and split it into the weight and scale outputs, so the model sees the same bytes
// as from the official layout (docs/gguf.md "GGUFs from ik_llama.cpp and ds4").
// Source: ds4 gguf-tools/deepseek41_validate_gguf.py (row = 256 source bytes then 8 scale bytes).
#pragma once

#include <cstdint>

#include "core/dtype.h"
#include "io/safetensors.h"

namespace strata::store {

// Whether `t` is an interleaved Engram table: U8 [rows, W] with W = 33 * k (k >= 1); then
// *head_dim = 32 * k and *n_scales = k.
inline bool engram_interleaved(const io::TensorInfo& t, int64_t* head_dim, int64_t* n_scales) {
  if (t.dtype != DType::kU8 || t.shape.rank != 2 || t.shape[1] <= 0 || t.shape[1] % 33 != 0) return false;
  *n_scales = t.shape[1] / 33;
  *head_dim = *n_scales * 32;
  return true;
}

}  // namespace strata::store
