#include "model/dspark.h"

#include <algorithm>
#include <cmath>

#include "core/dtype.h"
#include "kernels/attention.h"
#include "kernels/linear.h"
#include "model/attention.h"
#include "model/ops.h"

namespace strata::model {

namespace {

void norm_rows(float* x, int64_t n, int64_t d, const std::vector<float>& w, double eps) {
  for (int64_t t = 0; t < n; ++t) rms_norm(x + t * d, d, w.data(), eps, x + t * d);
}

// k = kv_norm(wkv(x)) with RoPE at start.. on the tail: [n, head_dim], before the FP8 rounding.
void stage_kv(const ModelConfig& c, const AttentionWeights& w, const RopeTable& rope, const float* x, int64_t n,
              int64_t start, std::vector<float>* kv, ThreadPool* pool) {
  const int64_t D = c.head_dim, rd = c.rope_head_dim;
  kv->resize(static_cast<size_t>(n * D));
  w.wkv.apply(x, n, kv->data(), pool);
  norm_rows(kv->data(), n, D, w.kv_norm, c.norm_eps);
  for (int64_t t = 0; t < n; ++t) rope.apply(kv->data() + t * D + D - rd, start + t);
}

}  // namespace

DSparkState new_dspark_state(const ModelConfig& c) {
  DSparkState s;
  if (c.dspark_block_size <= 0) return s;
  s.stages.resize(static_cast<size_t>(c.n_mtp_layers));
  for (LayerKvCache& r : s.stages) {
    r.window.assign(static_cast<size_t>(c.window_size * window_row_bytes(c.head_dim)), 0);
    r.window_pos.assign(static_cast<size_t>(c.window_size), -1);
  }
  return s;
}

void DSparkFeatures::capture(int layer, const float* x, int64_t n) {
  const int64_t dim = c_.dim;
  const int hc = c_.hc_mult;
  for (size_t k = 0; k < per_target_.size(); ++k) {
    if (c_.dspark_target_layer_ids[k] != layer) continue;
    std::vector<float>& f = per_target_[k];
    f.resize(static_cast<size_t>(n * dim));
    // ROUNDING: h.mean(dim=2) over hc_mult f32 values, summed in stream order, then divided.
    for (int64_t t = 0; t < n; ++t)
      for (int64_t i = 0; i < dim; ++i) {
        float s = 0.0f;
        for (int h = 0; h < hc; ++h) s += x[(t * hc + h) * dim + i];
        f[static_cast<size_t>(t * dim + i)] = s / static_cast<float>(hc);
      }
  }
}

Status DSparkFeatures::assemble(int64_t rows, std::vector<float>* out) const {
  const int64_t dim = c_.dim, nt = static_cast<int64_t>(per_target_.size());
  out->assign(static_cast<size_t>(rows * dim * nt), 0.0f);
  for (int64_t k = 0; k < nt; ++k) {
    const std::vector<float>& f = per_target_[static_cast<size_t>(k)];
    const int64_t have = static_cast<int64_t>(f.size()) / dim;
    if (have < rows)
      return Internal("DSpark target layer " + std::to_string(c_.dspark_target_layer_ids[static_cast<size_t>(k)]) +
                      " ran " + std::to_string(have) + " tokens, " + std::to_string(rows) + " needed");
    // A target before a bounded-replay boundary saw the whole chunk: its last `rows` are the tail.
    for (int64_t t = 0; t < rows; ++t)
      std::copy_n(f.data() + (have - rows + t) * dim, dim, out->data() + (t * nt + k) * dim);
  }
  return Status();
}

void dspark_main_x(const ModelConfig& c, const DSparkWeights& w, const float* main_hidden, int64_t n, float* main_x,
                   ThreadPool* pool) {
  w.main_proj.apply(main_hidden, n, main_x, pool);
  norm_rows(main_x, n, c.dim, w.main_norm, c.norm_eps);
}

void dspark_write_ring(const ModelConfig& c, const AttentionWeights& w, const RopeTable& rope, const float* main_x,
                       int64_t n, int64_t start, LayerKvCache& ring, ThreadPool* pool) {
  const int64_t D = c.head_dim, win = c.window_size, wrow = window_row_bytes(D);
  // Only the newest window_size positions survive in the ring.
  const int64_t skip = std::max<int64_t>(0, n - win);
  std::vector<float> kv;
  stage_kv(c, w, rope, main_x + skip * c.dim, n - skip, start + skip, &kv, pool);
  for (int64_t t = 0; t < n - skip; ++t) {
    const int64_t pos = start + skip + t, slot = pos % win;
    // ROUNDING: FP8 E4M3, ue8m0 per 32 over the whole post-RoPE vector (act_quant in place on main_kv).
    encode_window_row(kv.data() + t * D, D, ring.window.data() + slot * wrow);
    ring.window_pos[static_cast<size_t>(slot)] = pos;
  }
}

void dspark_attention(const ModelConfig& c, const AttentionWeights& w, const RopeTable& rope, const float* x,
                      int64_t block, int64_t pos, const LayerKvCache& ring, ThreadPool* pool, float* out) {
  const int H = c.n_heads;
  const int64_t D = c.head_dim, rd = c.rope_head_dim, win = c.window_size, qrank = c.q_lora_rank;
  const int64_t first = pos + 1;  // the block's first position

  // Queries: wq_b(q_norm(wq_a(x))), RoPE on every head's tail (no per-head re-norm).
  std::vector<float> qr(static_cast<size_t>(block * qrank)), q(static_cast<size_t>(block * H * D));
  w.wq_a.apply(x, block, qr.data(), pool);
  norm_rows(qr.data(), block, qrank, w.q_norm, c.norm_eps);
  w.wq_b.apply(qr.data(), block, q.data(), pool);
  for (int64_t t = 0; t < block; ++t)
    for (int h = 0; h < H; ++h) rope.apply(q.data() + (t * H + h) * D + D - rd, first + t);

  // The block's keys (= values), FP8-rounded like the ring's.
  std::vector<float> kv;
  stage_kv(c, w, rope, x, block, first, &kv, pool);
  std::vector<uint8_t> row(static_cast<size_t>(window_row_bytes(D)));
  for (int64_t t = 0; t < block; ++t) {
    // ROUNDING: FP8 E4M3, ue8m0 per 32 (act_quant in place on the block's kv).
    encode_window_row(kv.data() + t * D, D, row.data());
    decode_window_row(row.data(), D, kv.data() + t * D);
  }

  // Entries: ring slots 0 .. min(window, pos + 1) - 1 in slot order, then the block's keys
  // (get_dspark_topk_idxs: the same list for every query of the block). A slot is used only if it
  // holds a position of the window (pos - window, pos]: after a seeding gap (bounded replay) older
  // entries may remain, and the reference's ring never holds those.
  const int64_t n_ring = std::min(win, pos + 1);
  std::vector<float> ring_rows(static_cast<size_t>(n_ring * D));
  std::vector<const float*> ent;
  for (int64_t s = 0; s < n_ring; ++s) {
    const int64_t p = ring.window_pos[static_cast<size_t>(s)];
    if (p < 0 || p > pos || p <= pos - win) continue;
    ring.window_row(s, D, ring_rows.data() + s * D);
    ent.push_back(ring_rows.data() + s * D);
  }
  for (int64_t t = 0; t < block; ++t) ent.push_back(kv.data() + t * D);

  std::vector<float> o(static_cast<size_t>(block * H * D));
  const float scale = static_cast<float>(1.0 / std::sqrt(static_cast<double>(D)));
  for (int64_t t = 0; t < block; ++t) {
    kernels::sparse_attention(kernels::SparseAttentionArgs{q.data() + t * H * D, H, D, ent.data(),
                                                           static_cast<int64_t>(ent.size()), w.attn_sink.data(), scale,
                                                           o.data() + t * H * D},
                              pool);
    for (int h = 0; h < H; ++h) rope.apply(o.data() + (t * H + h) * D + D - rd, first + t, /*inverse=*/true);
  }
  attention_output(c, w, o.data(), block, out, pool);
}

void dspark_head(const ModelConfig& c, const ModelWeights& w, const float* h, int32_t first, ThreadPool* pool,
                 DSparkDraft* d, const DSparkStop& stop) {
  const int64_t B = c.dspark_block_size, dim = c.dim, V = c.vocab_size, r = c.dspark_markov_rank;
  const DSparkWeights& ds = w.dspark;
  std::vector<float> normed(h, h + B * dim);
  norm_rows(normed.data(), B, dim, ds.norm, c.norm_eps);
  // Row by row only when a confidence can stop the head; otherwise every kept row at once.
  const bool early = stop.min_conf > 0.0f;
  const int64_t rows = stop.max_drafts >= 0 ? std::min(stop.max_drafts, B) : B;
  // Logits of rows [i0, i1) (DECISION: as for the main head (model.cpp), logits feed only an
  // argmax: free summation order).
  d->logits.assign(static_cast<size_t>(rows * V), 0.0f);
  auto head_rows = [&](int64_t i0, int64_t i1) {
    if (w.head.kind == Linear::Kind::kBf16) {
      kernels::linear_bf16_any_order(normed.data() + i0 * dim, i1 - i0, w.head.bf16, d->logits.data() + i0 * V, pool);
    } else {
      w.head.apply(normed.data() + i0 * dim, i1 - i0, d->logits.data() + i0 * V, pool);
    }
  };
  if (!early) head_rows(0, rows);
  d->ids.assign(static_cast<size_t>(rows + 1), 0);
  d->ids[0] = first;
  d->confidence.assign(static_cast<size_t>(rows), 0.0f);
  std::vector<float> emb(static_cast<size_t>(r)), bias(static_cast<size_t>(V));
  for (int64_t i = 0; i < rows; ++i) {
    // Markov head: the previous token's low-rank embedding, projected to a logit bias.
    const int64_t prev = d->ids[static_cast<size_t>(i)];
    if (ds.markov_embed.dtype == DType::kBF16) {
      const uint16_t* e = ds.markov_embed.as<uint16_t>() + prev * r;
      for (int64_t j = 0; j < r; ++j) emb[static_cast<size_t>(j)] = bf16_to_f32(e[j]);
    } else {
      std::copy_n(ds.markov_embed.as<float>() + prev * r, r, emb.data());
    }
    // Confidence: proj . [hidden before the norm, markov_embed], in f32.
    float acc = 0.0f;
    const float* hi = h + i * dim;
    for (int64_t j = 0; j < dim; ++j) acc += ds.confidence_proj[static_cast<size_t>(j)] * hi[j];
    for (int64_t j = 0; j < r; ++j) acc += ds.confidence_proj[static_cast<size_t>(dim + j)] * emb[static_cast<size_t>(j)];
    d->confidence[static_cast<size_t>(i)] = acc;
    if (early && 1.0f / (1.0f + std::exp(-acc)) < stop.min_conf) {  // this draft would be dropped
      d->ids.resize(static_cast<size_t>(i + 1));
      d->logits.resize(static_cast<size_t>(i * V));
      d->confidence.resize(static_cast<size_t>(i + 1));
      return;
    }
    if (early) head_rows(i, i + 1);
    ds.markov_head.apply(emb.data(), 1, bias.data(), pool);
    float* li = d->logits.data() + i * V;
    int64_t best = 0;
    for (int64_t v = 0; v < V; ++v) {
      li[v] += bias[static_cast<size_t>(v)];
      if (li[v] > li[best]) best = v;  // argmax, lowest id on ties (torch.argmax)
    }
    d->ids[static_cast<size_t>(i + 1)] = static_cast<int32_t>(best);
  }
}

}  // namespace strata::model
