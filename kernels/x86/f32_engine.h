// The f32 engine: decode matvecs and the prefill GEMM in f32 FMA arithmetic, written once over a
// vector-traits type V and instantiated by linear_avx2.cpp (8 lanes) and linear_avx512.cpp (16 lanes).
//
// Exactness: FP8/FP4 weights are widened to f32 exactly (E4M3 through the fp16 bit trick and
// VCVTPH2PS, E2M1 through a 16-entry table), the block scales are powers of two, and the activations
// are act_quant_fp8 values, so every product x*w is exact and only the summation order differs from
// kernels/ref (fixtures README: summation order is free). BF16/F32 linears reproduce kernels/ref bit
// for bit instead (reference order and rounding, see the decode section).
//
// The traits V provide (all static):
//   F; kW lanes; kXg = 2*kW packed x rows; kRw weight rows per micro-kernel; kTileRows; kKc (K chunk);
//   zero(), set1(f), load(p) (aligned), loadu(p), store(p, v) (aligned), add, mul, fmadd(a, b, c) = a*b+c,
//   hsum(v);
//   e4m3x(p):   kW E4M3 codes -> their values * 2^-8 (fp16 trick: code << 7 is an fp16 with bias 15);
//   bf16(p):    kW bf16 -> f32;
//   split_pairs(v, &even, &odd): kW dwords, each two bf16 -> the even-position and odd-position values;
//   transpose(r): in-place kW x kW transpose of r[0 .. kW);
//   T, e2m1_table(s): the E2M1 table times s; e2m1(p, t, &lo, &hi): kW packed bytes -> low-nibble
//     values (even K) and high-nibble values (odd K);
//   interleave(lo, hi, &a, &b): [lo0 hi0 lo1 hi1 ...] over two registers.
// Everything sits in an anonymous namespace (see common.h): instantiations stay inside their ISA file.
#pragma once

#include <immintrin.h>

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>

#include "core/dtype.h"
#include "kernels/linear.h"
#include "kernels/x86/common.h"

namespace strata::kernels::x86 {
namespace {

template <class V>
struct F32Engine {
  using F = typename V::F;
  static constexpr int kW = V::kW;
  static constexpr int kXg = V::kXg;

  // ---------------------------------------------------------------- decode: activation layouts
  // FP8: the quantised row itself.
  static size_t fp8_act_bytes(int64_t in) { return static_cast<size_t>(in) * sizeof(float); }
  static void fp8_prep(const float* x, int64_t in, void* act) {
    float* a = static_cast<float*>(act);
    std::memcpy(a, x, static_cast<size_t>(in) * sizeof(float));
    V::act_quant(a, in);
  }

  // FP4: the quantised row with each group of 2*kW values split into [evens | odds], matching the
  // low/high nibbles of kW packed bytes; then one float, 1 where the row's largest |value| reaches
  // 2^119. There the reference's partial sum times s_x (before s_w) can overflow where a sum of
  // x times pre-scaled weights would not (|partial s_x| <= 32 * 6 * amax < 2^8 amax), so fp4_matvec1
  // sums such a row's outputs as the reference does (fp4_row_late_scale) and overflows with it.
  static size_t fp4_act_bytes(int64_t in) { return static_cast<size_t>(in) * sizeof(float) + 64; }
  static void fp4_prep(const float* x, int64_t in, void* act) {
    Scratch tmp(static_cast<size_t>(in) * sizeof(float));
    float* q = tmp.as<float>();
    std::memcpy(q, x, static_cast<size_t>(in) * sizeof(float));
    V::act_quant(q, in);
    float* a = static_cast<float*>(act);
    deinterleave(q, in / (2 * kW) * (2 * kW), a);
    float top = 0.0f;  // a NaN compares false and stays out: its row is NaN either way
    for (int64_t k = 0; k < in; ++k) top = std::max(top, std::fabs(q[k]));
    a[in] = top >= 0x1p119f ? 1.0f : 0.0f;
  }

  static void deinterleave(const float* x, int64_t n, float* out) {
    for (int64_t g = 0; g < n; g += 2 * kW) {
      for (int i = 0; i < kW; ++i) {
        out[g + i] = x[g + 2 * i];
        out[g + kW + i] = x[g + 2 * i + 1];
      }
    }
  }

