// The Q8_K integer decode dot with AVX-512 F/BW (kernels/kquant_q8k.h): bit-identical to
// kernels::ref::dot_q8k.
//
// Per super-block and row, the weight quants (u8) times x's Q8_K quants (s8) are summed in pairs by
// VPMADDUBSW (no saturation: |q * xq| * 2 <= 63 * 127 * 2 < 2^15), then VPMADDWD with the sub-block
// scales as int16 gives int32 lanes; the mins go through VPMADDWD with x's bsums. Integer sums are
// exact, so the lane layout does not matter: the 16 (and 8) lanes are added to the block's S and M,
// and the f32 combination of the definition runs on four rows at once in the lanes of an xmm (the same
// IEEE operations per row as the reference, in block order). x's 64-byte vectors are assembled
// from two 32-byte halves so that they line up with the weight bytes as stored (no weight shuffles).
// Q6_K and Q3_K have signed quants: the kernel sums q + bias (32, 4; unsigned, as VPMADDUBSW needs)
// and subtracts bias * sum_i sc_i * bsums_i in int32, exactly as ggml's AVX2 kernels do, so S is the
// reference's S.
// VNNI (VPDPBUSD) would save one instruction per 64 products but needs the scale multiply in int32;
// this path needs AVX-512 BW only, which every kAvx512 CPU has.
// Each block of a group of four rows prefetches the same block of the next four rows, as the AVX2
// twin does: decode reads four interleaved streams, which the hardware prefetchers alone fed at
// 0.85-1.0x ggml's sapphirerapids kernels on Q4_K/Q2_K; with the prefetch see docs/performance.md
// (branch pf512; eight rows ahead measured the same as four, the earlier try of 8 blocks ahead in
// the same rows no better than none).
// Per the kernels/x86 rule (common.h) this file uses no std:: templates, and shared inline helpers only
// from headers that keep them in an anonymous namespace (common.h, kquant_q8k_common.h).
#include <immintrin.h>

#include "kernels/x86/common.h"
#include "kernels/x86/kquant_q8k_common.h"
#include "kernels/x86/kquant_x86.h"

