// The Q8_K integer decode dot with AVX2 + F16C (kernels/kquant_q8k.h): bit-identical to
// kernels::ref::dot_q8k, for CPUs without AVX-512 (the AVX-512 twin is x86/kquant_q8k_avx512.cpp).
//
// Per super-block and row, the weight quants (u8) times x's Q8_K quants (s8) are summed in pairs by
// VPMADDUBSW (no saturation: |q * xq| * 2 <= 63 * 127 * 2 < 2^15), then VPMADDWD with the sub-block
// scales as int16 gives int32 lanes; the mins go through VPMADDWD with x's bsums. This is the integer
// work of ggml-cpu's AVX2 ggml_vec_dot_{q4,q2,q6,q3}_K_q8_K (arch/x86/quants.c), but the int32 lanes
// are reduced to the block's exact S and M instead of being scaled into f32 lanes: integer sums are
// exact, so the lane layout does not matter, and the f32 combination of the definition then runs on
// four rows at once in the lanes of an xmm (the reference's IEEE operations per row, in block order;
// -ffp-contract=off keeps them unfused). Each 32-byte weight vector lines up with 32 consecutive
// elements of x as stored, so x needs no shuffles.
// Q6_K and Q3_K have signed quants: the kernel sums q + bias (32, 4; unsigned, as VPMADDUBSW needs)
// and subtracts bias * sum_i sc_i * bsums_i in int32, exactly as ggml's AVX2 kernels do, so S is the
// reference's S.
// Each block of a group of four rows prefetches the same block of the next four rows: decode reads
// four interleaved streams, which the hardware prefetchers alone kept at 45-65% of the read
// bandwidth (1 thread, bench/ggml_peer.sh --kquant --level avx2); with the prefetch 70-120%
// (docs/performance.md), 1.3-2x ggml's haswell kernels.
// Per the kernels/x86 rule (common.h) this file uses no std:: templates, and shared inline helpers only
// from headers that keep them in an anonymous namespace (common.h, kquant_q8k_common.h).
#include <immintrin.h>

#include "kernels/x86/common.h"
#include "kernels/x86/kquant_q8k_common.h"
#include "kernels/x86/kquant_x86.h"

namespace strata::kernels::x86 {
namespace {

inline __m256i ld256(const void* p) { return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)); }
inline __m128i ld128(const void* p) { return _mm_loadu_si128(reinterpret_cast<const __m128i*>(p)); }

// A VPSHUFB index that puts byte a (128-bit lane 0) and byte b (lane 1) of a vector holding 16 scale
// bytes in each lane into every int16 of that lane, zero-extended. With `high`, the byte goes to the
// high half of each int16 (its low half zero), so an arithmetic shift right by 8 sign-extends it
// (the signed Q6_K / Q3_K scales).
inline __m256i scale_idx(int a, int b, bool high = false) {
  auto v = [high](int j) { return static_cast<short>(high ? (j << 8) | 0x80 : 0x8000 | j); };
  return _mm256_set_m128i(_mm_set1_epi16(v(b)), _mm_set1_epi16(v(a)));
}