  // ---------------------------------------------------------------- decode: matvecs
  // Weight rows per pass. One row is one sequential stream, which the hardware prefetcher serves best;
  // FP8 is the exception here, its E4M3 widening (VCVTPH2PS) wants the ILP of four rows. Measured on
  // Zen4 with bench/kernels_bench decode_* (alternating A/B runs): FP8 engram 11.5 vs 8.5 GB/s with
  // 4 rows; FP4 expert 7.3 vs 6.3 GB/s with 1 row; BF16 head equal.
  static constexpr int kRowsFp8 = 4;
  static constexpr int kRows = 1;
  // FP8 rows [r0, r1), r0 a multiple of 32: per 32-row block, x' = xq * s_w * 2^8 (exact, powers of
  // two) is built once and dotted with the widened rows, four rows at a time.
  template <int R>
  static void fp8_dot(const float* xs, const uint8_t* w, int64_t in, float* y, bool once) {
    F acc[R][2];
    for (int i = 0; i < R; ++i) acc[i][0] = acc[i][1] = V::zero();
    for (int64_t k = 0; k < in; k += 2 * kW) {
      // The same bytes of the next R rows, once per 64 bytes: the hardware prefetchers alone left
      // the kernel waiting on DRAM (as the BF16 level's FP8 loop, see linear_avx512bf16.cpp).
      if ((k & 63) == 0)
        for (int i = 0; i < R; ++i) prefetch_weights(reinterpret_cast<const char*>(w + (i + R) * in + k), once);
      const F x0 = V::load(xs + k), x1 = V::load(xs + k + kW);
      for (int i = 0; i < R; ++i) {
        acc[i][0] = V::fmadd(V::e4m3x(w + i * in + k), x0, acc[i][0]);
        acc[i][1] = V::fmadd(V::e4m3x(w + i * in + k + kW), x1, acc[i][1]);
      }
    }
    for (int i = 0; i < R; ++i) y[i] = V::hsum(V::add(acc[i][0], acc[i][1]));
  }
  static void fp8_matvec1(const void* act, const Fp8Weight& w, int64_t r0, int64_t r1, float* y, bool once) {
    const float* xq = static_cast<const float*>(act);
    const int64_t in = w.in, nkb = in / 32;
    Scratch buf(static_cast<size_t>(in) * sizeof(float));
    float* xs = buf.as<float>();
    for (int64_t rb = r0 / 32; rb * 32 < r1; ++rb) {
      const uint8_t* sc = w.scale + rb * nkb;
      for (int64_t b = 0; b < nkb; ++b) {
        const F s = V::set1(e8m0_value(sc[b]) * 256.0f);  // 2^8 undoes e4m3x's 2^-8
        for (int j = 0; j < 32; j += kW) V::store(xs + b * 32 + j, V::mul(V::load(xq + b * 32 + j), s));
      }
      const int64_t hi = imin(r1, rb * 32 + 32);
      int64_t r = imax(r0, rb * 32);
      for (; r + kRowsFp8 <= hi; r += kRowsFp8) fp8_dot<kRowsFp8>(xs, w.w + r * in, in, y + r, once);
      for (; r < hi; ++r) fp8_dot<1>(xs, w.w + r * in, in, y + r, once);
    }
  }

  // FP4 rows from which the levels on this engine run its GEMM (their tables' gemm_min_rows).
  static constexpr int64_t kGemmMinRowsFp4 = 8;
  // Scale codes above this make an E2M1 value times the scale leave the floats (6 * 2^126 at 253),
  // so neither fp4_dot's tables nor fp4_pack_w's tiles can hold the weight.
  static constexpr uint8_t kMaxTableScaleCode = 252;

  // A row whose weights leave the floats, or whose x nears the floats' top (fp4_prep's flag), scaled
  // per block after its sum as the reference does: ((sum_k x_k e2m1_k) s_w), x = q s_x. The sum runs
  // on x 2^-64 (exact: |x| >= 2^-31 where not 0, and 2^-64 * 2^128 * 6 * 32 stays finite), so it
  // cannot overflow halfway where the reference's sum of q e2m1 does not (x = +-2^124 cancelling
  // gave inf for 0); times 2^64 it overflows where the reference's partial times s_x does. Within
  // the reference's rounding, not its bits. xa is fp4_prep's layout: x_k at its place in
  // [evens | odds] of its group of 2 kW.
  static float fp4_row_late_scale(const float* xa, const uint8_t* w, const uint8_t* sc, int64_t in) {
    float acc = 0.0f;
    for (int64_t b = 0; b < in / 32; ++b) {
      float partial = 0.0f;
      for (int64_t k = b * 32; k < b * 32 + 32; ++k) {
        const int64_t j = k % (2 * kW), at = k - j + (j % 2 != 0 ? kW + j / 2 : j / 2);
        partial += xa[at] * 0x1p-64f * e2m1_to_f32(static_cast<uint8_t>(w[k / 2] >> ((k & 1) * 4)));
      }
      acc += partial * 0x1p64f * e8m0_value(sc[b]);
    }
    return acc;
  }

