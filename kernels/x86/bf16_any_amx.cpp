// KernelLevel::kAmx: the per-token ops of the AVX-512 level, with the any-order BF16 matvec
// (kernels::linear_bf16_any_order: the LM head of every decode row) on AMX tiles (TDPBF16PS).
//
// Why: over four decode rows the FMA matvec (ops_engine.h bf16_rows_any) is compute-bound (eight
// rows of the demo's 129280 x 512 head: 8.9 ms at 2 threads against 6.6 ms for one row); a
// TDPBF16PS does 16 x 16 x 32 multiply-adds per instruction, so a batch of up to 16 rows costs
// about what one row's bytes cost.
//
// Exactness: TDPBF16PS multiplies bf16 by bf16. The weights are bf16; each x row is first scaled
// by a power of two that brings its largest finite |value| into [1, 2) (exact; undone on the
// result, also exact), then each value is split into three bf16 parts x = x1 + x2 + x3 exactly
// (x1 = the top 16 bits of x, x2 = those of x - x1, x3 = x - x1 - x2, which has at most 8
// significant bits: split_bf16x3 below). The products w * x_p are exact in f32 and the sums are
// f32 sums in the tile unit's order, so a row's result is an f32 dot product in another summation
// order, like bf16_rows_any's. Except: the tile unit flushes subnormal inputs and products to zero,
// so after the scaling a product below 2^-126 (|w x_k| below about 2^-110 of the row's largest
// |x|, or a subnormal weight) counts as zero; an infinite x value goes in whole (x, 0, 0), and an
// infinite weight gives NaN where x's lower parts are zero (0 * inf). The model refuses non-finite
// logits either way.
//
// Batch invariance (RowPath::kDecode): each element of a C tile is computed from its own A row
// and B column only, in K order; the three parts of one x row sit in three columns and are
// added afterwards in one fixed order, (c3 + c2) + c1. So a row's logits do not depend on the
// batch it came in, its position in it, the row range a thread got, or the tile shape used.
//
// Layout: A = 16 weight rows x 32 k (strided tile loads straight from the row-major weights),
// B = the packed x parts, per 32-k chunk NB tiles of 16 k-pairs x 16 columns; column
// L = p * S + m holds part p of x row m (S = nx for nx <= 10, else 16), NB = 1 (nx <= 5),
// 2 (nx <= 10) or 3 (nx <= 16). C = 16 weight rows x 16 columns, f32.
#include <immintrin.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "kernels/detail/ops_table.h"
#include "kernels/x86/common.h"
#include "kernels/x86/simd.h"

