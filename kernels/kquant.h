// ggml's block quantisation formats (GGUF): Q8_0, Q6_K, Q4_K, Q3_K, Q2_K and IQ4_NL.
//
// Each type stores a row as a run of fixed-size blocks; the structs below are ggml's layouts byte for
// byte (ggml/src/ggml-common.h block_q8_0, block_q6_K, block_q4_K, block_q3_K, block_q2_K,
// block_iq4_nl), so a GGUF tensor's bytes are read in place. fp16 fields hold IEEE half bits.
//   type    block  bytes  bits/weight  scales
//   Q8_0      32     34     8.5        fp16 d per 32;                      w = d * q,        q int8
//   Q6_K     256    210     6.5625     fp16 d, int8 scale per 16;          w = d*sc * q,     q in [-32, 31]
//   Q4_K     256    144     4.5        fp16 d/dmin, 6-bit sc/m per 32;     w = d*sc*q - dmin*m, q in [0, 15]
//   Q3_K     256    110     3.4375     fp16 d, 6-bit signed sc per 16;     w = d*(sc-32) * q, q in [-4, 3]
//   Q2_K     256     84     2.625      fp16 d/dmin, 4-bit sc/m per 16;     w = d*sc*q - dmin*m, q in [0, 3]
//   IQ4_NL    32     18     4.5        fp16 d per 32;                      w = d * kIq4nlValues[q], q in [0, 15]
//
// dequantize_row_* reproduce ggml's dequantize_row_* bit for bit (same f32 operations in the same
// order); quantize_row_*_ref produce the bytes of ggml's quantize_row_*_ref (the deterministic
// reference quantisers, no importance weights). tests/kernels/kquant_ggml_test.cpp checks both
// against ggml's own library.
// Threading: none (callers parallelise over rows). Cannot fail: `k` must be a multiple of the block.
// Source: ggml/src/ggml-quants.c (llama.cpp release pinned in bench/ggml/package.json).
#pragma once

#include <cstddef>
#include <cstdint>