  // The GEMM's tiles hold e2m1 times the scale as f32 (fp4_pack_w), so a weight with a code above
  // kMaxTableScaleCode goes to the fallback (kernel_table.h) from gemm_min_rows on; the decode rows
  // check their own codes (fp4_dot), and the AVX2 level's integer dot takes any code. Reads the
  // scales (in / 32 bytes a row) once per prompt call, beside a GEMM of n >= 8 rows.
  static bool fp4_supports(const Fp4Weight& w, int64_t n) {
    if (n < kGemmMinRowsFp4) return true;
    uint8_t top = 0;
    const int64_t count = w.out * (w.in / 32);
    for (int64_t i = 0; i < count; ++i) top = std::max(top, w.scale[i]);
    return top <= kMaxTableScaleCode;
  }

  // FP4 rows: per 32-block a table of the 16 codes times the row's block scale. A row with a code
  // above kMaxTableScaleCode (its table would hold inf) is summed again by fp4_row_late_scale.
  template <int R>
  static void fp4_dot(const float* xa, const uint8_t* w, const uint8_t* sc, int64_t in, float* y, bool once) {
    const int64_t nkb = in / 32, row_bytes = in / 2;
    F acc[R][2];
    uint8_t top[R] = {};
    for (int i = 0; i < R; ++i) acc[i][0] = acc[i][1] = V::zero();
    for (int64_t b = 0; b < nkb; ++b) {
      // One prefetch per 64 bytes, 1 KiB ahead (the BF16 level's FP4 loop, 4 KiB now, was 1 KiB
      // when this was written; not re-measured here).
      if ((b & 3) == 0) {
        for (int i = 0; i < R; ++i) prefetch_weights(w + i * row_bytes + b * 16 + 1024, once);
      }
      typename V::T t[R];
      for (int i = 0; i < R; ++i) {
        top[i] = std::max(top[i], sc[i * nkb + b]);
        t[i] = V::e2m1_table(e8m0_value(sc[i * nkb + b]));
      }
      for (int g = 0; g < 32; g += 2 * kW) {
        const F xe = V::load(xa + b * 32 + g), xo = V::load(xa + b * 32 + g + kW);
        for (int i = 0; i < R; ++i) {
          F lo, hi;
          V::e2m1(w + i * row_bytes + b * 16 + g / 2, t[i], &lo, &hi);
          acc[i][0] = V::fmadd(lo, xe, acc[i][0]);
          acc[i][1] = V::fmadd(hi, xo, acc[i][1]);
        }
      }
    }
    for (int i = 0; i < R; ++i) {
      y[i] = top[i] <= kMaxTableScaleCode ? V::hsum(V::add(acc[i][0], acc[i][1]))
                                          : fp4_row_late_scale(xa, w + i * row_bytes, sc + i * nkb, in);
    }
  }
  static void fp4_matvec1(const void* act, const Fp4Weight& w, int64_t r0, int64_t r1, float* y, bool once) {
    const float* xa = static_cast<const float*>(act);
    const int64_t in = w.in, nkb = in / 32;
    if (xa[in] != 0.0f) {  // x near the floats' top (fp4_prep): the reference's order, row by row
      for (int64_t r = r0; r < r1; ++r) y[r] = fp4_row_late_scale(xa, w.w + r * (in / 2), w.scale + r * nkb, in);
      return;
    }
    int64_t r = r0;
    for (; r + kRows <= r1; r += kRows) fp4_dot<kRows>(xa, w.w + r * (in / 2), w.scale + r * nkb, in, y + r, once);
    for (; r < r1; ++r) fp4_dot<1>(xa, w.w + r * (in / 2), w.scale + r * nkb, in, y + r, once);
  }

  // BF16 / F32 rows in the reference order. Their products are not exact, so the summation order is
  // part of the result, and the model is sensitive to it: a BF16 linear (attn.wo_a) feeds
  // act_quant_fp8, where one f32 ulp can move an element by a whole E4M3 step (fixtures README,
  // Tolerances). So these kernels reproduce kernels/ref bit for bit: each output sums x[k] * w[r, k]
  // for k = 0, 1, ... with the product and the sum rounded separately (no FMA; the kernels library
  // builds with -ffp-contract=off). Lanes hold kW output rows: a kW x kW tile of weights is loaded
  // row-wise and transposed, then added column by column.
  static float bf16_value(const uint16_t* w, int64_t k) { return bits_f32(static_cast<uint32_t>(w[k]) << 16); }
  // The row-major tiles (bf16_block, f32_ordered_rows) read kW rows side by side, one stream each,
  // more streams than the hardware prefetchers follow: each step that starts a 64-byte line of the
  // rows prefetches every row's line this far ahead. T0, as measured (the lines are read once, so
  // prefetch_weights' non-temporal hint would be allowed; not measured). The AVX2 level (kW = 8,
  // a line every second step) was not measured.
  // Zen 5 VM, kernels_bench BM_LinearBf16/decode_router_* (the MoE gate) and ops_bench
  // BM_HcMixes/decode_24x20480 (the mHC projection), builds alternated 3-5 times: router 139 x 1024
  // at 2 threads 12.4-15.5 -> 11.0-13.6 us, 384 x 5120 at 1 thread 194-216 -> 158-189 us; the mHC
  // projection at 2 threads 72-76 -> 63-65 us (1 KiB ahead was no better than none for the router).
  static constexpr int64_t kRowPrefetchBytes = 256;

