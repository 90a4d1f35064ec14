// Linears over ggml block formats (kernels/kquant_linear.h): every level against the reference, bit
// for bit, over a case table (every type; out with tails of the 4-row groups; in from one block up;
// n = 1 and n > 1; misaligned x and W; serial and threaded).
//
// Every type takes an integer dot (x as Q8_K: kernels/kquant_q8k.h; x as Q8_0:
// kernels/kquant_q8_0_dot.h); the reference's bound against a float64 dot product, which includes
// the rounding of x, lives in kquant_q8k_test.cpp.
// Tolerance: level vs reference, exact. The definition fixes each integer and f32 operation and
// the vector kernels perform exactly those, so any difference is a bug.
#include "kernels/kquant_linear.h"

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
#include "kernels/kquant_q8_0_dot.h"
#include "kernels/kquant_q8k.h"

namespace strata::kernels {
namespace {

struct Case {
  int64_t n, out, in;
};

// Random weights [out, in] of type t: half the rows quantised from random floats, half random bytes
// with finite fp16 scales (every quant pattern), placed `misalign` bytes after an aligned start.
struct Weights {
  std::vector<uint8_t> storage;
  QuantWeight w;
  Weights(QuantType t, int64_t out, int64_t in, size_t misalign, std::mt19937& rng) {
    const int64_t rb = quant_row_bytes(t, in);
    storage.resize(static_cast<size_t>(out * rb) + 64);
    uint8_t* base = storage.data() + misalign;
    std::normal_distribution<float> normal(0.0f, 1.0f);
    std::vector<float> row(static_cast<size_t>(in));
    for (int64_t r = 0; r < out; ++r) {
      uint8_t* p = base + r * rb;
      if (r % 2 == 0) {
        for (float& f : row) f = normal(rng) * 0.1f;
        quantize_row_ref(t, row.data(), p, in);
      } else {
        for (int64_t b = 0; b < rb; ++b) p[b] = static_cast<uint8_t>(rng());
        dequantize_row(t, p, row.data(), in);  // re-roll a block until its values are finite
        const int bytes = quant_block_bytes(t);
        for (int64_t b = 0; b < rb / bytes; ++b) {
          bool finite = true;
          for (int j = 0; j < quant_block_elems(t); ++j)
            finite = finite && std::isfinite(row[b * quant_block_elems(t) + j]);
          if (!finite) std::memset(p + b * bytes, 0, static_cast<size_t>(bytes));
        }
      }
    }
    w = QuantWeight{t, base, out, in};
  }
};

std::vector<float> random_x(int64_t count, std::mt19937& rng) {
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<float> v(static_cast<size_t>(count));
  for (float& f : v) f = normal(rng);
  return v;
}

std::vector<Case> cases(QuantType t) {
  const int64_t b = quant_block_elems(t);
  return {{1, 1, b},      {1, 5, 2 * b}, {1, 33, 3 * b}, {1, 67, 1024},
          {1, 128, 4096}, {3, 9, 512},   {2, 70, 7 * b}, {1, 4, 256},
          {17, 13, 512}};
}

class KquantLinear : public ::testing::TestWithParam<QuantType> {};

TEST_P(KquantLinear, EveryLevelEqualsReferenceBitForBit) {
  const QuantType t = GetParam();
  std::mt19937 rng(42);
  ThreadPool pool(3);
  int checked = 0;
  for (const Case& c : cases(t)) {
    // Blocks need 2-byte alignment only (their fp16 fields; kquant.h); x gets one float of offset.
    for (size_t misalign : {size_t{0}, size_t{2}}) {
      Weights wt(t, c.out, c.in, misalign, rng);
      std::vector<float> xs = random_x(c.n * c.in + 1, rng);
      const float* x = xs.data() + (misalign != 0 ? 1 : 0);
      std::vector<float> want(static_cast<size_t>(c.n * c.out));
      ref::linear_quant(x, c.n, wt.w, want.data());
      for (KernelLevel level : kAllKernelLevels) {
        if (!kernel_level_supported(level)) continue;
        for (ThreadPool* p : {static_cast<ThreadPool*>(nullptr), &pool}) {
          std::vector<float> got(want.size(), -1.0f);
          linear_quant(x, c.n, wt.w, got.data(), p, level);
          for (size_t i = 0; i < want.size(); ++i)
            ASSERT_EQ(std::bit_cast<uint32_t>(want[i]), std::bit_cast<uint32_t>(got[i]))
                << quant_type_name(t) << " level " << kernel_level_name(level) << " n=" << c.n << " out=" << c.out
                << " in=" << c.in << " misalign=" << misalign << (p ? " threaded" : " serial") << ": y[" << i << "] "
                << got[i] << " vs ref " << want[i];
          ++checked;
        }
      }
    }
  }
  EXPECT_GT(checked, 0);
}

INSTANTIATE_TEST_SUITE_P(AllTypes, KquantLinear, ::testing::ValuesIn(kAllQuantTypes),
                         [](const ::testing::TestParamInfo<QuantType>& info) {
                           return std::string(quant_type_name(info.param));
                         });

}  // namespace
}  // namespace strata::kernels