// Q4_K. qs bytes 32 g .. 32 g + 31: low nibbles = elements 64 g + l (sub-block 2 g), high nibbles =
// 64 g + 32 + l (sub-block 2 g + 1), i.e. x[64 g ..] and x[64 g + 32 ..] as stored.
struct Q4K {
  static constexpr int kBytes = 144, kD = 0, kDmin = 2, kBias = 0;
  struct Consts {
    __m256i idx[8] = {scale_idx(0, 0), scale_idx(1, 1), scale_idx(2, 2), scale_idx(3, 3),
                      scale_idx(4, 4), scale_idx(5, 5), scale_idx(6, 6), scale_idx(7, 7)};
    __m128i mins = _mm_setr_epi8(8, 8, 9, 9, 10, 10, 11, 11, 12, 12, 13, 13, 14, 14, 15, 15);
  };
  static void sums(const uint8_t* b, const int8_t* xq, __m256i bsums, const Consts& k, __m256i& S, __m256i& M) {
    // The 6-bit scales and mins unpacked to bytes (ggml's utmp trick: sc0..7 then m0..7).
    uint32_t u[4];
    std::memcpy(u, b + 4, 12);
    u[3] = ((u[2] >> 4) & 0x0f0f0f0f) | (((u[1] >> 6) & 0x03030303) << 4);
    const uint32_t ua = u[1] & 0x3f3f3f3f;
    u[1] = (u[2] & 0x0f0f0f0f) | (((u[0] >> 6) & 0x03030303) << 4);
    u[2] = ua;
    u[0] &= 0x3f3f3f3f;
    const __m128i scm = ld128(u);
    const __m256i sc = _mm256_broadcastsi128_si256(scm);
    const __m256i m4 = _mm256_set1_epi8(0x0F);
    __m256i s = _mm256_setzero_si256();
    for (int g = 0; g < 4; ++g) {
      const __m256i v = ld256(b + 16 + 32 * g);
      const __m256i lo = _mm256_and_si256(v, m4), hi = _mm256_and_si256(_mm256_srli_epi16(v, 4), m4);
      const __m256i plo =
          _mm256_madd_epi16(_mm256_maddubs_epi16(lo, ld256(xq + 64 * g)), _mm256_shuffle_epi8(sc, k.idx[2 * g]));
      const __m256i phi = _mm256_madd_epi16(_mm256_maddubs_epi16(hi, ld256(xq + 64 * g + 32)),
                                            _mm256_shuffle_epi8(sc, k.idx[2 * g + 1]));
      s = _mm256_add_epi32(s, _mm256_add_epi32(plo, phi));
    }
    S = s;
    M = _mm256_madd_epi16(_mm256_cvtepu8_epi16(_mm_shuffle_epi8(scm, k.mins)), bsums);  // m_{i/2} * bsums_i
  }
};

// The plane layout of Q2_K, Q3_K and Q6_K: plane j of half h holds elements 128 h + 32 j + l
// (l = 0..31), i.e. x[128 h + 32 j ..] as stored; its 128-bit lanes are sub-blocks 8 h + 2 j and
// 8 h + 2 j + 1.
struct PlaneIdx {
  __m256i idx[8];  // [4 h + j]
  explicit PlaneIdx(bool high) {
    for (int h = 0; h < 2; ++h)
      for (int j = 0; j < 4; ++j) idx[4 * h + j] = scale_idx(8 * h + 2 * j, 8 * h + 2 * j + 1, high);
  }
};

// Q2_K. qs bytes 32 h + l hold element 128 h + 32 j + l at bits 2 j.
struct Q2K {
  static constexpr int kBytes = 84, kD = 80, kDmin = 82, kBias = 0;
  struct Consts : PlaneIdx {
    Consts() : PlaneIdx(false) {}
  };
  static void sums(const uint8_t* b, const int8_t* xq, __m256i bsums, const Consts& k, __m256i& S, __m256i& M) {
    const __m128i raw = ld128(b);
    const __m128i m4 = _mm_set1_epi8(0x0F);
    const __m256i sc = _mm256_broadcastsi128_si256(_mm_and_si128(raw, m4));
    const __m256i m3 = _mm256_set1_epi8(3);
    __m256i s = _mm256_setzero_si256();
    for (int h = 0; h < 2; ++h) {
      const __m256i v = ld256(b + 16 + 32 * h);
      for (int j = 0; j < 4; ++j) {
        const __m256i q = _mm256_and_si256(_mm256_srli_epi16(v, 2 * j), m3);
        s = _mm256_add_epi32(s, _mm256_madd_epi16(_mm256_maddubs_epi16(q, ld256(xq + 128 * h + 32 * j)),
                                                  _mm256_shuffle_epi8(sc, k.idx[4 * h + j])));
      }
    }
    S = s;
    M = _mm256_madd_epi16(_mm256_cvtepu8_epi16(_mm_and_si128(_mm_srli_epi16(raw, 4), m4)), bsums);
  }
};

// S' += madd(maddubs(q', x plane), sc) for plane j of half h, q' = q + bias; sc8: the 16 signed scales.
inline __m256i signed_plane(__m256i s, __m256i q, const int8_t* xq, int h, int j, __m256i sc, const __m256i* idx) {
  const __m256i scj = _mm256_srai_epi16(_mm256_shuffle_epi8(sc, idx[4 * h + j]), 8);  // int8 -> int16
  return _mm256_add_epi32(s, _mm256_madd_epi16(_mm256_maddubs_epi16(q, ld256(xq + 128 * h + 32 * j)), scj));
}