  // `rows` (<= kW) weight rows in the lanes; rows past the end repeat the last one (valid memory,
  // results dropped), so a tail of rows runs vectorised too.
  template <class Load, class Value>
  static void ordered_block(const float* x, int64_t in, float* y, Load load, Value value, int rows = kW) {
    F acc = V::zero();
    const int64_t main = in / kW * kW;
    for (int64_t k0 = 0; k0 < main; k0 += kW) {
      F t[kW];
      for (int i = 0; i < kW; ++i) t[i] = load(i < rows ? i : rows - 1, k0);
      V::transpose(t);
      for (int j = 0; j < kW; ++j) acc = V::add(acc, V::mul(t[j], V::set1(x[k0 + j])));
    }
    alignas(64) float s[kW];
    V::store(s, acc);
    for (int i = 0; i < rows; ++i) {
      float a = s[i];
      for (int64_t k = main; k < in; ++k) a += x[k] * value(i, k);
      y[i] = a;
    }
  }

  // BF16: the tile is transposed as dwords, each an (even k, odd k) pair of bf16, and one shift / one
  // mask then give the two f32 columns: half the shuffles of widening first.
  static void bf16_block(const float* x, int64_t in, const uint16_t* wr, float* y, int rows = kW) {
    F acc = V::zero();
    const int64_t main = in / (2 * kW) * (2 * kW);
    for (int64_t k0 = 0; k0 < main; k0 += 2 * kW) {
      F t[kW];
      if (k0 * 2 % 64 == 0)
        for (int i = 0; i < kW; ++i) {
          const uint16_t* row = wr + (i < rows ? i : rows - 1) * in;
          prefetch_weights(reinterpret_cast<const char*>(row + k0) + kRowPrefetchBytes, false);
        }
      for (int i = 0; i < kW; ++i)
        t[i] = V::loadu(reinterpret_cast<const float*>(wr + (i < rows ? i : rows - 1) * in + k0));
      V::transpose(t);
      for (int m = 0; m < kW; ++m) {
        F even, odd;
        V::split_pairs(t[m], &even, &odd);
        acc = V::add(acc, V::mul(even, V::set1(x[k0 + 2 * m])));
        acc = V::add(acc, V::mul(odd, V::set1(x[k0 + 2 * m + 1])));
      }
    }
    alignas(64) float s[kW];
    V::store(s, acc);
    for (int i = 0; i < rows; ++i) {
      float a = s[i];
      for (int64_t k = main; k < in; ++k) a += x[k] * bf16_value(wr + i * in, k);
      y[i] = a;
    }
  }
  // Blocked BF16 (Bf16Weight::blocked): kW rows' values at one k are contiguous, so each row keeps
  // its k-order sum in a lane with no transpose; NB groups of kW rows share each broadcast of x[k]
  // and give the adds NB independent chains. r is a multiple of kW (kW divides 16).
  // NX rows of x (xs floats apart) share each widened weight vector (the weights are read once, not
  // NX times); every (x row, weight row) keeps the same chain (acc + w x, k in order) at any NX, so
  // a row's bits are the same alone or with others, and NX x NB chains hide the add latency.
  // wo_a (8 groups of 192 x 768 on the 8 GB scaled checkpoint) at 4 decode rows: 6% of a batched
  // step's samples through the one-row loop.
  // E4M3 storage (Bf16Weight::e4m3): the codes widened through e4m3x (value * 2^-8) times the
  // block's scale * 2^8, the exact bf16 value, so the chains are the same bits at half the bytes,
  // for four more operations a vector (widen, scale). kernels_bench BM_LinearWoA at 2 threads, Zen 5
  // VM (2026-12-05): the 8 GB checkpoint's 192 x 768 group 8.2-8.5 -> 6.9-7.0 us at one row and
  // 19.2-19.5 -> 14.3-14.9 at four; the release's 1024 x 4096 group the same 125-141 -> 126 us at
  // one row (now bound by the arithmetic, not the bytes) and 238-247 -> 279-284 at four (+15%).
  template <int NX, int NB>
  static void bf16_blocked_rows_nx(const float* x, size_t xs, const Bf16Weight& w, int64_t r, float* y,
                                   int64_t ldy, bool once) {
    // A step that starts inside a block or covers part of one (ymm, NB = 1) reads half of each
    // 64-byte line and another step the other half: those lines go to every cache level.
    once = once && r % kBf16BlockRows == 0 && NB * kW % kBf16BlockRows == 0;
    if (w.e4m3 != nullptr) return e4m3_blocked_rows_nx<NX, NB>(x, xs, w, r, y, ldy, once);
    const int64_t in = w.in, br = kBf16BlockRows;
    const uint16_t* p[NB];
    F acc[NX][NB];
    for (int j = 0; j < NB; ++j) {
      const int64_t row = r + j * kW;
      p[j] = w.w + (row / br) * br * in + row % br;
      for (int i = 0; i < NX; ++i) acc[i][j] = V::zero();
    }
    for (int64_t k = 0; k < in; ++k) {
      if ((k & 1) == 0)
        for (int j = 0; j < NB; ++j) prefetch_weights(reinterpret_cast<const char*>(p[j] + k * br) + 2048, once);
      F xk[NX];
      for (int i = 0; i < NX; ++i) xk[i] = V::set1(x[static_cast<int64_t>(i * xs) + k]);
      for (int j = 0; j < NB; ++j) {
        const F wv = V::bf16(p[j] + k * br);
        for (int i = 0; i < NX; ++i) acc[i][j] = V::add(acc[i][j], V::mul(wv, xk[i]));
      }
    }
    for (int i = 0; i < NX; ++i)
      for (int j = 0; j < NB; ++j) V::storeu(y + i * ldy + r + j * kW, acc[i][j]);
  }
  template <int NX, int NB>
  static void e4m3_blocked_rows_nx(const float* x, size_t xs, const Bf16Weight& w, int64_t r, float* y,
                                   int64_t ldy, bool once) {
    const int64_t in = w.in, br = kBf16BlockRows, nkb = ceil_div(in, 32);
    const uint8_t* p[NB];
    const uint8_t* sc[NB];
    F acc[NX][NB];
    for (int j = 0; j < NB; ++j) {
      const int64_t row = r + j * kW;
      p[j] = w.e4m3 + (row / br) * br * in + row % br;
      sc[j] = w.e4m3_scale + (row / 32) * nkb;
      for (int i = 0; i < NX; ++i) acc[i][j] = V::zero();
    }
    for (int64_t k0 = 0; k0 < in; k0 += 32) {
      F s[NB];
      for (int j = 0; j < NB; ++j) s[j] = V::set1(e8m0_value(sc[j][k0 / 32]) * 256.0f);  // 2^8 undoes e4m3x's 2^-8
      const int64_t k1 = imin(in, k0 + 32);
      for (int64_t k = k0; k < k1; ++k) {
        if ((k & 3) == 0)
          for (int j = 0; j < NB; ++j) prefetch_weights(reinterpret_cast<const char*>(p[j] + k * br) + 1024, once);
        F xk[NX];
        for (int i = 0; i < NX; ++i) xk[i] = V::set1(x[static_cast<int64_t>(i * xs) + k]);
        for (int j = 0; j < NB; ++j) {
          const F wv = V::mul(V::e4m3x(p[j] + k * br), s[j]);  // exact
          for (int i = 0; i < NX; ++i) acc[i][j] = V::add(acc[i][j], V::mul(wv, xk[i]));
        }
      }
    }
    for (int i = 0; i < NX; ++i)
      for (int j = 0; j < NB; ++j) V::storeu(y + i * ldy + r + j * kW, acc[i][j]);
  }
  static void bf16_matvec1(const void* act, const Bf16Weight& w, int64_t r0, int64_t r1, float* y, bool once) {
    const float* x = static_cast<const float*>(act);
    const int64_t in = w.in;
    int64_t r = r0;
    if (w.blocked) {
      for (; r + 4 * kW <= r1; r += 4 * kW) bf16_blocked_rows_nx<1, 4>(x, 0, w, r, y, 0, once);
      for (; r < r1; r += kW) bf16_blocked_rows_nx<1, 1>(x, 0, w, r, y, 0, once);
      return;
    }
    for (; r < r1; r += kW) bf16_block(x, in, w.w + r * in, y + r, static_cast<int>(imin(kW, r1 - r)));
  }

