// Decode matvec over ggml block formats with AVX2 + FMA + F16C: kernels/kquant_linear.h.
//
// The 16 lanes of the definition are two ymm accumulators (lanes 0-7 and 8-15); each chunk of 16
// consecutive elements is decoded with ggml's f32 operations (w = (d * sc) * q [- dmin * m], no FMA)
// and fused into them, so element k lands in lane k % 16 in k order and the result equals
// kernels/ref/kquant_linear.cpp bit for bit. Four rows run side by side (four independent chains).
// Per the kernels/x86 rule (common.h) this file uses no std:: templates and no shared inline helpers.
#include <immintrin.h>

#include "kernels/x86/common.h"
#include "kernels/x86/kquant_x86.h"

namespace strata::kernels::x86 {
namespace {

// Must match kernels::QuantType (kernels/kquant.h).
enum : int { kQ8_0 = 0, kQ6_K = 1, kQ4_K = 2, kQ3_K = 3, kQ2_K = 4, kIq4Nl = 5 };

struct V16 {
  __m256 lo, hi;  // lanes 0-7, 8-15
};
struct I16 {
  __m256i lo, hi;
};

inline float h2f(const uint8_t* p) {
  uint16_t h;
  std::memcpy(&h, p, 2);
  return _cvtsh_ss(h);  // exact
}
// 16 bytes at p zero-extended to int32 (sign-extended for s8x16).
inline I16 u8x16(const uint8_t* p) {
  return {_mm256_cvtepu8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(p))),
          _mm256_cvtepu8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(p + 8)))};
}
inline I16 s8x16(const uint8_t* p) {
  return {_mm256_cvtepi8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(p))),
          _mm256_cvtepi8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(p + 8)))};
}
inline I16 shr(I16 v, int s) {
  const __m128i n = _mm_cvtsi32_si128(s);
  return {_mm256_srl_epi32(v.lo, n), _mm256_srl_epi32(v.hi, n)};
}
inline I16 shl(I16 v, int s) {
  const __m128i n = _mm_cvtsi32_si128(s);
  return {_mm256_sll_epi32(v.lo, n), _mm256_sll_epi32(v.hi, n)};
}
inline I16 and_(I16 v, int m) {
  const __m256i k = _mm256_set1_epi32(m);
  return {_mm256_and_si256(v.lo, k), _mm256_and_si256(v.hi, k)};
}
inline I16 or_(I16 a, I16 b) { return {_mm256_or_si256(a.lo, b.lo), _mm256_or_si256(a.hi, b.hi)}; }
inline I16 sub_(I16 v, int m) {
  const __m256i k = _mm256_set1_epi32(m);
  return {_mm256_sub_epi32(v.lo, k), _mm256_sub_epi32(v.hi, k)};
}
inline V16 cvt(I16 v) { return {_mm256_cvtepi32_ps(v.lo), _mm256_cvtepi32_ps(v.hi)}; }

struct Prep {
  float dl[16];
  float ml[16];
};

// Block layouts (byte offsets): kernels/kquant.h. vals(b, c): the quants of chunk c as f32.
struct Q4K {
  static constexpr int kElems = 256, kBytes = 144, kChunks = 16;
  static constexpr bool kAffine = true;
  static void prep(const uint8_t* b, Prep& p) {
    const float d = h2f(b), dmin = h2f(b + 2);
    const uint8_t* s = b + 4;
    for (int sub = 0; sub < 8; ++sub) {
      int sc, m;  // ggml get_scale_min_k4
      if (sub < 4) {
        sc = s[sub] & 63;
        m = s[sub + 4] & 63;
      } else {
        sc = (s[sub + 4] & 0xF) | ((s[sub - 4] >> 6) << 4);
        m = (s[sub + 4] >> 4) | ((s[sub] >> 6) << 4);
      }
      p.dl[2 * sub] = p.dl[2 * sub + 1] = d * static_cast<float>(sc);
      p.ml[2 * sub] = p.ml[2 * sub + 1] = dmin * static_cast<float>(m);
    }
  }
  static V16 vals(const uint8_t* b, int c) {
    const I16 v = u8x16(b + 16 + (c / 4) * 32 + (c & 1) * 16);
    return cvt((c & 2) ? shr(v, 4) : and_(v, 0xF));
  }
};