// Q6_K. q + 32 = low nibble | top two bits << 4. Plane j of half h: the nibble of
// ql[64 h + 32 (j % 2) + l] (low for j < 2, high otherwise), bits 2 j of qh[32 h + l].
struct Q6K {
  static constexpr int kBytes = 210, kD = 208, kBias = 32;
  struct Consts : PlaneIdx {
    Consts() : PlaneIdx(true) {}
  };
  static void sums(const uint8_t* b, const int8_t* xq, __m256i bsums, const Consts& k, __m256i& S, __m256i& M) {
    const __m128i sc8 = ld128(b + 192);
    const __m256i sc = _mm256_broadcastsi128_si256(sc8);
    const __m256i m4 = _mm256_set1_epi8(0x0F), m30 = _mm256_set1_epi8(0x30);
    __m256i s = _mm256_setzero_si256();
    for (int h = 0; h < 2; ++h) {
      const __m256i la = ld256(b + 64 * h), lb = ld256(b + 64 * h + 32), qh = ld256(b + 128 + 32 * h);
      s = signed_plane(s, _mm256_or_si256(_mm256_and_si256(la, m4), _mm256_and_si256(_mm256_slli_epi16(qh, 4), m30)),
                       xq, h, 0, sc, k.idx);
      s = signed_plane(s, _mm256_or_si256(_mm256_and_si256(lb, m4), _mm256_and_si256(_mm256_slli_epi16(qh, 2), m30)),
                       xq, h, 1, sc, k.idx);
      s = signed_plane(s, _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(la, 4), m4), _mm256_and_si256(qh, m30)),
                       xq, h, 2, sc, k.idx);
      s = signed_plane(s,
                       _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(lb, 4), m4),
                                       _mm256_and_si256(_mm256_srli_epi16(qh, 2), m30)),
                       xq, h, 3, sc, k.idx);
    }
    S = s;
    M = _mm256_madd_epi16(_mm256_cvtepi8_epi16(sc8), bsums);
  }
};

// Q3_K. q + 4 = the 2-bit field (Q2_K's planes) | hmask bit << 2; the hmask bit of plane j of half h
// is bit 4 h + j of hmask[l]. Scales: ggml's 6-bit unpacking (low nibbles from bytes 0..7, then
// their high nibbles; bits 2 (j / 4) of byte 8 + j % 4 on top), minus 32, in vector registers.
struct Q3K {
  static constexpr int kBytes = 110, kD = 108, kBias = 4;
  using Consts = Q6K::Consts;
  static void sums(const uint8_t* b, const int8_t* xq, __m256i bsums, const Consts& k, __m256i& S, __m256i& M) {
    const __m128i m4 = _mm_set1_epi8(0x0F);
    const __m128i lo8 = _mm_loadl_epi64(reinterpret_cast<const __m128i*>(b + 96));
    const __m128i lo = _mm_unpacklo_epi64(_mm_and_si128(lo8, m4), _mm_and_si128(_mm_srli_epi16(lo8, 4), m4));
    uint32_t top;
    std::memcpy(&top, b + 104, 4);
    const __m128i hi =
        _mm_slli_epi32(_mm_and_si128(_mm_srlv_epi32(_mm_set1_epi32(static_cast<int>(top)), _mm_setr_epi32(0, 2, 4, 6)),
                                     _mm_set1_epi8(3)),
                       4);
    const __m128i sc8 = _mm_sub_epi8(_mm_or_si128(lo, hi), _mm_set1_epi8(32));
    const __m256i sc = _mm256_broadcastsi128_si256(sc8);
    const __m256i hm = ld256(b), m3 = _mm256_set1_epi8(3), bit2 = _mm256_set1_epi8(4);
    __m256i s = _mm256_setzero_si256();
    for (int h = 0; h < 2; ++h) {
      const __m256i v = ld256(b + 32 + 32 * h);
      const __m256i hh = h == 0 ? hm : _mm256_srli_epi16(hm, 4);  // bits 4 h + j -> bits j
      // Bit j of each byte moved to bit 2 (16-bit shifts: the mask drops what crosses bytes).
      const __m256i hb[4] = {_mm256_and_si256(_mm256_slli_epi16(hh, 2), bit2),
                             _mm256_and_si256(_mm256_slli_epi16(hh, 1), bit2), _mm256_and_si256(hh, bit2),
                             _mm256_and_si256(_mm256_srli_epi16(hh, 1), bit2)};
      for (int j = 0; j < 4; ++j) {
        const __m256i q = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(v, 2 * j), m3), hb[j]);
        s = signed_plane(s, q, xq, h, j, sc, k.idx);
      }
    }
    S = s;
    M = _mm256_madd_epi16(_mm256_cvtepi8_epi16(sc8), bsums);
  }
};

