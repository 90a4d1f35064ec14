// AVX-512 BF16 (+VBMI) kernels for FP8 and MXFP4 weights: products in VDPBF16PS, sums in f32.
//
// Why this is exact: E4M3 and E2M1 values, act_quant_fp8 activations (E4M3 times a power of two) and
// E4M3/E2M1 weights times their power-of-two block scales are all representable in bf16, and the
// product of two such values (at most 4 x 4 significant bits) is exact in f32. VDPBF16PS treats bf16
// subnormals as zero and flushes f32 subnormal results, so the level only takes weights whose scale
// codes lie in [kMinScaleCode, kMaxScaleCode] (every operand and product then stays normal); others
// go to the AVX-512 f32 level (`supports`, see linear.cpp). Only the summation order differs from ref.
//
// Decode FP8 (per 64 weight bytes of a row): two VPERMI2B look the 7-bit magnitude up in 128-entry
//   tables of the bf16 low and high bytes, one VPTERNLOGD ORs the sign in, and VPUNPCK{L,H}BW make
//   bf16 words in a lane-interleaved order that the prepared x row shares; the [32, 32] weight
//   scale is folded into x once per 32-row block by adding to the bf16 exponent.
// Decode FP4 (per 64 packed bytes = 128 weights = 4 blocks): each 16-bit word holds 4 nibbles; three
//   shifts and four VPERMW on a 32-entry bf16 table give 4 vectors, x is prepared in the matching
//   4-way order, and 128-bit lane l of the VDPBF16PS partial is exactly block l, so one FMA with the
//   per-lane block scales finishes the 4 blocks.
// Prefill: x rows packed as bf16 pairs [K/2][32 rows][2]; weight tiles dequantised (scale folded,
//   exact) to plain bf16 rows; a 12 x 32 micro-kernel of 24 zmm accumulators.
#include <immintrin.h>

#include "kernels/detail/kernel_table.h"
#include "kernels/x86/common.h"
#include "kernels/x86/quant_x86.h"