  // F32 weights, NX rows of x at once: each kW x kW weight tile is transposed once for all of them
  // and each x row keeps its own chain of adds, in the order ordered_block uses (the same bits as
  // one row at a time). The mHC projection (24 x 4 dim, model/mhc) is latency-bound on one chain:
  // eight decode rows took 8x one row's time through ordered_block.
  template <int NX>
  static void f32_ordered_rows(const float* x, size_t xstride, int64_t in, const float* wr, float* y, int64_t ldy,
                               int rows) {
    F acc[NX];
    for (int j = 0; j < NX; ++j) acc[j] = V::zero();
    const int64_t main = in / kW * kW;
    for (int64_t k0 = 0; k0 < main; k0 += kW) {
      F t[kW];
      if (k0 * 4 % 64 == 0)
        for (int i = 0; i < kW; ++i)
          prefetch_weights(wr + (i < rows ? i : rows - 1) * in + k0 + kRowPrefetchBytes / sizeof(float), false);
      for (int i = 0; i < kW; ++i) t[i] = V::loadu(wr + (i < rows ? i : rows - 1) * in + k0);
      V::transpose(t);
      for (int m = 0; m < kW; ++m)
        for (int j = 0; j < NX; ++j) acc[j] = V::add(acc[j], V::mul(t[m], V::set1(x[j * xstride + k0 + m])));
    }
    for (int j = 0; j < NX; ++j) {
      alignas(64) float s[kW];
      V::store(s, acc[j]);
      const float* xj = x + j * xstride;
      for (int i = 0; i < rows; ++i) {
        float a = s[i];
        for (int64_t k = main; k < in; ++k) a += xj[k] * wr[i * in + k];
        y[j * ldy + i] = a;
      }
    }
  }
  static void f32_matvec(const void* act, int64_t nx, size_t stride, const F32Weight& w, int64_t r0, int64_t r1,
                         float* y, int64_t ldy, bool /*once: the tiles prefetch T0*/) {
    const float* x = static_cast<const float*>(act);
    const size_t xs = stride / sizeof(float);
    const int64_t in = w.in;
    // A tail of fewer than kW rows runs as one short block, not row by row: the mHC projection
    // (24 rows) at AVX-512 went from 543 to 285 us (bench/ops_bench HcMixes/decode, loaded VM).
    for (int64_t i = 0; i < nx; i += 4) {
      const float* xi = x + i * xs;
      float* yi = y + i * ldy;
      for (int64_t r = r0; r < r1; r += kW) {
        const int rows = static_cast<int>(imin(kW, r1 - r));
        const float* wr = w.w + r * in;
        switch (imin(4, nx - i)) {
          case 1: f32_ordered_rows<1>(xi, xs, in, wr, yi + r, ldy, rows); break;
          case 2: f32_ordered_rows<2>(xi, xs, in, wr, yi + r, ldy, rows); break;
          case 3: f32_ordered_rows<3>(xi, xs, in, wr, yi + r, ldy, rows); break;
          default: f32_ordered_rows<4>(xi, xs, in, wr, yi + r, ldy, rows); break;
        }
      }
    }
  }