// [sum v0, .., sum v7]: the int32 lanes of each vector added up (exact, so in any order), as one
// transpose-and-add tree for all eight.
inline __m256i hsum8(__m256i v0, __m256i v1, __m256i v2, __m256i v3, __m256i v4, __m256i v5, __m256i v6, __m256i v7) {
  const __m256i a = _mm256_add_epi32(_mm256_unpacklo_epi32(v0, v1), _mm256_unpackhi_epi32(v0, v1));
  const __m256i b = _mm256_add_epi32(_mm256_unpacklo_epi32(v2, v3), _mm256_unpackhi_epi32(v2, v3));
  const __m256i c = _mm256_add_epi32(_mm256_unpacklo_epi64(a, b), _mm256_unpackhi_epi64(a, b));  // per 128: v0..v3
  const __m256i e = _mm256_add_epi32(_mm256_unpacklo_epi32(v4, v5), _mm256_unpackhi_epi32(v4, v5));
  const __m256i f = _mm256_add_epi32(_mm256_unpacklo_epi32(v6, v7), _mm256_unpackhi_epi32(v6, v7));
  const __m256i g = _mm256_add_epi32(_mm256_unpacklo_epi64(e, f), _mm256_unpackhi_epi64(e, f));  // per 128: v4..v7
  return _mm256_add_epi32(_mm256_permute2x128_si256(c, g, 0x20), _mm256_permute2x128_si256(c, g, 0x31));
}
// Four rows at a time, one token (the group loop and the f32 part: kquant_q8k_common.h).
template <class B>
void rows(const uint8_t* xq, int64_t nb, const uint8_t* w, int64_t row_bytes, int64_t r0, int64_t r1, float* y) {
  const typename B::Consts k;
  rows4<B>(xq, nb, w, row_bytes, r0, r1, y, [&k](const uint8_t* const p[4], const uint8_t* xb, int64_t off) {
    const auto* q = reinterpret_cast<const int8_t*>(xb + kQ8KQs);
    const __m256i bsums = ld256(xb + kQ8KBsums);
    __m256i S0, S1, S2, S3, M0, M1, M2, M3;
    B::sums(p[0] + off, q, bsums, k, S0, M0);
    B::sums(p[1] + off, q, bsums, k, S1, M1);
    B::sums(p[2] + off, q, bsums, k, S2, M2);
    B::sums(p[3] + off, q, bsums, k, S3, M3);
    return hsum8(S0, S1, S2, S3, M0, M1, M2, M3);  // [S0..S3, M0..M3]
  });
}

}  // namespace

bool linear_q8k_rows_avx2(int type, const void* xq, int64_t n, int64_t nb, const uint8_t* w, int64_t row_bytes,
                          int64_t r0, int64_t r1, float* y, int64_t out) {
  auto* run = type == kQ4_K   ? &rows<Q4K>
              : type == kQ2_K ? &rows<Q2K>
              : type == kQ6_K ? &rows<Q6K>
              : type == kQ3_K ? &rows<Q3K>
                              : nullptr;
  if (run == nullptr) return false;
  const auto* x = static_cast<const uint8_t*>(xq);
  for (int64_t t = 0; t < n; ++t) run(x + t * nb * kQ8KBytes, nb, w, row_bytes, r0, r1, y + t * out);
  return true;
}

}  // namespace strata::kernels::x86