namespace strata::kernels::x86 {
namespace {

// The 64 bytes a[0..31] ++ b[0..31].
inline __m512i cat32(const int8_t* a, const int8_t* b) {
  return _mm512_inserti64x4(_mm512_castsi256_si512(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(a))),
                            _mm256_loadu_si256(reinterpret_cast<const __m256i*>(b)), 1);
}
// A VPSHUFB index that puts byte a (b, c, d) of each 128-bit lane, zero-extended to int16, in every
// int16 of 128-bit lane 0 (1, 2, 3). With `high`, the byte goes to the high half of each int16 (its
// low half zero), so an arithmetic shift right by 8 sign-extends it (the signed Q6_K / Q3_K scales).
inline __m512i scale_idx(int a, int b, int c, int d, bool high = false) {
  auto lane = [high](int j) {
    const uint64_t v = high ? (static_cast<uint64_t>(j) << 8) | 0x80u : 0x8000u | static_cast<uint64_t>(j);
    return static_cast<long long>(v | (v << 16) | (v << 32) | (v << 48));
  };
  return _mm512_setr_epi64(lane(a), lane(a), lane(b), lane(b), lane(c), lane(c), lane(d), lane(d));
}

// Q4_K. Weight bytes 0..63 of qs: low nibbles = elements 0..31 (sub-block 0) and 64..95 (2), high
// nibbles = 32..63 (1) and 96..127 (3); bytes 64..127 the same plus 128.
struct Q4K {
  static constexpr int kBytes = 144, kD = 0, kDmin = 2, kBias = 0;
  struct Consts {
    __m512i idx[4] = {scale_idx(0, 0, 2, 2), scale_idx(1, 1, 3, 3), scale_idx(4, 4, 6, 6), scale_idx(5, 5, 7, 7)};
    __m128i mins = _mm_setr_epi8(8, 8, 9, 9, 10, 10, 11, 11, 12, 12, 13, 13, 14, 14, 15, 15);
  };
  static void load_x(const int8_t* q, __m512i X[4]) {
    X[0] = cat32(q, q + 64);
    X[1] = cat32(q + 32, q + 96);
    X[2] = cat32(q + 128, q + 192);
    X[3] = cat32(q + 160, q + 224);
  }
  static void sums(const uint8_t* b, const __m512i X[4], __m256i bsums, const Consts& k, __m512i& S, __m256i& M) {
    // The 6-bit scales and mins unpacked to bytes (ggml's utmp trick: sc0..7 then m0..7).
    uint32_t u[4];
    std::memcpy(u, b + 4, 12);
    u[3] = ((u[2] >> 4) & 0x0f0f0f0f) | (((u[1] >> 6) & 0x03030303) << 4);
    const uint32_t ua = u[1] & 0x3f3f3f3f;
    u[1] = (u[2] & 0x0f0f0f0f) | (((u[0] >> 6) & 0x03030303) << 4);
    u[2] = ua;
    u[0] &= 0x3f3f3f3f;
    const __m128i scm = _mm_loadu_si128(reinterpret_cast<const __m128i*>(u));
    const __m512i sc = _mm512_broadcast_i32x4(scm);
    const __m512i m4 = _mm512_set1_epi8(0x0F);
    const __m512i v0 = _mm512_loadu_si512(b + 16), v1 = _mm512_loadu_si512(b + 80);
    const __m512i q[4] = {_mm512_and_si512(v0, m4), _mm512_and_si512(_mm512_srli_epi16(v0, 4), m4),
                          _mm512_and_si512(v1, m4), _mm512_and_si512(_mm512_srli_epi16(v1, 4), m4)};
    __m512i s = _mm512_setzero_si512();
    for (int j = 0; j < 4; ++j)
      s = _mm512_add_epi32(s, _mm512_madd_epi16(_mm512_maddubs_epi16(q[j], X[j]), _mm512_shuffle_epi8(sc, k.idx[j])));
    S = s;
    M = _mm256_madd_epi16(_mm256_cvtepu8_epi16(_mm_shuffle_epi8(scm, k.mins)), bsums);  // m_{i/2} * bsums_i
  }
};

// Q2_K. qs bytes 0..31 hold elements 32 j + l at bits 2 j, bytes 32..63 elements 128 + 32 j + l.
struct Q2K {
  static constexpr int kBytes = 84, kD = 80, kDmin = 82, kBias = 0;
  struct Consts {
    __m512i idx[4] = {scale_idx(0, 1, 8, 9), scale_idx(2, 3, 10, 11), scale_idx(4, 5, 12, 13),
                      scale_idx(6, 7, 14, 15)};
  };
  // Byte l of half h of X[j]: element 128 h + 32 j + l (the plane layout of Q2_K, Q3_K and Q6_K).
  static void load_x(const int8_t* q, __m512i X[4]) {
    for (int j = 0; j < 4; ++j) X[j] = cat32(q + 32 * j, q + 128 + 32 * j);
  }
  static void sums(const uint8_t* b, const __m512i X[4], __m256i bsums, const Consts& k, __m512i& S, __m256i& M) {
    const __m128i raw = _mm_loadu_si128(reinterpret_cast<const __m128i*>(b));
    const __m128i m4 = _mm_set1_epi8(0x0F);
    const __m512i sc = _mm512_broadcast_i32x4(_mm_and_si128(raw, m4));
    const __m512i v = _mm512_loadu_si512(b + 16), m3 = _mm512_set1_epi8(3);
    __m512i s = _mm512_setzero_si512();
    for (int j = 0; j < 4; ++j) {
      const __m512i q = _mm512_and_si512(_mm512_srli_epi16(v, 2 * j), m3);
      s = _mm512_add_epi32(s, _mm512_madd_epi16(_mm512_maddubs_epi16(q, X[j]), _mm512_shuffle_epi8(sc, k.idx[j])));
    }
    S = s;
    M = _mm256_madd_epi16(_mm256_cvtepu8_epi16(_mm_and_si128(_mm_srli_epi16(raw, 4), m4)), bsums);
  }
};

// S' = sum_j madd(maddubs(q'_j, X_j), sc), q' = q + bias in the Q2_K plane layout, and
// M = sc_i * bsums_i (8 lanes): the parts of the signed types' S = S' - bias * sum M.
inline void signed_sums(const __m512i q[4], const __m512i X[4], __m128i sc8, __m256i bsums, const __m512i idx[4],
                        __m512i& S, __m256i& M) {
  const __m512i sc = _mm512_broadcast_i32x4(sc8);
  __m512i s = _mm512_setzero_si512();
  for (int j = 0; j < 4; ++j) {
    const __m512i scj = _mm512_srai_epi16(_mm512_shuffle_epi8(sc, idx[j]), 8);  // int8 -> int16
    s = _mm512_add_epi32(s, _mm512_madd_epi16(_mm512_maddubs_epi16(q[j], X[j]), scj));
  }
  S = s;
  M = _mm256_madd_epi16(_mm256_cvtepi8_epi16(sc8), bsums);
}

// Q6_K. q + 32 = low nibble | top two bits << 4. Plane j of half h (elements 128 h + 32 j + l): the
// nibble of ql[64 h + 32 (j % 2) + l] (low for j < 2, high otherwise), bits 2 j of qh[32 h + l].
struct Q6K {
  static constexpr int kBytes = 210, kD = 208, kBias = 32;
  struct Consts {
    __m512i idx[4] = {scale_idx(0, 1, 8, 9, true), scale_idx(2, 3, 10, 11, true), scale_idx(4, 5, 12, 13, true),
                      scale_idx(6, 7, 14, 15, true)};
  };
  static void load_x(const int8_t* q, __m512i X[4]) { Q2K::load_x(q, X); }
  static void sums(const uint8_t* b, const __m512i X[4], __m256i bsums, const Consts& k, __m512i& S, __m256i& M) {
    const __m512i lo_a = cat32(reinterpret_cast<const int8_t*>(b), reinterpret_cast<const int8_t*>(b + 64));
    const __m512i lo_b = cat32(reinterpret_cast<const int8_t*>(b + 32), reinterpret_cast<const int8_t*>(b + 96));
    const __m512i h = _mm512_loadu_si512(b + 128);  // qh: bytes 0..31 half 0, 32..63 half 1
    const __m512i m4 = _mm512_set1_epi8(0x0F), m30 = _mm512_set1_epi8(0x30);
    const __m512i q[4] = {
        _mm512_or_si512(_mm512_and_si512(lo_a, m4), _mm512_and_si512(_mm512_slli_epi16(h, 4), m30)),
        _mm512_or_si512(_mm512_and_si512(lo_b, m4), _mm512_and_si512(_mm512_slli_epi16(h, 2), m30)),
        _mm512_or_si512(_mm512_and_si512(_mm512_srli_epi16(lo_a, 4), m4), _mm512_and_si512(h, m30)),
        _mm512_or_si512(_mm512_and_si512(_mm512_srli_epi16(lo_b, 4), m4),
                        _mm512_and_si512(_mm512_srli_epi16(h, 2), m30))};
    signed_sums(q, X, _mm_loadu_si128(reinterpret_cast<const __m128i*>(b + 192)), bsums, k.idx, S, M);
  }
};

// Q3_K. q + 4 = the 2-bit field (Q2_K's planes) | hmask bit << 2; the hmask bit of plane j of half h
// is bit 4 h + j of hmask[l]. Scales: ggml's 6-bit unpacking (low nibbles from bytes 0..7, then
// their high nibbles; bits 2 (j / 4) of byte 8 + j % 4 on top), minus 32, in vector registers.
struct Q3K {
  static constexpr int kBytes = 110, kD = 108, kBias = 4;
  using Consts = Q6K::Consts;
  static void load_x(const int8_t* q, __m512i X[4]) { Q2K::load_x(q, X); }
  static void sums(const uint8_t* b, const __m512i X[4], __m256i bsums, const Consts& k, __m512i& S, __m256i& M) {
    const __m128i m4 = _mm_set1_epi8(0x0F);
    const __m128i lo8 = _mm_loadl_epi64(reinterpret_cast<const __m128i*>(b + 96));
    const __m128i lo = _mm_unpacklo_epi64(_mm_and_si128(lo8, m4), _mm_and_si128(_mm_srli_epi16(lo8, 4), m4));
    uint32_t top;
    std::memcpy(&top, b + 104, 4);
    const __m128i hi = _mm_slli_epi32(
        _mm_and_si128(_mm_srlv_epi32(_mm_set1_epi32(static_cast<int>(top)), _mm_setr_epi32(0, 2, 4, 6)), _mm_set1_epi8(3)),
        4);
    const __m128i sc8 = _mm_sub_epi8(_mm_or_si128(lo, hi), _mm_set1_epi8(32));
    const __m256i hm = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(b));
    const __m512i h = _mm512_inserti64x4(_mm512_castsi256_si512(hm), _mm256_srli_epi16(hm, 4), 1);
    const __m512i v = _mm512_loadu_si512(b + 32), m3 = _mm512_set1_epi8(3), bit2 = _mm512_set1_epi8(4);
    // (low2 & 3) | (hmask bit moved to bit 2): VPTERNLOGD with imm 0xEA = (A & B) | C.
    const __m512i hb[4] = {_mm512_and_si512(_mm512_slli_epi16(h, 2), bit2), _mm512_and_si512(_mm512_slli_epi16(h, 1), bit2),
                           _mm512_and_si512(h, bit2), _mm512_and_si512(_mm512_srli_epi16(h, 1), bit2)};
    const __m512i q[4] = {_mm512_ternarylogic_epi32(v, m3, hb[0], 0xEA),
                          _mm512_ternarylogic_epi32(_mm512_srli_epi16(v, 2), m3, hb[1], 0xEA),
                          _mm512_ternarylogic_epi32(_mm512_srli_epi16(v, 4), m3, hb[2], 0xEA),
                          _mm512_ternarylogic_epi32(_mm512_srli_epi16(v, 6), m3, hb[3], 0xEA)};
    signed_sums(q, X, sc8, bsums, k.idx, S, M);
  }
};

