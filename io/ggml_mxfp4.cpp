// ggml MXFP4 blocks <-> official MXFP4 codes + scales (see ggml_mxfp4.h).
#include "io/ggml_mxfp4.h"

#include <bit>
#include <cstring>
#include <vector>

#if defined(__SSE2__)
#include <emmintrin.h>
#endif

namespace strata::io {

namespace {

// ggml qs[16] (value j low, j + 16 high) -> official 16 bytes (value 2i low, 2i + 1 high). Values
// 0..15 are qs's low nibbles, so official byte i < 8 pairs the low nibbles of qs[2i], qs[2i + 1];
// values 16..31 are the high nibbles, so byte i >= 8 pairs those of qs[2i - 16], qs[2i - 15].
inline void block_to_official(const uint8_t* qs, uint8_t* out) {
  for (int i = 0; i < 8; ++i) out[i] = static_cast<uint8_t>((qs[2 * i] & 0x0F) | (qs[2 * i + 1] << 4));
  for (int i = 0; i < 8; ++i) out[8 + i] = static_cast<uint8_t>((qs[2 * i] >> 4) | (qs[2 * i + 1] & 0xF0));
}

// The same on 16-bit lanes w = qs[2i] | qs[2i + 1] << 8: a = w & 0x0F0F holds both low nibbles,
// and (a | a >> 4) has them paired in its low byte; b = (w >> 4) & 0x0F0F does the high nibbles.
// Narrowing the lanes to bytes gives out[0..8) from a and out[8..16) from b.
#if defined(__SSE2__)
inline void block_to_official_fast(const uint8_t* qs, uint8_t* out) {
  const __m128i nib = _mm_set1_epi16(0x0F0F);
  const __m128i low_byte = _mm_set1_epi16(0x00FF);
  const __m128i w = _mm_loadu_si128(reinterpret_cast<const __m128i*>(qs));
  const __m128i a = _mm_and_si128(w, nib);
  const __m128i b = _mm_and_si128(_mm_srli_epi16(w, 4), nib);
  const __m128i lo = _mm_and_si128(_mm_or_si128(a, _mm_srli_epi16(a, 4)), low_byte);
  const __m128i hi = _mm_and_si128(_mm_or_si128(b, _mm_srli_epi16(b, 4)), low_byte);
  _mm_storeu_si128(reinterpret_cast<__m128i*>(out), _mm_packus_epi16(lo, hi));
}
#else
// Four 16-bit lanes of a little-endian word -> their four paired bytes (see above), compacted.
inline uint32_t pair_nibbles(uint64_t a) {
  uint64_t t = (a | (a >> 4)) & 0x00FF00FF00FF00FFull;
  t = (t | (t >> 8)) & 0x0000FFFF0000FFFFull;
  return static_cast<uint32_t>(t | (t >> 16));
}

inline void block_to_official_fast(const uint8_t* qs, uint8_t* out) {
  constexpr uint64_t kNib = 0x0F0F0F0F0F0F0F0Full;
  uint64_t w[2];
  std::memcpy(w, qs, 16);  // loaded before any store: `out` may overlap `qs`
  uint32_t r[4];
  for (int h = 0; h < 2; ++h) {
    r[h] = pair_nibbles(w[h] & kNib);
    r[2 + h] = pair_nibbles((w[h] >> 4) & kNib);
  }
  if constexpr (std::endian::native != std::endian::little) {
    block_to_official(reinterpret_cast<const uint8_t*>(w), out);
    return;
  }
  std::memcpy(out, r, 16);
}
#endif

// The inverse: qs[j] takes value j (nibble j & 1 of official byte j / 2) low and value j + 16
// (nibble j & 1 of byte 8 + j / 2) high.
inline void block_to_ggml(const uint8_t* in, uint8_t* qs) {
  for (int k = 0; k < 8; ++k) {
    qs[2 * k] = static_cast<uint8_t>((in[k] & 0x0F) | (in[8 + k] << 4));
    qs[2 * k + 1] = static_cast<uint8_t>((in[k] >> 4) | (in[8 + k] & 0xF0));
  }
}

}  // namespace

void ggml_mxfp4_to_official_scalar(const uint8_t* ggml, int64_t n_blocks, uint8_t* codes, uint8_t* scales) {
  for (int64_t b = 0; b < n_blocks; ++b) {
    const uint8_t* blk = ggml + b * kMxfp4BlockBytes;
    scales[b] = blk[0];
    block_to_official(blk + 1, codes + b * 16);
  }
}

void ggml_mxfp4_to_official(const uint8_t* ggml, int64_t n_blocks, uint8_t* codes, uint8_t* scales) {
  for (int64_t b = 0; b < n_blocks; ++b) {
    const uint8_t* blk = ggml + b * kMxfp4BlockBytes;
    scales[b] = blk[0];
    block_to_official_fast(blk + 1, codes + b * 16);
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
  // In place, so the slice is not copied whole (a second pass over memory): blocks wholly inside
  // `codes` are regrouped where they lie (ggml_mxfp4_to_official allows codes == ggml). The rest
  // straddle or sit in `scales`, which the scales overwrite, so they are copied out first.
  const int64_t in_codes = static_cast<int64_t>(ci.nbytes) / kMxfp4BlockBytes;
  const uint64_t tail_from = static_cast<uint64_t>(in_codes * kMxfp4BlockBytes);
  thread_local std::vector<uint8_t> tail;
  tail.resize(static_cast<size_t>((nb - in_codes) * kMxfp4BlockBytes));
  std::memcpy(tail.data(), codes + tail_from, static_cast<size_t>(ci.nbytes - tail_from));
  std::memcpy(tail.data() + (ci.nbytes - tail_from), scales, static_cast<size_t>(si.nbytes));
  ggml_mxfp4_to_official(codes, in_codes, codes, scales);
  ggml_mxfp4_to_official(tail.data(), nb - in_codes, codes + in_codes * 16, scales + in_codes);
  return Status();
}

}  // namespace strata::io
