// The integer decode dots of every linear_quant type: x as Q8_K for the K-quants (Q4_K, Q2_K, Q6_K,
// Q3_K; kernels/kquant_q8k.h), x as Q8_0 for Q8_0 and IQ4_NL (kernels/kquant_q8_0_dot.h):
//  - every level and thread count equals kernels/ref bit for bit on edge-case activations (all zero,
//    zero blocks, one-hot, exact rounding ties, magnitudes near FLT_MAX, E4M3-like coarse values) with
//    random and all-extreme weight blocks, odd row counts and several n;
//  - the reference stays within the bound x's rounding implies of the float64 dot of ggml's
//    dequantised weights with the unrounded x.
// (kquant_ggml_test checks quantize_row_q8_K and quantize_row_q8_0_ref against ggml's bytes;
// kquant_linear_test runs the common level-vs-reference table for every type.)
//
// The bound. Per 256-block b with amax_b = max |x|: Q8_K stores d * q with |x - d q| <= amax_b / 254
// (half a step of amax / 127; the 0.1% slack covers the roundings of -127 / max, iscale * x and
// 1 / iscale, each 2^-24 relative). The integer sums are exact; the f32 work per block is dd, dm
// (one rounding each), float(S), float(M), t, u, t - u (one each) and one add into the running sum, and
// ggml's dequantised w_k = (d sc) q - dmin m carries three roundings of |d sc q| + |dmin m| =: a_k.
// So |y - sum w_k x_k| <= sum_k |w_k| delta_b + (nb + 8) * 2^-23 * sum_k a_k (|x_k| + delta_b).
// Q8_0 x: per 32-block, d = amax / 127 is stored as fp16, so delta_b adds the fp16 rounding of d
// times |q| <= 127 (x_error below); the f32 work per block is fewer steps (dd exact, t, one add).
#include <gtest/gtest.h>

#include <bit>
#include <cfloat>
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
#include "kernels/kquant_unpack.h"