namespace strata::kernels::x86 {
namespace {

// Weight scales 2^-63 .. 2^63: with activations >= 2^-31 (act_quant's 1e-4 clamp gives s_x >= 2^-22)
// every folded operand and product stays a normal float.
constexpr uint8_t kMinScaleCode = 127 - 63;
constexpr uint8_t kMaxScaleCode = 127 + 63;

// ---- constant tables ---------------------------------------------------------------------------
// bf16 bits of the E4M3 magnitude m (7 bits); 127 is NaN.
constexpr uint16_t e4m3_bf16_bits(int m) {
  const int e = m >> 3, mm = m & 7;
  if (m == 127) return 0x7FC0;
  if (e == 0) {
    if (mm == 0) return 0;
    int man = mm, exp = -9;  // value man * 2^exp, normalised to man in [8, 16)
    while (man < 8) {
      man <<= 1;
      --exp;
    }
    return static_cast<uint16_t>(((exp + 3 + 127) << 7) | ((man & 7) << 4));
  }
  return static_cast<uint16_t>(((e + 120) << 7) | (mm << 4));
}
struct alignas(64) E4m3Lut {
  uint8_t lo[128];
  uint8_t hi[128];
};
constexpr E4m3Lut make_e4m3_lut() {
  E4m3Lut t{};
  for (int m = 0; m < 128; ++m) {
    t.lo[m] = static_cast<uint8_t>(e4m3_bf16_bits(m) & 0xFF);
    t.hi[m] = static_cast<uint8_t>(e4m3_bf16_bits(m) >> 8);
  }
  return t;
}
constexpr E4m3Lut kE4m3Lut = make_e4m3_lut();

// bf16 bits of E2M1 code (k & 15), 32 entries so VPERMW may see bit 4 of the next nibble.
struct alignas(64) Words32 {
  uint16_t v[32];
};
constexpr Words32 make_e2m1_bf16() {
  constexpr uint16_t mag[8] = {0x0000, 0x3F00, 0x3F80, 0x3FC0, 0x4000, 0x4040, 0x4080, 0x40C0};
  Words32 t{};
  for (int k = 0; k < 32; ++k) t.v[k] = static_cast<uint16_t>(mag[k & 7] | ((k & 8) ? 0x8000 : 0));
  return t;
}
constexpr Words32 kE2M1Bf16 = make_e2m1_bf16();

// FP8 decode order: word p of the "lo" vector is byte 16*(p/8) + p%8 of a 64-byte chunk, of "hi" + 8.
constexpr Words32 make_fp8_order(int half) {
  Words32 t{};
  for (int p = 0; p < 32; ++p) t.v[p] = static_cast<uint16_t>(16 * (p / 8) + 8 * half + p % 8);
  return t;
}
constexpr Words32 kFp8OrderLo = make_fp8_order(0), kFp8OrderHi = make_fp8_order(1);

// FP4 decode order: word i of vector q is element 4i + q of a 128-element chunk (mod 64 per half).
constexpr Words32 make_fp4_order(int q) {
  Words32 t{};
  for (int i = 0; i < 32; ++i) t.v[i] = static_cast<uint16_t>((4 * i + q) & 63);
  return t;
}
constexpr Words32 kFp4Order[4] = {make_fp4_order(0), make_fp4_order(1), make_fp4_order(2), make_fp4_order(3)};

// Natural order from [lo0..lo15, hi0..hi15]: word j is lo_{j/2} (even j) or hi_{j/2} (odd j).
constexpr Words32 make_word_interleave() {
  Words32 t{};
  for (int j = 0; j < 32; ++j) t.v[j] = static_cast<uint16_t>((j & 1) ? 16 + j / 2 : j / 2);
  return t;
}
constexpr Words32 kWordInterleave = make_word_interleave();

alignas(64) constexpr int32_t kLaneOfBlock[16] = {0, 0, 0, 0, 1, 1, 1, 1, 2, 2, 2, 2, 3, 3, 3, 3};
alignas(64) constexpr float kE2M1Signed[16] = {0.0f,  0.5f,  1.0f,  1.5f,  2.0f,  3.0f,  4.0f,  6.0f,
                                               -0.0f, -0.5f, -1.0f, -1.5f, -2.0f, -3.0f, -4.0f, -6.0f};

inline __m512i load_words(const Words32& t) { return _mm512_load_si512(t.v); }
inline __m512bh as_bh(__m512i v) { return (__m512bh)v; }
inline __m512i from_bh(__m512bh v) { return (__m512i)v; }
inline __m512 dot(__m512 acc, __m512i a, __m512i b) { return _mm512_dpbf16_ps(acc, as_bh(a), as_bh(b)); }

// Lane r = _mm512_reduce_add_ps(v[r]) bit for bit, for 16 vectors at once: GCC's reduction adds the
// 256-bit halves, then the 128-bit halves, then lanes (0, 2) and (1, 3), then those two sums; the
// same additions (float addition commutes exactly) run here on two, four, eight and sixteen rows per
// vector, so 15 adds and 30 shuffles replace 16 x 4 adds and 16 x 4 extracts or shuffles. Rows are
// taken in the order v[4 (j % 4) + j / 4] so that the last step leaves them in natural lane order.
inline __m512 reduce_add_16(const __m512* v) {
  __m512 t[8], u[4], h[2];
  for (int m = 0; m < 8; ++m) {
    const __m512 a = v[4 * ((2 * m) % 4) + (2 * m) / 4], b = v[4 * ((2 * m + 1) % 4) + (2 * m + 1) / 4];
    t[m] = _mm512_add_ps(_mm512_shuffle_f32x4(a, b, 0x44), _mm512_shuffle_f32x4(a, b, 0xEE));
  }
  for (int m = 0; m < 4; ++m)
    u[m] = _mm512_add_ps(_mm512_shuffle_f32x4(t[2 * m], t[2 * m + 1], 0x88), _mm512_shuffle_f32x4(t[2 * m], t[2 * m + 1], 0xDD));
  for (int n = 0; n < 2; ++n)
    h[n] = _mm512_add_ps(_mm512_shuffle_ps(u[2 * n], u[2 * n + 1], 0x44), _mm512_shuffle_ps(u[2 * n], u[2 * n + 1], 0xEE));
  return _mm512_add_ps(_mm512_shuffle_ps(h[0], h[1], 0x88), _mm512_shuffle_ps(h[0], h[1], 0xDD));
}

// y[j * ldy + i] = horizontal sum of part[j * 16 + i] for j < NX, i < rows (rows <= 16); the rest of
// part is padding (zeroed here, never stored).
template <int NX>
void store_row_sums(__m512* part, int rows, float* y, int64_t ldy) {
  for (int i = rows; i < 16; ++i)
    for (int j = 0; j < NX; ++j) part[j * 16 + i] = _mm512_setzero_ps();
  const __mmask16 keep = static_cast<__mmask16>((1u << rows) - 1);
  for (int j = 0; j < NX; ++j) _mm512_mask_storeu_ps(y + j * ldy, keep, reduce_add_16(part + j * 16));
}

// 16 E4M3 codes -> values * 2^-8 (fp16 trick, exact; see linear_avx512.cpp).
inline __m512 e4m3x16(const uint8_t* p) {
  __m256i h = _mm256_cvtepi8_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
  h = _mm256_and_si256(_mm256_slli_epi16(h, 7), _mm256_set1_epi16(static_cast<short>(0xBF80)));
  return _mm512_cvtph_ps(h);
}

// A quantised row padded with zeros to `padded` values.
void quantised_copy(const float* x, int64_t in, int64_t padded, float* q) {
  std::memcpy(q, x, static_cast<size_t>(in) * sizeof(float));
  std::memset(q + in, 0, static_cast<size_t>(padded - in) * sizeof(float));
  act_quant_fp8_avx512(q, in);
}

bool codes_in_range(const uint8_t* s, int64_t n) {
  __m512i mn = _mm512_set1_epi8(static_cast<char>(0xFF)), mx = _mm512_setzero_si512();
  int64_t i = 0;
  for (; i + 64 <= n; i += 64) {
    const __m512i v = _mm512_loadu_si512(s + i);
    mn = _mm512_min_epu8(mn, v);
    mx = _mm512_max_epu8(mx, v);
  }
  if (i < n) {
    const __mmask64 m = (~0ULL) >> (64 - (n - i));
    mn = _mm512_min_epu8(mn, _mm512_mask_loadu_epi8(_mm512_set1_epi8(static_cast<char>(0xFF)), m, s + i));
    mx = _mm512_max_epu8(mx, _mm512_maskz_loadu_epi8(m, s + i));
  }
  const __mmask64 low = _mm512_cmplt_epu8_mask(mn, _mm512_set1_epi8(static_cast<char>(kMinScaleCode)));
  const __mmask64 high = _mm512_cmpgt_epu8_mask(mx, _mm512_set1_epi8(static_cast<char>(kMaxScaleCode)));
  return (low | high) == 0;
}

bool fp8_supports(const Fp8Weight& w, int64_t /*n*/) {
  // A range known since bind time (with_scale_range) spares reading every scale on every call.
  if (w.scale_lo <= w.scale_hi) return w.scale_lo >= kMinScaleCode && w.scale_hi <= kMaxScaleCode;
  return codes_in_range(w.scale, ceil_div(w.out, 32) * ceil_div(w.in, 32));
}
// n < kGemmMinRows runs the decode kernels; from there on the GEMM.
constexpr int64_t kGemmMinRows = 8;

// The FP4 decode kernel applies scales in f32 (any code is exact); the GEMM folds them into bf16.
bool fp4_supports(const Fp4Weight& w, int64_t n) {
  return n < kGemmMinRows || codes_in_range(w.scale, w.out * (w.in / 32));
}

// =================================================================================== FP8 decode
size_t fp8_act_bytes(int64_t in) { return static_cast<size_t>(ceil_div(in, 64) * 128); }

// x row -> per 64-value chunk [32 words "lo" order | 32 words "hi" order] of bf16 (exact).
void fp8_prep(const float* x, int64_t in, void* act) {
  const int64_t padded = round_up(in, 64);
  Scratch tmp(static_cast<size_t>(padded) * sizeof(float));
  float* q = tmp.as<float>();
  quantised_copy(x, in, padded, q);
  uint16_t* a = static_cast<uint16_t*>(act);
  const __m512i lo = load_words(kFp8OrderLo), hi = load_words(kFp8OrderHi);
  for (int64_t c = 0; c < padded / 64; ++c) {
    const float* f = q + 64 * c;
    const __m512i z0 = from_bh(_mm512_cvtne2ps_pbh(_mm512_load_ps(f + 16), _mm512_load_ps(f)));
    const __m512i z1 = from_bh(_mm512_cvtne2ps_pbh(_mm512_load_ps(f + 48), _mm512_load_ps(f + 32)));
    _mm512_store_si512(a + 64 * c, _mm512_permutex2var_epi16(z0, lo, z1));
    _mm512_store_si512(a + 64 * c + 32, _mm512_permutex2var_epi16(z0, hi, z1));
  }
}

// 64 E4M3 codes -> bf16 words in fp8 decode order (lo, hi).
struct E4m3Decoder {
  __m512i tl0, tl1, th0, th1, sign;
  E4m3Decoder()
      : tl0(_mm512_load_si512(kE4m3Lut.lo)),
        tl1(_mm512_load_si512(kE4m3Lut.lo + 64)),
        th0(_mm512_load_si512(kE4m3Lut.hi)),
        th1(_mm512_load_si512(kE4m3Lut.hi + 64)),
        sign(_mm512_set1_epi8(static_cast<char>(0x80))) {}
  void decode(__m512i v, __m512i* wl, __m512i* wh) const {
    const __m512i lb = _mm512_permutex2var_epi8(tl0, v, tl1);  // index bits 0..6: the sign is ignored
    __m512i hb = _mm512_permutex2var_epi8(th0, v, th1);
    hb = _mm512_ternarylogic_epi32(hb, v, sign, 0xF8);  // hb | (v & 0x80)
    *wl = _mm512_unpacklo_epi8(lb, hb);
    *wh = _mm512_unpackhi_epi8(lb, hb);
  }
};

// One weight row against NX prepared x rows (xstride words apart). A single sequential weight stream
// keeps the hardware prefetcher at full speed: on Zen4 one row at a time streams ~1.6x faster from
// DRAM than four interleaved rows (bench/kernels_bench decode_*, t=1). Two accumulators per x row
// (even/odd words) keep the VDPBF16PS chains short.
// The loop prefetches the same bytes two rows ahead, once per 64 bytes. Without it the kernel
// waited on DRAM at every 64-byte load (perf annotate: 60% of its samples on the first VPERMT2B)
// on a Sapphire Rapids VM: 12.6-12.9 GB/s at 2 threads; 2 KiB ahead 15.0-15.1; one row ahead
// 14.8-16.4; two rows 16.2-19.3; four 16.1-18.4; eight 15.9-18.0 (bench/kernels_bench
// BM_LinearFp8/decode_attn_*, level avx512bf16, medians of 3). On Zen 4 a fixed 1 KiB prefetch
// made this loop slower (see fp4_partials); the two-row distance was not measured there.
// Short rows (in < 2048: the 8 GB scaled checkpoint's wq_b 6144 x 256, wo_b 1024 x 1536) prefetch
// at least kFp8PrefetchMinBytes ahead: two rows of 256 bytes were 512 bytes, too close to hide DRAM
// latency. Zen 5 VM, 2 threads, before -> after (BM_LinearFp8/decode_*/2/3, alternated twice):
// 6144 x 256 26.4-27.8 -> 34.2-40.2 GB/s, 5120 x 1024 37.1-42.0 -> 41.7-45.3, 1024 x 1536 33.6-38.1
// -> 35.3-43.0; 8 KiB ahead measured no better than 4.
constexpr int64_t kFp8PrefetchRows = 2;
constexpr int64_t kFp8PrefetchMinBytes = 4096;

// It leaves lane partials, part[j * 16] = acc[j][0] + acc[j][1] (fp8_rows sums 16 rows' at once).
template <int NX>
void fp8_partials(const uint16_t* xs, int64_t xstride, const uint8_t* w, int64_t in, __m512* part, bool once) {
  const E4m3Decoder d;
  __m512 acc[NX][2];
  for (int j = 0; j < NX; ++j) acc[j][0] = acc[j][1] = _mm512_setzero_ps();
  auto step = [&](int64_t c, __m512i v) __attribute__((always_inline)) {
    __m512i wl, wh;
    d.decode(v, &wl, &wh);
    for (int j = 0; j < NX; ++j) {
      acc[j][0] = dot(acc[j][0], wl, _mm512_load_si512(xs + j * xstride + 64 * c));
      acc[j][1] = dot(acc[j][1], wh, _mm512_load_si512(xs + j * xstride + 64 * c + 32));
    }
  };
  const int64_t full = in / 64;
  for (int64_t c = 0; c < full; ++c) {
    prefetch_weights(w + 64 * c + imax(kFp8PrefetchRows * in, kFp8PrefetchMinBytes), once);
    step(c, _mm512_loadu_si512(w + 64 * c));
  }
  // A half chunk at the end: the missing bytes load as code 0 (value 0) and meet zero x.
  if (in & 32) step(full, _mm512_maskz_loadu_epi8(0xFFFFFFFFULL, w + 64 * full));
  for (int j = 0; j < NX; ++j) part[j * 16] = _mm512_add_ps(acc[j][0], acc[j][1]);
}

// Rows [r, hi) in groups of 16, each group's sums reduced together (reduce_add_16; see fp4_rows).
template <int NX>
void fp8_rows(const uint16_t* xs, int64_t xstride, const Fp8Weight& w, int64_t r, int64_t hi, float* y, int64_t ldy,
              bool once) {
  __m512 part[NX * 16];
  for (; r < hi; r += 16) {
    const int rows = static_cast<int>(imin(16, hi - r));
    for (int i = 0; i < rows; ++i) fp8_partials<NX>(xs, xstride, w.w + (r + i) * w.in, w.in, part + i, once);
    store_row_sums<NX>(part, rows, y + r, ldy);
  }
}

// Up to eight x rows share one pass over a weight row: eight decode rows (eight streams of a batch)
// decode each weight vector once instead of twice. Rows wider than kWideNxMaxIn go four at a time
// (eight rows of x would no longer fit L1 beside the weight stream). A row's sum is the same at any
// NX (own accumulators, same order), so the grouping never changes bits.
constexpr int kMaxNx = 8;
constexpr int64_t kWideNxMaxIn = 2048;

void fp8_matvec(const void* act, int64_t nx, size_t act_stride, const Fp8Weight& w, int64_t r0, int64_t r1, float* y,
                int64_t ldy, bool once_call) {
  const int64_t in = w.in, nkb = in / 32, nch = ceil_div(in, 64), xstride = nch * 64;
  Scratch buf(static_cast<size_t>(nx * xstride) * 2);
  uint16_t* xs = buf.as<uint16_t>();
  const __m512i nonzero = _mm512_set1_epi16(0x7FFF), exponent = _mm512_set1_epi16(0x7F80);
  for (int64_t rb = r0 / 32; rb * 32 < r1; ++rb) {
    // x' = x * s_w[rb, b]: add (code - 127) to the bf16 exponent of every non-zero value (exact).
    const uint8_t* sc = w.scale + rb * nkb;
    for (int64_t c = 0; c < nch; ++c) {
      const short d0 = static_cast<short>((sc[2 * c] - 127) * 128);
      const short d1 = static_cast<short>(2 * c + 1 < nkb ? (sc[2 * c + 1] - 127) * 128 : 0);
      const __m512i dv = _mm512_mask_blend_epi16(0xFFFF0000u, _mm512_set1_epi16(d0), _mm512_set1_epi16(d1));
      for (int64_t j = 0; j < nx; ++j) {
        const uint16_t* xa = reinterpret_cast<const uint16_t*>(static_cast<const unsigned char*>(act) + j * act_stride);
        for (int h = 0; h < 2; ++h) {
          const __m512i xv = _mm512_load_si512(xa + 64 * c + 32 * h);
          // Not a NaN or inf either: moving its exponent would make it finite, where the reference's
          // row is NaN (NonFiniteInputGivesNaNAsReference).
          const __mmask32 nz = _mm512_test_epi16_mask(xv, nonzero) &
                               _mm512_cmpneq_epi16_mask(_mm512_and_si512(xv, exponent), exponent);
          _mm512_store_si512(xs + j * xstride + 64 * c + 32 * h, _mm512_mask_add_epi16(xv, nz, xv, dv));
        }
      }
    }
    const int64_t lo = imax(r0, rb * 32), hi = imin(r1, rb * 32 + 32);
    const int64_t group = in > kWideNxMaxIn ? 4 : kMaxNx;
    const bool once = once_call && nx <= group;  // more rows: the block is read again for the next group
    for (int64_t j0 = 0; j0 < nx; j0 += group) {
      const uint16_t* xj = xs + j0 * xstride;
      float* yj = y + j0 * ldy;
      with_count<kMaxNx>(imin(group, nx - j0), [&](auto nxc) {
        fp8_rows<decltype(nxc)::value>(xj, xstride, w, lo, hi, yj, ldy, once);
      });
    }
  }
}

// =================================================================================== FP4 decode
size_t fp4_act_bytes(int64_t in) { return static_cast<size_t>(ceil_div(in, 128) * 256); }

// x row -> per 128-value chunk four vectors X_q with word i = x[128c + 4i + q] (bf16, exact).
void fp4_prep(const float* x, int64_t in, void* act) {
  const int64_t padded = round_up(in, 128);
  Scratch tmp(static_cast<size_t>(padded) * sizeof(float));
  float* q = tmp.as<float>();
  quantised_copy(x, in, padded, q);
  uint16_t* a = static_cast<uint16_t*>(act);
  __m512i order[4];
  for (int j = 0; j < 4; ++j) order[j] = load_words(kFp4Order[j]);
  for (int64_t c = 0; c < padded / 128; ++c) {
    const float* f = q + 128 * c;
    __m512i z[4];
    for (int j = 0; j < 4; ++j)
      z[j] = from_bh(_mm512_cvtne2ps_pbh(_mm512_load_ps(f + 32 * j + 16), _mm512_load_ps(f + 32 * j)));
    for (int j = 0; j < 4; ++j) {
      const __m512i lo = _mm512_permutex2var_epi16(z[0], order[j], z[1]);
      const __m512i hi = _mm512_permutex2var_epi16(z[2], order[j], z[3]);
      _mm512_store_si512(a + 128 * c + 32 * j, _mm512_mask_blend_epi16(0xFFFF0000u, lo, hi));
    }
  }
}

// Block scales of one row as floats, padded with zeros to a multiple of 16.
void row_scales(const uint8_t* sc, int64_t nkb, float* out) {
  for (int64_t b = 0; b < nkb; b += 16) {
    const __mmask16 m = static_cast<__mmask16>(nkb - b >= 16 ? 0xFFFF : (1u << (nkb - b)) - 1);
    __m512i v = _mm512_slli_epi32(_mm512_cvtepu8_epi32(_mm_maskz_loadu_epi8(m, sc + b)), 23);
    v = _mm512_mask_mov_epi32(v, _mm512_testn_epi32_mask(v, v), _mm512_set1_epi32(0x00400000));  // 2^-127
    _mm512_store_si512(out + b, _mm512_maskz_mov_epi32(m, v));
  }
}

// One weight row (one sequential stream, see fp8_partials) against NX prepared x rows. Per 64 bytes
// the four nibble vectors meet x in two independent two-deep VDPBF16PS chains.
// The FP4 decode loop is compute-heavy enough that the hardware prefetcher falls behind; a software
// prefetch 1 KiB ahead lifts it from ~9-12 to ~14-15 GB/s on Zen4 (512..2048 all alike; the FP8 loop
// got slower with it). bench/kernels_bench decode_expert_*, t=1, alternating A/B runs.
// 2 KiB measured 9-12% faster than 1 KiB on a Sapphire Rapids VM (12.8-13.3 -> 14.4 GB/s at 2
// threads, decode_expert_*), 4 KiB the same as 2. On a Zen 5 VM 4 KiB beat 2 (both T0, before the
// prefetches went non-temporal, prefetch_weights): 448 x 1024 experts
// streamed from DRAM by both kernels alternated in one process (medians of the paired ratios over
// 40-60 rounds, seven runs) +4 to +11% at 2 threads, +8% at 1; 3 and 6 KiB between; a near/far
// pair (1 KiB into L1, 6 KiB into L2) -6 to -10%. BM_LinearFp4/decode_expert_448x1024/2/3 (the
// pool's pass), the two builds alternated five times: 11.8-13.1 -> 10.7-11.6 us.
constexpr int64_t kFp4PrefetchBytes = 4096;
constexpr int64_t kFp4ScaleRowsAhead = 4;

// Leaves NX vectors of lane partials, part[j * 16] = acc[j][0] + acc[j][1], whose horizontal sum is
// x row j's result (fp4_rows sums 16 weight rows' at once).
template <int NX>
void fp4_partials(const uint16_t* xa, size_t xstride, const uint8_t* w, const uint8_t* sc, int64_t in, float* sf,
                  __m512* part, bool once) {
  const int64_t nkb = in / 32, row_bytes = in / 2;
  // The scales are a second stream (in / 32 bytes a row, a separate tensor) that the weights'
  // prefetch does not cover: fetch those of the row kFp4ScaleRowsAhead rows on. Zen 5 VM, 2 threads,
  // BM_LinearFp4/decode_expert_* medians of 3, alternated 3 times: 448 x 1024 10.5-11.6 -> 9.4-10.4
  // us, 2304 x 5120 154-180 -> 137-164, 5120 x 2304 149-178 -> 143-165 (BM_MemRead/2 beside them).
  for (int64_t b = 0; b < nkb; b += 64)
    prefetch_weights(sc + kFp4ScaleRowsAhead * nkb + b, once);
  row_scales(sc, nkb, sf);
  const __m512i table = load_words(kE2M1Bf16);
  const __m512i lanes = _mm512_load_si512(kLaneOfBlock);
  __m512 acc[NX][2];
  for (int j = 0; j < NX; ++j) acc[j][0] = acc[j][1] = _mm512_setzero_ps();
  auto step = [&](int64_t c, __m512i v) __attribute__((always_inline)) {
    const __m512i q0 = _mm512_permutexvar_epi16(v, table);
    const __m512i q1 = _mm512_permutexvar_epi16(_mm512_srli_epi16(v, 4), table);
    const __m512i q2 = _mm512_permutexvar_epi16(_mm512_srli_epi16(v, 8), table);
    const __m512i q3 = _mm512_permutexvar_epi16(_mm512_srli_epi16(v, 12), table);
    // Lane l of each partial is block 4c + l: one FMA applies the four block scales.
    const __m512 s = _mm512_permutexvar_ps(lanes, _mm512_castps128_ps512(_mm_load_ps(sf + 4 * c)));
    for (int j = 0; j < NX; ++j) {
      const uint16_t* xc = xa + j * xstride + 128 * c;
      const __m512 p0 = dot(dot(_mm512_setzero_ps(), q0, _mm512_load_si512(xc)), q1, _mm512_load_si512(xc + 32));
      const __m512 p1 = dot(dot(_mm512_setzero_ps(), q2, _mm512_load_si512(xc + 64)), q3, _mm512_load_si512(xc + 96));
      acc[j][0] = _mm512_fmadd_ps(p0, s, acc[j][0]);
      acc[j][1] = _mm512_fmadd_ps(p1, s, acc[j][1]);
    }
  };
  const int64_t full = row_bytes / 64, rem = row_bytes % 64;
  for (int64_t c = 0; c < full; ++c) {
    prefetch_weights(w + 64 * c + kFp4PrefetchBytes, once);
    step(c, _mm512_loadu_si512(w + 64 * c));
  }
  if (rem != 0) step(full, _mm512_maskz_loadu_epi8(~0ULL >> (64 - rem), w + 64 * full));
  for (int j = 0; j < NX; ++j) part[j * 16] = _mm512_add_ps(acc[j][0], acc[j][1]);
}

// Rows [r, r1) in groups of 16: each row's partials first, then one reduce_add_16 per x row gives the
// group's 16 sums in one vector (the same bits as a horizontal sum per row, a third of its work).
template <int NX>
void fp4_rows(const uint16_t* xa, size_t xstride, const Fp4Weight& w, int64_t r, int64_t r1, float* sf, float* y,
              int64_t ldy, bool once) {
  const int64_t in = w.in, nkb = in / 32;
  __m512 part[NX * 16];
  for (; r < r1; r += 16) {
    const int rows = static_cast<int>(imin(16, r1 - r));
    for (int i = 0; i < rows; ++i)
      fp4_partials<NX>(xa, xstride, w.w + (r + i) * (in / 2), w.scale + (r + i) * nkb, in, sf, part + i, once);
    store_row_sums<NX>(part, rows, y + r, ldy);
  }
}

void fp4_matvec(const void* act, int64_t nx, size_t act_stride, const Fp4Weight& w, int64_t r0, int64_t r1, float* y,
                int64_t ldy, bool once_call) {
  const uint16_t* xa = static_cast<const uint16_t*>(act);
  const size_t xstride = act_stride / 2;
  Scratch buf(static_cast<size_t>(round_up(w.in / 32, 16)) * sizeof(float));
  float* sf = buf.as<float>();
  const int64_t group = w.in > kWideNxMaxIn ? 4 : kMaxNx;
  const bool once = once_call && nx <= group;  // more rows: the chunk is read again for the next group
  for (int64_t j0 = 0; j0 < nx; j0 += group) {
    const uint16_t* xj = xa + j0 * xstride;
    float* yj = y + j0 * ldy;
    with_count<kMaxNx>(imin(group, nx - j0), [&](auto nxc) {
      fp4_rows<decltype(nxc)::value>(xj, xstride, w, r0, r1, sf, yj, ldy, once);
    });
  }
}

// =================================================================================== prefill
constexpr int kXg = 32;          // x rows per packed group (two zmm of 16 rows)
constexpr int kRw = 12;          // weight rows per micro-kernel
constexpr int kTileRows = 48;    // weight rows per dequantised tile
constexpr int64_t kKcPairs = 256;  // K pairs per chunk: 32 KiB of packed x

size_t x_panel_bytes(int64_t in) { return static_cast<size_t>(in / 2 * kXg) * 4; }

// panel dword [kp * 32 + i] = (x[i, 2kp], x[i, 2kp + 1]) as bf16 (the rows are quantised: exact).
void pack_x(const float* x, int64_t ldx, int64_t rows, int64_t in, void* panel) {
  uint32_t* p = static_cast<uint32_t*>(panel);
  if (rows < kXg) std::memset(p, 0, x_panel_bytes(in));
  for (int64_t i = 0; i < rows; ++i) {
    const float* xi = x + i * ldx;
    for (int64_t kp = 0; kp < in / 2; ++kp)
      p[kp * kXg + i] = (f32_bits(xi[2 * kp]) >> 16) | (f32_bits(xi[2 * kp + 1]) & 0xFFFF0000u);
  }
}

void fp8_pack_w(const Fp8Weight& w, int64_t r0, int64_t r1, int64_t ldw, void* tile) {
  uint16_t* t = static_cast<uint16_t*>(tile);
  const int64_t in = w.in, nkb = in / 32;
  for (int64_t r = r0; r < r1; ++r) {
    const uint8_t* src = w.w + r * in;
    const uint8_t* sc = w.scale + (r / 32) * nkb;
    uint16_t* dst = t + (r - r0) * ldw;
    for (int64_t b = 0; b < nkb; ++b) {
      const __m512 s = _mm512_set1_ps(e8m0_value(sc[b]) * 256.0f);
      for (int j = 0; j < 32; j += 16) {
        const __m256bh v = _mm512_cvtneps_pbh(_mm512_mul_ps(e4m3x16(src + b * 32 + j), s));  // exact
        _mm256_storeu_si256(reinterpret_cast<__m256i*>(dst + b * 32 + j), (__m256i)v);
      }
    }
  }
}

void fp4_pack_w(const Fp4Weight& w, int64_t r0, int64_t r1, int64_t ldw, void* tile) {
  uint16_t* t = static_cast<uint16_t*>(tile);
  const int64_t in = w.in, nkb = in / 32;
  const __m512 table = _mm512_load_ps(kE2M1Signed);
  const __m512i order = load_words(kWordInterleave);
  for (int64_t r = r0; r < r1; ++r) {
    const uint8_t* src = w.w + r * (in / 2);
    uint16_t* dst = t + (r - r0) * ldw;
    for (int64_t b = 0; b < nkb; ++b) {
      const __m512 tb = _mm512_mul_ps(table, _mm512_set1_ps(e8m0_value(w.scale[r * nkb + b])));
      const __m512i bytes = _mm512_cvtepu8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(src + b * 16)));
      const __m512 lo = _mm512_permutexvar_ps(bytes, tb);
      const __m512 hi = _mm512_permutexvar_ps(_mm512_srli_epi32(bytes, 4), tb);
      const __m512i z = from_bh(_mm512_cvtne2ps_pbh(hi, lo));  // exact
      _mm512_storeu_si512(dst + b * 32, _mm512_permutexvar_epi16(order, z));
    }
  }
}

