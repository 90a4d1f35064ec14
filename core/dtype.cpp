#include "core/dtype.h"

#include <limits>

namespace strata {

namespace {
struct NameEntry {
  DType type;
  std::string_view name;
  size_t size;
};
constexpr NameEntry kNames[] = {
    {DType::kF32, "F32", 4},       {DType::kF16, "F16", 2},   {DType::kBF16, "BF16", 2},
    {DType::kF8E4M3, "F8_E4M3", 1}, {DType::kF8E8M0, "F8_E8M0", 1}, {DType::kI8, "I8", 1},
    {DType::kU8, "U8", 1},         {DType::kI32, "I32", 4},   {DType::kI64, "I64", 8},
    {DType::kF64, "F64", 8},       {DType::kBool, "BOOL", 1},
};
// ggml block formats (names as ggml prints them, upper-cased like the safetensors names).
struct BlockEntry {
  DType type;
  std::string_view name;
  DTypeBlock block;
};
constexpr BlockEntry kBlocks[] = {
    {DType::kQ8_0, "Q8_0", {32, 34}},   {DType::kQ2_K, "Q2_K", {256, 84}},   {DType::kQ3_K, "Q3_K", {256, 110}},
    {DType::kQ4_K, "Q4_K", {256, 144}}, {DType::kQ6_K, "Q6_K", {256, 210}}, {DType::kIQ4_NL, "IQ4_NL", {32, 18}},
};
}  // namespace

std::string_view dtype_name(DType t) {
  for (const auto& e : kNames)
    if (e.type == t) return e.name;
  for (const auto& e : kBlocks)
    if (e.type == t) return e.name;
  return "?";
}

DTypeBlock dtype_block(DType t) {
  for (const auto& e : kBlocks)
    if (e.type == t) return e.block;
  return DTypeBlock{1, static_cast<int64_t>(dtype_size(t))};
}

std::optional<DType> dtype_from_name(std::string_view name) {
  for (const auto& e : kNames)
    if (e.name == name) return e.type;
  return std::nullopt;
}

size_t dtype_size(DType t) {
  for (const auto& e : kNames)
    if (e.type == t) return e.size;
  return 0;
}

float f16_to_f32(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  const uint32_t exp = (h >> 10) & 0x1Fu;
  const uint32_t man = h & 0x3FFu;
  float v;
  if (exp == 0) {
    v = std::ldexp(static_cast<float>(man), -24);
  } else if (exp == 31) {
    v = man ? std::numeric_limits<float>::quiet_NaN() : std::numeric_limits<float>::infinity();
  } else {
    v = std::ldexp(1.0f + static_cast<float>(man) / 1024.0f, static_cast<int>(exp) - 15);
  }
  return sign ? -v : v;
}

uint16_t f32_to_f16(float x) {
  const uint32_t u = std::bit_cast<uint32_t>(x);
  const uint16_t sign = static_cast<uint16_t>((u >> 16) & 0x8000u);
  const uint32_t a = u & 0x7FFFFFFFu;
  if (a > 0x7F800000u) return sign | 0x7E00u;   // NaN
  if (a >= 0x477FF000u) return sign | 0x7C00u;  // rounds to >= 2^16: inf (65520 and up)
  if (a < 0x38800000u) {
    // Below 2^-14: the subnormal grid of 2^-24. a * 2^24 in [0, 1024) is exact in f32 as a value with
    // at most 24 significant bits; nearbyint rounds ties to even (default rounding mode).
    const float v = std::bit_cast<float>(a) * 0x1p24f;
    return sign | static_cast<uint16_t>(std::nearbyint(v));  // 1024 lands on the smallest normal
  }
  // Normal: drop 13 mantissa bits with RNE; a carry bumps the exponent (and may reach inf: excluded above).
  const uint32_t rounded = a + 0xFFFu + ((a >> 13) & 1u);
  return sign | static_cast<uint16_t>((rounded >> 13) - ((127u - 15u) << 10));
}

uint8_t f32_to_e4m3(float x) {
  if (std::isnan(x)) return 0x7F;
  const uint8_t sign = std::signbit(x) ? 0x80 : 0;
  float a = std::fabs(x);
  if (a > kE4M3Max) a = kE4M3Max;
  uint8_t mag;
  if (a < 0.015625f) {  // below 2^-6: subnormal grid of 2^-9, exact scaling then RNE
    mag = static_cast<uint8_t>(std::nearbyint(a * 512.0f));  // 8 lands on code 8 = 2^-6, as it should
  } else {
    // Round the 23-bit mantissa to 3 bits, ties to even, letting a carry bump the exponent.
    uint32_t u = std::bit_cast<uint32_t>(a);
    u += 0x7FFFFu + ((u >> 20) & 1u);
    const int e = static_cast<int>(u >> 23) - 127 + 7;
    const uint32_t m = (u >> 20) & 7u;
    mag = static_cast<uint8_t>((e << 3) | m);  // a <= 448 keeps e <= 15 and (e,m) != (15,7)
  }
  return mag == 0 ? 0 : static_cast<uint8_t>(mag | sign);
}

std::optional<uint8_t> f32_to_e8m0_exact(float pow2) {
  if (!(pow2 > 0) || std::isinf(pow2)) return std::nullopt;
  int exp = 0;
  const float frac = std::frexp(pow2, &exp);  // pow2 = frac * 2^exp, frac in [0.5, 1)
  if (frac != 0.5f) return std::nullopt;
  const int code = exp - 1 + 127;
  if (code < 0 || code > 254) return std::nullopt;
  return static_cast<uint8_t>(code);
}

uint8_t f32_to_e2m1(float x) {
  if (std::isnan(x)) return 0;
  const float a = std::fabs(x);
  uint8_t code;
  // Midpoints between neighbours; at an exact midpoint the even code wins (fixtures README).
  if (a <= 0.25f) code = 0;
  else if (a < 0.75f) code = 1;
  else if (a <= 1.25f) code = 2;
  else if (a < 1.75f) code = 3;
  else if (a <= 2.5f) code = 4;
  else if (a < 3.5f) code = 5;
  else if (a <= 5.0f) code = 6;
  else code = 7;
  return (code != 0 && std::signbit(x)) ? static_cast<uint8_t>(code | 8) : code;
}

}  // namespace strata
