// The Q8_0-x integer decode dot with AVX-512 F/BW (kernels/kquant_q8_0_dot.h): bit-identical to
// kernels::ref::dot_q8_0.
//
// Four rows by four blocks at a time, two blocks per vector. The weight quants (Q8_0: as stored;
// IQ4_NL: the nibbles looked up in a table with VPSHUFB) go to VPMADDUBSW as |q|, with x's quants
// (shared by the four rows) negated where q < 0, then VPMADDWD by ones gives int32 lanes; the 8
// (row, block pair) vectors are reduced by one transpose-and-add tree to S[block][row], exact in
// int32 in any order. (Sign-extending both sides to int16 for VPMADDWD measured 1.4x slower on
// Sapphire Rapids, hot cache: more port-5 shuffles; gathering the 16 fp16 d with VPGATHERDD
// instead of 16 VPINSRW: no difference.) The
// f32 part then runs on all 16 at once (dd = d * xd, t = dd * float(S)) and the four blocks' t are
// added to the four rows' acc in block order: the reference's operations, lane by lane. A tail of
// fewer than four blocks repeats the last block and skips the copies' adds.
// Each step of four blocks of a group of four rows prefetches the same bytes of the next four rows
// (the first pass of tokens only), as the AVX2 twin does: the hardware prefetchers alone left the
// four interleaved streams well short of the read bandwidth (docs/performance.md, branch pf512).
// Per the kernels/x86 rule (common.h) this file uses no std:: templates and no shared inline helpers.
#include <immintrin.h>

#include "kernels/x86/common.h"
#include "kernels/x86/kquant_x86.h"