template <int NV, int RW>
void micro(const uint16_t* xp, const uint16_t* wp, int64_t ldw, int64_t nkp, float* c, bool first) {
  __m512 acc[RW][NV];
  for (int r = 0; r < RW; ++r)
    for (int v = 0; v < NV; ++v) acc[r][v] = first ? _mm512_setzero_ps() : _mm512_load_ps(c + r * kXg + 16 * v);
  for (int64_t kp = 0; kp < nkp; ++kp) {
    __m512i xv[NV];
    for (int v = 0; v < NV; ++v) xv[v] = _mm512_load_si512(xp + kp * 2 * kXg + 32 * v);
    for (int r = 0; r < RW; ++r) {
      const __m512i b = _mm512_set1_epi32(static_cast<int>(load_u32(wp + r * ldw + 2 * kp)));
      for (int v = 0; v < NV; ++v) acc[r][v] = dot(acc[r][v], xv[v], b);
    }
  }
  for (int r = 0; r < RW; ++r)
    for (int v = 0; v < NV; ++v) _mm512_store_ps(c + r * kXg + 16 * v, acc[r][v]);
}
template <int NV, int RW>
void micro_rows(int rows, const uint16_t* xp, const uint16_t* wp, int64_t ldw, int64_t nkp, float* c, bool first) {
  if constexpr (RW >= 1) {
    if (rows == RW) micro<NV, RW>(xp, wp, ldw, nkp, c, first);
    else micro_rows<NV, RW - 1>(rows, xp, wp, ldw, nkp, c, first);
  }
}

