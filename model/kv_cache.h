// KvCache: everything one sequence carries from token to token, stored in the formats of the spec.
//
// Per layer:
//   - the sliding-window ring (slot = pos % window_size): each row is head_dim E4M3 codes followed by
//     head_dim/32 ue8m0 scales (528 B at head_dim 512), plus the position each slot holds (-1: none);
//   - at KV source layers, the compressed KV: one row per completed group of compress_ratio tokens,
//     head_dim/2 bytes of packed E2M1 (even element in the low nibble) followed by head_dim/16 E4M3
//     scales (288 B at head_dim 512);
//   - at index-key owners, the index keys: index_head_dim/2 bytes of packed E2M1 followed by
//     index_head_dim/32 ue8m0 scales (68 B at index_head_dim 128);
//   - at KV sources with ratio > 1, the compressor's partial group (f32, exact) and its frontier.
// Plus the Engram history (compressed ids of the last max_ngram-1 tokens) and the position.
//
// The bytes hold exactly what the reference's fake-quantised caches hold: decoding a row gives the
// f32 values the reference computes with, bit for bit (the encoders below round as act_quant /
// fp4_act_quant do; E4M3 x E2M1 and code x power-of-two products are exact in f32).
// Global KV at the full config: (288 + 68) x (3 x 1/2 + 1) = 890 B per token (kv_bytes_per_token).
//
// Compressed KV and index keys only grow, so they live in fixed-size pages that copies of a cache
// share (copy-on-write of the partly filled last page): a snapshot for the prefix cache or a
// session file costs the ring, the compressor state and one page per source, not the whole history.
// Thread safety: one writer per cache; pages shared by copies are never written after they are
// shared, so copies may live on other threads.
// Source: ARCHITECTURE.md §Attention "Caches"; model.py Attention._window_kv, _compress_kv,
// Compressor (kv_state / score_state), Indexer (k_cache).
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "model/config.h"
#include "model/engram_hash.h"

namespace strata::model {

// ---- row formats ----------------------------------------------------------------------------------

// Bytes of one window row: head_dim E4M3 + head_dim/32 ue8m0. REQUIRES head_dim % 32 == 0.
inline int64_t window_row_bytes(int64_t head_dim) { return head_dim + head_dim / 32; }
// Bytes of one compressed-KV row: head_dim/2 packed E2M1 + head_dim/16 E4M3. REQUIRES head_dim % 16 == 0.
inline int64_t compressed_row_bytes(int64_t head_dim) { return head_dim / 2 + head_dim / 16; }
// Bytes of one index-key row: index_head_dim/2 packed E2M1 + index_head_dim/32 ue8m0.
inline int64_t index_key_row_bytes(int64_t index_head_dim) { return index_head_dim / 2 + index_head_dim / 32; }

// Window KV x[n] (post-RoPE f32) -> row bytes. ROUNDING: FP8 E4M3 with a ue8m0 scale per 32, as
// model.py Attention._window_kv act_quant (= kernels::act_quant_fp8_inplace, bit for bit).
void encode_window_row(const float* x, int64_t n, uint8_t* row);
void decode_window_row(const uint8_t* row, int64_t n, float* out);
// Compressed KV latent x[n] (post-RoPE f32) -> row bytes. ROUNDING: FP4 E2M1 with an E4M3 scale per
// 16, as model.py Attention._compress_kv fp4_act_quant (= kernels::fp4_quant_e4m3_inplace).
void encode_compressed_row(const float* x, int64_t n, uint8_t* row);
void decode_compressed_row(const uint8_t* row, int64_t n, float* out);
// Index key x[n] (post-RoPE f32) -> row bytes. ROUNDING: FP4 E2M1 with a ue8m0 scale per 32, as
// model.py Indexer.forward fp4_act_quant (= kernels::fp4_quant_e8m0_inplace).
void encode_index_key_row(const float* x, int64_t n, uint8_t* row);
void decode_index_key_row(const uint8_t* row, int64_t n, float* out);

// ---- memory math (a pure function of the config; `strata plan` and `run --stats` use it) ------------

struct KvFootprint {
  // Compressed KV + index keys per token, amortised over the compress ratio (890 at the full config).
  double global_bytes_per_token = 0;
  int64_t window_bytes = 0;  // every layer's ring (fixed, independent of the context length)
  int64_t state_bytes = 0;   // compressor partial groups (f32) and ring positions (fixed)
  // Bytes of a cache holding n_tokens tokens: rows actually stored, excluding page slack.
  uint64_t bytes_at(int64_t n_tokens) const;
  std::vector<int> sources;  // KV source layers counted in global_bytes_per_token
};
// REQUIRES c.validate() ok.
KvFootprint kv_footprint(const ModelConfig& c);
inline double kv_bytes_per_token(const ModelConfig& c) { return kv_footprint(c).global_bytes_per_token; }

// ---- storage --------------------------------------------------------------------------------------

// Append-only fixed-size rows in pages of ~64 KiB. Copying a PagedRows shares its pages; a write
// into a page that another copy also holds copies that page first, so copies never see each
// other's later rows. Thread safety: const methods may run concurrently; one writer.
class PagedRows {
 public:
  PagedRows() = default;
  explicit PagedRows(int64_t row_bytes);

