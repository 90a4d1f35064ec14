// Driver of the linears over ggml block formats (kernels/kquant_linear.h): picks the level's kernel,
// splits the output rows over the pool. Each row is computed whole by one thread in the defined
// order, so results do not depend on the thread count or on which level runs.
#include "kernels/kquant_linear.h"

#include <vector>

#include "core/status.h"
#include "kernels/kquant_q8_0_dot.h"
#include "kernels/kquant_q8k.h"
#if !defined(STRATA_KERNELS_NO_X86)
#include "kernels/x86/kquant_x86.h"
#endif

namespace strata::kernels {
namespace {

// Rows per task: a multiple of the 4 rows the vector kernels run side by side.
constexpr int64_t kRowGrain = 16;

// The rows kernels of kernels/x86/kquant_x86.h (linear_q8k_rows_*, linear_q8_0_rows_*).
using RowsKernel = bool (*)(int, const void*, int64_t, int64_t, const uint8_t*, int64_t, int64_t, int64_t, float*,
                            int64_t);

// One integer path: x's block type and elements per block, its rounding, the reference dot and
// the AVX2 and AVX-512 rows kernels (same bits).
template <class XBlock>
struct IntegerPath {
  int64_t x_block_elems;
  void (*quantize)(const float*, XBlock*, int64_t);
  float (*dot)(QuantType, const uint8_t*, const XBlock*, int64_t);
  RowsKernel rows_avx2, rows_avx512;
};

// x rounded once per call (per token, shared by every row range and thread), then the path's integer
// dot row by row: the level's kernel (AVX-512 BF16 adds nothing to integer dots: it runs the AVX-512
// one), or the reference at kScalar.
template <class XBlock>
void linear_integer(const IntegerPath<XBlock>& path, const float* x, int64_t n, const QuantWeight& w, float* y,
                    ThreadPool* pool, KernelLevel level) {
  const int64_t nb = w.in / path.x_block_elems;
  std::vector<XBlock> xq(static_cast<size_t>(n * nb));  // once per call, never per row
  for (int64_t i = 0; i < n; ++i) path.quantize(x + i * w.in, xq.data() + i * nb, w.in);
  const auto* base = static_cast<const uint8_t*>(w.w);
  const int64_t row_bytes = quant_row_bytes(w.type, w.in);
  const RowsKernel kernel = !linear_quant_has_kernel(w.type, level) ? nullptr
                            : level == KernelLevel::kAvx2           ? path.rows_avx2
                                                                    : path.rows_avx512;
  // n > 1: chunks of kRowGrain rows outermost, tokens inside, so a chunk's weights are read from
  // memory once for all n tokens (prefill); n = 1: the whole range in one call. The bits do not
  // depend on the chunking (each row is computed whole).
  auto run = [&](int64_t r0, int64_t r1) {
    const int64_t chunk = n > 1 ? kRowGrain : r1 - r0;
    for (int64_t c0 = r0; c0 < r1; c0 += chunk) {
      const int64_t c1 = c0 + chunk < r1 ? c0 + chunk : r1;
      if (kernel != nullptr) {
        kernel(static_cast<int>(w.type), xq.data(), n, nb, base, row_bytes, c0, c1, y, w.out);
        continue;
      }
      for (int64_t i = 0; i < n; ++i)
        for (int64_t r = c0; r < c1; ++r)
          y[i * w.out + r] = path.dot(w.type, base + r * row_bytes, xq.data() + i * nb, nb);
    }
  };
  if (pool == nullptr || level == KernelLevel::kScalar)
    run(0, w.out);
  else
    pool->parallel_for(w.out, run, kRowGrain);
}

#if !defined(STRATA_KERNELS_NO_X86)
constexpr IntegerPath<BlockQ8_K> kQ8KPath{256, quantize_row_q8_K, ref::dot_q8k, x86::linear_q8k_rows_avx2,
                                          x86::linear_q8k_rows_avx512};
constexpr IntegerPath<BlockQ8_0> kQ80Path{32, quantize_row_q8_0_ref, ref::dot_q8_0, x86::linear_q8_0_rows_avx2,
                                          x86::linear_q8_0_rows_avx512};
#else
constexpr IntegerPath<BlockQ8_K> kQ8KPath{256, quantize_row_q8_K, ref::dot_q8k, nullptr, nullptr};
constexpr IntegerPath<BlockQ8_0> kQ80Path{32, quantize_row_q8_0_ref, ref::dot_q8_0, nullptr, nullptr};
#endif

}  // namespace

bool linear_quant_has_kernel(QuantType t, KernelLevel level) {
#if !defined(STRATA_KERNELS_NO_X86)
  // Every vector level has a kernel for every type (the integer paths: AVX2 and AVX-512 files).
  (void)t;
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
  // Every type takes an integer path (kquant_linear.h); the f32-x kernels are gone.
  if (q8k_dot_supported(w.type)) return linear_integer(kQ8KPath, x, n, w, y, pool, level);
  STRATA_CHECK(q8_0_dot_supported(w.type), "linear_quant: no integer path for this type");
  linear_integer(kQ80Path, x, n, w, y, pool, level);
}

void linear_quant(const float* x, int64_t n, const QuantWeight& w, float* y, ThreadPool* pool) {
  linear_quant(x, n, w, y, pool, best_kernel_level());
}

}  // namespace strata::kernels
