// Field access of the K-quant blocks (kernels/kquant.h), element by element: where each quant and
// each sub-block scale sits. Internal to kernels/ (the references and the tests' readers use it).
// Source: ggml-quants.c dequantize_row_q{2,3,4,6}_K, get_scale_min_k4.
#pragma once

#include <cstdint>

#include "kernels/kquant.h"

namespace strata::kernels::kquant {

// Q4_K: the 6-bit scale and min of sub-block j (0..7) of 32 (ggml get_scale_min_k4). Sub-blocks 0..3
// keep theirs in the low 6 bits of bytes j and j + 4; 4..7 in the nibbles of byte j + 4 plus the top
// two bits of bytes j - 4 (scale) and j (min).
inline void q4_K_scale_min(const uint8_t* s, int j, uint8_t* sc, uint8_t* m) {
  if (j < 4) {
    *sc = s[j] & 63;
    *m = s[j + 4] & 63;
  } else {
    *sc = static_cast<uint8_t>((s[j + 4] & 0xF) | ((s[j - 4] >> 6) << 4));
    *m = static_cast<uint8_t>((s[j + 4] >> 4) | ((s[j] >> 6) << 4));
  }
}

// Q3_K: the 6-bit (biased by 32) scale of sub-block j (0..15) of 16: low nibble from byte j (j < 8,
// low) or j - 8 (high), top two bits from byte 8 + j % 4 at bit 2 * (j / 4).
inline int q3_K_scale(const uint8_t* s, int j) {
  const int lo = j < 8 ? (s[j] & 0xF) : (s[j - 8] >> 4);
  return lo | (((s[8 + j % 4] >> (2 * (j / 4))) & 3) << 4);
}

// Q2_K / Q3_K 2-bit field of element e (0..255): each 128 holds four 32-wide planes at bits 0,2,4,6
// of qs[half * 32 + l].
inline int k_low2(const uint8_t* qs, int e) {
  const int half = e / 128, plane = (e % 128) / 32, l = e % 32;
  return (qs[half * 32 + l] >> (2 * plane)) & 3;
}

inline int q2_K_quant(const BlockQ2_K& b, int e) { return k_low2(b.qs, e); }

// Q3_K quant of element e in [-4, 3]: the 2 low bits, minus 4 when the hmask bit is clear. The
// hmask bit of element e is bit (e / 32) of hmask[e % 32].
inline int q3_K_quant(const BlockQ3_K& b, int e) {
  return k_low2(b.qs, e) - (((b.hmask[e % 32] >> (e / 32)) & 1) ? 0 : 4);
}

// Q6_K quant of element e in [-32, 31]: per 128, planes 0/1 in the low nibbles of ql[l] / ql[l + 32],
// planes 2/3 in their high nibbles, the top two bits of plane p at bit 2p of qh[l].
inline int q6_K_quant(const BlockQ6_K& b, int e) {
  const int half = e / 128, plane = (e % 128) / 32, l = e % 32;
  const uint8_t lo = b.ql[half * 64 + l + (plane & 1) * 32];
  const int low4 = (plane < 2) ? (lo & 0xF) : (lo >> 4);
  const int hi2 = (b.qh[half * 32 + l] >> (2 * plane)) & 3;
  return (low4 | (hi2 << 4)) - 32;
}

}  // namespace strata::kernels::kquant
