// ggml's MXFP4 (GGML_TYPE_MXFP4 = 39) <-> the official V4.1 MXFP4 expert layout, losslessly.
//
// ggml (ggml-common.h block_mxfp4; ggml-quants.c dequantize_row_mxfp4): 32 values per 17-byte block
// {uint8 e; uint8 qs[16]}; value j (0..15) is kvalues_mxfp4[qs[j] & 15] and value j+16 is
// kvalues_mxfp4[qs[j] >> 4], times GGML_E8M0_TO_FP32_HALF(e). kvalues_mxfp4 =
// {0,1,2,3,4,6,8,12,0,-1,...,-12} is twice the E2M1 values and the half scale 2^(e-128) undoes
// the 2x, so a ggml block holds the official E2M1 codes and UE8M0 scale unchanged, regrouped.
// Official (docs/gguf.md, ../shared/spec/ARCHITECTURE.md routed experts; kernels/linear.h): a
// weight [out, in/2] of packed E2M1 (element 2i in the low nibble of byte i) and a separate
// UE8M0 scale [out, in/32], one per 32 values of a row. Blocks run in row order in both, so block
// b is official codes [16b, 16b + 16) and scale b.
// `strata quantize --experts mxfp4` writes experts this way; Checkpoint::open_gguf binds such a
// slice as the official two tensors and the stores unpack each expert after reading it.
#pragma once

#include <cstdint>

#include "core/status.h"
#include "io/safetensors.h"

namespace strata::io {

inline constexpr int64_t kMxfp4BlockValues = 32;  // QK_MXFP4
inline constexpr int64_t kMxfp4BlockBytes = 17;   // sizeof(block_mxfp4)

// n_blocks ggml blocks (17 bytes each) -> official codes (16 bytes a block) and scales (1 a block).
// `ggml` must not overlap `scales`; `codes` may be `ggml` itself (block b is read before its 16
// code bytes, which end before block b + 1 starts, are written) but no other overlap. SSE2 where
// the compiler targets it, else eight bytes at a time; equal to ggml_mxfp4_to_official_scalar.
void ggml_mxfp4_to_official(const uint8_t* ggml, int64_t n_blocks, uint8_t* codes, uint8_t* scales);
// The same, a byte at a time: the reference the fast path is tested against.
void ggml_mxfp4_to_official_scalar(const uint8_t* ggml, int64_t n_blocks, uint8_t* codes, uint8_t* scales);
// The inverse: official codes and scales -> n_blocks ggml blocks.
void official_to_ggml_mxfp4(const uint8_t* codes, const uint8_t* scales, int64_t n_blocks, uint8_t* ggml);

// A routed expert's two parts bound from one ggml MXFP4 slice (TensorInfo::Packing): `codes` holds
// the slice's first codes.nbytes bytes and `scales` the rest, as read from the file; afterwards
// they hold the official codes and scales. Checks that the two TensorInfos are such a pair (codes
// then scales, adjacent in one shard, 16 code bytes per scale); kInternal naming the tensors
// otherwise. Regroups in place, with a per-thread scratch buffer of about the scales' size.
[[nodiscard]] Status unpack_ggml_mxfp4(const TensorInfo& codes_info, const TensorInfo& scales_info, uint8_t* codes,
                                       uint8_t* scales);

}  // namespace strata::io
