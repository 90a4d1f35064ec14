#include "tools/synth_fill.h"

#include <algorithm>
#include <bit>
#include <cmath>
#include <map>
#include <numbers>
#include <utility>

#include "core/dtype.h"
#include "tools/synth_skew.h"

namespace strata::tools {

namespace {

constexpr uint64_t kGolden = 0x9E3779B97F4A7C15ull;
constexpr uint64_t kScaleSalt = 0x5CA1E5CA1E5CA1E5ull;
constexpr int kQuantiles = 65536;

// The splitmix64 output function (Steele, Lea, Flood 2014): a bijective 64-bit mixer.
inline uint64_t mix64(uint64_t z) {
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

// One row's random stream: splitmix64 started at a state derived from (key, row).
class RowStream {
 public:
  RowStream(uint64_t key, uint64_t row) : s_(mix64(key ^ mix64(row + kGolden))) {}
  uint64_t next() {
    s_ += kGolden;
    return mix64(s_);
  }

 private:
  uint64_t s_;
};

// Block offset d in {0, 1} of scale block `block` (1 with probability 1/4).
inline int block_offset(uint64_t key, uint64_t block) {
  return (mix64(key ^ kScaleSalt ^ mix64(block + 1)) >> 62) == 0;
}

// Typical max |x| / std of a block of n normals (32 -> ~2.3, 1024 -> ~3.3): sets the base exponent.
constexpr double kAmaxPer32 = 2.3, kAmaxPer1024 = 3.3;

int base_exponent(double std, double amax_factor, double qmax) {
  return static_cast<int>(std::ceil(std::log2(std::max(std, 1e-30) * amax_factor / qmax)));
}

inline void put_bf16(uint8_t* p, float v) {
  const uint16_t b = f32_to_bf16(v);
  p[0] = static_cast<uint8_t>(b & 0xFF);
  p[1] = static_cast<uint8_t>(b >> 8);
}

inline void put_f32(uint8_t* p, float v) {
  const uint32_t u = std::bit_cast<uint32_t>(v);
  for (int i = 0; i < 4; ++i) p[i] = static_cast<uint8_t>((u >> (8 * i)) & 0xFF);
}

int64_t scale_cols(const SynthTensor& t) {
  return t.decl.shape.rank == 2 ? t.decl.shape.dims[1] : t.decl.shape.dims[0];
}

}  // namespace

double normal_quantile(double p) {
  // Start from the Hastings rational approximation (|error| < 4.5e-4), then take Halley steps on
  // f(z) = Phi(z) - p. In the upper half f is evaluated as (1 - p) - Q(z) with Q(z) = erfc(z/sqrt 2)/2,
  // so both tails keep full relative precision.
  const bool upper = p >= 0.5;
  const double tail = upper ? 1.0 - p : p;
  const double t = std::sqrt(-2.0 * std::log(tail));
  double z =
      t - (2.515517 + 0.802853 * t + 0.010328 * t * t) / (1.0 + 1.432788 * t + 0.189269 * t * t + 0.001308 * t * t * t);
  if (!upper) z = -z;
  const double inv_sqrt2 = 1.0 / std::numbers::sqrt2;
  for (int it = 0; it < 3; ++it) {
    const double pdf = std::exp(-0.5 * z * z) * (0.5 * std::numbers::inv_sqrtpi * std::numbers::sqrt2);
    if (!(pdf > 0)) break;
    const double f = upper ? tail - 0.5 * std::erfc(z * inv_sqrt2) : 0.5 * std::erfc(-z * inv_sqrt2) - p;
    const double u = f / pdf;
    z -= u / (1.0 + 0.5 * z * u);  // Halley: f' = pdf, f'' = -z pdf
  }
  return z;
}

uint64_t fill_key(uint64_t seed, std::string_view name) {
  uint64_t h = 0xCBF29CE484222325ull;  // FNV-1a 64
  for (unsigned char c : name) {
    h ^= c;
    h *= 0x100000001B3ull;
  }
  return mix64(h ^ mix64(seed + kGolden));
}

FillTables FillTables::build(std::span<const SynthTensor> tensors) {
  FillTables ft;
  ft.normal_.resize(kQuantiles);
  for (int u = 0; u < kQuantiles; ++u)
    ft.normal_[static_cast<size_t>(u)] = static_cast<float>(normal_quantile((u + 0.5) / kQuantiles));
  // Tables are shared by every tensor of the same format and std (all experts of a model, say).
  std::map<std::pair<int, uint32_t>, int> index;
  ft.table_of_.assign(tensors.size(), -1);
  for (size_t i = 0; i < tensors.size(); ++i) {
    const SynthTensor& t = tensors[i];
    int fmt;  // 0: FP8 32x32, 1: FP8 rows of 32, 2: FP4 rows of 32
    if (t.fill == FillKind::kFp8Weight || t.fill == FillKind::kFp8Scale)
      fmt = t.block_rows == 32 ? 0 : 1;
    else if (t.fill == FillKind::kFp4Weight || t.fill == FillKind::kFp4Scale)
      fmt = 2;
    else
      continue;
    const auto k = std::make_pair(fmt, std::bit_cast<uint32_t>(t.std));
    auto it = index.find(k);
    if (it != index.end()) {
      ft.table_of_[i] = it->second;
      continue;
    }
    const bool fp4 = fmt == 2;
    const double qmax = fp4 ? kE2M1Max : kE4M3Max;
    CodeTables ct;
    ct.e0 = base_exponent(t.std, fmt == 0 ? kAmaxPer1024 : kAmaxPer32, qmax);
    for (int d = 0; d < 2; ++d) {
      std::vector<uint8_t>& lut = d == 0 ? ct.d0 : ct.d1;
      lut.resize(kQuantiles);
      // ratio = std / scale: the code grid is in units of the block scale.
      const double ratio = static_cast<double>(t.std) / std::ldexp(1.0, ct.e0 + d);
      for (int u = 0; u < kQuantiles; ++u) {
        // ROUNDING: round to nearest even on the E2M1 / E4M3 grid, saturating, as the release's
        // quantiser does to its master weights (make_tiny_v41.py e2m1_encode / e4m3_encode).
        const float x = static_cast<float>(ft.normal_[static_cast<size_t>(u)] * ratio);
        lut[static_cast<size_t>(u)] = fp4 ? f32_to_e2m1(x) : f32_to_e4m3(x);
      }
    }
    const int id = static_cast<int>(ft.codes_.size());
    ft.codes_.push_back(std::move(ct));
    index.emplace(k, id);
    ft.table_of_[i] = id;
  }
  return ft;
}

int64_t fill_n_rows(const SynthTensor& t) { return t.decl.shape.rank >= 2 ? t.decl.shape.dims[0] : 1; }

uint64_t fill_row_bytes(const SynthTensor& t) {
  const int64_t rows = fill_n_rows(t);
  return rows == 0 ? 0 : t.decl.nbytes() / static_cast<uint64_t>(rows);
}

void fill_rows(const SynthTensor& t, size_t tensor_index, const FillTables& tables, int64_t row_begin, int64_t row_end,
               uint8_t* out) {
  const uint64_t row_bytes = fill_row_bytes(t);
  std::vector<float> skew;
  for (int64_t r = row_begin; r < row_end; ++r) {
    uint8_t* o = out + static_cast<uint64_t>(r - row_begin) * row_bytes;
    RowStream rng(t.key, static_cast<uint64_t>(r));
    switch (t.fill) {
      case FillKind::kNormal: {
        const float* q = tables.normal_quantiles();
        const bool bf16 = t.decl.dtype == DType::kBF16;
        const uint64_t n = row_bytes / (bf16 ? 2 : 4);
        // --routing-skew: a structured component on top of the random values (tools/synth_skew.h).
        if (t.skew.kind != RoutingSkew::Kind::kNone) {
          skew.resize(static_cast<size_t>(n));
          routing_skew_row(t, r, static_cast<int64_t>(n), q, skew.data());
        }
        const bool skewed = t.skew.kind != RoutingSkew::Kind::kNone;
        uint64_t x = 0;
        for (uint64_t i = 0; i < n; ++i) {
          if ((i & 3) == 0) x = rng.next();
          const float v = t.mean + t.std * q[(x >> (16 * (i & 3))) & 0xFFFF] + (skewed ? skew[i] : 0.0f);
          if (bf16)
            put_bf16(o + 2 * i, v);
          else
            put_f32(o + 4 * i, v);
        }
        break;
      }
      case FillKind::kFp8Weight: {
        const FillTables::CodeTables& ct = tables.codes_of(tensor_index);
        const int64_t cols = static_cast<int64_t>(row_bytes);
        const int64_t nbc = (cols + 31) / 32;
        const uint64_t brow = static_cast<uint64_t>(r / t.block_rows) * static_cast<uint64_t>(nbc);
        for (int64_t bc = 0; bc < nbc; ++bc) {
          const uint8_t* lut = block_offset(t.key, brow + static_cast<uint64_t>(bc)) ? ct.d1.data() : ct.d0.data();
          const int64_t c0 = bc * 32, c1 = std::min<int64_t>(cols, c0 + 32);
          uint64_t x = 0;
          for (int64_t c = c0; c < c1; ++c) {
            const int k = static_cast<int>((c - c0) & 3);
            if (k == 0) x = rng.next();
            o[c] = lut[(x >> (16 * k)) & 0xFFFF];
          }
        }
        break;
      }
      case FillKind::kFp4Weight: {
        const FillTables::CodeTables& ct = tables.codes_of(tensor_index);
        const int64_t nblk = t.value_cols / 32;  // value_cols is a multiple of 32 (validated config)
        const uint64_t brow = static_cast<uint64_t>(r) * static_cast<uint64_t>(nblk);
        for (int64_t b = 0; b < nblk; ++b) {
          const uint8_t* lut = block_offset(t.key, brow + static_cast<uint64_t>(b)) ? ct.d1.data() : ct.d0.data();
          uint8_t* ob = o + b * 16;
          for (int k = 0; k < 8; ++k) {
            const uint64_t x = rng.next();
            // Even element in the low nibble (release layout).
            ob[2 * k] = static_cast<uint8_t>(lut[x & 0xFFFF] | (lut[(x >> 16) & 0xFFFF] << 4));
            ob[2 * k + 1] = static_cast<uint8_t>(lut[(x >> 32) & 0xFFFF] | (lut[x >> 48] << 4));
          }
        }
        break;
      }
      case FillKind::kFp8Scale:
      case FillKind::kFp4Scale: {
        const FillTables::CodeTables& ct = tables.codes_of(tensor_index);
        const int64_t cols = scale_cols(t);
        const uint64_t brow = static_cast<uint64_t>(r) * static_cast<uint64_t>(cols);
        for (int64_t c = 0; c < cols; ++c) {
          const int e = ct.e0 + block_offset(t.key, brow + static_cast<uint64_t>(c));
          o[c] = static_cast<uint8_t>(std::clamp(e + 127, 1, 254));
        }
        break;
      }
    }
  }
}

}  // namespace strata::tools