// [sum S0, sum S1, sum S2, sum S3, sum M0, .., sum M3]: the int32 lanes of each vector added up (exact,
// so in any order), as one transpose-and-add tree for all eight.
inline __m256i hsum_sm(__m512i s0, __m512i s1, __m512i s2, __m512i s3, __m256i m0, __m256i m1, __m256i m2, __m256i m3) {
  const __m512i a = _mm512_add_epi32(_mm512_unpacklo_epi32(s0, s1), _mm512_unpackhi_epi32(s0, s1));
  const __m512i b = _mm512_add_epi32(_mm512_unpacklo_epi32(s2, s3), _mm512_unpackhi_epi32(s2, s3));
  const __m512i c = _mm512_add_epi32(_mm512_unpacklo_epi64(a, b), _mm512_unpackhi_epi64(a, b));  // per 128: S0..S3
  const __m256i cs = _mm256_add_epi32(_mm512_castsi512_si256(c), _mm512_extracti64x4_epi64(c, 1));
  const __m256i e = _mm256_add_epi32(_mm256_unpacklo_epi32(m0, m1), _mm256_unpackhi_epi32(m0, m1));
  const __m256i f = _mm256_add_epi32(_mm256_unpacklo_epi32(m2, m3), _mm256_unpackhi_epi32(m2, m3));
  const __m256i cm = _mm256_add_epi32(_mm256_unpacklo_epi64(e, f), _mm256_unpackhi_epi64(e, f));  // per 128: M0..M3
  return _mm256_add_epi32(_mm256_permute2x128_si256(cs, cm, 0x20), _mm256_permute2x128_si256(cs, cm, 0x31));
}
// Four rows at a time (the group loop and the f32 part: kquant_q8k_common.h).
template <class B>
void rows(const uint8_t* xq, int64_t nb, const uint8_t* w, int64_t row_bytes, int64_t r0, int64_t r1, float* y) {
  const typename B::Consts k;
  rows4<B>(xq, nb, w, row_bytes, r0, r1, y, [&k](const uint8_t* const p[4], const uint8_t* xb, int64_t off) {
    __m512i X[4];
    B::load_x(reinterpret_cast<const int8_t*>(xb + kQ8KQs), X);
    const __m256i bsums = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(xb + kQ8KBsums));
    __m512i S0, S1, S2, S3;
    __m256i M0, M1, M2, M3;
    B::sums(p[0] + off, X, bsums, k, S0, M0);
    B::sums(p[1] + off, X, bsums, k, S1, M1);
    B::sums(p[2] + off, X, bsums, k, S2, M2);
    B::sums(p[3] + off, X, bsums, k, S3, M3);
    return hsum_sm(S0, S1, S2, S3, M0, M1, M2, M3);  // [S0..S3, M0..M3]
  });
}

}  // namespace

bool linear_q8k_rows_avx512(int type, const void* xq, int64_t n, int64_t nb, const uint8_t* w, int64_t row_bytes,
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