namespace strata::kernels {

inline constexpr int kQk8_0 = 32;  // QK8_0
inline constexpr int kQkK = 256;   // QK_K: the super-block of the K-quants
inline constexpr int kQk4Nl = 32;  // QK4_NL

struct BlockQ8_0 {
  uint16_t d;     // fp16 scale
  int8_t qs[32];  // quants
};
struct BlockQ6_K {
  uint8_t ql[128];    // low 4 bits of the 6-bit quants
  uint8_t qh[64];     // high 2 bits
  int8_t scales[16];  // 8-bit scale per 16
  uint16_t d;         // fp16 super-block scale
};
struct BlockQ4_K {
  uint16_t d;          // fp16 super-block scale of the scales
  uint16_t dmin;       // fp16 super-block scale of the mins
  uint8_t scales[12];  // 6-bit scale and min per 32, packed (ggml get_scale_min_k4)
  uint8_t qs[128];     // 4-bit quants: byte l of each 64 holds element l (low) and l + 32 (high)
};
struct BlockQ3_K {
  uint8_t hmask[32];   // high bit of the 3-bit quants (set means +0, clear means -4)
  uint8_t qs[64];      // low 2 bits
  uint8_t scales[12];  // 6-bit scale per 16, packed
  uint16_t d;          // fp16 super-block scale
};
struct BlockQ2_K {
  uint8_t scales[16];  // 4-bit scale (low) and 4-bit min (high) per 16
  uint8_t qs[64];      // 2-bit quants
  uint16_t d;          // fp16 super-block scale of the scales
  uint16_t dmin;       // fp16 super-block scale of the mins
};
struct BlockIq4Nl {
  uint16_t d;      // fp16 scale
  uint8_t qs[16];  // 4-bit indices into kIq4nlValues: byte j holds element j (low) and j + 16 (high)
};
static_assert(sizeof(BlockQ8_0) == 34);
static_assert(sizeof(BlockQ6_K) == 210);
static_assert(sizeof(BlockQ4_K) == 144);
static_assert(sizeof(BlockQ3_K) == 110);
static_assert(sizeof(BlockQ2_K) == 84);
static_assert(sizeof(BlockIq4Nl) == 18);

// The IQ4_NL grid (ggml-common.h kvalues_iq4nl).
inline constexpr int8_t kIq4nlValues[16] = {-127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113};

enum class QuantType : uint8_t { kQ8_0, kQ6_K, kQ4_K, kQ3_K, kQ2_K, kIq4Nl };
inline constexpr QuantType kAllQuantTypes[] = {QuantType::kQ8_0, QuantType::kQ6_K, QuantType::kQ4_K,
                                               QuantType::kQ3_K, QuantType::kQ2_K, QuantType::kIq4Nl};

// "q8_0", "q6_K", "q4_K", "q3_K", "q2_K", "iq4_nl" (ggml's type names).
const char* quant_type_name(QuantType t);
// Elements per block (32 or 256) and bytes per block.
int quant_block_elems(QuantType t);
int quant_block_bytes(QuantType t);
// Bytes of a row of k elements. REQUIRES: k % quant_block_elems(t) == 0.
inline int64_t quant_row_bytes(QuantType t, int64_t k) { return k / quant_block_elems(t) * quant_block_bytes(t); }

// y[k] = the values of the blocks x[k / block]. Bit-identical to ggml dequantize_row_<type>.
void dequantize_row_q8_0(const BlockQ8_0* x, float* y, int64_t k);
void dequantize_row_q6_K(const BlockQ6_K* x, float* y, int64_t k);
void dequantize_row_q4_K(const BlockQ4_K* x, float* y, int64_t k);
void dequantize_row_q3_K(const BlockQ3_K* x, float* y, int64_t k);
void dequantize_row_q2_K(const BlockQ2_K* x, float* y, int64_t k);
void dequantize_row_iq4_nl(const BlockIq4Nl* x, float* y, int64_t k);
// The same, by type: `x` points at quant_row_bytes(t, k) bytes, 2-byte aligned (the fp16 fields).
void dequantize_row(QuantType t, const void* x, float* y, int64_t k);

// Quantises x[k] (finite values) to blocks y[k / block]: the bytes ggml quantize_row_<type>_ref writes.
// The one exception is an IQ4_NL block whose |x| are all below 1e-15 (ggml GROUP_MAX_EPS): ggml then
// packs indices left over from the previous block of the call (uninitialised stack memory for the
// first block); we do the same within a call and use index 0 for a leading such block. Its d is 0,
// so every choice decodes to zeros.
void quantize_row_q8_0_ref(const float* x, BlockQ8_0* y, int64_t k);
void quantize_row_q6_K_ref(const float* x, BlockQ6_K* y, int64_t k);
void quantize_row_q4_K_ref(const float* x, BlockQ4_K* y, int64_t k);
void quantize_row_q3_K_ref(const float* x, BlockQ3_K* y, int64_t k);
void quantize_row_q2_K_ref(const float* x, BlockQ2_K* y, int64_t k);
void quantize_row_iq4_nl_ref(const float* x, BlockIq4Nl* y, int64_t k);
void quantize_row_ref(QuantType t, const float* x, void* y, int64_t k);

// Quantises one row x[k] (finite values) with importance weights qw[k] (finite, >= 0; in practice
// an imatrix column's mean x^2, tools/imatrix.h) to blocks y[k / block]: the bytes ggml's
// quantize_<type>(x, y, 1, k, qw) writes with a non-null imatrix, i.e. the quantize_row_<type>_impl
// paths (Q2_K, Q3_K, Q4_K, Q6_K) and quantize_row_iq4_nl_impl with 7 tries (IQ4_NL). Each element's
// weight is qw[j] * sqrt(sigma2 + x[j]^2) (Q6_K: qw[j]); the super-block scales are fitted to the
// group scales by weighted least squares. Q8_0 ignores qw and writes quantize_row_q8_0_ref's bytes,
// as ggml's quantize_q8_0 does. Unlike the reference IQ4_NL, an all-zero block is deterministic
// (every index 8), as ggml's imatrix path re-rounds each index at the final scale.
// tests/kernels/kquant_ggml_test.cpp checks the bytes against ggml's library.
// Threading: none. Cannot fail: `k` must be a multiple of the block.
// Source: ggml/src/ggml-quants.c quantize_q2_K .. quantize_q6_K, quantize_iq4_nl.
void quantize_row_q6_K_weighted(const float* x, const float* qw, BlockQ6_K* y, int64_t k);
void quantize_row_q4_K_weighted(const float* x, const float* qw, BlockQ4_K* y, int64_t k);
void quantize_row_q3_K_weighted(const float* x, const float* qw, BlockQ3_K* y, int64_t k);
void quantize_row_q2_K_weighted(const float* x, const float* qw, BlockQ2_K* y, int64_t k);
void quantize_row_iq4_nl_weighted(const float* x, const float* qw, BlockIq4Nl* y, int64_t k);
void quantize_row_weighted(QuantType t, const float* x, const float* qw, void* y, int64_t k);

}  // namespace strata::kernels