  // Several rows of x: the f32 engine decodes the weights once per row (the chunk [r0, r1) is
  // re-read from L2, so its prefetches keep it there: prefetch_weights' `once` only for one row),
  // which is as fast per row as n = 1; the BF16 level shares the decode.
  template <class W, void (*One)(const void*, const W&, int64_t, int64_t, float*, bool)>
  static void rows(const void* act, int64_t nx, size_t stride, const W& w, int64_t r0, int64_t r1, float* y,
                   int64_t ldy, bool once) {
    for (int64_t i = 0; i < nx; ++i)
      One(static_cast<const unsigned char*>(act) + i * stride, w, r0, r1, y + i * ldy, once && nx == 1);
  }
  static constexpr auto fp8_matvec = &rows<Fp8Weight, &fp8_matvec1>;
  static constexpr auto fp4_matvec = &rows<Fp4Weight, &fp4_matvec1>;
  // Blocked BF16 with several rows of x: groups of up to four x rows share the weights
  // (bf16_blocked_rows_nx) where the registers hold 4 x 4 chains (zmm); otherwise row by row.
  static void bf16_matvec(const void* act, int64_t nx, size_t stride, const Bf16Weight& w, int64_t r0, int64_t r1,
                          float* y, int64_t ldy, bool once_call) {
    if constexpr (kW < 16) {  // ymm: 4 x 4 chains do not fit the registers (no such loop is built)
      rows<Bf16Weight, &bf16_matvec1>(act, nx, stride, w, r0, r1, y, ldy, once_call);
    } else {
      if (!w.blocked || nx == 1) return rows<Bf16Weight, &bf16_matvec1>(act, nx, stride, w, r0, r1, y, ldy, once_call);
      const float* x = static_cast<const float*>(act);
      const size_t xs = stride / sizeof(float);
      for (int64_t i = 0; i < nx; i += 4) {
        const float* xi = x + i * static_cast<int64_t>(xs);
        float* yi = y + i * ldy;
        const int64_t g = imin(4, nx - i);
        const bool once = once_call && nx <= 4;  // more rows: the chunk is read again for the next group
        int64_t r = r0;
        for (; r + 4 * kW <= r1; r += 4 * kW) {
          switch (g) {
            case 1: bf16_blocked_rows_nx<1, 4>(xi, xs, w, r, yi, ldy, once); break;
            case 2: bf16_blocked_rows_nx<2, 4>(xi, xs, w, r, yi, ldy, once); break;
            case 3: bf16_blocked_rows_nx<3, 4>(xi, xs, w, r, yi, ldy, once); break;
            default: bf16_blocked_rows_nx<4, 4>(xi, xs, w, r, yi, ldy, once); break;
          }
        }
        for (int64_t j = 0; j < g; ++j)
          for (int64_t rr = r; rr < r1; rr += kW)
            bf16_blocked_rows_nx<1, 1>(xi + j * static_cast<int64_t>(xs), 0, w, rr, yi + j * ldy, 0, false);
      }
    }
  }

