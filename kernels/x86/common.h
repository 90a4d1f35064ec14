// Scalar helpers and the weight prefetch shared by the ISA files of kernels/x86 (each compiled with
// its own -m flags).
//
// Everything here sits in an anonymous namespace on purpose: each ISA file gets its own internal copy
// compiled with its own flags, so the linker can never merge an AVX-512 build of a helper into code
// that runs on a CPU without AVX-512 (the ODR hazard of per-file flags). For the same reason the ISA
// files use no std:: templates (std::min, std::vector, ...), only these helpers and C functions.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <type_traits>
#include <utility>

#include <xmmintrin.h>

namespace strata::kernels::x86 {
namespace {

// Prefetches the weight line at p for a decode matvec. Where the call reads each weight byte once
// (`once`: every row of x in one pass over the weights) the line goes in non-temporal (NTA: into
// L1, likely without displacing L2/L3 on its way out), so the ~800 MB a token streams no longer
// evict what the step reads again between its passes: the activations, the KV cache's window ring
// and compressed rows, the mHC state, the kernels' tables. Where a chunk is read again for another
// group of x rows (more rows than one pass takes) the line goes to every level (T0) as before.
// Measured on a Zen 5 VM only (8 GB scaled checkpoint, 2 threads; docs/performance.md, "Weights
// stream past the caches"): `strata run --stats` attention, MoE and head times lower in 4 of 4
// alternated pairs (decode +2 to +11%); the kernels alone stream at the same rate with either hint.
inline void prefetch_weights(const void* p, bool once) {
  if (once) _mm_prefetch(static_cast<const char*>(p), _MM_HINT_NTA);
  else _mm_prefetch(static_cast<const char*>(p), _MM_HINT_T0);
}

// Calls f(std::integral_constant<int, N>{}) with N = n, for n in [1, Max] (n > Max: Max; n <= 0:
// not at all). The kernels' loops over a few x rows, heads or entries take the count as a template
// parameter; this picks the instantiation at run time in one place.
template <int Max, class F>
inline void with_count(int64_t n, F&& f) {
  if (n > Max) n = Max;
  [&]<int... I>(std::integer_sequence<int, I...>) {
    (void)((n == I + 1 ? (f(std::integral_constant<int, I + 1>{}), true) : false) || ...);
  }(std::make_integer_sequence<int, Max>{});
}

inline float bits_f32(uint32_t u) {
  float f;
  std::memcpy(&f, &u, sizeof f);
  return f;
}
inline uint32_t f32_bits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, sizeof u);
  return u;
}
inline uint32_t load_u32(const void* p) {
  uint32_t u;
  std::memcpy(&u, p, sizeof u);
  return u;
}

inline int64_t imin(int64_t a, int64_t b) { return a < b ? a : b; }
inline int64_t imax(int64_t a, int64_t b) { return a > b ? a : b; }
inline int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }
inline int64_t round_up(int64_t a, int64_t b) { return ceil_div(a, b) * b; }

// Exact value of a UE8M0 code: 2^(c-127); 0 is the subnormal 2^-127, 255 is NaN (core/dtype.h e8m0_to_f32).
inline float e8m0_value(uint8_t c) {
  if (c == 0) return bits_f32(0x00400000u);
  if (c == 255) return bits_f32(0x7FC00000u);
  return bits_f32(static_cast<uint32_t>(c) << 23);
}

// kernels::fp8_block_scale, restated here so the ISA files do not call out of line per block.
// ROUNDING: fp32(max(amax, 1e-4) * fp32(1/448)), then 2^(exponent + (mantissa != 0)) (fast_round_scale).
inline float fp8_scale(float amax) {
  const float t = (amax > 1e-4f ? amax : 1e-4f) * (1.0f / 448.0f);
  const uint32_t u = f32_bits(t);
  return bits_f32((((u >> 23) & 0xFFu) + ((u & 0x7FFFFFu) != 0 ? 1u : 0u)) << 23);
}

// The E8M0 scale of an E2M1 block (kernels::fp4_quant_e8m0), restated for the same reason.
// ROUNDING: s = 2^ceil(log2(fp32(max(amax, 6*2^-126) * fp32(1/6)))) from the bits (fp4_act_quant).
// (Ternaries and the bit casts above, no std templates: see above on the ISA files.)
inline float fp4_e8m0_scale(float amax) {
  const uint32_t u = f32_bits((amax < 6.0f * 0x1p-126f ? 6.0f * 0x1p-126f : amax) * (1.0f / 6.0f));
  return bits_f32((((u >> 23) & 0xFFu) + ((u & 0x7FFFFFu) != 0 ? 1u : 0u)) << 23);
}

// Scratch that lives on the stack up to kStackBytes and on the heap beyond (64-byte aligned): the
// ISA files' own copy of kernels/detail/inline_scratch.h (a shared template would break the rule
// above).
constexpr size_t kStackBytes = 64 * 1024;
class Scratch {
 public:
  explicit Scratch(size_t bytes)
      : heap_(bytes > kStackBytes ? std::aligned_alloc(64, (bytes + 63) / 64 * 64) : nullptr) {}
  ~Scratch() { std::free(heap_); }
  Scratch(const Scratch&) = delete;
  Scratch& operator=(const Scratch&) = delete;
  template <class T>
  T* as() {
    return static_cast<T*>(heap_ != nullptr ? heap_ : static_cast<void*>(stack_));
  }

 private:
  void* heap_;
  alignas(64) unsigned char stack_[kStackBytes];
};

}  // namespace
}  // namespace strata::kernels::x86
