// Run-time choice of the kernel level and the public entry points of quant.h / linear.h.
//
// The level is read once from CpuFeatures::detect() (a function-local static, immutable after the
// first call). AVX-512 with BF16 needs VBMI too: its FP8 decode kernel looks E4M3 codes up with
// VPERMI2B. Builds for other architectures (STRATA_KERNELS_NO_X86) only have the scalar level.
#include "kernels/dispatch.h"

#include "core/cpu_features.h"
#include "core/status.h"
#include "kernels/detail/kernel_table.h"
#include "kernels/detail/ops_table.h"
#include "kernels/quant.h"

namespace strata::kernels {
namespace {

struct Support {
  bool level[5] = {true, false, false, false, false};
  KernelLevel best = KernelLevel::kScalar;
};

Support detect_support() {
  Support s;
#if !defined(STRATA_KERNELS_NO_X86)
  const CpuFeatures f = CpuFeatures::detect();
  s.level[static_cast<int>(KernelLevel::kAvx2)] = f.avx2;
  s.level[static_cast<int>(KernelLevel::kAvx512)] = f.avx2 && f.avx512;
  s.level[static_cast<int>(KernelLevel::kAvx512Bf16)] = f.avx2 && f.avx512 && f.avx512_bf16 && f.avx512_vbmi;
  // The permission request is the one side effect of detection: process-wide, once, and harmless when
  // nothing uses tiles (the kernel then only reserves room for them in signal frames).
  s.level[static_cast<int>(KernelLevel::kAmx)] =
      s.level[static_cast<int>(KernelLevel::kAvx512Bf16)] && f.amx_bf16 && detail::amx_request_permission();
#endif
  for (KernelLevel l : kAllKernelLevels)
    if (s.level[static_cast<int>(l)]) s.best = l;
  return s;
}

const Support& support() {
  static const Support s = detect_support();
  return s;
}

// The table of an x86 level; null for kScalar.
const detail::LevelKernels* table(KernelLevel level) {
  STRATA_CHECK(kernel_level_supported(level), "kernels: level not supported by this CPU");
#if !defined(STRATA_KERNELS_NO_X86)
  switch (level) {
    case KernelLevel::kScalar: return nullptr;
    case KernelLevel::kAvx2: return &detail::avx2_kernels();
    case KernelLevel::kAvx512: return &detail::avx512_kernels();
    case KernelLevel::kAvx512Bf16:
    case KernelLevel::kAmx: return &detail::avx512bf16_kernels();
  }
#endif
  return nullptr;
}

template <class W, class Ref>
void linear_at(KernelLevel level, const float* x, int64_t n, const W& w, float* y, ThreadPool* pool, RowPath path,
               Ref ref_fn) {
  const detail::LevelKernels* t = table(level);
  if (t == nullptr) ref_fn(x, n, w, y);  // the reference computes every row alike: no regimes
  else detail::run_linear(*t, x, n, w, y, pool, path);
}

template <class W, class Ref>
void linear_batch_at(KernelLevel level, std::span<const LinearJob<W>> jobs, ThreadPool* pool, Ref ref_fn) {
  const detail::LevelKernels* t = table(level);
  if (t == nullptr) {
    for (const LinearJob<W>& j : jobs) ref_fn(j.x, j.n, j.w, j.y);
  } else {
    detail::run_linear_batch(*t, jobs, pool);
  }
}

}  // namespace

const char* kernel_level_name(KernelLevel level) {
  switch (level) {
    case KernelLevel::kScalar: return "scalar";
    case KernelLevel::kAvx2: return "avx2";
    case KernelLevel::kAvx512: return "avx512";
    case KernelLevel::kAvx512Bf16: return "avx512bf16";
    case KernelLevel::kAmx: return "amx";
  }
  return "?";
}

bool kernel_level_supported(KernelLevel level) { return support().level[static_cast<int>(level)]; }

KernelLevel best_kernel_level() { return support().best; }

void act_quant_fp8_inplace(float* x, int64_t n, int block, KernelLevel level) {
  const detail::LevelKernels* t = table(level);
  if (t == nullptr || block != 32) ref::act_quant_fp8_inplace(x, n, block);
  else t->act_quant_fp8(x, n);
}

void fp4_quant_e8m0_inplace(float* x, int64_t n, int block, KernelLevel level) {
  const detail::LevelKernels* t = table(level);
  if (t == nullptr || t->fp4_quant_e8m0 == nullptr || block != 32) ref::fp4_quant_e8m0_inplace(x, n, block);
  else t->fp4_quant_e8m0(x, n);
}

void linear_fp8(const float* x, int64_t n, const Fp8Weight& w, float* y, ThreadPool* pool, KernelLevel level,
                RowPath path) {
  linear_at(level, x, n, w, y, pool, path, [](const float* a, int64_t m, const Fp8Weight& b, float* c) { ref::linear_fp8(a, m, b, c); });
}
void linear_fp4(const float* x, int64_t n, const Fp4Weight& w, float* y, ThreadPool* pool, KernelLevel level,
                RowPath path) {
  linear_at(level, x, n, w, y, pool, path, [](const float* a, int64_t m, const Fp4Weight& b, float* c) { ref::linear_fp4(a, m, b, c); });
}
void linear_bf16(const float* x, int64_t n, const Bf16Weight& w, float* y, ThreadPool* pool, KernelLevel level,
                RowPath path) {
  linear_at(level, x, n, w, y, pool, path, [](const float* a, int64_t m, const Bf16Weight& b, float* c) { ref::linear_bf16(a, m, b, c); });
}
void linear_f32(const float* x, int64_t n, const F32Weight& w, float* y, ThreadPool* pool, KernelLevel level,
                RowPath path) {
  linear_at(level, x, n, w, y, pool, path, [](const float* a, int64_t m, const F32Weight& b, float* c) { ref::linear_f32(a, m, b, c); });
}

void linear_fp8_batch(std::span<const LinearJob<Fp8Weight>> jobs, ThreadPool* pool, KernelLevel level) {
  linear_batch_at(level, jobs, pool, [](const float* a, int64_t m, const Fp8Weight& b, float* c) { ref::linear_fp8(a, m, b, c); });
}
void linear_fp4_batch(std::span<const LinearJob<Fp4Weight>> jobs, ThreadPool* pool, KernelLevel level) {
  linear_batch_at(level, jobs, pool, [](const float* a, int64_t m, const Fp4Weight& b, float* c) { ref::linear_fp4(a, m, b, c); });
}
void linear_batch(const LinearBatch& jobs, ThreadPool* pool, KernelLevel level) {
  const detail::LevelKernels* t = table(level);
  if (t == nullptr) {
    for (const LinearJob<Fp8Weight>& j : jobs.fp8) ref::linear_fp8(j.x, j.n, j.w, j.y);
    for (const LinearJob<Fp4Weight>& j : jobs.fp4) ref::linear_fp4(j.x, j.n, j.w, j.y);
    for (const LinearJob<Bf16Weight>& j : jobs.bf16) ref::linear_bf16(j.x, j.n, j.w, j.y);
    for (const LinearJob<F32Weight>& j : jobs.f32) ref::linear_f32(j.x, j.n, j.w, j.y);
  } else {
    detail::run_linear_batch(*t, jobs, pool);
  }
}
void linear_bf16_batch(std::span<const LinearJob<Bf16Weight>> jobs, ThreadPool* pool, KernelLevel level) {
  linear_batch_at(level, jobs, pool, [](const float* a, int64_t m, const Bf16Weight& b, float* c) { ref::linear_bf16(a, m, b, c); });
}

void act_quant_fp8_inplace(float* x, int64_t n, int block) { act_quant_fp8_inplace(x, n, block, best_kernel_level()); }
void fp4_quant_e8m0_inplace(float* x, int64_t n, int block) {
  fp4_quant_e8m0_inplace(x, n, block, best_kernel_level());
}
void linear_fp8(const float* x, int64_t n, const Fp8Weight& w, float* y, ThreadPool* pool, RowPath path) {
  linear_fp8(x, n, w, y, pool, best_kernel_level(), path);
}
void linear_fp4(const float* x, int64_t n, const Fp4Weight& w, float* y, ThreadPool* pool, RowPath path) {
  linear_fp4(x, n, w, y, pool, best_kernel_level(), path);
}
void linear_bf16(const float* x, int64_t n, const Bf16Weight& w, float* y, ThreadPool* pool, RowPath path) {
  linear_bf16(x, n, w, y, pool, best_kernel_level(), path);
}
void linear_fp8_batch(std::span<const LinearJob<Fp8Weight>> jobs, ThreadPool* pool) {
  linear_fp8_batch(jobs, pool, best_kernel_level());
}
void linear_fp4_batch(std::span<const LinearJob<Fp4Weight>> jobs, ThreadPool* pool) {
  linear_fp4_batch(jobs, pool, best_kernel_level());
}
void linear_batch(const LinearBatch& jobs, ThreadPool* pool) { linear_batch(jobs, pool, best_kernel_level()); }
void linear_bf16_batch(std::span<const LinearJob<Bf16Weight>> jobs, ThreadPool* pool) {
  linear_bf16_batch(jobs, pool, best_kernel_level());
}
void linear_f32(const float* x, int64_t n, const F32Weight& w, float* y, ThreadPool* pool, RowPath path) {
  linear_f32(x, n, w, y, pool, best_kernel_level(), path);
}

}  // namespace strata::kernels
