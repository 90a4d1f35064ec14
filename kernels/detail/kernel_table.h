// Internal to kernels/: the contract between the generic linear driver (kernels/linear.cpp, compiled
// for baseline x86-64) and the per-ISA files (kernels/x86/*_avx2.cpp, *_avx512*.cpp, compiled with
// their own -m flags). Nothing outside kernels/ includes this.
//
// The ISA files export only plain functions over raw pointers, gathered in a LevelKernels table; the
// driver owns threading (ThreadPool, std::function) and scratch memory. That split keeps every
// std:: template instantiation out of the ISA files, so no inline function compiled with AVX-512
// flags can be merged by the linker into code that runs on an older CPU.
//
// Two regimes per weight format:
//   decode (small n): vec_prep lays each quantised row of x out for the level, then matvec streams
//     each weight row once for up to max_nx rows of x (memory bound);
//   prefill (n >= gemm_min_rows): x rows are quantised and packed transposed into groups of `xg` rows
//     (pack_x), a tile of weight rows is dequantised once into plain rows (pack_w), and `gemm`
//     multiplies every packed group with the tile (compute bound).
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>

#include "kernels/linear.h"

namespace strata::kernels::detail {

// How packed x groups meet dequantised weight tiles at one level.
struct GemmEngine {
  int64_t xg;            // x rows per packed group
  int64_t tile_rows;     // weight rows per tile (pack_w / gemm)
  int64_t w_elem_bytes;  // bytes per dequantised tile element: 2 (bf16) or 4 (f32)
  int64_t k_align;       // tile rows and panels are padded to a multiple of this many K elements
  // Bytes of one packed group for inputs of length `in`.
  size_t (*x_panel_bytes)(int64_t in);
  // Packs rows [0, rows) of x (row stride ldx floats; rows <= xg, missing rows are zero) into panel.
  void (*pack_x)(const float* x, int64_t ldx, int64_t rows, int64_t in, void* panel);
  // y[i, r] = sum_k x[i, k] * tile[r, k] for i < x_rows (packed group) and r < w_rows, where tile
  // rows are `ldw` elements apart; y rows are `ldy` floats apart. Overwrites y.
  void (*gemm)(const void* panel, int64_t x_rows, const void* tile, int64_t ldw, int64_t w_rows, int64_t in,
               float* y, int64_t ldy);
};

// One weight format at one level.
template <class W>
struct FormatKernels {
  // ---- decode and small n ----
  // Bytes of one prepared activation row (0: matvec reads the rows of x themselves).
  size_t (*vec_act_bytes)(int64_t in) = nullptr;
  // Lays out (and for FP8/FP4 quantises) one row x[in] into act (64-byte aligned).
  void (*vec_prep)(const float* x, int64_t in, void* act) = nullptr;
  // y[i, r] for i < nx (nx <= max_nx) and r in [r0, r1); prepared rows are act_stride bytes apart
  // (x rows when vec_act_bytes is 0), y rows ldy floats apart. r0 is a multiple of vec_row_unit.
  // Each weight byte of the range is decoded once for all nx rows. A row's result does not depend
  // on r0 and r1 (the pool's decode passes cut the rows where the threads' timing puts the cuts,
  // kernels/linear.cpp run_rows).
  // `once`: this call is the only pass over rows [r0, r1) (false: the caller runs them again for
  // the next group of x rows), so the weight prefetches may bypass L2/L3 (kernels/x86/common.h
  // prefetch_weights); a kernel that itself reads a line more than once (its own groups of x rows,
  // a pass per x row, half-block steps) prefetches those into every level regardless. Never
  // changes a result.
  void (*matvec)(const void* act, int64_t nx, size_t act_stride, const W& w, int64_t r0, int64_t r1, float* y,
                 int64_t ldy, bool once) = nullptr;
  int64_t vec_row_unit = 1;
  int64_t max_nx = 1;
  // n < gemm_min_rows runs the matvec kernel over groups of max_nx rows; larger n the GEMM engine.
  int64_t gemm_min_rows = 2;
  // ---- prefill ----
  const GemmEngine* engine = nullptr;
  bool quantise_x = false;  // rows of x go through act_quant_fp8 before pack_x
  // Dequantises weight rows [r0, r1) into `tile` as rows of ldw elements of the engine's type
  // (ldw = in rounded up to k_align, the padding zeroed). Null: the tile is w.w itself (f32 on f32).
  void (*pack_w)(const W& w, int64_t r0, int64_t r1, int64_t ldw, void* tile) = nullptr;
  // Null, or whether this level computes (w, n) exactly; false sends the call one level down.
  bool (*supports)(const W& w, int64_t n) = nullptr;
};

struct LevelKernels {
  // In-place act_quant_fp8 over n floats (n a multiple of 32), blocks of 32; bit-exact with ref.
  void (*act_quant_fp8)(float* x, int64_t n) = nullptr;
  // In-place fp4_quant_e8m0 over n floats (n a multiple of 32), blocks of 32; bit-exact with ref.
  // Null: the reference.
  void (*fp4_quant_e8m0)(float* x, int64_t n) = nullptr;
  FormatKernels<Fp8Weight> fp8;
  FormatKernels<Fp4Weight> fp4;
  FormatKernels<Bf16Weight> bf16;
  FormatKernels<F32Weight> f32;
  // Where `supports` == false sends a call; null: the scalar reference (kernels/ref).
  const LevelKernels* fallback = nullptr;
};

// Tables of the x86 levels (defined in kernels/x86/linear_*.cpp). Call only when the CPU supports them.
const LevelKernels& avx2_kernels();
const LevelKernels& avx512_kernels();
const LevelKernels& avx512bf16_kernels();

// Runs y = x . W^T with the level's kernels (kernels/linear.cpp).
// `path` picks the regime (kernels::RowPath; kAuto: by n).
void run_linear(const LevelKernels& level, const float* x, int64_t n, const Fp8Weight& w, float* y, ThreadPool* pool,
                RowPath path);
void run_linear(const LevelKernels& level, const float* x, int64_t n, const Fp4Weight& w, float* y, ThreadPool* pool,
                RowPath path);
void run_linear(const LevelKernels& level, const float* x, int64_t n, const Bf16Weight& w, float* y,
                ThreadPool* pool, RowPath path);
void run_linear(const LevelKernels& level, const float* x, int64_t n, const F32Weight& w, float* y, ThreadPool* pool,
                RowPath path);
// Runs a batch of linears as run_linear would, decode-sized jobs in one shared pool pass.
void run_linear_batch(const LevelKernels& level, std::span<const LinearJob<Fp8Weight>> jobs, ThreadPool* pool);
void run_linear_batch(const LevelKernels& level, std::span<const LinearJob<Fp4Weight>> jobs, ThreadPool* pool);
void run_linear_batch(const LevelKernels& level, std::span<const LinearJob<Bf16Weight>> jobs, ThreadPool* pool);
void run_linear_batch(const LevelKernels& level, const LinearBatch& jobs, ThreadPool* pool);

}  // namespace strata::kernels::detail
