// The Q8_0-x integer decode dot with AVX2 + F16C (kernels/kquant_q8_0_dot.h): bit-identical to
// kernels::ref::dot_q8_0, for CPUs without AVX-512 (the AVX-512 twin is x86/kquant_q8_0_dot_avx512.cpp).
//
// One 32-byte vector per block and row: the weight quants (Q8_0: as stored; IQ4_NL: the nibbles
// looked up in kIq4nlValues with VPSHUFB) go to VPMADDUBSW as |q| with x's quants negated where q < 0
// (VPSIGNB), then VPMADDWD by ones gives eight int32 partial sums: ggml-cpu's AVX2 mul_sum_i8_pairs
// in ggml_vec_dot_q8_0_q8_0 / ggml_vec_dot_iq4_nl_q8_0 (arch/x86/quants.c). Four rows by two blocks
// at a time: the 8 vectors are reduced by one transpose-and-add tree to S[block][row], exact in int32
// in any order; the f32 part then runs on all 8 at once (dd = d * xd, t = dd * float(S)) and the two
// blocks' t are added to the four rows' acc in block order: the reference's operations, lane by
// lane (-ffp-contract=off keeps them unfused). ggml instead keeps 8 f32 lanes of partial sums per
// row, which is why its last bits differ. An odd last block repeats itself and skips the copy's add.
// Each pair of blocks of a group of four rows prefetches the same bytes of the next four rows (the
// first token only): without it the four interleaved streams ran at 0.8-0.95x ggml's haswell kernel
// on the 5120-row shapes, with it 1.1-1.7x (bench/ggml_peer.sh --kquant --level avx2, 1 thread).
// Per the kernels/x86 rule (common.h) this file uses no std:: templates and no shared inline helpers.
#include <immintrin.h>

#include "kernels/x86/common.h"
#include "kernels/x86/kquant_x86.h"

namespace strata::kernels::x86 {
namespace {

// Must match kernels::QuantType (kernels/kquant.h) and BlockQ8_0 (34 bytes: fp16 d, int8 qs[32]).
enum : int { kQ8_0 = 0, kIq4Nl = 5 };
constexpr int kQ80Bytes = 34;

inline uint64_t ld16(const uint8_t* p) {
  uint16_t h;
  std::memcpy(&h, p, 2);
  return h;
}
// The fp16 fields at p0..p3 packed into one uint64 (lane order), in general-purpose registers: eight
// VPINSRW per (4 rows x 2 blocks) kept port 5, already busy with the reduction tree, saturated.
inline uint64_t f16x4(const uint8_t* p0, const uint8_t* p1, const uint8_t* p2, const uint8_t* p3) {
  return ld16(p0) | ld16(p1) << 16 | ld16(p2) << 32 | ld16(p3) << 48;
}
inline __m256i ld256(const void* p) { return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)); }

// Q8_0: the 32 int8 weights as stored (|q * xq| * 2 <= 128 * 127 * 2 < 2^15 in VPMADDUBSW; |-128|
// is 128 as u8).
struct Q80 {
  static constexpr int kBytes = 34;
  struct Consts {};
  static __m256i quants(const uint8_t* b, const Consts&) { return ld256(b + 2); }
};

// IQ4_NL: byte j of qs holds the index of element j (low nibble) and j + 16 (high); lane 0 gets the
// low nibbles, lane 1 the high ones, so byte order is element order; values from the table.
struct Iq4Nl {
  static constexpr int kBytes = 18;
  struct Consts {
    __m256i grid = _mm256_broadcastsi128_si256(
        _mm_setr_epi8(-127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113));
    __m256i m4 = _mm256_set1_epi8(0x0F);
  };
  static __m256i quants(const uint8_t* b, const Consts& k) {
    const __m128i raw = _mm_loadu_si128(reinterpret_cast<const __m128i*>(b + 2));
    const __m256i idx = _mm256_and_si256(_mm256_set_m128i(_mm_srli_epi16(raw, 4), raw), k.m4);
    return _mm256_shuffle_epi8(k.grid, idx);
  }
};

// Eight int32 lanes summing to sum_k q_k * x_k (q, x int8; x never -128, as Q8_0 rounding gives).
inline __m256i dot32(__m256i q, __m256i x, __m256i ones) {
  return _mm256_madd_epi16(_mm256_maddubs_epi16(_mm256_sign_epi8(q, q), _mm256_sign_epi8(x, q)), ones);
}

