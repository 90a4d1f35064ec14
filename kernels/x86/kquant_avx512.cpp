// Decode matvec over ggml block formats with AVX-512 F/BW/VL/DQ (+F16C): kernels/kquant_linear.h.
//
// One zmm accumulator per row holds the 16 lanes of the definition: element k of the row lands in
// lane k % 16 because each FMA takes 16 consecutive elements. Weights are decoded 16 at a time with
// exactly ggml's f32 operations (kernels/ref/kquant.cpp), so the result equals the reference bit for
// bit. Four rows run side by side, chunk by chunk, so four independent FMA chains hide the FMA
// latency; each block's scale factors are computed once per block (Prep), not per chunk.
// Per the kernels/x86 rule (common.h) this file uses no std:: templates and no shared inline helpers.
#include <immintrin.h>

#include "kernels/x86/common.h"
#include "kernels/x86/kquant_x86.h"

namespace strata::kernels::x86 {
namespace {

// Must match kernels::QuantType (kernels/kquant.h).
enum : int { kQ8_0 = 0, kQ6_K = 1, kQ4_K = 2, kQ3_K = 3, kQ2_K = 4, kIq4Nl = 5 };

inline float h2f(const uint8_t* p) {
  uint16_t h;
  std::memcpy(&h, p, 2);
  return _cvtsh_ss(h);  // exact
}
// 16 bytes at p, zero-extended to 16 int32 lanes.
inline __m512i u8x16(const uint8_t* p) {
  return _mm512_cvtepu8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
}
inline __m512i shr(__m512i v, int s) { return _mm512_srl_epi32(v, _mm_cvtsi32_si128(s)); }
inline __m512i and_(__m512i v, int m) { return _mm512_and_si512(v, _mm512_set1_epi32(m)); }

// Per block, the f32 factors of each 16-element chunk c: w = dl[c] * vals(c) (- ml[c] when affine),
// each computed with ggml's scalar operations (d * sc, dmin * m). ROUNDING: as ggml, no FMA.
struct kquant_avx512_prep {
  float dl[16];
  float ml[16];
};

// Each block type B: B::Prep, computed once per block by B::prep, and B::w(b, c, prep), the 16
// weights of chunk c (elements 16c .. 16c + 15) as f32, bit-identical to ggml's dequantisation.
// Block layouts (byte offsets): kernels/kquant.h.

// Q4_K: per sub-block of 32 a table of its 16 possible weights, T[q] = (d * sc) * q - dmin * m (the
// ggml operations, lane-wise), looked up with VPERMPS by the 4-bit quant: one shuffle per 16
// weights instead of convert, multiply and subtract.
struct Q4K {
  static constexpr int kElems = 256, kBytes = 144, kChunks = 16;
  struct Prep {
    __m512 t[8];
  };
  static void prep(const uint8_t* b, Prep& p) {
    const float d = h2f(b), dmin = h2f(b + 2);
    const uint8_t* s = b + 4;
    const __m512 iota = _mm512_setr_ps(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);
    for (int sub = 0; sub < 8; ++sub) {
      int sc, m;  // ggml get_scale_min_k4
      if (sub < 4) {
        sc = s[sub] & 63;
        m = s[sub + 4] & 63;
      } else {
        sc = (s[sub + 4] & 0xF) | ((s[sub - 4] >> 6) << 4);
        m = (s[sub + 4] >> 4) | ((s[sub] >> 6) << 4);
      }
      // ROUNDING: (d * sc) * q - dmin * m, each operation rounded, as ggml dequantize_row_q4_K.
      p.t[sub] = _mm512_sub_ps(_mm512_mul_ps(_mm512_set1_ps(d * static_cast<float>(sc)), iota),
                               _mm512_set1_ps(dmin * static_cast<float>(m)));
    }
  }
  static __m512 w(const uint8_t* b, int c, const Prep& p) {
    const __m512i v = u8x16(b + 16 + (c / 4) * 32 + (c & 1) * 16);  // sub-block c / 2, half c % 2
    // VPERMPS reads the low 4 bits of each index: the low nibble needs no mask.
    return _mm512_permutexvar_ps((c & 2) ? _mm512_srli_epi32(v, 4) : v, p.t[c / 2]);
  }
};

// Q2_K: per group of four chunks one register of tables, lane 4i + q = (d * sc_i) * q - dmin * m_i
// for chunk i of the group; the 2-bit quant plus 4i picks the lane.
struct Q2K {
  static constexpr int kElems = 256, kBytes = 84, kChunks = 16;
  struct Prep {
    __m512 t[4];
  };
  static void prep(const uint8_t* b, Prep& p) {
    const __m512 d = _mm512_set1_ps(h2f(b + 80)), dmin = _mm512_set1_ps(h2f(b + 82));
    const __m512i sc = u8x16(b);
    // ROUNDING: d * sc and dmin * m lane-wise, then (d * sc) * q - dmin * m: ggml dequantize_row_q2_K.
    const __m512 dl = _mm512_mul_ps(d, _mm512_cvtepi32_ps(and_(sc, 0xF)));
    const __m512 ml = _mm512_mul_ps(dmin, _mm512_cvtepi32_ps(_mm512_srli_epi32(sc, 4)));
    const __m512 q = _mm512_setr_ps(0, 1, 2, 3, 0, 1, 2, 3, 0, 1, 2, 3, 0, 1, 2, 3);
    for (int g = 0; g < 4; ++g) {
      const __m512i idx =
          _mm512_add_epi32(_mm512_set1_epi32(4 * g), _mm512_setr_epi32(0, 0, 0, 0, 1, 1, 1, 1, 2, 2, 2, 2, 3, 3, 3, 3));
      p.t[g] = _mm512_sub_ps(_mm512_mul_ps(_mm512_permutexvar_ps(idx, dl), q), _mm512_permutexvar_ps(idx, ml));
    }
  }
  static __m512 w(const uint8_t* b, int c, const Prep& p) {
    const __m512i v = shr(u8x16(b + 16 + (c / 8) * 32 + (c & 1) * 16), 2 * ((c % 8) / 2));
    // (v & 3) | 4 (c % 4) in one VPTERNLOGD (A & B | C = 0xEA).
    const __m512i idx = _mm512_ternarylogic_epi32(v, _mm512_set1_epi32(3), _mm512_set1_epi32(4 * (c % 4)), 0xEA);
    return _mm512_permutexvar_ps(idx, p.t[c / 4]);
  }
};

// The other types: scalar factors per chunk, then (dl * q) [- ml] lane-wise.
template <class Self, bool kAffine>
struct ScaledBlock {
  using Prep = kquant_avx512_prep;
  static __m512 w(const uint8_t* b, int c, const Prep& p) {
    __m512 v = _mm512_mul_ps(_mm512_set1_ps(p.dl[c]), Self::vals(b, c));
    if constexpr (kAffine) v = _mm512_sub_ps(v, _mm512_set1_ps(p.ml[c]));
    return v;
  }
};

struct Q3K : ScaledBlock<Q3K, false> {
  static constexpr int kElems = 256, kBytes = 110, kChunks = 16;
  static void prep(const uint8_t* b, Prep& p) {
    const uint8_t* s = b + 96;
    const float d = h2f(b + 108);
    for (int c = 0; c < 16; ++c) {
      const int lo = c < 8 ? (s[c] & 0xF) : (s[c - 8] >> 4);
      const int sc = lo | (((s[8 + c % 4] >> (2 * (c / 4))) & 3) << 4);
      p.dl[c] = d * static_cast<float>(sc - 32);
    }
  }
  static __m512 vals(const uint8_t* b, int c) {
    const int l0 = (c & 1) * 16;
    const __m512i low = and_(shr(u8x16(b + 32 + (c / 8) * 32 + l0), 2 * ((c % 8) / 2)), 3);
    const __m512i hi = _mm512_slli_epi32(and_(shr(u8x16(b + l0), c / 2), 1), 2);
    return _mm512_cvtepi32_ps(_mm512_sub_epi32(_mm512_or_si512(low, hi), _mm512_set1_epi32(4)));
  }
};

struct Q6K : ScaledBlock<Q6K, false> {
  static constexpr int kElems = 256, kBytes = 210, kChunks = 16;
  static void prep(const uint8_t* b, Prep& p) {
    const int8_t* sc = reinterpret_cast<const int8_t*>(b + 192);
    const float d = h2f(b + 208);
    for (int c = 0; c < 16; ++c) p.dl[c] = d * static_cast<float>(sc[c]);
  }
  static __m512 vals(const uint8_t* b, int c) {
    const int half = c / 8, plane = (c % 8) / 2, l0 = (c & 1) * 16;
    const __m512i lo8 = u8x16(b + half * 64 + l0 + (plane & 1) * 32);
    const __m512i low4 = plane < 2 ? and_(lo8, 0xF) : _mm512_srli_epi32(lo8, 4);
    const __m512i hi2 = and_(shr(u8x16(b + 128 + half * 32 + l0), 2 * plane), 3);
    return _mm512_cvtepi32_ps(
        _mm512_sub_epi32(_mm512_or_si512(low4, _mm512_slli_epi32(hi2, 4)), _mm512_set1_epi32(32)));
  }
};

struct Q80 : ScaledBlock<Q80, false> {
  static constexpr int kElems = 32, kBytes = 34, kChunks = 2;
  static void prep(const uint8_t* b, Prep& p) { p.dl[0] = p.dl[1] = h2f(b); }
  static __m512 vals(const uint8_t* b, int c) {  // q * d == d * q (ggml: qs[j]*d)
    return _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(b + 2 + 16 * c))));
  }
};