struct Q2K {
  static constexpr int kElems = 256, kBytes = 84, kChunks = 16;
  static constexpr bool kAffine = true;
  static void prep(const uint8_t* b, Prep& p) {
    const float d = h2f(b + 80), dmin = h2f(b + 82);
    for (int c = 0; c < 16; ++c) {
      p.dl[c] = d * static_cast<float>(b[c] & 0xF);
      p.ml[c] = dmin * static_cast<float>(b[c] >> 4);
    }
  }
  static V16 vals(const uint8_t* b, int c) {
    return cvt(and_(shr(u8x16(b + 16 + (c / 8) * 32 + (c & 1) * 16), 2 * ((c % 8) / 2)), 3));
  }
};

struct Q3K {
  static constexpr int kElems = 256, kBytes = 110, kChunks = 16;
  static constexpr bool kAffine = false;
  static void prep(const uint8_t* b, Prep& p) {
    const uint8_t* s = b + 96;
    const float d = h2f(b + 108);
    for (int c = 0; c < 16; ++c) {
      const int lo = c < 8 ? (s[c] & 0xF) : (s[c - 8] >> 4);
      const int sc = lo | (((s[8 + c % 4] >> (2 * (c / 4))) & 3) << 4);
      p.dl[c] = d * static_cast<float>(sc - 32);
    }
  }
  static V16 vals(const uint8_t* b, int c) {
    const int l0 = (c & 1) * 16;
    const I16 low = and_(shr(u8x16(b + 32 + (c / 8) * 32 + l0), 2 * ((c % 8) / 2)), 3);
    const I16 hi = shl(and_(shr(u8x16(b + l0), c / 2), 1), 2);
    return cvt(sub_(or_(low, hi), 4));
  }
};

struct Q6K {
  static constexpr int kElems = 256, kBytes = 210, kChunks = 16;
  static constexpr bool kAffine = false;
  static void prep(const uint8_t* b, Prep& p) {
    const int8_t* sc = reinterpret_cast<const int8_t*>(b + 192);
    const float d = h2f(b + 208);
    for (int c = 0; c < 16; ++c) p.dl[c] = d * static_cast<float>(sc[c]);
  }
  static V16 vals(const uint8_t* b, int c) {
    const int half = c / 8, plane = (c % 8) / 2, l0 = (c & 1) * 16;
    const I16 lo8 = u8x16(b + half * 64 + l0 + (plane & 1) * 32);
    const I16 low4 = plane < 2 ? and_(lo8, 0xF) : shr(lo8, 4);
    const I16 hi2 = and_(shr(u8x16(b + 128 + half * 32 + l0), 2 * plane), 3);
    return cvt(sub_(or_(low4, shl(hi2, 4)), 32));
  }
};

struct Q80 {
  static constexpr int kElems = 32, kBytes = 34, kChunks = 2;
  static constexpr bool kAffine = false;
  static void prep(const uint8_t* b, Prep& p) { p.dl[0] = p.dl[1] = h2f(b); }
  static V16 vals(const uint8_t* b, int c) { return cvt(s8x16(b + 2 + 16 * c)); }  // q * d == d * q
};

struct Iq4Nl {
  static constexpr int kElems = 32, kBytes = 18, kChunks = 2;
  static constexpr bool kAffine = false;
  static void prep(const uint8_t* b, Prep& p) { p.dl[0] = p.dl[1] = h2f(b); }
  // kvalues_iq4nl[q]: VPERMPS on each half of the grid, bit 3 of q picks the half.
  static __m256 lookup(__m256i q) {
    const __m256 g0 = _mm256_setr_ps(-127, -104, -83, -65, -49, -35, -22, -10);
    const __m256 g1 = _mm256_setr_ps(1, 13, 25, 38, 53, 69, 89, 113);
    const __m256 sel = _mm256_castsi256_ps(_mm256_slli_epi32(q, 28));  // sign bit = bit 3 of q
    return _mm256_blendv_ps(_mm256_permutevar8x32_ps(g0, q), _mm256_permutevar8x32_ps(g1, q), sel);
  }
  static V16 vals(const uint8_t* b, int c) {
    const I16 q = u8x16(b + 2);
    const I16 idx = c == 0 ? and_(q, 0xF) : shr(q, 4);
    return {lookup(idx.lo), lookup(idx.hi)};
  }
};