// [sum v0, .., sum v7]: the int32 lanes of each vector added up (exact, so in any order).
inline __m256i hsum8(__m256i v0, __m256i v1, __m256i v2, __m256i v3, __m256i v4, __m256i v5, __m256i v6, __m256i v7) {
  const __m256i a = _mm256_add_epi32(_mm256_unpacklo_epi32(v0, v1), _mm256_unpackhi_epi32(v0, v1));
  const __m256i b = _mm256_add_epi32(_mm256_unpacklo_epi32(v2, v3), _mm256_unpackhi_epi32(v2, v3));
  const __m256i c = _mm256_add_epi32(_mm256_unpacklo_epi64(a, b), _mm256_unpackhi_epi64(a, b));  // per 128: v0..v3
  const __m256i e = _mm256_add_epi32(_mm256_unpacklo_epi32(v4, v5), _mm256_unpackhi_epi32(v4, v5));
  const __m256i f = _mm256_add_epi32(_mm256_unpacklo_epi32(v6, v7), _mm256_unpackhi_epi32(v6, v7));
  const __m256i g = _mm256_add_epi32(_mm256_unpacklo_epi64(e, f), _mm256_unpackhi_epi64(e, f));  // per 128: v4..v7
  return _mm256_add_epi32(_mm256_permute2x128_si256(c, g, 0x20), _mm256_permute2x128_si256(c, g, 0x31));
}

// Four rows at a time (a tail group repeats its last row and drops the copies), each token in turn
// (the driver hands over 16-row chunks for n > 1, so the weights are in cache for the later tokens);
// token t's x at xq + t * nb blocks, its y at y + t * out.
template <class B>
void rows(const uint8_t* xq, int64_t n, int64_t nb, const uint8_t* w, int64_t row_bytes, int64_t r0, int64_t r1,
          float* y, int64_t out) {
  const typename B::Consts k;
  const __m256i ones = _mm256_set1_epi16(1);
  const int64_t x_stride = nb * kQ80Bytes;
  for (int64_t r = r0; r < r1; r += 4) {
    const uint8_t* p[4];
    for (int j = 0; j < 4; ++j) p[j] = w + (r + j < r1 ? r + j : r1 - 1) * row_bytes;
    for (int64_t t = 0; t < n; ++t) {
      const uint8_t* xt = xq + t * x_stride;
      __m128 acc = _mm_setzero_ps();
      for (int64_t ib = 0; ib < nb; ib += 2) {
        const bool pair = ib + 1 < nb;
        const int64_t a = ib, b = pair ? ib + 1 : ib;
        const int64_t oa = a * B::kBytes, ob = b * B::kBytes;
        if (t == 0)  // the next group's rows, into L1 ahead of time (see the top of the file)
          for (int j = 0; j < 4; ++j)
            _mm_prefetch(reinterpret_cast<const char*>(p[j] + 4 * row_bytes + oa), _MM_HINT_T0);
        const __m256i xa = ld256(xt + a * kQ80Bytes + 2), xb = ld256(xt + b * kQ80Bytes + 2);
        const __m256i S = hsum8(dot32(B::quants(p[0] + oa, k), xa, ones), dot32(B::quants(p[1] + oa, k), xa, ones),
                                dot32(B::quants(p[2] + oa, k), xa, ones), dot32(B::quants(p[3] + oa, k), xa, ones),
                                dot32(B::quants(p[0] + ob, k), xb, ones), dot32(B::quants(p[1] + ob, k), xb, ones),
                                dot32(B::quants(p[2] + ob, k), xb, ones), dot32(B::quants(p[3] + ob, k), xb, ones));
        const __m256 dw =
            _mm256_cvtph_ps(_mm_set_epi64x(static_cast<long long>(f16x4(p[0] + ob, p[1] + ob, p[2] + ob, p[3] + ob)),
                                           static_cast<long long>(f16x4(p[0] + oa, p[1] + oa, p[2] + oa, p[3] + oa))));
        const uint64_t xda = ld16(xt + a * kQ80Bytes) * 0x0001000100010001ull;
        const uint64_t xdb = ld16(xt + b * kQ80Bytes) * 0x0001000100010001ull;
        const __m256 xd = _mm256_cvtph_ps(_mm_set_epi64x(static_cast<long long>(xdb), static_cast<long long>(xda)));
        // ROUNDING: the definition's dd = d * xd (exact), t = dd * float(S), acc += t per block in
        // order, lane-wise for the four rows (no FMA: -ffp-contract=off).
        const __m256 tv = _mm256_mul_ps(_mm256_mul_ps(dw, xd), _mm256_cvtepi32_ps(S));
        acc = _mm_add_ps(acc, _mm256_castps256_ps128(tv));
        if (pair) acc = _mm_add_ps(acc, _mm256_extractf128_ps(tv, 1));
      }
      float o[4];
      _mm_storeu_ps(o, acc);
      for (int j = 0; j < 4 && r + j < r1; ++j) y[t * out + r + j] = o[j];
    }
  }
}

}  // namespace

bool linear_q8_0_rows_avx2(int type, const void* xq, int64_t n, int64_t nb, const uint8_t* w, int64_t row_bytes,
                           int64_t r0, int64_t r1, float* y, int64_t out) {
  const auto* x = static_cast<const uint8_t*>(xq);
  switch (type) {
    case kQ8_0:
      rows<Q80>(x, n, nb, w, row_bytes, r0, r1, y, out);
      return true;
    case kIq4Nl:
      rows<Iq4Nl>(x, n, nb, w, row_bytes, r0, r1, y, out);
      return true;
    default:
      return false;
  }
}

}  // namespace strata::kernels::x86
