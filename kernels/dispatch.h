// Which implementation of the kernels runs: chosen once from the CPU, or forced (tests, benches).
//
// The plain entry points in kernels/quant.h and kernels/linear.h use best_kernel_level(). The
// overloads below take a KernelLevel so a test can run every level the machine supports against the
// scalar reference (an AVX-512 machine still checks its AVX2 path), and a bench can compare them.
// Levels form a chain: each one may fall back to the one below it for a shape or weight it cannot
// handle exactly (kAvx512Bf16 -> kAvx512 for weight scales outside its safe range, see linear.cpp).
// Threading: as the plain entry points. Cannot fail; an unsupported level is a bug (STRATA_CHECK).
#pragma once

#include <cstdint>

#include "kernels/linear.h"

namespace strata::kernels {

enum class KernelLevel : uint8_t {
  kScalar = 0,  // kernels/ref: the definition
  kAvx2,        // AVX2 + FMA + F16C, f32 arithmetic
  kAvx512,      // AVX-512 F/BW/VL/DQ, f32 arithmetic
  kAvx512Bf16,  // + AVX512_BF16 and AVX512_VBMI: FP8/FP4 products in VDPBF16PS (exact, f32 sums)
  kAmx,         // + AMX-BF16 (and the OS's grant of tile state): the any-order BF16 matvec on tiles
};

inline constexpr KernelLevel kAllKernelLevels[] = {KernelLevel::kScalar, KernelLevel::kAvx2, KernelLevel::kAvx512,
                                                   KernelLevel::kAvx512Bf16, KernelLevel::kAmx};

// "scalar", "avx2", "avx512", "avx512bf16", "amx".
const char* kernel_level_name(KernelLevel level);
// Whether the running CPU (and this build) can run `level`.
bool kernel_level_supported(KernelLevel level);
// The fastest supported level; read once from CpuFeatures::detect().
KernelLevel best_kernel_level();

// Forced-level versions of the dispatched entry points. REQUIRES: kernel_level_supported(level).
// kScalar runs the references in kernels::ref (serial; `pool` is ignored).
void act_quant_fp8_inplace(float* x, int64_t n, int block, KernelLevel level);
void fp4_quant_e8m0_inplace(float* x, int64_t n, int block, KernelLevel level);
void linear_fp8(const float* x, int64_t n, const Fp8Weight& w, float* y, ThreadPool* pool, KernelLevel level,
                RowPath path = RowPath::kAuto);
void linear_fp4(const float* x, int64_t n, const Fp4Weight& w, float* y, ThreadPool* pool, KernelLevel level,
                RowPath path = RowPath::kAuto);
void linear_bf16(const float* x, int64_t n, const Bf16Weight& w, float* y, ThreadPool* pool, KernelLevel level,
                 RowPath path = RowPath::kAuto);
void linear_f32(const float* x, int64_t n, const F32Weight& w, float* y, ThreadPool* pool, KernelLevel level,
                RowPath path = RowPath::kAuto);
void linear_bf16_any_order(const float* x, int64_t n, const Bf16Weight& w, float* y, ThreadPool* pool,
                           KernelLevel level, RowPath path = RowPath::kAuto);
void linear_bf16_any_order_rows(const float* x, int64_t n, const Bf16Weight& w, float* const* y, ThreadPool* pool,
                                KernelLevel level, RowPath path = RowPath::kAuto);
bool any_order_writes_rows(const Bf16Weight& w, int64_t n, RowPath path, KernelLevel level);
void linear_batch(const LinearBatch& jobs, ThreadPool* pool, KernelLevel level);
void linear_fp8_batch(std::span<const LinearJob<Fp8Weight>> jobs, ThreadPool* pool, KernelLevel level);
void linear_fp4_batch(std::span<const LinearJob<Fp4Weight>> jobs, ThreadPool* pool, KernelLevel level);
void linear_bf16_batch(std::span<const LinearJob<Bf16Weight>> jobs, ThreadPool* pool, KernelLevel level);

}  // namespace strata::kernels