// IQ4_NL: the block's 16 weights d * kvalues_iq4nl[q] (ggml's product, lane-wise) as one register,
// looked up with VPERMPS.
struct Iq4Nl {
  static constexpr int kElems = 32, kBytes = 18, kChunks = 2;
  struct Prep {
    __m512 t;
  };
  static void prep(const uint8_t* b, Prep& p) {
    const __m512 grid = _mm512_setr_ps(-127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113);
    p.t = _mm512_mul_ps(_mm512_set1_ps(h2f(b)), grid);
  }
  static __m512 w(const uint8_t* b, int c, const Prep& p) {
    const __m512i q = u8x16(b + 2);  // VPERMPS reads the low 4 bits: the low nibble needs no mask
    return _mm512_permutexvar_ps(c == 0 ? q : _mm512_srli_epi32(q, 4), p.t);
  }
};

// One fused multiply-add of chunk c's weights into the lane k % 16 accumulator.
template <class B>
inline __m512 step(const uint8_t* b, int c, const typename B::Prep& p, __m512 xv, __m512 acc) {
  return _mm512_fmadd_ps(B::w(b, c, p), xv, acc);
}

// ROUNDING: the lane tree of kquant_linear.h: j += j + 8, then + 4, + 2, + 1.
inline float reduce16(__m512 v) {
  const __m256 a = _mm256_add_ps(_mm512_castps512_ps256(v), _mm512_extractf32x8_ps(v, 1));
  const __m128 b = _mm_add_ps(_mm256_castps256_ps128(a), _mm256_extractf128_ps(a, 1));
  const __m128 c = _mm_add_ps(b, _mm_movehl_ps(b, b));
  return _mm_cvtss_f32(_mm_add_ss(c, _mm_shuffle_ps(c, c, 1)));
}