namespace strata::kernels::x86 {
namespace {

// Must match kernels::QuantType (kernels/kquant.h) and BlockQ8_0 (34 bytes: fp16 d, int8 qs[32]).
enum : int { kQ8_0 = 0, kIq4Nl = 5 };
constexpr int kQ80Bytes = 34;
// How far ahead the prefetch reaches: the next group of four rows (8 measured the same; see the top).
constexpr int64_t kPrefetchRows = 4;

inline short ld16(const uint8_t* p) {
  short h;
  std::memcpy(&h, p, 2);
  return h;
}

// Each type decodes two blocks A and B of one row once (W) and gives, for a token's x (XPair), the
// int32 vector whose 128-bit lanes 0, 1 hold partial sums of block A's products and lanes 2, 3 those
// of block B (the total of each pair of lanes is S_A, S_B, exactly).

// Q8_0: the weights of A and B in one vector; VPMADDUBSW with |w| and x negated where w < 0, as ggml's
// mul_sum_i8_pairs (|w * xq| * 2 <= 128 * 127 * 2 < 2^15; |-128| = 128 as u8).
struct Q80 {
  static constexpr int kBytes = 34;
  struct Consts {
    __m512i ones = _mm512_set1_epi16(1);
  };
  struct XPair {
    __m512i q;  // x's quants of A then B, int8
  };
  static XPair load_x(const uint8_t* xa, const uint8_t* xb) {
    return {_mm512_inserti64x4(_mm512_castsi256_si512(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(xa + 2))),
                               _mm256_loadu_si256(reinterpret_cast<const __m256i*>(xb + 2)), 1)};
  }
  // The weights of A and B as VPMADDUBSW takes them: |q| (u8) and where q < 0 (x is negated there).
  struct W {
    __m512i abs;
    __mmask64 neg;
  };
  static W decode(const uint8_t* wa, const uint8_t* wb, const Consts&) {
    const __m512i q = load_x(wa, wb).q;
    return {_mm512_abs_epi8(q), _mm512_movepi8_mask(q)};
  }
  static __m512i apply(const W& w, const XPair& x, __m512i ones) {
    const __m512i xs = _mm512_mask_sub_epi8(x.q, w.neg, _mm512_setzero_si512(), x.q);
    return _mm512_madd_epi16(_mm512_maddubs_epi16(w.abs, xs), ones);
  }
};

// IQ4_NL (x, W and apply as Q8_0): byte j of qs holds the index of element j (low nibble) and j + 16
// (high). The 16-byte qs of A and B are loaded as [A, A, B, B] and shifted by 0 / 4 per 128-bit lane, so lane order is element
// order. VPMADDUBSW needs one unsigned side: |value| from a table, x negated where the value is
// negative (indices 0..7), as ggml's mul_sum_i8_pairs (|value * xq| * 2 <= 127 * 127 * 2 < 2^15).
struct Iq4Nl : Q80 {
  static constexpr int kBytes = 18;
  struct Consts {
    __m512i abs_grid = _mm512_broadcast_i32x4(_mm_setr_epi8(127, 104, 83, 65, 49, 35, 22, 10, 1, 13, 25, 38, 53, 69, 89, 113));
    __m512i shift = _mm512_setr_epi64(0, 0, 0x0004000400040004, 0x0004000400040004, 0, 0, 0x0004000400040004,
                                      0x0004000400040004);
    __m512i m4 = _mm512_set1_epi8(0x0F), eight = _mm512_set1_epi8(8), ones = _mm512_set1_epi16(1);
  };
  static W decode(const uint8_t* wa, const uint8_t* wb, const Consts& k) {
    const __m512i raw = _mm512_inserti64x4(
        _mm512_castsi256_si512(_mm256_broadcastsi128_si256(_mm_loadu_si128(reinterpret_cast<const __m128i*>(wa + 2)))),
        _mm256_broadcastsi128_si256(_mm_loadu_si128(reinterpret_cast<const __m128i*>(wb + 2))), 1);
    const __m512i idx = _mm512_and_si512(_mm512_srlv_epi16(raw, k.shift), k.m4);
    return {_mm512_shuffle_epi8(k.abs_grid, idx), _mm512_cmplt_epu8_mask(idx, k.eight)};
  }
};

// Adds the int32 lanes of u and v pairwise-interleaved: within each 128-bit lane, [u0+u2, v0+v2,
// u1+u3, v1+v3] (merge32), and [u01, v01, u23, v23] -> per 64-bit half (merge64).
inline __m512i merge32(__m512i u, __m512i v) {
  return _mm512_add_epi32(_mm512_unpacklo_epi32(u, v), _mm512_unpackhi_epi32(u, v));
}
inline __m512i merge64(__m512i u, __m512i v) {
  return _mm512_add_epi32(_mm512_unpacklo_epi64(u, v), _mm512_unpackhi_epi64(u, v));
}

// Four rows at a time (a tail group repeats its last row and drops the copies), up to kTokens tokens
// per pass (each tile of weights is decoded once for them; 1 for decode, 4 for prefill, so the
// decode loop keeps everything in registers); token t's x at xq + t * nb blocks, its y at
// y + t * out.
template <class B, int kTokens>
void rows(const uint8_t* xq, int64_t n, int64_t nb, const uint8_t* w, int64_t row_bytes, int64_t r0, int64_t r1,
          float* y, int64_t out) {
  const typename B::Consts k;
  const __m512i bcast = _mm512_setr_epi32(0, 0, 0, 0, 1, 1, 1, 1, 2, 2, 2, 2, 3, 3, 3, 3);
  const int64_t x_stride = nb * kQ80Bytes;
  for (int64_t r = r0; r < r1; r += 4) {
    const uint8_t* p[4];
    for (int j = 0; j < 4; ++j) p[j] = w + (r + j < r1 ? r + j : r1 - 1) * row_bytes;
    for (int64_t t0 = 0; t0 < n; t0 += kTokens) {
      const int n_tokens = n - t0 < kTokens ? static_cast<int>(n - t0) : kTokens;
      __m128 acc[kTokens];
      for (int t = 0; t < kTokens; ++t) acc[t] = _mm_setzero_ps();
      for (int64_t ib = 0; ib < nb; ib += 4) {
        const int n_blocks = nb - ib < 4 ? static_cast<int>(nb - ib) : 4;
        int64_t blk[4];
        for (int b = 0; b < 4; ++b) blk[b] = ib + (b < n_blocks ? b : n_blocks - 1);
        if (t0 == 0)  // the same blocks of a later group of rows, into L1 ahead of time (top of the file)
          for (int j = 0; j < 4; ++j)
            for (int c = 0; c < 4 * B::kBytes; c += 64)
              _mm_prefetch(reinterpret_cast<const char*>(p[j] + kPrefetchRows * row_bytes + ib * B::kBytes + c),
                           _MM_HINT_T0);
        // Wt[h][j]: row j's blocks 2 h, 2 h + 1, decoded once for every token of the pass.
        typename B::W Wt[2][4];
        for (int h = 0; h < 2; ++h)
          for (int j = 0; j < 4; ++j)
            Wt[h][j] = B::decode(p[j] + blk[2 * h] * B::kBytes, p[j] + blk[2 * h + 1] * B::kBytes, k);
        const __m512 dw = _mm512_cvtph_ps(_mm256_setr_epi16(
            ld16(p[0] + blk[0] * B::kBytes), ld16(p[1] + blk[0] * B::kBytes), ld16(p[2] + blk[0] * B::kBytes),
            ld16(p[3] + blk[0] * B::kBytes), ld16(p[0] + blk[1] * B::kBytes), ld16(p[1] + blk[1] * B::kBytes),
            ld16(p[2] + blk[1] * B::kBytes), ld16(p[3] + blk[1] * B::kBytes), ld16(p[0] + blk[2] * B::kBytes),
            ld16(p[1] + blk[2] * B::kBytes), ld16(p[2] + blk[2] * B::kBytes), ld16(p[3] + blk[2] * B::kBytes),
            ld16(p[0] + blk[3] * B::kBytes), ld16(p[1] + blk[3] * B::kBytes), ld16(p[2] + blk[3] * B::kBytes),
            ld16(p[3] + blk[3] * B::kBytes)));
        for (int t = 0; t < n_tokens; ++t) {
          const uint8_t* xt = xq + (t0 + t) * x_stride;
          // R[h]: blocks 2 h, 2 h + 1; per 128-bit lane the partial sums of rows 0..3 (lanes 0, 1:
          // block 2 h; lanes 2, 3: block 2 h + 1).
          __m512i R[2];
          for (int h = 0; h < 2; ++h) {
            const typename B::XPair X = B::load_x(xt + blk[2 * h] * kQ80Bytes, xt + blk[2 * h + 1] * kQ80Bytes);
            R[h] = merge64(merge32(B::apply(Wt[h][0], X, k.ones), B::apply(Wt[h][1], X, k.ones)),
                           merge32(B::apply(Wt[h][2], X, k.ones), B::apply(Wt[h][3], X, k.ones)));
          }
          // S lane 4 b + row: the two 128-bit lanes of each block added.
          const __m512i S =
              _mm512_add_epi32(_mm512_shuffle_i64x2(R[0], R[1], 0x88), _mm512_shuffle_i64x2(R[0], R[1], 0xDD));
          const __m128i xd16 = _mm_setr_epi16(ld16(xt + blk[0] * kQ80Bytes), ld16(xt + blk[1] * kQ80Bytes),
                                              ld16(xt + blk[2] * kQ80Bytes), ld16(xt + blk[3] * kQ80Bytes), 0, 0, 0, 0);
          const __m512 xd = _mm512_permutexvar_ps(bcast, _mm512_castps128_ps512(_mm_cvtph_ps(xd16)));
          // ROUNDING: the definition's dd = d * xd (exact), t = dd * float(S), acc += t per block in
          // order, lane-wise for the four rows (no FMA: -ffp-contract=off).
          const __m512 tv = _mm512_mul_ps(_mm512_mul_ps(dw, xd), _mm512_cvtepi32_ps(S));
          float tb[16];
          _mm512_storeu_ps(tb, tv);
          for (int b = 0; b < n_blocks; ++b) acc[t] = _mm_add_ps(acc[t], _mm_loadu_ps(tb + 4 * b));
        }
      }
      for (int t = 0; t < n_tokens; ++t) {
        float o[4];
        _mm_storeu_ps(o, acc[t]);
        for (int j = 0; j < 4 && r + j < r1; ++j) y[(t0 + t) * out + r + j] = o[j];
      }
    }
  }
}

}  // namespace

bool linear_q8_0_rows_avx512(int type, const void* xq, int64_t n, int64_t nb, const uint8_t* w, int64_t row_bytes,
                             int64_t r0, int64_t r1, float* y, int64_t out) {
  const auto* x = static_cast<const uint8_t*>(xq);
  switch (type) {
    case kQ8_0: (n == 1 ? rows<Q80, 1> : rows<Q80, 4>)(x, n, nb, w, row_bytes, r0, r1, y, out); return true;
    case kIq4Nl: (n == 1 ? rows<Iq4Nl, 1> : rows<Iq4Nl, 4>)(x, n, nb, w, row_bytes, r0, r1, y, out); return true;
    default: return false;
  }
}

}  // namespace strata::kernels::x86
