// The AVX2 integer rows kernels of the six linear_quant types (kernels/x86/kquant_q8k_avx2.cpp:
// Q4_K, Q2_K, Q6_K, Q3_K with x as Q8_K; kernels/x86/kquant_q8_0_dot_avx2.cpp: Q8_0, IQ4_NL with x
// as Q8_0) called directly, bit for bit against the references ref::dot_q8k / ref::dot_q8_0
// (kernels/kquant_q8k.h, kernels/kquant_q8_0_dot.h):
//  - shapes: in from one block (32 for the 32-wide types, so odd block counts too) to 2048, odd row
//    counts, row sub-ranges [r0, r1) (rows outside must stay untouched), n = 1..5 tokens;
//  - weights: quantised from random floats, random bytes, every bit set, all zero (zero scales),
//    and per type the extreme quants (Q8_0 -128, IQ4_NL index 0 = -127, Q6_K q = -32 with scale
//    -128, Q3_K q = -4 with scale -32), with fp16 scales up to 65504;
//  - x: random int8 blocks in [-127, 127] with consistent bsums, all +127, all -127, alternating,
//    zero blocks, and x rounded from floats by quantize_row_q8_K / quantize_row_q8_0_ref.
// Then linear_quant at KernelLevel::kAvx2 against kScalar through the driver (serial and threaded).
// Skipped, saying why, on a CPU without AVX2.
// Tolerance: exact (the bits; two NaNs count as equal, as overflowing adversarial products can make
// inf - inf whose NaN payload is not part of the definition).
#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "core/dtype.h"
#include "core/thread_pool.h"
#include "kernels/dispatch.h"
#include "kernels/kquant.h"
#include "kernels/kquant_linear.h"
#include "kernels/kquant_q8_0_dot.h"
#include "kernels/kquant_q8k.h"
#if defined(__x86_64__) || defined(_M_X64)
#include "kernels/x86/kquant_x86.h"
#define STRATA_TEST_X86 1
#endif

