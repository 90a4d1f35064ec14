// AVX-512 (F/BW/VL/DQ) linear kernels: the f32 engine (f32_engine.h) with 16 lanes.
//
// E4M3 widens through the fp16 trick (sign-extend, shift, mask, VCVTPH2PS: exact, subnormals
// included); E2M1 through VPERMPS on a 16-entry table that already holds the block scale.
// GEMM micro-kernel: 12 weight rows x 32 x rows = 24 zmm accumulators.
#include <immintrin.h>

#include "kernels/detail/kernel_table.h"
#include "kernels/x86/common.h"
#include "kernels/x86/f32_engine.h"
#include "kernels/x86/quant_x86.h"
#include "kernels/x86/simd.h"

namespace strata::kernels::x86 {
namespace {

alignas(64) constexpr float kE2M1Signed[16] = {0.0f,  0.5f,  1.0f,  1.5f,  2.0f,  3.0f,  4.0f,  6.0f,
                                               -0.0f, -0.5f, -1.0f, -1.5f, -2.0f, -3.0f, -4.0f, -6.0f};
alignas(64) constexpr int32_t kInterleaveLo[16] = {0, 16, 1, 17, 2, 18, 3, 19, 4, 20, 5, 21, 6, 22, 7, 23};
alignas(64) constexpr int32_t kInterleaveHi[16] = {8, 24, 9, 25, 10, 26, 11, 27, 12, 28, 13, 29, 14, 30, 15, 31};

struct V512 {
  using F = __m512;
  using T = __m512;
  static constexpr int kW = 16;
  static constexpr int kXg = 32;
  static constexpr int kRw = 12;
  static constexpr int kTileRows = 48;
  static constexpr int64_t kKc = 256;

  static void act_quant(float* x, int64_t n) { act_quant_fp8_avx512(x, n); }
  static F zero() { return _mm512_setzero_ps(); }
  static F set1(float f) { return _mm512_set1_ps(f); }
  static F load(const float* p) { return _mm512_load_ps(p); }
  static F loadu(const float* p) { return _mm512_loadu_ps(p); }
  static void store(float* p, F v) { _mm512_store_ps(p, v); }
  static void storeu(float* p, F v) { _mm512_storeu_ps(p, v); }
  static F add(F a, F b) { return _mm512_add_ps(a, b); }
  static F mul(F a, F b) { return _mm512_mul_ps(a, b); }
  static F fmadd(F a, F b, F c) { return _mm512_fmadd_ps(a, b, c); }
  static float hsum(F v) { return _mm512_reduce_add_ps(v); }

  static F e4m3x(const uint8_t* p) {
    // s eeee mmm -> fp16 s 0eeee mmm0000000: the same value times 2^-8 (bias 15 vs 7), exact.
    __m256i h = _mm256_cvtepi8_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
    h = _mm256_and_si256(_mm256_slli_epi16(h, 7), _mm256_set1_epi16(static_cast<short>(0xBF80)));
    return _mm512_cvtph_ps(h);
  }
  static F bf16(const uint16_t* p) {
    const __m512i v = _mm512_cvtepu16_epi32(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)));
    return _mm512_castsi512_ps(_mm512_slli_epi32(v, 16));
  }
  static void split_pairs(F v, F* even, F* odd) {
    *even = _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_castps_si512(v), 16));
    *odd = _mm512_castsi512_ps(_mm512_and_si512(_mm512_castps_si512(v), _mm512_set1_epi32(static_cast<int>(0xFFFF0000u))));
  }
  static T e2m1_table(float s) { return _mm512_mul_ps(_mm512_load_ps(kE2M1Signed), _mm512_set1_ps(s)); }
  static void e2m1(const uint8_t* p, T t, F* lo, F* hi) {
    const __m512i b = _mm512_cvtepu8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
    *lo = _mm512_permutexvar_ps(b, t);  // VPERMPS reads the low 4 bits of each index
    *hi = _mm512_permutexvar_ps(_mm512_srli_epi32(b, 4), t);
  }
  // In-place 16 x 16 transpose: r[i] lane c <- r[c] lane i (the one in simd.h).
  static void transpose(F* r) { VF16::transpose(r); }
  static void interleave(F lo, F hi, F* a, F* b) {
    *a = _mm512_permutex2var_ps(lo, _mm512_load_si512(kInterleaveLo), hi);
    *b = _mm512_permutex2var_ps(lo, _mm512_load_si512(kInterleaveHi), hi);
  }
};

using E = F32Engine<V512>;

// FP8/FP4 tiles: exact products, so FMA.
const detail::GemmEngine kEngine = {V512::kXg, V512::kTileRows, 4, 1, &E::x_panel_bytes, &E::pack_x, &E::gemm<true>};

detail::LevelKernels make_table() {
  detail::LevelKernels t;
  t.act_quant_fp8 = &act_quant_fp8_avx512;
  t.fp4_quant_e8m0 = &fp4_quant_e8m0_avx512;
  // Decode kernels serve n < 8: the GEMM's smallest tile is 16 x rows, slower below 8 (Zen4).
  t.fp8 = {&E::fp8_act_bytes, &E::fp8_prep, E::fp8_matvec, 32, 4, 8, &kEngine, true, &E::fp8_pack_w, nullptr};
  t.fp4 = {&E::fp4_act_bytes, &E::fp4_prep, E::fp4_matvec, 4, 4, E::kGemmMinRowsFp4, &kEngine, true, &E::fp4_pack_w,
           &E::fp4_supports};
  // BF16/F32 prefill keeps the reference rounding (multiply, then add), which runs ~1.5x faster in the
  // AVX2 micro-kernel on ymm than on zmm (Zen4: 67 vs 45 GFLOP/s, kernels_bench prefill512_wo_a, t=1),
  // so borrow the AVX2 level's GEMM; decode stays on zmm (head 13.6 vs 10.2 GB/s).
  const detail::LevelKernels& avx2 = detail::avx2_kernels();
  t.bf16 = {nullptr, nullptr, E::bf16_matvec, 16, 4, 8, avx2.bf16.engine, false, avx2.bf16.pack_w, nullptr};
  t.f32 = {nullptr, nullptr, E::f32_matvec, 16, 4, 8, avx2.f32.engine, false, nullptr, nullptr};
  return t;
}

}  // namespace
}  // namespace strata::kernels::x86

namespace strata::kernels::detail {
const LevelKernels& avx512_kernels() {
  static const LevelKernels t = x86::make_table();
  return t;
}
}  // namespace strata::kernels::detail
