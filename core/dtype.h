// Element types of checkpoint tensors and their exact scalar codecs.
//
// The codecs are the definition every vector kernel is tested against: decode is exact; encode rounds
// to nearest, ties to even, saturating at the format's largest finite value, as the official
// act_quant / fp4_act_quant kernels do (fixtures README, "Kernel shims").
// Source: ARCHITECTURE.md §Checkpoint format; safetensors dtype names.
#pragma once

#include <bit>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <optional>
#include <string_view>

namespace strata {

enum class DType : uint8_t {
  kF32,
  kF16,
  kBF16,
  kF8E4M3,  // E4M3 "fn": no infinities, 0x7F/0xFF are NaN, max 448
  kF8E8M0,  // UE8M0: a power of two 2^(c-127), used for block scales
  kI8,      // routed experts: two packed E2M1 codes per byte (even element in the low nibble)
  kU8,
  kI32,
  kI64,
  kF64,
  kBool,
  // ggml block formats (kernels/kquant.h), as read from a GGUF: an [out, in] tensor is `out` rows of
  // in / block_elems blocks (dtype_block). Never in safetensors (dtype_from_name does not parse them).
  kQ8_0,
  kQ2_K,
  kQ3_K,
  kQ4_K,
  kQ6_K,
  kIQ4_NL,
};

// safetensors name ("F32", "BF16", "F8_E4M3", ...) of a dtype.
std::string_view dtype_name(DType t);
// Parses a safetensors dtype name; nullopt for names strata does not know.
std::optional<DType> dtype_from_name(std::string_view name);
// Bytes per stored element (1 for I8 even when it holds two E2M1 codes); 0 for the block formats.
size_t dtype_size(DType t);
// Storage geometry: `elems` consecutive elements of the innermost dim take `bytes` bytes
// ({1, dtype_size} for the element types; {32, 34} for Q8_0, {256, 144} for Q4_K, ...).
struct DTypeBlock {
  int64_t elems = 1, bytes = 0;
};
DTypeBlock dtype_block(DType t);
// Whether t is one of the ggml block formats (kQ8_0 .. kIQ4_NL).
inline bool dtype_is_block_quant(DType t) { return t >= DType::kQ8_0 && t <= DType::kIQ4_NL; }
// Bytes of `numel` elements of t (numel a whole number of blocks).
inline uint64_t dtype_nbytes(DType t, int64_t numel) {
  const DTypeBlock b = dtype_block(t);
  return static_cast<uint64_t>(numel / b.elems) * static_cast<uint64_t>(b.bytes);
}

// ---- bf16 ----------------------------------------------------------------------------------------
inline float bf16_to_f32(uint16_t b) { return std::bit_cast<float>(static_cast<uint32_t>(b) << 16); }
// Round to nearest even; NaN stays NaN.
inline uint16_t f32_to_bf16(float f) {
  uint32_t u = std::bit_cast<uint32_t>(f);
  if ((u & 0x7FFFFFFFu) > 0x7F800000u) return static_cast<uint16_t>((u >> 16) | 0x40);
  u += 0x7FFFu + ((u >> 16) & 1u);
  return static_cast<uint16_t>(u >> 16);
}
// The float value of bf16(f).
inline float bf16_round(float f) { return bf16_to_f32(f32_to_bf16(f)); }

// ---- fp16 (IEEE half) ------------------------------------------------------------------------------
float f16_to_f32(uint16_t h);
// Nearest fp16 of x, ties to even; overflow gives +-inf, NaN gives 0x7E00 (sign kept), as
// ggml's GGML_FP32_TO_FP16 (ggml-impl.h ggml_compute_fp32_to_fp16) and F16C's VCVTPS2PH do.
uint16_t f32_to_f16(float x);

// ---- E4M3 (fn) -------------------------------------------------------------------------------------
inline constexpr float kE4M3Max = 448.0f;
namespace detail {
// Value of an E4M3 code built from its bits: subnormals m * 2^-9, normals (1 + m/8) * 2^(e-7), both
// exact f32 normals; (e, m) = (15, 7) is NaN.
constexpr float e4m3_value(unsigned code) {
  const unsigned e = (code >> 3) & 0xF, m = code & 7;
  if (e == 15 && m == 7) return std::numeric_limits<float>::quiet_NaN();
  const float mag = e == 0 ? static_cast<float>(m) * (1.0f / 512.0f)
                           : std::bit_cast<float>(((e - 7 + 127) << 23) | (m << 20));
  return (code & 0x80) ? -mag : mag;
}
struct E4m3Table {
  float v[256];
  constexpr E4m3Table() : v() {
    for (unsigned c = 0; c < 256; ++c) v[c] = e4m3_value(c);
  }
};
inline constexpr E4m3Table kE4m3Table{};
}  // namespace detail
// Exact value of an E4M3 code (NaN for 0x7F / 0xFF). A table lookup: KV rows and Engram rows decode
// through it every decode step (the ldexp form cost ~10% of a demo decode step).
inline float e4m3_to_f32(uint8_t code) { return detail::kE4m3Table.v[code]; }
// Nearest E4M3 code, ties to even; |x| > 448 saturates to +-448; NaN gives 0x7F.
uint8_t f32_to_e4m3(float x);
// The float value of e4m3(x).
inline float e4m3_round(float x) { return e4m3_to_f32(f32_to_e4m3(x)); }

// ---- E8M0 (ue8m0 scales) -----------------------------------------------------------------------------
// 2^(code-127); code 255 is NaN.
inline float e8m0_to_f32(uint8_t code) {
  if (code == 255) return std::numeric_limits<float>::quiet_NaN();
  if (code == 0) return std::ldexp(1.0f, -127);  // subnormal float, exact
  return std::bit_cast<float>(static_cast<uint32_t>(code) << 23);
}
// Code of an exact power of two in [2^-127, 2^127]; nullopt otherwise.
std::optional<uint8_t> f32_to_e8m0_exact(float pow2);

// ---- E2M1 (fp4) --------------------------------------------------------------------------------------
inline constexpr float kE2M1Max = 6.0f;
// Magnitudes of the eight non-negative codes: {0, .5, 1, 1.5, 2, 3, 4, 6}; bit 3 is the sign.
inline constexpr float kE2M1Values[16] = {0.0f, 0.5f, 1.0f, 1.5f, 2.0f, 3.0f, 4.0f, 6.0f,
                                          -0.0f, -0.5f, -1.0f, -1.5f, -2.0f, -3.0f, -4.0f, -6.0f};
inline float e2m1_to_f32(uint8_t code) { return kE2M1Values[code & 0xF]; }
// Nearest E2M1 code, ties to the even code; saturates at +-6; -0 encodes as 0.
uint8_t f32_to_e2m1(float x);
inline float e2m1_round(float x) { return e2m1_to_f32(f32_to_e2m1(x)); }

}  // namespace strata