namespace strata::kernels {
namespace {

constexpr QuantType kTypes[] = {QuantType::kQ4_K, QuantType::kQ2_K, QuantType::kQ6_K,
                                QuantType::kQ3_K, QuantType::kQ8_0, QuantType::kIq4Nl};

bool same(float a, float b) {
  return std::bit_cast<uint32_t>(a) == std::bit_cast<uint32_t>(b) || (std::isnan(a) && std::isnan(b));
}

// Byte offsets of a block's fp16 scale fields (d, and dmin where there is one).
std::vector<int> f16_fields(QuantType t) {
  switch (t) {
    case QuantType::kQ4_K:
      return {0, 2};
    case QuantType::kQ2_K:
      return {80, 82};
    case QuantType::kQ6_K:
      return {208};
    case QuantType::kQ3_K:
      return {108};
    default:
      return {0};  // Q8_0, IQ4_NL
  }
}

// The block whose every quant is the type's most negative value with the most negative (or largest)
// scale: the cases that stress VPMADDUBSW's unsigned side and the signed-scale paths.
void extreme_block(QuantType t, uint8_t* b) {
  const int bytes = quant_block_bytes(t);
  switch (t) {
    case QuantType::kQ8_0:
      std::memset(b + 2, 0x80, 32);
      break;  // q = -128
    case QuantType::kIq4Nl:
      std::memset(b + 2, 0x00, 16);
      break;  // kIq4nlValues[0] = -127
    case QuantType::kQ6_K:
      std::memset(b, 0x00, 192);       // ql = qh = 0: q = -32
      std::memset(b + 192, 0x80, 16);  // scales -128
      break;
    case QuantType::kQ3_K:
      std::memset(b, 0x00, 108);  // hmask clear and low bits 0: q = -4; 6-bit scales 0: sc - 32 = -32
      break;
    default:
      std::memset(b, 0xFF, static_cast<size_t>(bytes));
      break;  // Q4_K, Q2_K: max q, sc, m
  }
}

// Weights [out, in], rows of several kinds (row r: kind r % 6); fp16 fields finite.
std::vector<uint8_t> weights(QuantType t, int64_t out, int64_t in, std::mt19937& rng) {
  const int64_t rb = quant_row_bytes(t, in);
  const int bytes = quant_block_bytes(t);
  std::vector<uint8_t> w(static_cast<size_t>(out * rb));
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<float> row(static_cast<size_t>(in));
  for (int64_t r = 0; r < out; ++r) {
    uint8_t* p = w.data() + r * rb;
    const int kind = static_cast<int>(r % 6);
    if (kind == 0) {
      for (float& f : row) f = normal(rng) * 0.05f;
      quantize_row_ref(t, row.data(), p, in);
      continue;
    }
    for (int64_t b = 0; b < rb / bytes; ++b) {
      uint8_t* blk = p + b * bytes;
      const int k = kind == 5 ? static_cast<int>(rng() % 4) + 1 : kind;  // 5: the kinds mixed per block
      if (k == 1) {
        for (int i = 0; i < bytes; ++i) blk[i] = static_cast<uint8_t>(rng());
      } else if (k == 2) {
        std::memset(blk, 0xFF, static_cast<size_t>(bytes));
      } else if (k == 3) {
        std::memset(blk, 0x00, static_cast<size_t>(bytes));  // zero scales (and d = 0)
        continue;
      } else {
        extreme_block(t, blk);
      }
      for (int off : f16_fields(t)) {
        // fp16 scales: random finite, or the largest finite value 65504 (0x7BFF) or its negative.
        uint16_t v = static_cast<uint16_t>(rng()) & 0xBBFF;
        if (rng() % 4 == 0) v = rng() % 2 ? 0x7BFF : 0xFBFF;
        std::memcpy(blk + off, &v, 2);
      }
    }
  }
  return w;
}

// Quant i of a block of token kind 0..4: random, all 127, all -127, alternating, zero.
int x_quant(int kind, int i, std::mt19937& rng) {
  return kind == 0   ? static_cast<int>(rng() % 255) - 127
         : kind == 1 ? 127
         : kind == 2 ? -127
         : kind == 3 ? (i % 2 ? 127 : -127)
                     : 0;
}

// Quantised x: n tokens of nb blocks (kElems quants each) of the path's block type, in several kinds
// (token t: kind (t + seed) % 6). Kind 5 is rounded from floats (one in eight times `big`) by
// round(f, blocks, elems), as linear_quant does; the others get x_quant's quants, then scale(block,
// kind) sets the block's scale (and sums).
template <class Block, int kElems, class Round, class Scale>
std::vector<Block> x_blocks(int64_t n, int64_t nb, int seed, std::mt19937& rng, float big, Round round, Scale scale) {
  std::vector<Block> x(static_cast<size_t>(n * nb));
  std::normal_distribution<float> normal(0.0f, 1.0f);
  for (int64_t t = 0; t < n; ++t) {
    const int kind = static_cast<int>((t + seed) % 6);
    Block* xt = x.data() + t * nb;
    if (kind == 5) {
      std::vector<float> f(static_cast<size_t>(nb * kElems));
      for (float& v : f) v = normal(rng) * (rng() % 8 == 0 ? big : 1.0f);
      round(f.data(), xt, nb * kElems);
      continue;
    }
    for (int64_t b = 0; b < nb; ++b) {
      Block& blk = xt[b];
      for (int i = 0; i < kElems; ++i) blk.qs[i] = static_cast<int8_t>(x_quant(kind, i, rng));
      scale(blk, kind);
    }
  }
  return x;
}

std::vector<BlockQ8_K> x_q8k(int64_t n, int64_t nb, int seed, std::mt19937& rng) {
  return x_blocks<BlockQ8_K, 256>(
      n, nb, seed, rng, 1e30f, [](const float* f, BlockQ8_K* b, int64_t k) { quantize_row_q8_K(f, b, k); },
      [&rng](BlockQ8_K& blk, int kind) {
        for (int i = 0; i < 16; ++i) {
          int s = 0;
          for (int l = 0; l < 16; ++l) s += blk.qs[16 * i + l];
          blk.bsums[i] = static_cast<int16_t>(s);
        }
        blk.d = kind == 4
                    ? 0.0f
                    : std::ldexp(1.0f + static_cast<float>(rng() % 1000) / 1000.0f, static_cast<int>(rng() % 40) - 30);
      });
}

std::vector<BlockQ8_0> x_q8_0(int64_t n, int64_t nb, int seed, std::mt19937& rng) {
  return x_blocks<BlockQ8_0, 32>(
      n, nb, seed, rng, 1000.0f, [](const float* f, BlockQ8_0* b, int64_t k) { quantize_row_q8_0_ref(f, b, k); },
      [&rng](BlockQ8_0& blk, int kind) {
        uint16_t d = static_cast<uint16_t>(rng()) & 0xBBFF;
        if (kind == 4) d = 0;
        if (rng() % 5 == 0) d = 0x7BFF;
        blk.d = d;
      });
}

struct Shape {
  int64_t out, in;
};

// (in, out) pairs; the 32-wide types also get in = 32 and 96 (one and three blocks).
std::vector<Shape> shapes(QuantType t) {
  std::vector<Shape> s = {{1, 256}, {3, 512}, {7, 768}, {5, 256}, {33, 1024}, {17, 2048}, {4, 512}, {9, 1280}};
  if (quant_block_elems(t) == 32) s.insert(s.end(), {{5, 32}, {6, 96}, {3, 160}});
  return s;
}

#if defined(STRATA_TEST_X86)
TEST(KquantAvx2, RowsKernelsEqualReferenceBitForBit) {
  if (!kernel_level_supported(KernelLevel::kAvx2))
    GTEST_SKIP() << "CPU lacks AVX2 + FMA + F16C: the AVX2 kernels cannot run";
  std::mt19937 rng(16);
  int checked = 0;
  for (QuantType t : kTypes) {
    const bool q8k = q8k_dot_supported(t);
    const int64_t xbe = q8k ? 256 : 32;
    for (const Shape& s : shapes(t)) {
      const std::vector<uint8_t> w = weights(t, s.out, s.in, rng);
      const int64_t rb = quant_row_bytes(t, s.in), nb = s.in / xbe;
      for (int64_t n = 1; n <= 5; ++n) {
        const int seed = static_cast<int>(rng() % 6);
        const std::vector<BlockQ8_K> xk = q8k ? x_q8k(n, nb, seed, rng) : std::vector<BlockQ8_K>{};
        const std::vector<BlockQ8_0> x0 = q8k ? std::vector<BlockQ8_0>{} : x_q8_0(n, nb, seed, rng);
        const void* xq = q8k ? static_cast<const void*>(xk.data()) : static_cast<const void*>(x0.data());
        const int64_t ranges[][2] = {
            {0, s.out}, {1, s.out}, {0, s.out - 1}, {s.out / 2, s.out}, {s.out / 3, s.out / 3 + 1}};
        for (const auto& rr : ranges) {
          const int64_t r0 = rr[0], r1 = rr[1];
          if (r0 >= r1) continue;
          std::vector<float> y(static_cast<size_t>(n * s.out), -7.0f);
          const bool ok =
              q8k ? x86::linear_q8k_rows_avx2(static_cast<int>(t), xq, n, nb, w.data(), rb, r0, r1, y.data(), s.out)
                  : x86::linear_q8_0_rows_avx2(static_cast<int>(t), xq, n, nb, w.data(), rb, r0, r1, y.data(), s.out);
          ASSERT_TRUE(ok) << quant_type_name(t);
          for (int64_t i = 0; i < n; ++i)
            for (int64_t r = 0; r < s.out; ++r) {
              const float got = y[static_cast<size_t>(i * s.out + r)];
              const uint8_t* wr = w.data() + r * rb;
              const float want = r < r0 || r >= r1 ? -7.0f
                                 : q8k             ? ref::dot_q8k(t, wr, xk.data() + i * nb, nb)
                                                   : ref::dot_q8_0(t, wr, x0.data() + i * nb, nb);
              ASSERT_TRUE(same(got, want))
                  << quant_type_name(t) << " out=" << s.out << " in=" << s.in << " n=" << n << " rows [" << r0 << ", "
                  << r1 << ") token " << i << " row " << r << ": " << got << " vs ref " << want;
            }
          ++checked;
        }
      }
    }
  }
  EXPECT_GT(checked, 0);
}

TEST(KquantAvx2, RowsKernelsRejectOtherTypes) {
  if (!kernel_level_supported(KernelLevel::kAvx2))
    GTEST_SKIP() << "CPU lacks AVX2 + FMA + F16C: the AVX2 kernels cannot run";
  float y = 0.0f;
  EXPECT_FALSE(x86::linear_q8k_rows_avx2(static_cast<int>(QuantType::kQ8_0), nullptr, 1, 1, nullptr, 0, 0, 1, &y, 1));
  EXPECT_FALSE(x86::linear_q8_0_rows_avx2(static_cast<int>(QuantType::kQ4_K), nullptr, 1, 1, nullptr, 0, 0, 1, &y, 1));
}
#endif

// The driver at kAvx2 (the AVX2 kernels, x rounded inside) against kScalar (the references).
TEST(KquantAvx2, LinearQuantAvx2EqualsScalar) {
  if (!kernel_level_supported(KernelLevel::kAvx2)) GTEST_SKIP() << "CPU lacks AVX2 + FMA + F16C: no kAvx2 level here";
  std::mt19937 rng(61);
  ThreadPool pool(3);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  int checked = 0;
  for (QuantType t : kTypes) {
    EXPECT_TRUE(linear_quant_has_kernel(t, KernelLevel::kAvx2)) << quant_type_name(t);
    for (const Shape& s : shapes(t))
      for (int64_t n : {1, 2, 5}) {
        const std::vector<uint8_t> w = weights(t, s.out, s.in, rng);
        const QuantWeight qw{t, w.data(), s.out, s.in};
        std::vector<float> x(static_cast<size_t>(n * s.in));
        for (float& v : x) v = normal(rng);
        std::vector<float> want(static_cast<size_t>(n * s.out));
        linear_quant(x.data(), n, qw, want.data(), nullptr, KernelLevel::kScalar);
        for (ThreadPool* p : {static_cast<ThreadPool*>(nullptr), &pool}) {
          std::vector<float> got(want.size(), -1.0f);
          linear_quant(x.data(), n, qw, got.data(), p, KernelLevel::kAvx2);
          for (size_t i = 0; i < want.size(); ++i)
            ASSERT_TRUE(same(got[i], want[i]))
                << quant_type_name(t) << " out=" << s.out << " in=" << s.in << " n=" << n
                << (p ? " threaded" : " serial") << " y[" << i << "] " << got[i] << " vs " << want[i];
          ++checked;
        }
      }
  }
  EXPECT_GT(checked, 0);
}

}  // namespace
}  // namespace strata::kernels