  // ---------------------------------------------------------------- prefill: packing
  // Panel of kXg rows of x, transposed: panel[k * kXg + i] = x[i, k] (missing rows zero).
  static size_t x_panel_bytes(int64_t in) { return static_cast<size_t>(in * kXg) * sizeof(float); }
  static void pack_x(const float* x, int64_t ldx, int64_t rows, int64_t in, void* panel) {
    float* p = static_cast<float*>(panel);
    if (rows < kXg) std::memset(p, 0, x_panel_bytes(in));
    for (int64_t i = 0; i < rows; ++i)
      for (int64_t k = 0; k < in; ++k) p[k * kXg + i] = x[i * ldx + k];
  }

  // Weight tiles: plain f32 rows of ldw (= in) values, dequantised exactly.
  static void fp8_pack_w(const Fp8Weight& w, int64_t r0, int64_t r1, int64_t ldw, void* tile) {
    float* t = static_cast<float*>(tile);
    const int64_t in = w.in, nkb = in / 32;
    for (int64_t r = r0; r < r1; ++r) {
      const uint8_t* src = w.w + r * in;
      const uint8_t* sc = w.scale + (r / 32) * nkb;
      float* dst = t + (r - r0) * ldw;
      for (int64_t b = 0; b < nkb; ++b) {
        const F s = V::set1(e8m0_value(sc[b]) * 256.0f);
        for (int j = 0; j < 32; j += kW) V::store(dst + b * 32 + j, V::mul(V::e4m3x(src + b * 32 + j), s));
      }
    }
  }
  static void fp4_pack_w(const Fp4Weight& w, int64_t r0, int64_t r1, int64_t ldw, void* tile) {
    float* t = static_cast<float*>(tile);
    const int64_t in = w.in, nkb = in / 32;
    for (int64_t r = r0; r < r1; ++r) {
      const uint8_t* src = w.w + r * (in / 2);
      float* dst = t + (r - r0) * ldw;
      for (int64_t b = 0; b < nkb; ++b) {
        const typename V::T tb = V::e2m1_table(e8m0_value(w.scale[r * nkb + b]));
        for (int g = 0; g < 32; g += 2 * kW) {
          F lo, hi, a, c;
          V::e2m1(src + b * 16 + g / 2, tb, &lo, &hi);
          V::interleave(lo, hi, &a, &c);
          V::store(dst + b * 32 + g, a);
          V::store(dst + b * 32 + g + kW, c);
        }
      }
    }
  }
  static void bf16_pack_w(const Bf16Weight& w, int64_t r0, int64_t r1, int64_t ldw, void* tile) {
    float* t = static_cast<float*>(tile);
    const int64_t in = w.in, main = in / kW * kW;
    if (w.blocked) {
      // Once per tile and prefill chunk. A vector of the blocked layout is kW rows at one k: kW of
      // them (k0 .. k0 + kW) transposed give kW rows' runs of kW values. E4M3 codes are widened as
      // the matvec does (exact). The k tail goes through at(); a block's rows outside [r0, r1) are
      // skipped (a tile need not start on a block).
      const int64_t br = kBf16BlockRows, nkb = ceil_div(in, 32), kmain = in / kW * kW;
      for (int64_t blk = r0 / br; blk * br < r1; ++blk) {
        for (int64_t h = 0; h < br; h += kW) {
          const int64_t row0 = blk * br + h;
          if (row0 + kW <= r0 || row0 >= r1) continue;
          for (int64_t k0 = 0; k0 < kmain; k0 += kW) {
            F v[kW];
            if (w.e4m3 != nullptr) {
              const uint8_t* p = w.e4m3 + blk * br * in + h;
              const F sc = V::set1(e8m0_value(w.e4m3_scale[(row0 / 32) * nkb + k0 / 32]) * 256.0f);  // kW divides 32
              for (int i = 0; i < kW; ++i) v[i] = V::mul(V::e4m3x(p + (k0 + i) * br), sc);
            } else {
              const uint16_t* p = w.w + blk * br * in + h;
              for (int i = 0; i < kW; ++i) v[i] = V::bf16(p + (k0 + i) * br);
            }
            V::transpose(v);
            for (int j = 0; j < kW; ++j)
              if (row0 + j >= r0 && row0 + j < r1) V::storeu(t + (row0 + j - r0) * ldw + k0, v[j]);
          }
          for (int64_t j = 0; j < kW; ++j)
            if (row0 + j >= r0 && row0 + j < r1)
              for (int64_t k = kmain; k < in; ++k)
                t[(row0 + j - r0) * ldw + k] = bits_f32(static_cast<uint32_t>(w.at(row0 + j, k)) << 16);
        }
      }
      return;
    }
    for (int64_t r = r0; r < r1; ++r) {
      const uint16_t* src = w.w + r * in;
      float* dst = t + (r - r0) * ldw;
      int64_t k = 0;
      for (; k < main; k += kW) V::storeu(dst + k, V::bf16(src + k));
      for (; k < in; ++k) dst[k] = bits_f32(static_cast<uint32_t>(src[k]) << 16);
    }
  }