namespace strata::kernels {
namespace {

constexpr QuantType kTypes[] = {QuantType::kQ4_K, QuantType::kQ2_K, QuantType::kQ6_K,
                                QuantType::kQ3_K, QuantType::kQ8_0, QuantType::kIq4Nl};

// Byte offsets of a block's fp16 scale fields (d, and dmin where there is one).
std::vector<int> f16_fields(QuantType t) {
  switch (t) {
    case QuantType::kQ4_K: return {0, 2};
    case QuantType::kQ2_K: return {80, 82};
    case QuantType::kQ6_K: return {208};
    case QuantType::kQ3_K: return {108};
    default: return {0};  // Q8_0, IQ4_NL
  }
}

// Weights [out, in]: rows quantised from random floats, rows of random bytes (finite fp16 scales),
// and rows with every quant, scale and min at its maximum.
std::vector<uint8_t> weights(QuantType t, int64_t out, int64_t in, std::mt19937& rng) {
  const int64_t rb = quant_row_bytes(t, in);
  std::vector<uint8_t> w(static_cast<size_t>(out * rb));
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<float> row(static_cast<size_t>(in));
  const int bytes = quant_block_bytes(t);
  for (int64_t r = 0; r < out; ++r) {
    uint8_t* p = w.data() + r * rb;
    if (r % 3 == 0) {
      for (float& f : row) f = normal(rng) * 0.05f;
      quantize_row_ref(t, row.data(), p, in);
      continue;
    }
    for (int64_t b = 0; b < rb; ++b) p[b] = r % 3 == 1 ? static_cast<uint8_t>(rng()) : 0xFF;
    // fp16 d and dmin: finite (exponent field below 31)
    for (int64_t b = 0; b < rb / bytes; ++b) {
      uint8_t* blk = p + b * bytes;
      for (int off : f16_fields(t)) {
        uint16_t v = static_cast<uint16_t>(rng()) & 0xBBFF;  // exponent field <= 14: finite, |v| < 1
        std::memcpy(blk + off, &v, 2);
      }
    }
  }
  return w;
}

std::vector<std::pair<std::string, std::vector<float>>> activations(int64_t n, int64_t in, std::mt19937& rng) {
  const auto count = static_cast<size_t>(n * in);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<std::pair<std::string, std::vector<float>>> xs;
  xs.push_back({"zeros", std::vector<float>(count, 0.0f)});
  std::vector<float> v(count);
  for (float& f : v) f = normal(rng);
  for (size_t i = 256; i < 512 && i < count; ++i) v[i] = 0.0f;  // one zero block inside
  xs.push_back({"normal_zero_block", v});
  std::vector<float> one(count, 0.0f);
  for (size_t i = 3; i < count; i += 300) one[i] = -2.5f;
  xs.push_back({"sparse", one});
  std::vector<float> ties(count);
  for (size_t i = 0; i < count; ++i) ties[i] = i % 256 == 0 ? 127.0f : static_cast<float>(static_cast<int>(i % 200) - 100) + 0.5f;
  xs.push_back({"ties", ties});
  std::vector<float> big(count);
  for (size_t i = 0; i < count; ++i) big[i] = (i % 2 ? FLT_MAX : -FLT_MAX) / static_cast<float>(1 + i % 5);
  xs.push_back({"max_magnitude", big});
  std::vector<float> coarse(count);  // few distinct values, as after the model's E4M3 rounding
  for (size_t i = 0; i < count; ++i) coarse[i] = std::ldexp(1.0f + 0.125f * static_cast<float>(rng() % 8), static_cast<int>(rng() % 9) - 6) * (rng() % 2 ? 1.0f : -1.0f);
  xs.push_back({"coarse", coarse});
  return xs;
}

struct Shape {
  int64_t n, out, in;
};
constexpr Shape kShapes[] = {{1, 1, 256}, {1, 3, 512}, {1, 7, 768}, {2, 5, 256}, {3, 33, 1024}, {1, 64, 2048}, {5, 17, 512}};

TEST(KquantQ8K, EveryLevelEqualsReferenceOnEdgeActivations) {
  std::mt19937 rng(5);
  ThreadPool pool(3);
  int checked = 0;
  for (QuantType t : kTypes)
    for (const Shape& s : kShapes) {
      const std::vector<uint8_t> wb = weights(t, s.out, s.in, rng);
      const QuantWeight w{t, wb.data(), s.out, s.in};
      for (const auto& [name, x] : activations(s.n, s.in, rng)) {
        std::vector<float> want(static_cast<size_t>(s.n * s.out));
        ref::linear_quant(x.data(), s.n, w, want.data());
        for (KernelLevel level : kAllKernelLevels) {
          if (!kernel_level_supported(level)) continue;
          for (ThreadPool* p : {static_cast<ThreadPool*>(nullptr), &pool}) {
            std::vector<float> got(want.size(), -1.0f);
            linear_quant(x.data(), s.n, w, got.data(), p, level);
            for (size_t i = 0; i < want.size(); ++i)
              ASSERT_EQ(std::bit_cast<uint32_t>(want[i]), std::bit_cast<uint32_t>(got[i]))
                  << quant_type_name(t) << " " << name << " level " << kernel_level_name(level) << " n=" << s.n
                  << " out=" << s.out << " in=" << s.in << (p ? " threaded" : " serial") << " y[" << i << "] " << got[i]
                  << " vs " << want[i];
            ++checked;
          }
        }
      }
    }
  EXPECT_GT(checked, 0);
}

// a_k = |d sc q_k| + |dmin m| of element e of a block (the magnitudes ggml's dequantisation rounds);
// for the types without mins, |w_k| itself (the dequantised `w`, within two roundings of |d sc q|).
double weight_mag(QuantType t, const uint8_t* blk, int e, float w) {
  if (t != QuantType::kQ4_K && t != QuantType::kQ2_K) return std::fabs(static_cast<double>(w)) * (1.0 + 0x1p-20);
  if (t == QuantType::kQ4_K) {
    const auto& b = *reinterpret_cast<const BlockQ4_K*>(blk);
    uint8_t sc, m;
    kquant::q4_K_scale_min(b.scales, e / 32, &sc, &m);
    const int q = (b.qs[32 * (e / 64) + e % 32] >> (4 * ((e / 32) % 2))) & 0xF;
    return std::fabs(static_cast<double>(f16_to_f32(b.d)) * sc * q) + std::fabs(static_cast<double>(f16_to_f32(b.dmin)) * m);
  }
  const auto& b = *reinterpret_cast<const BlockQ2_K*>(blk);
  const int q = kquant::k_low2(b.qs, e);
  return std::fabs(static_cast<double>(f16_to_f32(b.d)) * (b.scales[e / 16] & 0xF) * q) +
         std::fabs(static_cast<double>(f16_to_f32(b.dmin)) * (b.scales[e / 16] >> 4));
}

// The largest |x - x'| in a block of quantised x whose largest |x| is amax (see the top of the file).
double x_error(bool q8k, double amax) {
  if (q8k) return amax / 254.0 * 1.001;
  // Q8_0: half a step of d = amax / 127, plus the fp16 rounding of d (2^-11 relative, or 2^-25
  // absolute below fp16's normal range) times |q| <= 127.
  return (amax / 127.0 * (0.5 + 127.0 * 0x1p-11) + 127.0 * 0x1p-25) * 1.001;
}

TEST(KquantQ8K, ReferenceWithinQ8KBoundOfFloat64) {
  std::mt19937 rng(9);
  int checked = 0;
  for (QuantType t : kTypes)
    for (const Shape& s : kShapes) {
      const std::vector<uint8_t> wb = weights(t, s.out, s.in, rng);
      const QuantWeight w{t, wb.data(), s.out, s.in};
      const int64_t nb = s.in / quant_block_elems(t);  // weight blocks: the f32 steps per row
      const bool q8k = q8k_dot_supported(t);
      const int xbe = q8k ? 256 : 32;  // elements per block of quantised x
      for (const auto& [name, x] : activations(s.n, s.in, rng)) {
        if (name == "max_magnitude") continue;  // products overflow f32: no finite bound to check
        std::vector<float> y(static_cast<size_t>(s.n * s.out));
        ref::linear_quant(x.data(), s.n, w, y.data());
        std::vector<float> row(static_cast<size_t>(s.in));
        for (int64_t r = 0; r < s.out; ++r) {
          const uint8_t* wr = quant_weight_row(w, r);
          dequantize_row(t, wr, row.data(), s.in);
          for (int64_t i = 0; i < s.n; ++i) {
            const float* xi = x.data() + i * s.in;
            double exact = 0.0, xerr = 0.0, mag = 0.0;
            for (int64_t xb = 0; xb < s.in / xbe; ++xb) {
              double amax = 0.0;
              for (int e = 0; e < xbe; ++e) amax = std::fmax(amax, std::fabs(static_cast<double>(xi[xb * xbe + e])));
              const double delta = x_error(q8k, amax);
              for (int e = 0; e < xbe; ++e) {
                const int64_t k = xb * xbe + e;
                const int64_t wb = k / quant_block_elems(t);
                exact += static_cast<double>(row[k]) * xi[k];
                xerr += std::fabs(static_cast<double>(row[k])) * delta;
                mag += weight_mag(t, wr + wb * quant_block_bytes(t), static_cast<int>(k % quant_block_elems(t)), row[k]) *
                       (std::fabs(static_cast<double>(xi[k])) + delta);
              }
            }
            const double bound = xerr + static_cast<double>(nb + 8) * 0x1p-23 * mag + 1e-30;
            EXPECT_LE(std::fabs(y[i * s.out + r] - exact), bound)
                << quant_type_name(t) << " " << name << " row " << r << " token " << i << " in=" << s.in;
            ++checked;
          }
        }
      }
    }
  EXPECT_GT(checked, 0);
}

}  // namespace
}  // namespace strata::kernels
