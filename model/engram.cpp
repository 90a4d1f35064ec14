#include "model/engram.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "core/dtype.h"
#include "kernels/kquant.h"
#include "model/ops.h"

namespace strata::model {

Status engram_start(const ModelConfig& c, std::span<const BlockWeights> layers, store::WeightStore& store,
                    std::span<const int64_t> rows, int64_t n, std::vector<std::unique_ptr<store::EngramFetch>>* out,
                    std::vector<int64_t>* layer_rows_buf) {
  const int cols = c.engram_n_cols();
  const int ne = static_cast<int>(c.engram_layer_ids.size());
  out->clear();
  out->resize(static_cast<size_t>(ne));
  std::vector<int64_t>& layer_rows = *layer_rows_buf;
  layer_rows.resize(static_cast<size_t>(n * cols));
  // In layer order: the first Engram layer's rows are needed first.
  for (const BlockWeights& bw : layers) {
    if (!bw.has_engram) continue;
    const int ei = bw.engram.index;
    for (int64_t t = 0; t < n; ++t)
      std::copy_n(rows.data() + (t * ne + ei) * cols, cols, layer_rows.data() + t * cols);
    auto f = store.start_engram_rows(bw.layer, layer_rows);
    if (!f.ok()) return f.error().with_context("Engram layer " + std::to_string(bw.layer));
    (*out)[static_cast<size_t>(ei)] = std::move(*f);
  }
  return Status();
}

Status engram_forward(const ModelConfig& c, const EngramWeights& w, int layer, store::WeightStore& store,
                      const int64_t* rows, int64_t n, float* x, ThreadPool* pool, Observer* obs) {
  auto f = store.start_engram_rows(layer, std::span<const int64_t>(rows, static_cast<size_t>(n * c.engram_n_cols())));
  if (!f.ok()) return f.error().with_context("Engram layer " + std::to_string(layer));
  return engram_forward(c, w, layer, **f, n, Rows{n, -1}, x, pool, obs);
}

Status engram_forward(const ModelConfig& c, const EngramWeights& w, int layer, store::EngramFetch& fetch,
                      int64_t n_fetched, Rows rows, float* x, ThreadPool* pool, Observer* obs, ForwardProfile* prof,
                      EngramScratch* scratch) {
  const int64_t n = rows.n;
  EngramScratch local;
  EngramScratch& sc = scratch ? *scratch : local;
  ScopedNs timer(prof ? &prof->engram_ns : nullptr);
  const int cols = c.engram_n_cols();
  const int64_t hd = c.engram_head_dim, dim = c.dim;
  // Stored bytes per row: FP8 codes + E8M0 scales, or one block-format row (no scales).
  const int64_t rb = w.row_bytes > 0 ? w.row_bytes : hd, ns = w.row_bytes > 0 ? w.scale_bytes : hd / 32;
  const int hc = c.hc_mult;
  const int64_t n_rows = n * cols;
  const int64_t skip = (n_fetched - n) * cols;  // rows of tokens that bounded replay dropped
  std::vector<uint8_t>& codes = sc.codes;
  std::vector<uint8_t>& scales = sc.scales;
  codes.resize(static_cast<size_t>(n_fetched * cols * rb));
  scales.resize(static_cast<size_t>(n_fetched * cols * ns));
  Status s = fetch.wait(codes.data(), scales.data());
  if (!s.ok()) return s.with_context("Engram layer " + std::to_string(layer));
  if (skip > 0) {
    codes.erase(codes.begin(), codes.begin() + skip * rb);
    scales.erase(scales.begin(), scales.begin() + skip * ns);
  }

  // Dequantise: e4m3 * 2^k per 32 values is exact in f32 (and in bf16, as the reference casts).
  std::vector<float>& emb = sc.emb;
  emb.resize(static_cast<size_t>(n_rows * hd));
  kernels::QuantType qt;
  if (dtype_is_block_quant(w.table_dtype)) {
    // A re-quantised table (`strata quantize --engram T`): ggml's reference dequantiser per row.
    STRATA_CHECK(quant_type_of(w.table_dtype, &qt), "engram: not a block format");
    for (int64_t r = 0; r < n_rows; ++r) kernels::dequantize_row(qt, codes.data() + r * rb, emb.data() + r * hd, hd);
  } else {
    for (int64_t r = 0; r < n_rows; ++r)
      for (int64_t i = 0; i < hd; ++i)
        emb[static_cast<size_t>(r * hd + i)] =
            e4m3_to_f32(codes[static_cast<size_t>(r * hd + i)]) * e8m0_to_f32(scales[static_cast<size_t>(r * ns + i / 32)]);
  }
  if (obs) {
    obs->tensor("engram_rows_dequant", layer, emb, {n, cols, hd});
    obs->linear_input("engram.wkv", layer, -1, emb, cols * hd);
  }

  const int64_t kv_width = dim * (hc + 1);
  std::vector<float>& kv = sc.kv;
  kv.resize(static_cast<size_t>(n * kv_width));
  w.wkv.apply(emb.data(), rows, kv.data(), pool);

  std::vector<float>& prod = sc.prod;
  prod.resize(static_cast<size_t>(dim));
  const float inv_sqrt_dim = static_cast<float>(std::pow(static_cast<double>(dim), -0.5));
  for (int64_t t = 0; t < n; ++t) {
    const float* kvt = kv.data() + t * kv_width;
    const float* value = kvt + hc * dim;
    for (int ch = 0; ch < hc; ++ch) {
      float* h = x + (t * hc + ch) * dim;
      const float* key = kvt + ch * dim;
      const float* wq = w.qk_weight.data() + ch * dim;
      // Normalised per (token, stream) over dim, not jointly over the streams.
      const float rstd = rms_rsqrt(h, dim, c.norm_eps) * rms_rsqrt(key, dim, c.norm_eps);
      for (int64_t i = 0; i < dim; ++i) prod[static_cast<size_t>(i)] = h[i] * wq[i] * key[i];
      // ROUNDING: (h * w * key).sum(-1) in the reference's reduction order (model/torch_sum.h).
      float dot = torch_inner_sum(prod.data(), dim);
      dot = dot * rstd * inv_sqrt_dim;
      const float mag = std::sqrt(std::max(std::fabs(dot), 1e-6f));
      const float gate = sigmoid(std::copysign(mag, dot));
      for (int64_t i = 0; i < dim; ++i) h[i] = h[i] + gate * value[i];
    }
  }
  return Status();
}

}  // namespace strata::model