  // ---------------------------------------------------------------- prefill: GEMM
  // c[RW][kXg] (+)= tile rows x panel over kn K values. acc[r][v] holds 8/16 x rows of weight row r.
  // Each output runs k = 0, 1, ... in order with the product and the sum rounded separately (K chunks
  // continue from c), so BF16/F32 results equal kernels/ref bit for bit (see the decode comment);
  // FP8/FP4 products are exact, where an FMA gives the same result (gemm<true>).
  template <bool kFused, int NV, int RW>
  static void micro(const float* xp, const float* wp, int64_t ldw, int64_t kn, float* c, bool first) {
    F acc[RW][NV];
    for (int r = 0; r < RW; ++r)
      for (int v = 0; v < NV; ++v) acc[r][v] = first ? V::zero() : V::load(c + r * kXg + v * kW);
    for (int64_t k = 0; k < kn; ++k) {
      F xv[NV];
      for (int v = 0; v < NV; ++v) xv[v] = V::load(xp + k * kXg + v * kW);
      for (int r = 0; r < RW; ++r) {
        const F b = V::set1(wp[r * ldw + k]);
        for (int v = 0; v < NV; ++v) {
          if constexpr (kFused) acc[r][v] = V::fmadd(b, xv[v], acc[r][v]);
          else acc[r][v] = V::add(acc[r][v], V::mul(b, xv[v]));
        }
      }
    }
    for (int r = 0; r < RW; ++r)
      for (int v = 0; v < NV; ++v) V::store(c + r * kXg + v * kW, acc[r][v]);
  }
  template <bool kFused, int NV, int RW>
  static void micro_rows(int rows, const float* xp, const float* wp, int64_t ldw, int64_t kn, float* c, bool first) {
    if constexpr (RW >= 1) {
      if (rows == RW) micro<kFused, NV, RW>(xp, wp, ldw, kn, c, first);
      else micro_rows<kFused, NV, RW - 1>(rows, xp, wp, ldw, kn, c, first);
    }
  }
  // kFused: FMA, for FP8/FP4 tiles (exact products: the same result, and faster on AVX-512);
  // otherwise product and sum rounded separately, for BF16/F32 (bit-exact with ref).
  template <bool kFused>
  static void gemm(const void* panel, int64_t x_rows, const void* tile, int64_t ldw, int64_t w_rows, int64_t in,
                   float* y, int64_t ldy) {
    const float* xp = static_cast<const float*>(panel);
    const float* wt = static_cast<const float*>(tile);
    alignas(64) float c[V::kTileRows * kXg];
    for (int64_t k0 = 0; k0 < in; k0 += V::kKc) {
      const int64_t kn = imin(V::kKc, in - k0);
      for (int64_t r = 0; r < w_rows; r += V::kRw) {
        const int rows = static_cast<int>(imin(V::kRw, w_rows - r));
        if (x_rows > kW) micro_rows<kFused, 2, V::kRw>(rows, xp + k0 * kXg, wt + r * ldw + k0, ldw, kn, c + r * kXg, k0 == 0);
        else micro_rows<kFused, 1, V::kRw>(rows, xp + k0 * kXg, wt + r * ldw + k0, ldw, kn, c + r * kXg, k0 == 0);
      }
    }
    // Row by row of y: contiguous stores (y's rows are ldy floats apart, 24 KiB for a 6144-wide
    // output: column by column each store was a new cache line and page, a third of the GEMM's time
    // at K = 256, bench/kernels_bench BM_LinearFp8/prefill512_wq_b_6144x256).
    for (int64_t i = 0; i < x_rows; ++i)
      for (int64_t r = 0; r < w_rows; ++r) y[i * ldy + r] = c[r * kXg + i];
  }
};

}  // namespace
}  // namespace strata::kernels::x86
