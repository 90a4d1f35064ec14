#include "model/attention.h"

#include <algorithm>
#include <cmath>
#include <numeric>

#include "kernels/attention.h"
#include "kernels/indexer.h"
#include "kernels/quant.h"
#include "model/ops.h"

namespace strata::model {

namespace {

// Latest layer <= `layer` in `list` (the source a compressed layer reads from), -1 if none.
int latest_at_or_before(const std::vector<int>& list, int layer) {
  int best = -1;
  for (int l : list)
    if (l <= layer) best = l;
  return best;
}

// Latest index-key owner at or before `layer` (a kv source that is also an index source).
int latest_key_owner(const ModelConfig& c, int layer) {
  int best = -1;
  for (int l : c.kv_source_layers)
    if (l <= layer && c.is_index_source(l)) best = l;
  return best;
}

void rms_norm_rows(float* x, int64_t n, int64_t d, const std::vector<float>& w, double eps) {
  for (int64_t t = 0; t < n; ++t) rms_norm(x + t * d, d, w.data(), eps, x + t * d);
}

}  // namespace

void select_candidate_blocks(const float* scores, int64_t n_visible, int64_t width, int topk_blocks, int block_size,
                             uint8_t* keep) {
  std::fill(keep, keep + width, 0);
  if (n_visible <= 0) return;
  const int64_t nb = (n_visible + block_size - 1) / block_size;
  std::vector<float> bs(static_cast<size_t>(nb), -INFINITY);
  for (int64_t i = 0; i < n_visible; ++i) {
    float& b = bs[static_cast<size_t>(i / block_size)];
    b = std::max(b, scores[i]);
  }
  // The block holding the newest position is only partly filled: always keep it.
  bs[static_cast<size_t>((n_visible - 1) / block_size)] = INFINITY;
  std::vector<int32_t> order(static_cast<size_t>(nb));
  std::iota(order.begin(), order.end(), 0);
  const int64_t m = std::min<int64_t>(topk_blocks, nb);
  std::partial_sort(order.begin(), order.begin() + m, order.end(), [&](int32_t a, int32_t b) {
    return bs[static_cast<size_t>(a)] > bs[static_cast<size_t>(b)] || (bs[static_cast<size_t>(a)] == bs[static_cast<size_t>(b)] && a < b);
  });
  for (int64_t i = 0; i < m; ++i) {
    const int32_t blk = order[static_cast<size_t>(i)];
    if (bs[static_cast<size_t>(blk)] == -INFINITY) continue;
    // Whole blocks are marked, clipped to `width` (positions past n_visible are masked anyway).
    const int64_t b0 = static_cast<int64_t>(blk) * block_size, b1 = std::min<int64_t>(b0 + block_size, width);
    for (int64_t j = b0; j < b1; ++j) keep[j] = 1;
  }
}

int64_t compress_chunk(const ModelConfig& c, int layer, const AttentionWeights& w, const float* x, int64_t n,
                       int64_t start, LayerKvCache& lc, std::vector<float>* latents, ThreadPool* pool) {
  const int ratio = c.compress_ratio(layer);
  const int64_t D = c.head_dim;
  latents->clear();
  std::vector<float> kv(static_cast<size_t>(n * D));
  w.comp_wkv.apply(x, n, kv.data(), pool);
  const int64_t first_group = start / ratio;  // group g completes at g*ratio + ratio-1 >= start
  if (ratio == 1) {
    // One token per group: nothing to pool (model.py Compressor, ratio 1).
    latents->resize(static_cast<size_t>(n * D));
    for (int64_t t = 0; t < n; ++t) rms_norm(kv.data() + t * D, D, w.comp_norm.data(), c.norm_eps, latents->data() + t * D);
    return start;
  }
  std::vector<float> score(static_cast<size_t>(n * D));
  w.comp_wgate.apply(x, n, score.data(), pool);
  if (lc.kv_state.empty()) {
    lc.kv_state.assign(static_cast<size_t>(ratio * D), 0.0f);
    lc.score_state.assign(static_cast<size_t>(ratio * D), -INFINITY);
  }
  std::vector<float> pooled(static_cast<size_t>(D));
  for (int64_t t = 0; t < n; ++t) {
    const int64_t pos = start + t;
    const int slot = static_cast<int>(pos % ratio);
    std::copy(kv.begin() + t * D, kv.begin() + (t + 1) * D, lc.kv_state.begin() + slot * D);
    std::copy(score.begin() + t * D, score.begin() + (t + 1) * D, lc.score_state.begin() + slot * D);
    if (slot != ratio - 1) continue;
    // Softmax over the group's tokens, per channel, then the gated sum (model.py Compressor.forward).
    for (int64_t d = 0; d < D; ++d) {
      float mx = -INFINITY;
      for (int s = 0; s < ratio; ++s) mx = std::max(mx, lc.score_state[static_cast<size_t>(s * D + d)]);
      float den = 0.0f;
      for (int s = 0; s < ratio; ++s) den += std::exp(lc.score_state[static_cast<size_t>(s * D + d)] - mx);
      float acc = 0.0f;
      for (int s = 0; s < ratio; ++s)
        acc += lc.kv_state[static_cast<size_t>(s * D + d)] * (std::exp(lc.score_state[static_cast<size_t>(s * D + d)] - mx) / den);
      pooled[static_cast<size_t>(d)] = acc;
    }
    const size_t off = latents->size();
    latents->resize(off + static_cast<size_t>(D));
    rms_norm(pooled.data(), D, w.comp_norm.data(), c.norm_eps, latents->data() + off);
  }
  return first_group;
}

namespace {

// Index keys of new latents: k = RoPE(k_norm(wk(latent))) then FP4 (ue8m0 per 32) (Indexer.forward).
void append_index_keys(const ModelConfig& c, const AttentionWeights& w, const RopeTable& rope, const float* latents,
                       int64_t n_new, int64_t first_group, int ratio, LayerKvCache& lc, ThreadPool* pool) {
  const int64_t id = c.index_head_dim, rd = c.rope_head_dim;
  std::vector<float> k(static_cast<size_t>(n_new * id));
  w.idx_wk.apply(latents, n_new, k.data(), pool);
  for (int64_t g = 0; g < n_new; ++g) {
    float* kg = k.data() + g * id;
    rms_norm(kg, id, w.idx_k_norm.data(), c.norm_eps, kg);
    rope.apply(kg + id - rd, (first_group + g) * ratio);  // a latent sits at its group's first token
    // ROUNDING: FP4 E2M1 with a ue8m0 scale per 32 (model.py Indexer.forward, fp4_act_quant), stored
    // as codes + scales (decoding gives the fake-quantised values bit for bit).
    encode_index_key_row(kg, id, lc.index_keys.append_row());
  }
}

// Indexer scoring and selection for every query of the chunk (model.py Indexer.forward).
void run_indexer(const AttentionContext& ctx, int layer, const AttentionWeights& w, const float* x, const float* qr,
                 int64_t n, int64_t start) {
  const ModelConfig& c = ctx.c;
  const int ratio = c.compress_ratio(layer);
  const int ih = c.index_n_heads;
  const int64_t id = c.index_head_dim, rd = c.rope_head_dim;
  const int K = c.index_topk;
  const int owner = latest_key_owner(c, layer);
  const LayerKvCache& key_cache = ctx.cache.layers[static_cast<size_t>(owner)];

  std::vector<float> q(static_cast<size_t>(n * ih * id));
  w.idx_wq_b.apply(qr, n, q.data(), ctx.pool);
  std::vector<float> wts(static_cast<size_t>(n * ih));
  w.idx_weights_proj.apply(x, n, wts.data(), ctx.pool);
  // ROUNDING: the python scalar softmax_scale * n_heads^-0.5 multiplies an f32 tensor as f32.
  const float wscale = static_cast<float>(std::pow(static_cast<double>(id), -0.5) * std::pow(static_cast<double>(ih), -0.5));
  for (auto& v : wts) v *= wscale;

  AttentionShared& sh = ctx.shared;
  const int64_t max_vis = (start + n) / ratio;
  STRATA_CHECK(key_cache.index_keys.size() >= max_vis, "indexer: index keys behind the queries");
  // The owner's keys decoded once for the chunk (exact: the stored FP4 values).
  std::vector<float> keys(static_cast<size_t>(max_vis * id));
  for (int64_t g = 0; g < max_vis; ++g) key_cache.index_key(g, id, keys.data() + g * id);
  sh.topk.assign(static_cast<size_t>(n * K), -1);
  sh.have_topk = true;
  const bool cand_source = c.is_candidate_source(layer);
  const bool use_cand = c.uses_candidates(layer);
  if (cand_source) {
    sh.cand_width = max_vis;
    sh.candidates.assign(static_cast<size_t>(n * max_vis), 0);
    sh.have_candidates = true;
  }
  STRATA_CHECK(!use_cand || sh.have_candidates, "indexer uses candidates but no candidate source ran");

  auto body = [&](int64_t t0, int64_t t1) {
    std::vector<float> score(static_cast<size_t>(std::max<int64_t>(max_vis, 1)));
    for (int64_t t = t0; t < t1; ++t) {
      const int64_t pos = start + t;
      float* qt = q.data() + t * ih * id;
      for (int h = 0; h < ih; ++h) ctx.rope.apply(qt + h * id + id - rd, pos);
      // ROUNDING: FP4 E2M1 with a ue8m0 scale per 32 on the index queries (Indexer.forward).
      kernels::fp4_quant_e8m0_inplace(qt, ih * id, 32);
      const int64_t n_vis = (pos + 1) / ratio;  // groups complete at this query
      const float* wt = wts.data() + t * ih;
      // score[g] = sum_h w_h * relu(q_h . k_g), heads and dims in order (kernels/indexer.h: bit for bit
      // the scalar loop at every level; keys split over the pool in decode).
      kernels::index_scores(kernels::IndexScoreArgs{qt, wt, ih, id, keys.data(), id, n_vis, score.data()}, ctx.pool);
      if (cand_source) {
        select_candidate_blocks(score.data(), n_vis, sh.cand_width, c.candidate_topk_blocks, c.candidate_block_size,
                                sh.candidates.data() + t * sh.cand_width);
      } else if (use_cand) {
        const uint8_t* keep = sh.candidates.data() + t * sh.cand_width;
        for (int64_t g = 0; g < n_vis; ++g)
          if (!keep[g]) score[static_cast<size_t>(g)] = -INFINITY;
      }
      kernels::topk_ascending(score.data(), n_vis, K, sh.topk.data() + t * K);  // = topk_ascending, O(n)
    }
  };
  if (ctx.pool && n > 1) ctx.pool->parallel_for(n, body);
  else body(0, n);

  if (ctx.obs) {
    std::vector<int64_t> ids(sh.topk.begin(), sh.topk.end());
    ctx.obs->ids("indexer_topk", layer, ids, {n, K});
    if (cand_source) {
      std::vector<int64_t> m(sh.candidates.begin(), sh.candidates.end());
      ctx.obs->ids("candidate_mask", layer, m, {n, sh.cand_width});
    }
  }
}

// The KV source's compressor for positions [start, start+n): appends the latents of every group
// that completes to the compressed cache (RoPE'd, FP4) and, at index-key owners, their index keys.
// Advances the compressor frontier to start+n.
void update_compressed(const AttentionContext& ctx, int layer, const AttentionWeights& w, const float* x, int64_t n,
                       int64_t start) {
  const ModelConfig& c = ctx.c;
  const int64_t D = c.head_dim, rd = c.rope_head_dim;
  const int ratio = c.compress_ratio(layer);
  LayerKvCache& lc = ctx.cache.layers[static_cast<size_t>(layer)];
  STRATA_CHECK(lc.comp_pos == start, "compressor frontier is not at the chunk start");
  std::vector<float> latents;
  const int64_t first = compress_chunk(c, layer, w, x, n, start, lc, &latents, ctx.pool);
  const int64_t n_new = static_cast<int64_t>(latents.size()) / D;
  if (ctx.obs && n_new > 0) ctx.obs->tensor("compressor_latent", layer, latents, {n_new, D});
  // The indexer needs the latent before RoPE, so index keys come first (model.py _compress_kv).
  if (c.owns_index_keys(layer) && n_new > 0)
    append_index_keys(c, w, ctx.rope, latents.data(), n_new, first, ratio, lc, ctx.pool);
  for (int64_t g = 0; g < n_new; ++g) {
    float* lg = latents.data() + g * D;
    ctx.rope.apply(lg + D - rd, (first + g) * ratio);
    // ROUNDING: FP4 E2M1 with an E4M3 scale per 16 (model.py _compress_kv fp4_act_quant), stored as
    // codes + scales; readers decode the exact fake-quantised values.
    encode_compressed_row(lg, D, lc.compressed.append_row());
  }
  lc.comp_pos = start + n;
}

}  // namespace

void attention_compress(const AttentionContext& ctx, int layer, const AttentionWeights& w, const float* x, int64_t n,
                        int64_t start) {
  if (ctx.c.compress_ratio(layer) > 0 && ctx.c.is_kv_source(layer)) update_compressed(ctx, layer, w, x, n, start);
}

void attention_forward(const AttentionContext& ctx, int layer, const AttentionWeights& w, const float* x, int64_t n,
                       int64_t start, float* out) {
  const ModelConfig& c = ctx.c;
  const int H = c.n_heads;
  const int64_t D = c.head_dim, rd = c.rope_head_dim, win = c.window_size, qrank = c.q_lora_rank;
  const int ratio = c.compress_ratio(layer);
  LayerKvCache& lc = ctx.cache.layers[static_cast<size_t>(layer)];
  STRATA_CHECK(static_cast<int64_t>(lc.window_pos.size()) == win, "KvCache was not shaped for this config");

  // Queries: q = wq_b(q_norm(wq_a(x))), RoPE on the tail of every head. No per-head q re-norm in V4.1.
  std::vector<float> qr(static_cast<size_t>(n * qrank));
  std::vector<float> kv(static_cast<size_t>(n * D));
  if (w.wq_a.kind == Linear::Kind::kFp8 && w.wkv.kind == Linear::Kind::kFp8) {
    // wq_a and wkv read the same x: in decode one pool pass and one activation quantisation for both.
    const kernels::LinearJob<kernels::Fp8Weight> first[] = {{x, n, w.wq_a.fp8, qr.data()}, {x, n, w.wkv.fp8, kv.data()}};
    kernels::linear_fp8_batch(first, ctx.pool);
  } else {
    w.wq_a.apply(x, n, qr.data(), ctx.pool);
    w.wkv.apply(x, n, kv.data(), ctx.pool);
  }
  rms_norm_rows(qr.data(), n, qrank, w.q_norm, c.norm_eps);
  std::vector<float> q(static_cast<size_t>(n * H * D));
  w.wq_b.apply(qr.data(), n, q.data(), ctx.pool);
  for (int64_t t = 0; t < n; ++t)
    for (int h = 0; h < H; ++h) ctx.rope.apply(q.data() + (t * H + h) * D + D - rd, start + t);

  // Window KV: kv_norm(wkv(x)), RoPE, then E4M3 over the whole post-RoPE vector. The chunk attends
  // to the decoded codes, which are what the ring keeps.
  const int64_t wrow = window_row_bytes(D);
  std::vector<uint8_t> kvq(static_cast<size_t>(n * wrow));
  rms_norm_rows(kv.data(), n, D, w.kv_norm, c.norm_eps);
  for (int64_t t = 0; t < n; ++t) {
    ctx.rope.apply(kv.data() + t * D + D - rd, start + t);
    // ROUNDING: FP8 E4M3, ue8m0 per 32 (model.py Attention._window_kv act_quant in place).
    encode_window_row(kv.data() + t * D, D, kvq.data() + t * wrow);
    decode_window_row(kvq.data() + t * wrow, D, kv.data() + t * D);
  }
  // Ring positions the chunk can see (before `start`), decoded once. A slot whose position is not
  // the one a query wants is skipped: after bounded replay the decoder's ring has no KV for the
  // positions it did not run (the approximation replay makes).
  const int64_t ring_first = std::max<int64_t>(0, start - win + 1);
  std::vector<float> ring(static_cast<size_t>((start - ring_first) * D));
  for (int64_t p = ring_first; p < start; ++p)
    if (lc.window_pos[static_cast<size_t>(p % win)] == p) lc.window_row(p % win, D, ring.data() + (p - ring_first) * D);

  // Compressed KV and the per-query selection.
  const LayerKvCache* comp = nullptr;
  const int32_t* sel = nullptr;
  const int K = c.index_topk;
  if (ratio > 0) {
    // A KV source compresses its chunk unless bounded replay already did (Model::forward runs the
    // first decoder layer's compressor over every prompt token, then the decoder over the tail).
    if (c.is_kv_source(layer) && lc.comp_pos == start) update_compressed(ctx, layer, w, x, n, start);
    STRATA_CHECK(!c.is_kv_source(layer) || lc.comp_pos == start + n, "compressor frontier is not at the chunk end");
    if (c.is_index_source(layer)) run_indexer(ctx, layer, w, x, qr.data(), n, start);
    STRATA_CHECK(ctx.shared.have_topk, "compressed layer without an index source before it");
    const int src = latest_at_or_before(c.kv_source_layers, layer);
    comp = &ctx.cache.layers[static_cast<size_t>(src)];
    sel = ctx.shared.topk.data();
  }

  // The compressed entries the chunk's queries selected, decoded once each (queries of a prefill
  // chunk share most of their selections): slot[g] indexes union_rows. Past a cap on the union's
  // size (very long contexts) each query decodes its own selection instead.
  std::vector<int32_t> slot;
  std::vector<float> union_rows;
  if (sel && n > 1) {
    const int64_t n_groups = comp->compressed.size();
    const int64_t cap = std::max<int64_t>(4096, (int64_t{64} << 20) / (D * static_cast<int64_t>(sizeof(float))));
    slot.assign(static_cast<size_t>(n_groups), -1);
    std::vector<int32_t> groups;
    for (int64_t i = 0; i < n * K && static_cast<int64_t>(groups.size()) <= cap; ++i) {
      const int32_t g = sel[i];
      if (g >= 0 && slot[static_cast<size_t>(g)] < 0) {
        slot[static_cast<size_t>(g)] = static_cast<int32_t>(groups.size());
        groups.push_back(g);
      }
    }
    if (static_cast<int64_t>(groups.size()) > cap) {
      slot.clear();
    } else {
      union_rows.resize(groups.size() * static_cast<size_t>(D));
      auto dec = [&](int64_t i0, int64_t i1) {
        for (int64_t i = i0; i < i1; ++i) comp->compressed_row(groups[static_cast<size_t>(i)], D, union_rows.data() + i * D);
      };
      if (ctx.pool) ctx.pool->parallel_for(static_cast<int64_t>(groups.size()), dec);
      else dec(0, static_cast<int64_t>(groups.size()));
    }
  }

  // Sparse attention with sinks, one query at a time (sparse_attn shim): entries are the window
  // positions and the selected compressed groups; K = V = the entry.
  std::vector<float> o(static_cast<size_t>(n * H * D));
  const float scale = static_cast<float>(1.0 / std::sqrt(static_cast<double>(D)));
  auto body = [&](int64_t t0, int64_t t1) {
    std::vector<const float*> ent;
    // This query's compressed entries, decoded here when there is no chunk-wide union.
    std::vector<float> sel_rows(sel && slot.empty() ? static_cast<size_t>(K * D) : 0);
    for (int64_t t = t0; t < t1; ++t) {
      const int64_t pos = start + t;
      ent.clear();
      for (int64_t p = std::max<int64_t>(0, pos - win + 1); p <= pos; ++p) {
        if (p >= start) ent.push_back(kv.data() + (p - start) * D);
        else if (lc.window_pos[static_cast<size_t>(p % win)] == p) ent.push_back(ring.data() + (p - ring_first) * D);
      }
      if (sel)
        for (int k = 0; k < K; ++k) {
          const int32_t g = sel[t * K + k];
          if (g < 0) continue;
          if (!slot.empty()) {
            ent.push_back(union_rows.data() + static_cast<int64_t>(slot[static_cast<size_t>(g)]) * D);
            continue;
          }
          float* row = sel_rows.data() + static_cast<int64_t>(k) * D;
          comp->compressed_row(g, D, row);
          ent.push_back(row);
        }
      const int64_t m = static_cast<int64_t>(ent.size());
      // Scores, softmax with the sink, weighted sum: kernels/attention.h, bit for bit the scalar loop
      // (heads in vector lanes; heads split over the pool in decode).
      kernels::sparse_attention(kernels::SparseAttentionArgs{q.data() + t * H * D, H, D, ent.data(), m,
                                                             w.attn_sink.data(), scale, o.data() + t * H * D},
                                ctx.pool);
      for (int h = 0; h < H; ++h) {
        float* oh = o.data() + (t * H + h) * D;
        // Remove the query's rotation from the output's RoPE tail (apply_rotary_emb inverse).
        ctx.rope.apply(oh + D - rd, pos, /*inverse=*/true);
      }
    }
  };
  if (ctx.pool && n > 1) ctx.pool->parallel_for(n, body);
  else body(0, n);

  // The newest window_size tokens of the chunk go into the ring (slot = pos % window), as bytes.
  for (int64_t t = std::max<int64_t>(0, n - win); t < n; ++t) {
    const int64_t slot = (start + t) % win;
    std::copy_n(kvq.begin() + t * wrow, wrow, lc.window.begin() + slot * wrow);
    lc.window_pos[static_cast<size_t>(slot)] = start + t;
  }

  attention_output(c, w, o.data(), n, out, ctx.pool);
}

void attention_output(const ModelConfig& c, const AttentionWeights& w, const float* o, int64_t n, float* out,
                      ThreadPool* pool) {
  const int H = c.n_heads;
  const int64_t D = c.head_dim;
  // Grouped low-rank output: group g's heads through wo_a[g] (bf16, no activation quantisation),
  // then wo_b (FP8).
  const int G = c.o_groups;
  const int64_t gin = H * D / G, R = c.o_lora_rank;
  std::vector<float> ocat(static_cast<size_t>(n * G * R));
  if (n == 1 && w.wo_a.kind == Linear::Kind::kBf16) {
    // Decode: group g's heads are a contiguous slice of o and its output one of ocat, so the groups
    // run as one batch (one pool pass instead of o_groups); same bits as the loop below.
    std::vector<kernels::LinearJob<kernels::Bf16Weight>> parts;
    for (int g = 0; g < G; ++g)
      parts.push_back({o + g * gin, 1, kernels::Bf16Weight{w.wo_a.bf16.w + g * R * gin, R, gin, w.wo_a.bf16.blocked},
                       ocat.data() + g * R});
    kernels::linear_bf16_batch(parts, pool);
    w.wo_b.apply(ocat.data(), n, out, pool);
    return;
  }
  std::vector<float> og(static_cast<size_t>(n * gin)), yg(static_cast<size_t>(n * R));
  for (int g = 0; g < G; ++g) {
    for (int64_t t = 0; t < n; ++t) std::copy_n(o + t * H * D + g * gin, gin, og.data() + t * gin);
    Linear part = w.wo_a;
    part.out = R;
    // Group g is rows [g R, (g+1) R): at the same offset in the blocked layout (R % 16 == 0).
    part.bf16 = kernels::Bf16Weight{w.wo_a.bf16.w + g * R * gin, R, gin, w.wo_a.bf16.blocked};
    part.f32 = kernels::F32Weight{w.wo_a.f32.w ? w.wo_a.f32.w + g * R * gin : nullptr, R, gin};
    part.apply(og.data(), n, yg.data(), pool);
    for (int64_t t = 0; t < n; ++t) std::copy_n(yg.data() + t * R, R, ocat.data() + t * G * R + g * R);
  }
  w.wo_b.apply(ocat.data(), n, out, pool);
}

}  // namespace strata::model
