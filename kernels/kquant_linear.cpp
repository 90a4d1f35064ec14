// Driver of the linears over ggml block formats (kernels/kquant_linear.h): picks the level's kernel,
// splits the output rows over the pool. Each row is computed whole by one thread in the defined
// order, so results do not depend on the thread count or on which level runs.
#include "kernels/kquant_linear.h"

#include <vector>

#include "core/status.h"
#include "kernels/kquant_q8k.h"
#if !defined(STRATA_KERNELS_NO_X86)
#include "kernels/x86/kquant_x86.h"
#endif

namespace strata::kernels {
namespace {

// Rows per task: a multiple of the 4 rows the vector kernels run side by side.
constexpr int64_t kRowGrain = 16;

// The K-quants (q8k_dot_supported): x rounded to Q8_K once per call (per token, shared by every row range and thread), then
// the integer dot (kernels/kquant_q8k.h) row by row: the AVX-512 kernel, or the reference elsewhere.
void linear_q8k(const float* x, int64_t n, const QuantWeight& w, float* y, ThreadPool* pool, KernelLevel level) {
  const int64_t nb = w.in / 256;
  std::vector<BlockQ8_K> xq(static_cast<size_t>(n * nb));  // once per call, never per row
  for (int64_t i = 0; i < n; ++i) quantize_row_q8_K(x + i * w.in, xq.data() + i * nb, w.in);
  const auto* base = static_cast<const uint8_t*>(w.w);
  const int64_t row_bytes = quant_row_bytes(w.type, w.in);
  const bool vec = linear_quant_has_kernel(w.type, level);
  auto run = [&](int64_t r0, int64_t r1) {
    for (int64_t i = 0; i < n; ++i) {
      const BlockQ8_K* xi = xq.data() + i * nb;
      float* yi = y + i * w.out;
#if !defined(STRATA_KERNELS_NO_X86)
      if (vec) {
        x86::linear_q8k_rows_avx512(static_cast<int>(w.type), xi, nb, base, row_bytes, r0, r1, yi);
        continue;
      }
#endif
      for (int64_t r = r0; r < r1; ++r) yi[r] = ref::dot_q8k(w.type, base + r * row_bytes, xi, nb);
    }
  };
  (void)vec;
  if (pool == nullptr || level == KernelLevel::kScalar)
    run(0, w.out);
  else
    pool->parallel_for(w.out, run, kRowGrain);
}

}  // namespace

bool linear_quant_has_kernel(QuantType t, KernelLevel level) {
#if !defined(STRATA_KERNELS_NO_X86)
  // The Q8_K integer path has an AVX-512 kernel only; AVX2 runs its reference (same bits).
  if (q8k_dot_supported(t)) return level == KernelLevel::kAvx512 || level == KernelLevel::kAvx512Bf16;
  return level != KernelLevel::kScalar;
#else
  (void)t;
  (void)level;
  return false;
#endif
}

void linear_quant(const float* x, int64_t n, const QuantWeight& w, float* y, ThreadPool* pool, KernelLevel level) {
  STRATA_CHECK(kernel_level_supported(level), "linear_quant: level not supported by this CPU");
  STRATA_DCHECK(w.in % quant_block_elems(w.type) == 0, "linear_quant: in must be a multiple of the block");
  if (q8k_dot_supported(w.type)) return linear_q8k(x, n, w, y, pool, level);
  if (!linear_quant_has_kernel(w.type, level)) {
    if (level == KernelLevel::kScalar || pool == nullptr) return ref::linear_quant(x, n, w, y);
    // The reference, row range by row range (same bits: each row is computed whole).
    pool->parallel_for(
        w.out,
        [&](int64_t r0, int64_t r1) {
          QuantWeight part = w;
          part.w = quant_weight_row(w, r0);
          part.out = r1 - r0;
          for (int64_t i = 0; i < n; ++i) {
            float* yi = y + i * w.out + r0;
            std::vector<float> tmp(static_cast<size_t>(part.out));
            ref::linear_quant(x + i * w.in, 1, part, tmp.data());
            for (int64_t r = 0; r < part.out; ++r) yi[r] = tmp[static_cast<size_t>(r)];
          }
        },
        kRowGrain);
    return;
  }
#if !defined(STRATA_KERNELS_NO_X86)
  const int type = static_cast<int>(w.type);
  const auto* base = static_cast<const uint8_t*>(w.w);
  const int64_t row_bytes = quant_row_bytes(w.type, w.in);
  // AVX-512 BF16 adds nothing for f32 FMAs: it runs the AVX-512 kernel.
  auto* kernel = level == KernelLevel::kAvx2 ? &x86::linear_quant_rows_avx2 : &x86::linear_quant_rows_avx512;
  const bool batch = n > 1 && level != KernelLevel::kAvx2;
  auto run = [&](int64_t r0, int64_t r1) {
    if (batch) {
      // Several tokens: decode each weight block once for all of them (same bits, see the kernel).
      std::vector<float> scratch(static_cast<size_t>(x86::linear_quant_batch_scratch_floats(w.in)));
      x86::linear_quant_rows_batch_avx512(type, x, n, base, row_bytes, w.in, w.out, r0, r1, y, scratch.data());
      return;
    }
    for (int64_t i = 0; i < n; ++i) kernel(type, x + i * w.in, base, row_bytes, w.in, r0, r1, y + i * w.out);
  };
  if (pool == nullptr)
    run(0, w.out);
  else
    pool->parallel_for(w.out, run, kRowGrain);
#endif
}

void linear_quant(const float* x, int64_t n, const QuantWeight& w, float* y, ThreadPool* pool) {
  linear_quant(x, n, w, y, pool, best_kernel_level());
}

}  // namespace strata::kernels
