#include "model/kv_cache.h"

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstring>

#include "core/dtype.h"
#include "core/status.h"
#include "kernels/indexer.h"
#include "kernels/quant.h"

namespace strata::model {

namespace {

// Target page size of PagedRows; a page holds at least kMinPageRows rows.
constexpr int64_t kPageBytes = 64 * 1024;
constexpr int64_t kMinPageRows = 16;

float block_amax(const float* x, int n) {
  float a = 0.0f;
  for (int j = 0; j < n; ++j) a = std::max(a, std::fabs(x[j]));
  return a;
}

// ue8m0 code of a power of two held in an f32 (its biased exponent). The scales produced below are
// normal powers of two, so the code decodes (core e8m0_to_f32) to the same float.
uint8_t e8m0_code_of(float pow2) { return static_cast<uint8_t>((std::bit_cast<uint32_t>(pow2) >> 23) & 0xFFu); }

// 2^ceil(log2(t)) from the bits of a positive finite t (the official fast_round_scale).
float pow2_ceil_bits(float t) {
  const uint32_t u = std::bit_cast<uint32_t>(t);
  const uint32_t e = (u >> 23) & 0xFFu;
  return std::bit_cast<float>((e + ((u & 0x7FFFFFu) != 0 ? 1u : 0u)) << 23);
}

}  // namespace

// ---- row codecs -----------------------------------------------------------------------------------

void encode_window_row(const float* x, int64_t n, uint8_t* row) {
  float s[64];  // scales of up to 64 blocks at a time (head_dim 2048)
  for (int64_t off = 0; off < n; off += 64 * 32) {
    const int64_t m = std::min<int64_t>(n - off, 64 * 32);
    // ROUNDING: E4M3 RNE of clamp(x/s, +-448) with s = the ue8m0 block scale (act_quant, inplace path).
    kernels::act_quant_fp8(x + off, m, row + off, s, 32);
    for (int64_t b = 0; b < m / 32; ++b) row[n + (off / 32) + b] = e8m0_code_of(s[b]);
  }
}

void decode_window_row(const uint8_t* row, int64_t n, float* out) {
  const uint8_t* sc = row + n;
  for (int64_t b = 0; b < n / 32; ++b) {
    const float s = e8m0_to_f32(sc[b]);
    for (int j = 0; j < 32; ++j) out[b * 32 + j] = e4m3_to_f32(row[b * 32 + j]) * s;
  }
}

void encode_compressed_row(const float* x, int64_t n, uint8_t* row) {
  constexpr float kMinAmax = 6.0f * 0x1p-9f;
  uint8_t* sc = row + n / 2;
  for (int64_t b = 0; b < n / 16; ++b) {
    const float* xb = x + b * 16;
    // ROUNDING: s = RNE_e4m3(max(amax, 6*2^-9) / 6), a true f32 division (fp4_act_quant, E4M3 scale).
    const uint8_t scode = f32_to_e4m3(std::max(block_amax(xb, 16), kMinAmax) / 6.0f);
    const float s = e4m3_to_f32(scode);
    sc[b] = scode;
    for (int j = 0; j < 16; j += 2) {
      // ROUNDING: RNE_e2m1(clamp(x/s, +-6)); two codes per byte, even element in the low nibble.
      const uint8_t lo = f32_to_e2m1(std::clamp(xb[j] / s, -kE2M1Max, kE2M1Max));
      const uint8_t hi = f32_to_e2m1(std::clamp(xb[j + 1] / s, -kE2M1Max, kE2M1Max));
      row[(b * 16 + j) / 2] = static_cast<uint8_t>(lo | (hi << 4));
    }
  }
}

void decode_compressed_row(const uint8_t* row, int64_t n, float* out) {
  const uint8_t* sc = row + n / 2;
  for (int64_t b = 0; b < n / 16; ++b) {
    const float s = e4m3_to_f32(sc[b]);
    for (int j = 0; j < 16; j += 2) {
      const uint8_t v = row[(b * 16 + j) / 2];
      out[b * 16 + j] = kE2M1Values[v & 0xF] * s;
      out[b * 16 + j + 1] = kE2M1Values[v >> 4] * s;
    }
  }
}

void encode_index_key_row(const float* x, int64_t n, uint8_t* row) {
  constexpr float kMinAmax = 6.0f * 0x1p-126f;
  uint8_t* sc = row + n / 2;
  for (int64_t b = 0; b < n / 32; ++b) {
    const float* xb = x + b * 32;
    // ROUNDING: s = 2^ceil(log2(fp32(max(amax, 6*2^-126) * fp32(1/6)))) (fp4_act_quant, E8M0 scale).
    const float s = pow2_ceil_bits(std::max(block_amax(xb, 32), kMinAmax) * (1.0f / 6.0f));
    sc[b] = e8m0_code_of(s);
    for (int j = 0; j < 32; j += 2) {
      // ROUNDING: RNE_e2m1(clamp(x/s, +-6)).
      const uint8_t lo = f32_to_e2m1(std::clamp(xb[j] / s, -kE2M1Max, kE2M1Max));
      const uint8_t hi = f32_to_e2m1(std::clamp(xb[j + 1] / s, -kE2M1Max, kE2M1Max));
      row[(b * 32 + j) / 2] = static_cast<uint8_t>(lo | (hi << 4));
    }
  }
}

void decode_index_key_row(const uint8_t* row, int64_t n, float* out) { kernels::dequant_index_key(row, n, out); }

// ---- memory math ----------------------------------------------------------------------------------

KvFootprint kv_footprint(const ModelConfig& c) {
  KvFootprint f;
  const int64_t wrow = window_row_bytes(c.head_dim);
  for (int l = 0; l < c.n_layers; ++l) {
    f.window_bytes += c.window_size * wrow;
    f.state_bytes += c.window_size * static_cast<int64_t>(sizeof(int64_t));
    if (!c.is_kv_source(l)) continue;
    const int ratio = c.compress_ratio(l);
    if (ratio <= 0) continue;
    f.sources.push_back(l);
    double per_group = static_cast<double>(compressed_row_bytes(c.head_dim));
    if (c.owns_index_keys(l)) per_group += static_cast<double>(index_key_row_bytes(c.index_head_dim));
    f.global_bytes_per_token += per_group / ratio;
    if (ratio > 1) f.state_bytes += 2 * ratio * c.head_dim * static_cast<int64_t>(sizeof(float));
  }
  return f;
}

uint64_t KvFootprint::bytes_at(int64_t n_tokens) const {
  return static_cast<uint64_t>(std::llround(global_bytes_per_token * static_cast<double>(n_tokens))) +
         static_cast<uint64_t>(window_bytes + state_bytes);
}

// ---- PagedRows ------------------------------------------------------------------------------------

PagedRows::PagedRows(int64_t row_bytes) : row_bytes_(row_bytes) {
  STRATA_CHECK(row_bytes > 0, "PagedRows: row_bytes must be positive");
  rows_per_page_ = std::max<int64_t>(kMinPageRows, kPageBytes / row_bytes);
}

int64_t PagedRows::rows_in_page(int p) const {
  return std::min<int64_t>(rows_per_page_, n_rows_ - static_cast<int64_t>(p) * rows_per_page_);
}

uint8_t* PagedRows::append_row() {
  STRATA_CHECK(row_bytes_ > 0, "PagedRows: append to an unshaped row store");
  const int64_t in_page = n_rows_ % rows_per_page_;
  if (in_page == 0) {
    pages_.push_back(std::make_shared<uint8_t[]>(static_cast<size_t>(page_bytes())));
  } else if (pages_.back().use_count() > 1) {
    // Copy-on-write: another copy of this store shares the partly filled page; it must not see our
    // new rows, and rows it may append later must not land in ours.
    auto fresh = std::make_shared<uint8_t[]>(static_cast<size_t>(page_bytes()));
    std::memcpy(fresh.get(), pages_.back().get(), static_cast<size_t>(in_page * row_bytes_));
    pages_.back() = std::move(fresh);
  }
  uint8_t* r = pages_.back().get() + in_page * row_bytes_;
  ++n_rows_;
  return r;
}

void PagedRows::truncate(int64_t n) {
  STRATA_CHECK(n >= 0 && n <= n_rows_, "PagedRows::truncate: past the stored rows");
  pages_.resize(static_cast<size_t>(rows_per_page_ > 0 ? (n + rows_per_page_ - 1) / rows_per_page_ : 0));
  n_rows_ = n;
}

void PagedRows::append_rows(const uint8_t* src, int64_t n) {
  for (int64_t i = 0; i < n; ++i) std::memcpy(append_row(), src + i * row_bytes_, static_cast<size_t>(row_bytes_));
}

// ---- KvCache --------------------------------------------------------------------------------------

KvCache::KvCache(const ModelConfig& c) {
  layers.resize(static_cast<size_t>(c.n_layers));
  for (int l = 0; l < c.n_layers; ++l) {
    LayerKvCache& lc = layers[static_cast<size_t>(l)];
    lc.window.assign(static_cast<size_t>(c.window_size * window_row_bytes(c.head_dim)), 0);
    lc.window_pos.assign(static_cast<size_t>(c.window_size), -1);
    const int ratio = c.compress_ratio(l);
    if (ratio > 0 && c.is_kv_source(l)) {
      lc.compressed = PagedRows(compressed_row_bytes(c.head_dim));
      if (c.owns_index_keys(l)) lc.index_keys = PagedRows(index_key_row_bytes(c.index_head_dim));
      if (ratio > 1) {
        lc.kv_state.assign(static_cast<size_t>(ratio * c.head_dim), 0.0f);
        lc.score_state.assign(static_cast<size_t>(ratio * c.head_dim), -INFINITY);
      }
    }
  }
}

uint64_t KvCache::bytes() const {
  uint64_t b = 0;
  for (const auto& l : layers)
    b += l.window.size() + l.window_pos.size() * sizeof(int64_t) + l.compressed.allocated_bytes() +
         l.index_keys.allocated_bytes() + (l.kv_state.size() + l.score_state.size()) * sizeof(float);
  return b;
}

uint64_t KvCache::global_bytes() const {
  uint64_t b = 0;
  for (const auto& l : layers) b += l.compressed.used_bytes() + l.index_keys.used_bytes();
  return b;
}

}  // namespace strata::model