  int64_t size() const { return n_rows_; }
  int64_t row_bytes() const { return row_bytes_; }
  int64_t rows_per_page() const { return rows_per_page_; }
  // REQUIRES 0 <= i < size().
  const uint8_t* row(int64_t i) const {
    return pages_[static_cast<size_t>(i / rows_per_page_)].get() + (i % rows_per_page_) * row_bytes_;
  }
  // A writable row at index size() (size() grows by one). Its bytes are unspecified until written.
  uint8_t* append_row();
  // Appends `n` rows copied from `src` (n * row_bytes bytes).
  void append_rows(const uint8_t* src, int64_t n);
  // Keeps the first `n` rows (a rewind, model/kv_undo.h); pages past them are released. A kept
  // partly filled page that a copy shares is copied by the next append_row, so the copy never sees
  // rows written after the cut. REQUIRES 0 <= n <= size().
  void truncate(int64_t n);

  int n_pages() const { return static_cast<int>(pages_.size()); }
  // Page p's first byte (rows p*rows_per_page ..); identifies shared pages for memory accounting.
  const uint8_t* page(int p) const { return pages_[static_cast<size_t>(p)].get(); }
  // Rows stored in page p.
  int64_t rows_in_page(int p) const;
  uint64_t page_bytes() const { return static_cast<uint64_t>(rows_per_page_ * row_bytes_); }
  uint64_t used_bytes() const { return static_cast<uint64_t>(n_rows_ * row_bytes_); }
  uint64_t allocated_bytes() const { return pages_.size() * page_bytes(); }

 private:
  std::vector<std::shared_ptr<uint8_t[]>> pages_;
  int64_t row_bytes_ = 0, rows_per_page_ = 0, n_rows_ = 0;
};

struct LayerKvCache {
  std::vector<uint8_t> window;      // [window_size, window_row_bytes] ring of post-RoPE KV
  std::vector<int64_t> window_pos;  // [window_size] position held by each slot, -1 = empty
  PagedRows compressed;             // KV sources: [n_groups] compressed_row_bytes rows, RoPE'd
  PagedRows index_keys;             // index-key owners: [n_groups] index_key_row_bytes rows
  std::vector<float> kv_state;      // [ratio, head_dim] compressor partial group (ratio > 1), f32
  std::vector<float> score_state;   // [ratio, head_dim]
  int64_t comp_pos = 0;             // KV sources: tokens the compressor has consumed (its frontier)

  // Decodes ring slot `slot` into out[head_dim]. REQUIRES window_pos[slot] >= 0.
  void window_row(int64_t slot, int64_t head_dim, float* out) const {
    decode_window_row(window.data() + slot * window_row_bytes(head_dim), head_dim, out);
  }
  // Decodes compressed group g into out[head_dim].
  void compressed_row(int64_t g, int64_t head_dim, float* out) const {
    decode_compressed_row(compressed.row(g), head_dim, out);
  }
  // Decodes index key g into out[index_head_dim].
  void index_key(int64_t g, int64_t index_head_dim, float* out) const {
    decode_index_key_row(index_keys.row(g), index_head_dim, out);
  }
};

struct KvCache {
  KvCache() = default;
  // An empty cache shaped for `c` (rings, sources, owners and compressor states allocated).
  explicit KvCache(const ModelConfig& c);

  int64_t n_past = 0;                    // tokens already in the cache
  std::vector<LayerKvCache> layers;      // one per backbone layer
  EngramHistory engram_history{0, 0};    // compressed ids of the last max_ngram-1 tokens, oldest first

  // Bytes held: rings, states and every allocated page (shared pages counted in full).
  uint64_t bytes() const;
  // Compressed KV + index-key bytes in stored rows (the "global KV" of kv_footprint).
  uint64_t global_bytes() const;
};

}  // namespace strata::model