// Four rows side by side, chunk by chunk: four independent FMA chains, each in its row's k order.
template <class B>
void rows(const float* x, const uint8_t* w, int64_t row_bytes, int64_t in, int64_t r0, int64_t r1, float* y) {
  const int64_t nb = in / B::kElems;
  int64_t r = r0;
  for (; r + 4 <= r1; r += 4) {
    const uint8_t* p0 = w + r * row_bytes;
    const uint8_t* p1 = p0 + row_bytes;
    const uint8_t* p2 = p1 + row_bytes;
    const uint8_t* p3 = p2 + row_bytes;
    __m512 a0 = _mm512_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;
    for (int64_t ib = 0; ib < nb; ++ib) {
      const float* xb = x + ib * B::kElems;
      const int64_t off = ib * B::kBytes;
      typename B::Prep q0, q1, q2, q3;
      B::prep(p0 + off, q0);
      B::prep(p1 + off, q1);
      B::prep(p2 + off, q2);
      B::prep(p3 + off, q3);
#pragma GCC unroll 16
      for (int c = 0; c < B::kChunks; ++c) {
        const __m512 xv = _mm512_loadu_ps(xb + 16 * c);
        a0 = step<B>(p0 + off, c, q0, xv, a0);
        a1 = step<B>(p1 + off, c, q1, xv, a1);
        a2 = step<B>(p2 + off, c, q2, xv, a2);
        a3 = step<B>(p3 + off, c, q3, xv, a3);
      }
    }
    y[r] = reduce16(a0);
    y[r + 1] = reduce16(a1);
    y[r + 2] = reduce16(a2);
    y[r + 3] = reduce16(a3);
  }
  for (; r < r1; ++r) {
    const uint8_t* p = w + r * row_bytes;
    __m512 a = _mm512_setzero_ps();
    for (int64_t ib = 0; ib < nb; ++ib) {
      typename B::Prep q;
      B::prep(p + ib * B::kBytes, q);
#pragma GCC unroll 16
      for (int c = 0; c < B::kChunks; ++c)
        a = step<B>(p + ib * B::kBytes, c, q, _mm512_loadu_ps(x + ib * B::kElems + 16 * c), a);
    }
    y[r] = reduce16(a);
  }
}