// ROUNDING: w = (dl * q) [- ml] as two roundings (no FMA), as ggml dequantize_row_*; then one FMA
// per lane.
template <class B>
inline void step(const uint8_t* b, int c, const Prep& p, const float* x, V16& acc) {
  const V16 q = B::vals(b, c);
  const __m256 dl = _mm256_set1_ps(p.dl[c]);
  __m256 wlo = _mm256_mul_ps(dl, q.lo), whi = _mm256_mul_ps(dl, q.hi);
  if constexpr (B::kAffine) {
    const __m256 ml = _mm256_set1_ps(p.ml[c]);
    wlo = _mm256_sub_ps(wlo, ml);
    whi = _mm256_sub_ps(whi, ml);
  }
  acc.lo = _mm256_fmadd_ps(wlo, _mm256_loadu_ps(x), acc.lo);
  acc.hi = _mm256_fmadd_ps(whi, _mm256_loadu_ps(x + 8), acc.hi);
}

// ROUNDING: the lane tree of kquant_linear.h: j += j + 8 (lo + hi), then + 4, + 2, + 1.
inline float reduce16(const V16& v) {
  const __m256 a = _mm256_add_ps(v.lo, v.hi);
  const __m128 b = _mm_add_ps(_mm256_castps256_ps128(a), _mm256_extractf128_ps(a, 1));
  const __m128 c = _mm_add_ps(b, _mm_movehl_ps(b, b));
  return _mm_cvtss_f32(_mm_add_ss(c, _mm_shuffle_ps(c, c, 1)));
}

template <class B>
void rows(const float* x, const uint8_t* w, int64_t row_bytes, int64_t in, int64_t r0, int64_t r1, float* y) {
  const int64_t nb = in / B::kElems;
  int64_t r = r0;
  for (; r + 4 <= r1; r += 4) {
    const uint8_t* p[4] = {w + r * row_bytes, w + (r + 1) * row_bytes, w + (r + 2) * row_bytes,
                           w + (r + 3) * row_bytes};
    V16 acc[4];
    for (V16& a : acc) a = {_mm256_setzero_ps(), _mm256_setzero_ps()};
    for (int64_t ib = 0; ib < nb; ++ib) {
      const float* xb = x + ib * B::kElems;
      const int64_t off = ib * B::kBytes;
      Prep q[4];
      for (int j = 0; j < 4; ++j) B::prep(p[j] + off, q[j]);
#pragma GCC unroll 16
      for (int c = 0; c < B::kChunks; ++c)
        for (int j = 0; j < 4; ++j) step<B>(p[j] + off, c, q[j], xb + 16 * c, acc[j]);
    }
    for (int j = 0; j < 4; ++j) y[r + j] = reduce16(acc[j]);
  }
  for (; r < r1; ++r) {
    const uint8_t* p = w + r * row_bytes;
    V16 acc = {_mm256_setzero_ps(), _mm256_setzero_ps()};
    for (int64_t ib = 0; ib < nb; ++ib) {
      Prep q;
      B::prep(p + ib * B::kBytes, q);
      for (int c = 0; c < B::kChunks; ++c) step<B>(p + ib * B::kBytes, c, q, x + ib * B::kElems + 16 * c, acc);
    }
    y[r] = reduce16(acc);
  }
}

}  // namespace

bool linear_quant_rows_avx2(int type, const float* x, const uint8_t* w, int64_t row_bytes, int64_t in, int64_t r0,
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