void gemm(const void* panel, int64_t x_rows, const void* tile, int64_t ldw, int64_t w_rows, int64_t in, float* y,
          int64_t ldy) {
  const uint16_t* xp = static_cast<const uint16_t*>(panel);
  const uint16_t* wt = static_cast<const uint16_t*>(tile);
  alignas(64) float c[kTileRows * kXg];
  const int64_t n_pairs = in / 2;
  for (int64_t k0 = 0; k0 < n_pairs; k0 += kKcPairs) {
    const int64_t kn = imin(kKcPairs, n_pairs - k0);
    for (int64_t r = 0; r < w_rows; r += kRw) {
      const int rows = static_cast<int>(imin(kRw, w_rows - r));
      const uint16_t* xk = xp + k0 * 2 * kXg;
      const uint16_t* wk = wt + r * ldw + 2 * k0;
      if (x_rows > 16) micro_rows<2, kRw>(rows, xk, wk, ldw, kn, c + r * kXg, k0 == 0);
      else micro_rows<1, kRw>(rows, xk, wk, ldw, kn, c + r * kXg, k0 == 0);
    }
  }
  // Row by row of y: contiguous stores (y's rows are ldy floats apart, 24 KiB for a 6144-wide
  // output: column by column each store was a new cache line and page, a third of the GEMM's time
  // at K = 256, bench/kernels_bench BM_LinearFp8/prefill512_wq_b_6144x256).
  for (int64_t i = 0; i < x_rows; ++i)
    for (int64_t r = 0; r < w_rows; ++r) y[i * ldy + r] = c[r * kXg + i];
}

const detail::GemmEngine kEngine = {kXg, kTileRows, 2, 2, &x_panel_bytes, &pack_x, &gemm};

detail::LevelKernels make_table() {
  detail::LevelKernels t = detail::avx512_kernels();
  // n < 8: the decode kernels, up to eight x rows per weight pass (faster than the GEMM's 16-row
  // minimum tile below 8 rows, measured on Zen4).
  t.fp8 = {&fp8_act_bytes, &fp8_prep, &fp8_matvec, 32, kMaxNx, kGemmMinRows, &kEngine, true, &fp8_pack_w, &fp8_supports};
  t.fp4 = {&fp4_act_bytes, &fp4_prep, &fp4_matvec, 4, kMaxNx, kGemmMinRows, &kEngine, true, &fp4_pack_w, &fp4_supports};
  t.fallback = &detail::avx512_kernels();
  return t;
}

}  // namespace
}  // namespace strata::kernels::x86

namespace strata::kernels::detail {
const LevelKernels& avx512bf16_kernels() {
  static const LevelKernels t = x86::make_table();
  return t;
}
}  // namespace strata::kernels::detail
