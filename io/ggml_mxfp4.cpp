// ggml MXFP4 blocks <-> official MXFP4 codes + scales (see ggml_mxfp4.h).
#include "io/ggml_mxfp4.h"

#include <cstring>
#include <vector>

namespace strata::io {

namespace {

// ggml qs[16] (value j low, j + 16 high) -> official 16 bytes (value 2i low, 2i + 1 high). Values
// 0..15 are qs's low nibbles, so official byte i < 8 pairs the low nibbles of qs[2i], qs[2i + 1];
// values 16..31 are the high nibbles, so byte i >= 8 pairs those of qs[2i - 16], qs[2i - 15].
inline void block_to_official(const uint8_t* qs, uint8_t* out) {
  for (int i = 0; i < 8; ++i) out[i] = static_cast<uint8_t>((qs[2 * i] & 0x0F) | (qs[2 * i + 1] << 4));
  for (int i = 0; i < 8; ++i) out[8 + i] = static_cast<uint8_t>((qs[2 * i] >> 4) | (qs[2 * i + 1] & 0xF0));
}

// The inverse: qs[j] takes value j (nibble j & 1 of official byte j / 2) low and value j + 16
// (nibble j & 1 of byte 8 + j / 2) high.
inline void block_to_ggml(const uint8_t* in, uint8_t* qs) {
  for (int k = 0; k < 8; ++k) {
    qs[2 * k] = static_cast<uint8_t>((in[k] & 0x0F) | (in[8 + k] << 4));
    qs[2 * k + 1] = static_cast<uint8_t>((in[k] >> 4) | (in[8 + k] & 0xF0));
  }
}

}  // namespace

void ggml_mxfp4_to_official(const uint8_t* ggml, int64_t n_blocks, uint8_t* codes, uint8_t* scales) {
  for (int64_t b = 0; b < n_blocks; ++b) {
    const uint8_t* blk = ggml + b * kMxfp4BlockBytes;
    scales[b] = blk[0];
    block_to_official(blk + 1, codes + b * 16);
  }
}

void official_to_ggml_mxfp4(const uint8_t* codes, const uint8_t* scales, int64_t n_blocks, uint8_t* ggml) {
  for (int64_t b = 0; b < n_blocks; ++b) {
    uint8_t* blk = ggml + b * kMxfp4BlockBytes;
    blk[0] = scales[b];
    block_to_ggml(codes + b * 16, blk + 1);
  }
}

Status unpack_ggml_mxfp4(const TensorInfo& ci, const TensorInfo& si, uint8_t* codes, uint8_t* scales) {
  if (ci.packing != TensorInfo::Packing::kGgmlMxfp4Codes || si.packing != TensorInfo::Packing::kGgmlMxfp4Scales ||
      ci.shard != si.shard || si.offset != ci.offset + ci.nbytes || ci.nbytes != 16 * si.nbytes)
    return Internal("tensors '" + ci.name + "' and '" + si.name +
                    "' are not the codes and scales of one ggml MXFP4 slice (io/ggml_mxfp4.h)");
  const int64_t nb = static_cast<int64_t>(si.nbytes);
  // The slice is regrouped, not permuted in place: a copy, then one pass (memory speed).
  thread_local std::vector<uint8_t> scratch;
  scratch.resize(static_cast<size_t>(nb * kMxfp4BlockBytes));
  std::memcpy(scratch.data(), codes, static_cast<size_t>(ci.nbytes));
  std::memcpy(scratch.data() + ci.nbytes, scales, static_cast<size_t>(si.nbytes));
  ggml_mxfp4_to_official(scratch.data(), nb, codes, scales);
  return Status();
}

}  // namespace strata::io
