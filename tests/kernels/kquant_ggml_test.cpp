// kernels/kquant.h against ggml itself: the dequantised floats bit for bit and the reference
// quantisers' bytes exactly, for Q8_0, Q6_K, Q4_K, Q3_K, Q2_K and IQ4_NL, on random and edge-case
// rows (zeros, constants, one-signed rows, spikes, huge and tiny magnitudes, zero blocks inside a
// row; all finite, none NaN); and the importance-weighted quantisers' bytes against ggml's
// quantize_<type>(src, dst, nrows, n_per_row, imatrix) on the same rows under several imatrices.
//
// ggml is the prebuilt libggml-base.so of the npm package pinned in bench/ggml/package.json (the
// same library bench/ggml_peer.sh measures against), loaded with dlopen from the path CMake passes
// in (STRATA_GGML_BASE_LIB); scripts/install-deps.sh installs it. Without it every test here is
// skipped with the reason, never passed.
#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "core/dtype.h"
#include "kernels/kquant.h"
#include "kernels/kquant_q8k.h"
#include "tests/support/ggml_library.h"

namespace strata::kernels {
namespace {

using DequantFn = void (*)(const void*, float*, int64_t);
using QuantFn = void (*)(const float*, void*, int64_t);
// ggml's quantize_<type>(src, dst, nrows, n_per_row, imatrix) -> bytes written.
using QuantizeFn = size_t (*)(const float*, void*, int64_t, int64_t, const float*);

// The ggml library (tests/support/ggml_library.h) with the per-type names this test looks up.
class Ggml : public strata::testing::GgmlLibrary {
 public:
  DequantFn dequant(QuantType t) const {
    return symbol<DequantFn>(std::string("dequantize_row_") + quant_type_name(t));
  }
  QuantFn quant(QuantType t) const {
    return symbol<QuantFn>(std::string("quantize_row_") + quant_type_name(t) + "_ref");
  }
  QuantizeFn quantize(QuantType t) const { return symbol<QuantizeFn>(std::string("quantize_") + quant_type_name(t)); }
};

// A named test row of k values.
struct Row {
  std::string name;
  std::vector<float> x;
};

// Rows of k elements (k a multiple of 256) covering the regimes the quantisers branch on.
std::vector<Row> test_rows(int64_t k, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::uniform_real_distribution<float> uni(-1.0f, 1.0f);
  auto fill = [&](float scale, auto&& dist) {
    std::vector<float> v(static_cast<size_t>(k));
    for (float& f : v) f = scale * dist(rng);
    return v;
  };
  std::vector<Row> rows;
  rows.push_back({"normal", fill(1.0f, normal)});
  rows.push_back({"normal_small", fill(0.02f, normal)});
  rows.push_back({"uniform", fill(3.0f, uni)});
  rows.push_back({"zeros", std::vector<float>(static_cast<size_t>(k), 0.0f)});
  rows.push_back({"const_pos", std::vector<float>(static_cast<size_t>(k), 0.75f)});
  rows.push_back({"const_neg", std::vector<float>(static_cast<size_t>(k), -1.25f)});
  {
    std::vector<float> v = fill(1.0f, normal);
    for (float& f : v) f = std::fabs(f) + 0.5f;  // all positive: the affine fits' min > 0 branch
    rows.push_back({"positive", v});
  }
  {
    std::vector<float> v = fill(1.0f, normal);
    for (float& f : v) f = -std::fabs(f);
    rows.push_back({"negative", v});
  }
  {
    std::vector<float> v = fill(0.01f, normal);
    for (size_t i = 7; i < v.size(); i += 97) v[i] = (i % 2 ? 40.0f : -55.0f);  // spikes
    rows.push_back({"spikes", v});
  }
  rows.push_back({"huge", fill(3.0e4f, normal)});     // scales near the top of fp16
  rows.push_back({"tiny", fill(1.0e-5f, normal)});    // fp16 scales in the subnormal range
  rows.push_back({"tinier", fill(1.0e-9f, normal)});  // scales flush to zero in fp16
  {
    std::vector<float> v = fill(1.0f, normal);
    for (int64_t i = 256; i < 288; ++i) v[static_cast<size_t>(i)] = 0.0f;            // one zero 32-block inside
    for (int64_t i = 512 + 16; i < 512 + 32; ++i) v[static_cast<size_t>(i)] = 0.0f;  // one zero 16-group
    rows.push_back({"zero_blocks", v});
  }
  {
    std::vector<float> v = fill(1.0f, normal);
    for (size_t i = 0; i < v.size(); ++i)
      if (rng() % 4 != 0) v[i] = 0.0f;  // sparse
    rows.push_back({"sparse", v});
  }
  {
    std::vector<float> v(static_cast<size_t>(k));
    for (size_t i = 0; i < v.size(); ++i) v[i] = static_cast<float>(static_cast<int>(i % 16) - 8);  // integers
    rows.push_back({"integers", v});
  }
  {
    std::vector<float> v = fill(1.0f, normal);
    for (size_t i = 0; i < v.size(); ++i)
      v[i] *= std::ldexp(1.0f, static_cast<int>(i / 32 % 24) - 12);  // block scales 2^-12..2^11
    rows.push_back({"mixed_scales", v});
  }
  return rows;
}

// Whether block b (of `block` elements) of x is all below ggml's zero threshold.
bool zero_block(const std::vector<float>& x, int64_t b, int block) {
  for (int j = 0; j < block; ++j)
    if (std::fabs(x[static_cast<size_t>(b * block + j)]) >= 1e-15f) return false;
  return true;
}

class KquantGgml : public ::testing::TestWithParam<QuantType> {};

TEST_P(KquantGgml, QuantizeRefBytesEqualGgml) {
  Ggml g;
  STRATA_REQUIRE_GGML(g);
  const QuantType t = GetParam();
  QuantFn theirs = g.quant(t);
  ASSERT_NE(theirs, nullptr) << "ggml has no quantize_row_" << quant_type_name(t) << "_ref";
  const int64_t k = 4096;
  const int block = quant_block_elems(t), bytes = quant_block_bytes(t);
  for (uint32_t seed : {1u, 2u, 3u}) {
    for (const Row& row : test_rows(k, seed)) {
      std::vector<uint8_t> a(static_cast<size_t>(quant_row_bytes(t, k))), b(a.size());
      quantize_row_ref(t, row.x.data(), a.data(), k);
      theirs(row.x.data(), b.data(), k);
      for (int64_t blk = 0; blk < k / block; ++blk) {
        const uint8_t* pa = a.data() + blk * bytes;
        const uint8_t* pb = b.data() + blk * bytes;
        if (t == QuantType::kIq4Nl && zero_block(row.x, blk, block)) {
          // ggml packs stale indices there (kernels/kquant.h); only d is defined, and it is 0.
          ASSERT_EQ(0, std::memcmp(pa, pb, 2)) << row.name << " block " << blk;
          bool leading = true;
          for (int64_t p = 0; p < blk; ++p) leading = leading && zero_block(row.x, p, block);
          if (leading) continue;
        }
        ASSERT_EQ(0, std::memcmp(pa, pb, static_cast<size_t>(bytes)))
            << quant_type_name(t) << " row '" << row.name << "' seed " << seed << ": block " << blk << " differs";
      }
    }
  }
}

// Importance vectors of k values (one per column, as an imatrix entry gives them): random positive
// (log-normal, the spread of real activations' mean squares), all ones, a few zero columns, very
// large and very small magnitudes, and whole zero 16/32-groups (every weight of a group 0).
std::vector<Row> test_importance(int64_t k, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  auto lognormal = [&](float sigma) {
    std::vector<float> v(static_cast<size_t>(k));
    for (float& f : v) f = std::exp(sigma * normal(rng));
    return v;
  };
  std::vector<Row> w;
  w.push_back({"lognormal", lognormal(1.0f)});
  w.push_back({"lognormal_wide", lognormal(3.0f)});
  w.push_back({"ones", std::vector<float>(static_cast<size_t>(k), 1.0f)});
  {
    std::vector<float> v = lognormal(1.0f);
    for (size_t i = 3; i < v.size(); i += 11) v[i] = 0.0f;
    w.push_back({"some_zero", v});
  }
  {
    std::vector<float> v = lognormal(1.0f);
    for (float& f : v) f *= 1.0e6f;
    w.push_back({"large", v});
  }
  {
    std::vector<float> v = lognormal(1.0f);
    for (float& f : v) f *= 1.0e-6f;
    w.push_back({"small", v});
  }
  {
    std::vector<float> v = lognormal(1.0f);
    for (int64_t i = 0; i < 32; ++i) v[static_cast<size_t>(i)] = 0.0f;  // a whole 32-block (and two 16-groups)
    w.push_back({"zero_group", v});
  }
  return w;
}

// quantize_row_weighted == ggml quantize_<type>(x, y, nrows, k, imatrix), every row and imatrix,
// two rows per call (the imatrix applies to each row of the call).
TEST_P(KquantGgml, QuantizeWeightedBytesEqualGgml) {
  Ggml g;
  STRATA_REQUIRE_GGML(g);
  const QuantType t = GetParam();
  QuantizeFn theirs = g.quantize(t);
  ASSERT_NE(theirs, nullptr) << "ggml has no quantize_" << quant_type_name(t);
  const int64_t k = 1024;
  const int64_t rb = quant_row_bytes(t, k);
  int n_differ_from_ref = 0;  // the weighted path must not be the reference in disguise
  for (uint32_t seed : {1u, 2u}) {
    const std::vector<Row> rows = test_rows(k, seed);
    for (const Row& w : test_importance(k, seed + 100)) {
      for (size_t r = 0; r < rows.size(); ++r) {
        const Row& r0 = rows[r];
        const Row& r1 = rows[(r + 1) % rows.size()];
        std::vector<float> x(r0.x);
        x.insert(x.end(), r1.x.begin(), r1.x.end());
        std::vector<uint8_t> a(static_cast<size_t>(2 * rb)), b(a.size(), 0xA5);
        for (int row = 0; row < 2; ++row) quantize_row_weighted(t, x.data() + row * k, w.x.data(), a.data() + row * rb, k);
        ASSERT_EQ(theirs(x.data(), b.data(), 2, k, w.x.data()), static_cast<size_t>(2 * rb));
        std::vector<uint8_t> ref(static_cast<size_t>(rb));
        quantize_row_ref(t, x.data(), ref.data(), k);
        n_differ_from_ref += std::memcmp(ref.data(), a.data(), ref.size()) != 0;
        for (int64_t blk = 0; blk < 2 * k / quant_block_elems(t); ++blk) {
          // Q8_0 ignores the imatrix and runs the reference, whose zero-block caveat does not arise
          // for Q8_0; IQ4_NL's imatrix path re-rounds every index, so zero blocks compare too.
          const size_t off = static_cast<size_t>(blk * quant_block_bytes(t));
          ASSERT_EQ(0, std::memcmp(a.data() + off, b.data() + off, static_cast<size_t>(quant_block_bytes(t))))
              << quant_type_name(t) << " rows '" << r0.name << "'+'" << r1.name << "' imatrix '" << w.name << "' seed "
              << seed << ": block " << blk << " differs";
        }
      }
    }
  }
  if (t == QuantType::kQ8_0)
    EXPECT_EQ(n_differ_from_ref, 0);
  else
    EXPECT_GT(n_differ_from_ref, 0);
}

TEST_P(KquantGgml, DequantizeBitIdenticalToGgml) {
  Ggml g;
  STRATA_REQUIRE_GGML(g);
  const QuantType t = GetParam();
  DequantFn theirs = g.dequant(t);
  ASSERT_NE(theirs, nullptr) << "ggml has no dequantize_row_" << quant_type_name(t);
  const int64_t k = 4096;
  std::vector<std::vector<uint8_t>> inputs;
  // Blocks from the quantiser over every test row ...
  for (const Row& row : test_rows(k, 7)) {
    std::vector<uint8_t> q(static_cast<size_t>(quant_row_bytes(t, k)));
    quantize_row_ref(t, row.x.data(), q.data(), k);
    inputs.push_back(std::move(q));
  }
  // ... and random bytes (every scale and quant pattern), fp16 fields set to finite values.
  std::mt19937 rng(11);
  for (int rep = 0; rep < 8; ++rep) {
    std::vector<uint8_t> q(static_cast<size_t>(quant_row_bytes(t, k)));
    for (uint8_t& c : q) c = static_cast<uint8_t>(rng());
    const int bytes = quant_block_bytes(t);
    for (size_t off = 0; off < q.size(); off += static_cast<size_t>(bytes)) {
      auto set_f16 = [&](size_t at) {
        uint16_t h = static_cast<uint16_t>(rng());
        if (((h >> 10) & 0x1F) == 0x1F) h = static_cast<uint16_t>(h & ~0x4000u);  // no inf/NaN
        std::memcpy(q.data() + off + at, &h, 2);
      };
      switch (t) {
        case QuantType::kQ8_0:
        case QuantType::kIq4Nl:
          set_f16(0);
          break;
        case QuantType::kQ4_K:
          set_f16(0);
          set_f16(2);
          break;
        case QuantType::kQ6_K:
          set_f16(208);
          break;
        case QuantType::kQ3_K:
          set_f16(108);
          break;
        case QuantType::kQ2_K:
          set_f16(80);
          set_f16(82);
          break;
      }
    }
    inputs.push_back(std::move(q));
  }
  for (size_t n = 0; n < inputs.size(); ++n) {
    std::vector<float> a(static_cast<size_t>(k)), b(static_cast<size_t>(k));
    dequantize_row(t, inputs[n].data(), a.data(), k);
    theirs(inputs[n].data(), b.data(), k);
    for (int64_t i = 0; i < k; ++i)
      ASSERT_EQ(std::bit_cast<uint32_t>(a[i]), std::bit_cast<uint32_t>(b[i]))
          << quant_type_name(t) << " input " << n << " element " << i << ": " << a[i] << " vs ggml " << b[i];
  }
}

INSTANTIATE_TEST_SUITE_P(AllTypes, KquantGgml, ::testing::ValuesIn(kAllQuantTypes),
                         [](const ::testing::TestParamInfo<QuantType>& info) {
                           return std::string(quant_type_name(info.param));
                         });

// x -> Q8_K (the activation rounding of the Q4_K / Q2_K integer dot, kernels/kquant_q8k.h): the same
// d, quants and bsums as ggml's quantize_row_q8_K_ref on every test row plus exact ties (x = k + 0.5
// after scaling) and extreme magnitudes. An all-zero block: ggml leaves its bsums unwritten, so only d
// and the quants are compared there.
TEST(KquantGgmlQ8K, QuantizeBytesEqualGgml) {
  Ggml g;
  STRATA_REQUIRE_GGML(g);
  const auto fn = g.symbol<QuantFn>("quantize_row_q8_K_ref");
  ASSERT_NE(fn, nullptr);
  const int64_t k = 1024;
  std::vector<Row> rows = test_rows(k, 11);
  {
    std::vector<float> v(static_cast<size_t>(k));
    for (int64_t i = 0; i < k; ++i) v[static_cast<size_t>(i)] = static_cast<float>(i % 255 - 127) + (i % 2 ? 0.5f : 0.0f);
    for (int64_t b = 0; b < k; b += 256) v[static_cast<size_t>(b)] = 127.0f;  // iscale = -1: exact ties
    rows.push_back({"ties", v});
    std::vector<float> big(static_cast<size_t>(k));
    for (int64_t i = 0; i < k; ++i) big[static_cast<size_t>(i)] = (i % 3 ? -1.0f : 1.0f) * 3.0e38f / static_cast<float>(1 + i % 7);
    rows.push_back({"max_magnitude", big});
  }
  for (const Row& row : rows) {
    std::vector<BlockQ8_K> got(static_cast<size_t>(k / 256)), want(got.size());
    std::memset(want.data(), 0x5A, want.size() * sizeof(BlockQ8_K));
    quantize_row_q8_K(row.x.data(), got.data(), k);
    fn(row.x.data(), want.data(), k);
    for (size_t b = 0; b < got.size(); ++b) {
      EXPECT_EQ(std::bit_cast<uint32_t>(got[b].d), std::bit_cast<uint32_t>(want[b].d)) << row.name << " block " << b;
      EXPECT_EQ(std::memcmp(got[b].qs, want[b].qs, 256), 0) << row.name << " block " << b;
      if (want[b].d != 0.0f)
        EXPECT_EQ(std::memcmp(got[b].bsums, want[b].bsums, 32), 0) << row.name << " block " << b;
    }
  }
}

TEST(KquantGgmlF16, RoundingMatchesGgml) {
  // f32_to_f16 is the rounding point of every stored scale: check it over many f32 patterns through
  // ggml's Q8_0 quantiser, whose d is GGML_FP32_TO_FP16(amax / 127).
  Ggml g;
  STRATA_REQUIRE_GGML(g);
  QuantFn q8 = g.quant(QuantType::kQ8_0);
  ASSERT_NE(q8, nullptr);
  std::mt19937 rng(5);
  std::vector<float> x(32 * 4096, 0.0f);
  for (size_t b = 0; b < 4096; ++b) {
    // Random f32 bits in [2^-30, 2^25): normals, subnormals and overflow of fp16 after /127.
    const uint32_t bits = (static_cast<uint32_t>(97 + rng() % 55) << 23) | (rng() & 0x7FFFFF);
    x[b * 32] = std::bit_cast<float>(bits);
  }
  std::vector<BlockQ8_0> theirs(4096), ours(4096);
  q8(x.data(), theirs.data(), static_cast<int64_t>(x.size()));
  quantize_row_q8_0_ref(x.data(), ours.data(), static_cast<int64_t>(x.size()));
  for (size_t b = 0; b < 4096; ++b) ASSERT_EQ(ours[b].d, theirs[b].d) << "amax " << x[b * 32];
}

}  // namespace
}  // namespace strata::kernels