// Several tokens (n > 1): each group of four rows is decoded once into `scratch` ([4][in] f32, L2
// sized), then every group of four tokens runs over it with its 4 x 4 accumulators in registers (one
// weight load and one x load per four FMAs). Each (token, row) still sums its elements in k order
// into lane k % 16 with the same weights, so the bits equal the one-token kernel's and the
// reference's. Tails (fewer than four rows or tokens) compute on a duplicate and drop it.
template <class B>
void rows_batch(const float* x, int64_t n, const uint8_t* w, int64_t row_bytes, int64_t in, int64_t out, int64_t r0,
                int64_t r1, float* y, float* scratch) {
  const int64_t nb = in / B::kElems;
  for (int64_t r = r0; r < r1; r += 4) {
    const int nr = static_cast<int>(imin(4, r1 - r));
    for (int j = 0; j < nr; ++j)
      for (int64_t ib = 0; ib < nb; ++ib) {
        const uint8_t* b = w + (r + j) * row_bytes + ib * B::kBytes;
        typename B::Prep p;
        B::prep(b, p);
#pragma GCC unroll 16
        for (int c = 0; c < B::kChunks; ++c) _mm512_storeu_ps(scratch + j * in + ib * B::kElems + 16 * c, B::w(b, c, p));
      }
    const float* wr[4];
    for (int j = 0; j < 4; ++j) wr[j] = scratch + (j < nr ? j : 0) * in;
    for (int64_t i0 = 0; i0 < n; i0 += 4) {
      const int ni = static_cast<int>(imin(4, n - i0));
      const float* xr[4];
      for (int t = 0; t < 4; ++t) xr[t] = x + (i0 + (t < ni ? t : 0)) * in;
      __m512 a[4][4];
      for (int t = 0; t < 4; ++t)
        for (int j = 0; j < 4; ++j) a[t][j] = _mm512_setzero_ps();
      for (int64_t k = 0; k < in; k += 16) {
        const __m512 x0 = _mm512_loadu_ps(xr[0] + k), x1 = _mm512_loadu_ps(xr[1] + k);
        const __m512 x2 = _mm512_loadu_ps(xr[2] + k), x3 = _mm512_loadu_ps(xr[3] + k);
        for (int j = 0; j < 4; ++j) {
          const __m512 wv = _mm512_loadu_ps(wr[j] + k);
          a[0][j] = _mm512_fmadd_ps(wv, x0, a[0][j]);
          a[1][j] = _mm512_fmadd_ps(wv, x1, a[1][j]);
          a[2][j] = _mm512_fmadd_ps(wv, x2, a[2][j]);
          a[3][j] = _mm512_fmadd_ps(wv, x3, a[3][j]);
        }
      }
      for (int t = 0; t < ni; ++t)
        for (int j = 0; j < nr; ++j) y[(i0 + t) * out + r + j] = reduce16(a[t][j]);
    }
  }
}

}  // namespace

bool linear_quant_rows_avx512(int type, const float* x, const uint8_t* w, int64_t row_bytes, int64_t in, int64_t r0,
                              int64_t r1, float* y) {
  switch (type) {
    case kQ4_K:
      rows<Q4K>(x, w, row_bytes, in, r0, r1, y);
      return true;
    case kQ2_K:
      rows<Q2K>(x, w, row_bytes, in, r0, r1, y);
      return true;
    case kQ3_K:
      rows<Q3K>(x, w, row_bytes, in, r0, r1, y);
      return true;
    case kQ6_K:
      rows<Q6K>(x, w, row_bytes, in, r0, r1, y);
      return true;
    case kQ8_0:
      rows<Q80>(x, w, row_bytes, in, r0, r1, y);
      return true;
    case kIq4Nl:
      rows<Iq4Nl>(x, w, row_bytes, in, r0, r1, y);
      return true;
    default:
      return false;
  }
}

}  // namespace strata::kernels::x86

namespace strata::kernels::x86 {

int64_t linear_quant_batch_scratch_floats(int64_t in) { return 4 * in; }

bool linear_quant_rows_batch_avx512(int type, const float* x, int64_t n, const uint8_t* w, int64_t row_bytes,
                                    int64_t in, int64_t out, int64_t r0, int64_t r1, float* y, float* scratch) {
  switch (type) {
    case kQ4_K: rows_batch<Q4K>(x, n, w, row_bytes, in, out, r0, r1, y, scratch); return true;
    case kQ2_K: rows_batch<Q2K>(x, n, w, row_bytes, in, out, r0, r1, y, scratch); return true;
    case kQ3_K: rows_batch<Q3K>(x, n, w, row_bytes, in, out, r0, r1, y, scratch); return true;
    case kQ6_K: rows_batch<Q6K>(x, n, w, row_bytes, in, out, r0, r1, y, scratch); return true;
    case kQ8_0: rows_batch<Q80>(x, n, w, row_bytes, in, out, r0, r1, y, scratch); return true;
    case kIq4Nl: rows_batch<Iq4Nl>(x, n, w, row_bytes, in, out, r0, r1, y, scratch); return true;
    default: return false;
  }
}

}  // namespace strata::kernels::x86