namespace strata::kernels::detail {
namespace {

using x86::bits_f32;
using x86::f32_bits;
using x86::imin;

constexpr int64_t kMaxRows = 16;  // x rows per packed group
constexpr int64_t kChunk = 32;    // k per tile (16 pairs of bf16)
constexpr int64_t kTileBytes = 1024;

// Palette 1: tiles of `rows` rows (A and C) and 16 rows (B), 64 bytes per row.
struct alignas(64) TileConfig {
  uint8_t palette = 1;
  uint8_t start_row = 0;
  uint8_t reserved[14] = {};
  uint16_t colsb[16] = {};
  uint8_t rows[16] = {};
};
TileConfig tile_config(int rows) {
  TileConfig c;
  for (int t = 0; t < 8; ++t) {
    c.colsb[t] = 64;
    c.rows[t] = static_cast<uint8_t>(rows);
  }
  return c;
}

int64_t stride_of(int64_t nx) { return nx <= 10 ? nx : 16; }
int64_t tiles_of(int64_t nx) { return nx <= 5 ? 1 : nx <= 10 ? 2 : 3; }

// x = x1 + x2 + x3 exactly, each a bf16 (bits returned). Truncation keeps every remainder exact: x - x1
// has at most 16 significant bits, (x - x1) - x2 at most 8.
inline void split_bf16x3(float x, uint16_t* p) {
  if ((f32_bits(x) & 0x7F800000u) == 0x7F800000u) {  // inf / NaN whole (not inf - inf = NaN); NaN stays NaN
    p[0] = static_cast<uint16_t>(f32_bits(x) >> 16 | ((f32_bits(x) & 0x7FFFFFu) != 0 ? 0x40u : 0u));
    p[1] = p[2] = 0;
    return;
  }
  float r = x;
  for (int i = 0; i < 3; ++i) {
    const uint32_t hi = f32_bits(r) & 0xFFFF0000u;
    p[i] = static_cast<uint16_t>(hi >> 16);
    r = r - bits_f32(hi);
  }
}

// The packed x: 64 bytes of per-row factors that undo the scaling (16 floats), then the tiles.
constexpr int64_t kHeadBytes = 64;
size_t amx_pack_bytes(int64_t nx, int64_t in) {
  return static_cast<size_t>(kHeadBytes + in / kChunk * tiles_of(imin(nx, kMaxRows)) * kTileBytes);
}

// 2^e with e in [-126, 126] chosen so that amax * 2^e lies in [1, 2) where it can; 1 for amax = 0.
inline float row_scale(float amax) {
  const int64_t ex = static_cast<int64_t>(f32_bits(amax) >> 23 & 0xFFu);
  if (amax == 0.0f) return 1.0f;
  const int64_t e = ex == 0 ? 126 : 127 - ex;
  return bits_f32(static_cast<uint32_t>(127 + (e > 126 ? 126 : e < -126 ? -126 : e)) << 23);
}

// x [nx <= 16, in] (ldx floats apart) -> b: the factors, then per chunk c, NB tiles; tile row kk
// holds, for each of its 16 columns, the pair (k = 32 c + 2 kk, k + 1) of that column's x part.
// Unused columns are zero.
void amx_pack(const float* x, int64_t nx, int64_t ldx, int64_t in, uint16_t* b) {
  const int64_t nb = tiles_of(nx), s = stride_of(nx), nc = in / kChunk;
  std::memset(b, 0, static_cast<size_t>(kHeadBytes + nc * nb * kTileBytes));
  float* unscale = reinterpret_cast<float*>(b);
  b += kHeadBytes / 2;
  for (int64_t m = 0; m < nx; ++m) {
    const float* xm = x + m * ldx;
    float amax = 0.0f;
    for (int64_t k = 0; k < in; ++k) {
      const float a = bits_f32(f32_bits(xm[k]) & 0x7FFFFFFFu);
      if (a > amax && a <= 3.40282347e38f) amax = a;  // the largest finite |value| (NaN compares false)
    }
    const float scale = row_scale(amax);
    unscale[m] = bits_f32((254u << 23) - f32_bits(scale));  // 1 / scale, a power of two in [2^-126, 2^126]
    for (int64_t k = 0; k < in; ++k) {
      uint16_t part[3];
      split_bf16x3(xm[k] * scale, part);
      const int64_t c = k / kChunk, kk = (k % kChunk) / 2, e = k % 2;
      for (int p = 0; p < 3; ++p) {
        const int64_t col = p * s + m;
        b[((c * nb + col / 16) * 16 + kk) * 32 + (col % 16) * 2 + e] = part[p];
      }
    }
  }
}

// The 16 C rows of one A tile (c[j] = tile j of the NB, 16 x 16 f32 each) -> y[m, r + i] for i < h.
template <int NB>
void finish_rows(const float* c, const float* unscale, int64_t nx, int64_t h, float* y, int64_t ldy, int64_t r) {
  const int64_t s = stride_of(nx);
  const __m512 u = _mm512_loadu_ps(unscale);
  __m512 v[16];
  for (int i = 0; i < 16; ++i) {
    const __m512 c0 = _mm512_load_ps(c + i * 16);
    __m512 p1, p2;
    if constexpr (NB == 3) {
      p1 = _mm512_load_ps(c + 256 + i * 16);
      p2 = _mm512_load_ps(c + 512 + i * 16);
    } else {
      const __m512 c1 = NB == 2 ? _mm512_load_ps(c + 256 + i * 16) : _mm512_setzero_ps();
      const __m512i lane = _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);
      const __m512i i1 = _mm512_add_epi32(lane, _mm512_set1_epi32(static_cast<int>(s)));
      const __m512i i2 = _mm512_add_epi32(lane, _mm512_set1_epi32(static_cast<int>(2 * s)));
      p1 = _mm512_permutex2var_ps(c0, _mm512_and_si512(i1, _mm512_set1_epi32(31)), c1);
      p2 = _mm512_permutex2var_ps(c0, _mm512_and_si512(i2, _mm512_set1_epi32(31)), c1);
    }
    v[i] = _mm512_mul_ps(_mm512_add_ps(_mm512_add_ps(p2, p1), c0), u);  // (x3 + x2 + x1 parts) / scale, lane m
  }
  x86::VF16::transpose(v);  // v[m] lane i = row r + i of x row m
  const __mmask16 keep = static_cast<__mmask16>((1u << h) - 1u);
  for (int64_t m = 0; m < nx; ++m) _mm512_mask_storeu_ps(y + m * ldy + r, keep, v[m]);
}

// Each of the block's weight rows is a stream the strided tile loads walk 64 bytes per chunk, too
// many streams for the hardware prefetcher: the line kPrefetchChunks chunks ahead in each (past the
// block's end, that line of the next block's rows) is prefetched, one line per row per chunk.
// Measured (kernels_bench, 2 threads): 129280 x 5120 head 66 -> 44 ms, x 512 one row 5.3 -> 4.9 ms,
// eight rows 4.3 -> 3.7 ms against a whole next block prefetched into L2 over the chunk loop
// (distances 2-16 and L2 hints measured; 4 into L1 kept).
constexpr int64_t kPrefetchChunks = 4;
inline void prefetch_rows(const uint16_t* a, int64_t rows, int64_t in, int64_t nc, int64_t k, bool next_block) {
  int64_t kt = k + kPrefetchChunks;
  if (kt >= nc) {
    if (!next_block) return;
    a += rows * in;
    kt -= nc;
  }
  const char* p = reinterpret_cast<const char*>(a + kt * kChunk);
  for (int64_t i = 0; i < rows; ++i) _mm_prefetch(p + i * in * 2, _MM_HINT_T0);
}

// Rows [r0, r1) of y for one packed group. Tile registers: C 0..NA*NB-1, A next NA, B last NB
// (NA * NB + NA + NB <= 8). Rows past the last full block of 16 run with a tile config of that height.
#define STRATA_AMX_DP(c, a, b) _tile_dpbf16ps(c, a, b)
template <int NB>
void amx_rows(const float* unscale, const uint16_t* b, int64_t nx, const uint16_t* w, int64_t in, int64_t r0, int64_t r1, float* y,
              int64_t ldy) {
  const int64_t nc = in / kChunk, lda = in * 2;
  constexpr int NA = NB == 1 ? 3 : NB == 2 ? 2 : 1;
  alignas(64) float c[NA][NB * 256] = {};
  const TileConfig full = tile_config(16);
  _tile_loadconfig(&full);
  int64_t r = r0;
  for (; r + 16 * NA <= r1; r += 16 * NA) {
    const uint16_t* a = w + r * in;
    const bool next = r + 32 * NA <= r1;
    if constexpr (NB == 1) {
      _tile_zero(0);
      _tile_zero(1);
      _tile_zero(2);
      for (int64_t k = 0; k < nc; ++k) {
        prefetch_rows(a, 16 * NA, in, nc, k, next);
        _tile_loadd(3, a + k * kChunk, lda);
        _tile_loadd(4, a + 16 * in + k * kChunk, lda);
        _tile_loadd(5, a + 32 * in + k * kChunk, lda);
        _tile_loadd(6, b + k * kTileBytes / 2, 64);
        STRATA_AMX_DP(0, 3, 6);
        STRATA_AMX_DP(1, 4, 6);
        STRATA_AMX_DP(2, 5, 6);
      }
      _tile_stored(0, c[0], 64);
      _tile_stored(1, c[1], 64);
      _tile_stored(2, c[2], 64);
    } else if constexpr (NB == 2) {
      _tile_zero(0);
      _tile_zero(1);
      _tile_zero(2);
      _tile_zero(3);
      for (int64_t k = 0; k < nc; ++k) {
        prefetch_rows(a, 16 * NA, in, nc, k, next);
        _tile_loadd(4, a + k * kChunk, lda);
        _tile_loadd(5, a + 16 * in + k * kChunk, lda);
        _tile_loadd(6, b + (2 * k) * kTileBytes / 2, 64);
        _tile_loadd(7, b + (2 * k + 1) * kTileBytes / 2, 64);
        STRATA_AMX_DP(0, 4, 6);
        STRATA_AMX_DP(1, 4, 7);
        STRATA_AMX_DP(2, 5, 6);
        STRATA_AMX_DP(3, 5, 7);
      }
      _tile_stored(0, c[0], 64);
      _tile_stored(1, c[0] + 256, 64);
      _tile_stored(2, c[1], 64);
      _tile_stored(3, c[1] + 256, 64);
    } else {
      _tile_zero(0);
      _tile_zero(1);
      _tile_zero(2);
      for (int64_t k = 0; k < nc; ++k) {
        prefetch_rows(a, 16 * NA, in, nc, k, next);
        _tile_loadd(3, a + k * kChunk, lda);
        _tile_loadd(4, b + (3 * k) * kTileBytes / 2, 64);
        _tile_loadd(5, b + (3 * k + 1) * kTileBytes / 2, 64);
        _tile_loadd(6, b + (3 * k + 2) * kTileBytes / 2, 64);
        STRATA_AMX_DP(0, 3, 4);
        STRATA_AMX_DP(1, 3, 5);
        STRATA_AMX_DP(2, 3, 6);
      }
      _tile_stored(0, c[0], 64);
      _tile_stored(1, c[0] + 256, 64);
      _tile_stored(2, c[0] + 512, 64);
    }
    for (int ia = 0; ia < NA; ++ia) finish_rows<NB>(c[ia], unscale, nx, 16, y, ldy, r + ia * 16);
  }
  // The rest, one A tile of up to 16 rows at a time (C rows beyond h are not read).
  for (; r < r1; r += 16) {
    const int64_t h = imin(16, r1 - r);
    if (h < 16) {
      TileConfig cfg = tile_config(16);
      cfg.rows[0] = cfg.rows[1] = cfg.rows[2] = cfg.rows[3] = static_cast<uint8_t>(h);  // C and A
      _tile_loadconfig(&cfg);
    }
    const uint16_t* a = w + r * in;
    _tile_zero(0);
    _tile_zero(1);
    _tile_zero(2);
    for (int64_t k = 0; k < nc; ++k) {
      _tile_loadd(3, a + k * kChunk, lda);
      _tile_loadd(4, b + (NB * k) * kTileBytes / 2, 64);
      STRATA_AMX_DP(0, 3, 4);
      if constexpr (NB >= 2) {
        _tile_loadd(5, b + (NB * k + 1) * kTileBytes / 2, 64);
        STRATA_AMX_DP(1, 3, 5);
      }
      if constexpr (NB == 3) {
        _tile_loadd(6, b + (NB * k + 2) * kTileBytes / 2, 64);
        STRATA_AMX_DP(2, 3, 6);
      }
    }
    _tile_stored(0, c[0], 64);
    if constexpr (NB >= 2) _tile_stored(1, c[0] + 256, 64);
    if constexpr (NB == 3) _tile_stored(2, c[0] + 512, 64);
    finish_rows<NB>(c[0], unscale, nx, h, y, ldy, r);
  }
  _tile_release();
}
#undef STRATA_AMX_DP

void amx_matvec(const uint16_t* b, int64_t nx, const uint16_t* w, int64_t in, int64_t r0, int64_t r1, float* y,
                int64_t ldy) {
  const float* unscale = reinterpret_cast<const float*>(b);
  b += kHeadBytes / 2;
  switch (tiles_of(nx)) {
    case 1: amx_rows<1>(unscale, b, nx, w, in, r0, r1, y, ldy); break;
    case 2: amx_rows<2>(unscale, b, nx, w, in, r0, r1, y, ldy); break;
    default: amx_rows<3>(unscale, b, nx, w, in, r0, r1, y, ldy); break;
  }
}

}  // namespace

bool amx_request_permission() {
  // Linux gates the 8 KiB of tile state per thread behind a per-process request (arch_prctl
  // ARCH_REQ_XCOMP_PERM for XFEATURE_XTILEDATA, kernel >= 5.16); refused or absent: no AMX.
  constexpr long kArchReqXcompPerm = 0x1023, kXfeatureXtiledata = 18;
  return syscall(SYS_arch_prctl, kArchReqXcompPerm, kXfeatureXtiledata) == 0;
}

void split_bf16x3_for_test(float x, uint16_t* parts) { split_bf16x3(x, parts); }

const OpsKernels& amx_ops() {
  static const OpsKernels t = [] {
    OpsKernels k = avx512_ops();
    k.amx_max_rows = kMaxRows;
    k.amx_chunk = kChunk;
    k.amx_pack_bytes = &amx_pack_bytes;
    k.amx_pack = &amx_pack;
    k.amx_matvec = &amx_matvec;
    return k;
  }();
  return t;
}

}  // namespace strata::kernels::detail
