#include "model/attention.h"

#include <algorithm>
#include <cmath>
#include <memory>
#include <numeric>

#include "kernels/attention.h"
#include "kernels/indexer.h"
#include "kernels/quant.h"
#include "model/ops.h"

namespace strata::model {

namespace {

// Room for n values in a scratch vector that only grows: filled where it grows (once), never
// again, so the rows written before they are read cost no memset per layer and token (a lone
// query's selection is index_topk x head_dim floats, 256 KiB on the 8 GB scaled checkpoint).
template <class T>
T* room(std::vector<T>& v, int64_t n) {
  if (static_cast<int64_t>(v.size()) < n) v.resize(static_cast<size_t>(n));
  return v.data();
}

// v = n copies of `value`, its capacity grown geometrically: buffers that grow with the context by
// one group every few tokens (assign alone would reallocate at each new group).
template <class T>
void assign_grow(std::vector<T>& v, size_t n, T value) {
  if (v.capacity() < n) v.reserve(std::max(n, 2 * v.capacity()));
  v.assign(n, value);
}

void rms_norm_rows(float* x, int64_t n, int64_t d, const std::vector<float>& w, double eps) {
  for (int64_t t = 0; t < n; ++t) rms_norm(x + t * d, d, w.data(), eps, x + t * d);
}

}  // namespace

void select_candidate_blocks(const float* scores, int64_t n_visible, int64_t width, int topk_blocks, int block_size,
                             uint8_t* keep, std::vector<float>* block_max, std::vector<int32_t>* order_buf) {
  std::fill(keep, keep + width, 0);
  if (n_visible <= 0) return;
  const int64_t nb = (n_visible + block_size - 1) / block_size;
  std::vector<float> bs_local;
  std::vector<float>& bs = block_max ? *block_max : bs_local;
  assign_grow(bs, static_cast<size_t>(nb), -INFINITY);
  for (int64_t i = 0; i < n_visible; ++i) {
    float& b = bs[static_cast<size_t>(i / block_size)];
    b = std::max(b, scores[i]);
  }
  // The block holding the newest position is only partly filled: always keep it.
  bs[static_cast<size_t>((n_visible - 1) / block_size)] = INFINITY;
  std::vector<int32_t> order_local;
  std::vector<int32_t>& order = order_buf ? *order_buf : order_local;
  order.resize(static_cast<size_t>(nb));
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
  const int64_t D = c.head_dim;
  std::vector<float> kv(static_cast<size_t>(n * D)), score;
  w.comp_wkv.apply(x, n, kv.data(), pool);
  if (c.compress_ratio(layer) > 1) {
    score.resize(static_cast<size_t>(n * D));
    w.comp_wgate.apply(x, n, score.data(), pool);
  }
  return compress_rows(c, layer, w, kv.data(), score.data(), n, start, lc, latents);
}

int64_t compress_rows(const ModelConfig& c, int layer, const AttentionWeights& w, const float* kv, const float* score,
                      int64_t n, int64_t start, LayerKvCache& lc, std::vector<float>* latents, KvUndoLog* undo) {
  const int ratio = c.compress_ratio(layer);
  const int64_t D = c.head_dim;
  latents->clear();
  const int64_t first_group = start / ratio;  // group g completes at g*ratio + ratio-1 >= start
  if (ratio == 1) {
    // One token per group: nothing to pool (model.py Compressor, ratio 1).
    latents->resize(static_cast<size_t>(n * D));
    for (int64_t t = 0; t < n; ++t) rms_norm(kv + t * D, D, w.comp_norm.data(), c.norm_eps, latents->data() + t * D);
    return start;
  }
  if (lc.kv_state.empty()) {
    lc.kv_state.assign(static_cast<size_t>(ratio * D), 0.0f);
    lc.score_state.assign(static_cast<size_t>(ratio * D), -INFINITY);
  }
  for (int64_t t = 0; t < n; ++t) {
    const int64_t pos = start + t;
    const int slot = static_cast<int>(pos % ratio);
    if (undo) undo->save_compressor(layer, pos, lc);
    std::copy(kv + t * D, kv + (t + 1) * D, lc.kv_state.begin() + slot * D);
    std::copy(score + t * D, score + (t + 1) * D, lc.score_state.begin() + slot * D);
    if (slot != ratio - 1) continue;
    // Softmax over the group's tokens, per channel, then the gated sum (model.py Compressor.forward),
    // pooled in place in the new latent row, then normed in place.
    const size_t off = latents->size();
    latents->resize(off + static_cast<size_t>(D));
    float* pooled = latents->data() + off;
    for (int64_t d = 0; d < D; ++d) {
      float mx = -INFINITY;
      for (int s = 0; s < ratio; ++s) mx = std::max(mx, lc.score_state[static_cast<size_t>(s * D + d)]);
      float den = 0.0f;
      for (int s = 0; s < ratio; ++s) den += std::exp(lc.score_state[static_cast<size_t>(s * D + d)] - mx);
      float acc = 0.0f;
      for (int s = 0; s < ratio; ++s)
        acc += lc.kv_state[static_cast<size_t>(s * D + d)] * (std::exp(lc.score_state[static_cast<size_t>(s * D + d)] - mx) / den);
      pooled[d] = acc;
    }
    rms_norm(pooled, D, w.comp_norm.data(), c.norm_eps, pooled);
  }
  return first_group;
}

namespace {

// Index keys of new latents: k = RoPE(k_norm(wk(latent))) then FP4 (ue8m0 per 32) (Indexer.forward).
// `path`: the entry's regime. A decode entry's keys always take the matvec, so several decode rows
// in one entry (a speculative verification) store the keys that one-token steps would; prompt
// entries keep the by-count choice.
void append_index_keys(const ModelConfig& c, const AttentionWeights& w, const RopeTable& rope, const float* latents,
                       int64_t n_new, int64_t first_group, int ratio, LayerKvCache& lc, ThreadPool* pool,
                       kernels::RowPath path, std::vector<float>& k_buf) {
  const int64_t id = c.index_head_dim, rd = c.rope_head_dim;
  float* k = room(k_buf, n_new * id);
  w.idx_wk.apply(latents, n_new, k, pool,
                 path == kernels::RowPath::kDecode ? kernels::RowPath::kDecode : kernels::RowPath::kAuto);
  for (int64_t g = 0; g < n_new; ++g) {
    float* kg = k + g * id;
    rms_norm(kg, id, w.idx_k_norm.data(), c.norm_eps, kg);
    rope.apply(kg + id - rd, (first_group + g) * ratio);  // a latent sits at its group's first token
    // ROUNDING: FP4 E2M1 with a ue8m0 scale per 32 (model.py Indexer.forward, fp4_act_quant), stored
    // as codes + scales (decoding gives the fake-quantised values bit for bit).
    encode_index_key_row(kg, id, lc.index_keys.append_row());
  }
}

// Indexer scoring and selection for the n queries of one entry (model.py Indexer.forward), from
// their index queries q [n, ih * id] (idx_wq_b(qr), before RoPE; rotated and quantised here in
// place) and head weights wts [n, ih] (idx_weights_proj(x), unscaled; scaled here in place).
void run_indexer(const ModelConfig& c, const RopeTable& rope, const KvCache& cache, AttentionShared& sh, int layer,
                 float* q, float* wts, int64_t n, int64_t start, ThreadPool* pool, Observer* obs,
                 AttentionEntryScratch& es) {
  const int ratio = c.compress_ratio(layer);
  const int ih = c.index_n_heads;
  const int64_t id = c.index_head_dim, rd = c.rope_head_dim;
  const int K = c.index_topk;
  const int owner = c.key_owner_of(layer);
  const LayerKvCache& key_cache = cache.layers[static_cast<size_t>(owner)];

  // ROUNDING: the python scalar softmax_scale * n_heads^-0.5 multiplies an f32 tensor as f32.
  const float wscale = static_cast<float>(std::pow(static_cast<double>(id), -0.5) * std::pow(static_cast<double>(ih), -0.5));
  for (int64_t i = 0; i < n * ih; ++i) wts[i] *= wscale;

  const int64_t max_vis = (start + n) / ratio;
  STRATA_CHECK(key_cache.index_keys.size() >= max_vis, "indexer: index keys behind the queries");
  // The owner's keys decoded once for the chunk (exact: the stored FP4 values); over the pool, as
  // the scores below are (a lone decode query's keys were serial work between pool passes).
  float* keys = room(es.keys, max_vis * id);
  auto decode_keys = [&](int64_t g0, int64_t g1) {
    for (int64_t g = g0; g < g1; ++g) key_cache.index_key(g, id, keys + g * id);
  };
  if (pool) pool->parallel_for(max_vis, decode_keys, 64);
  else decode_keys(0, max_vis);
  sh.topk.assign(static_cast<size_t>(n * K), -1);
  sh.have_topk = true;
  ++sh.topk_gen;
  const bool cand_source = c.is_candidate_source(layer);
  const bool use_cand = c.uses_candidates(layer);
  if (cand_source) {
    sh.cand_width = max_vis;
    assign_grow(sh.candidates, static_cast<size_t>(n * max_vis), uint8_t{0});
    sh.have_candidates = true;
  }
  STRATA_CHECK(!use_cand || sh.have_candidates, "indexer uses candidates but no candidate source ran");

  // score [max_vis]: the entry's scratch when one thread runs the queries, a chunk's own otherwise.
  // block_max/order: select_candidate_blocks' scratch (the entry's, or null in parallel chunks).
  auto queries = [&](int64_t t0, int64_t t1, float* score, std::vector<float>* block_max, std::vector<int32_t>* order) {
    for (int64_t t = t0; t < t1; ++t) {
      const int64_t pos = start + t;
      float* qt = q + t * ih * id;
      for (int h = 0; h < ih; ++h) rope.apply(qt + h * id + id - rd, pos);
      // ROUNDING: FP4 E2M1 with a ue8m0 scale per 32 on the index queries (Indexer.forward).
      kernels::fp4_quant_e8m0_inplace(qt, ih * id, 32);
      const int64_t n_vis = (pos + 1) / ratio;  // groups complete at this query
      const float* wt = wts + t * ih;
      // score[g] = sum_h w_h * relu(q_h . k_g), heads and dims in order (kernels/indexer.h: bit for bit
      // the scalar loop at every level; keys split over the pool in decode).
      kernels::index_scores(kernels::IndexScoreArgs{qt, wt, ih, id, keys, id, n_vis, score}, pool);
      if (cand_source) {
        select_candidate_blocks(score, n_vis, sh.cand_width, c.candidate_topk_blocks, c.candidate_block_size,
                                sh.candidates.data() + t * sh.cand_width, block_max, order);
      } else if (use_cand) {
        const uint8_t* keep = sh.candidates.data() + t * sh.cand_width;
        for (int64_t g = 0; g < n_vis; ++g)
          if (!keep[g]) score[g] = -INFINITY;
      }
      kernels::topk_ascending(score, n_vis, K, sh.topk.data() + t * K);  // = topk_ascending, O(n)
    }
  };
  if (pool && n > 1) {
    pool->parallel_for(n, [&](int64_t t0, int64_t t1) {
      std::vector<float> score(static_cast<size_t>(std::max<int64_t>(max_vis, 1)));
      queries(t0, t1, score.data(), nullptr, nullptr);
    });
  } else {
    queries(0, n, room(es.score, std::max<int64_t>(max_vis, 1)), &es.block_max, &es.block_order);
  }

  if (obs) {
    std::vector<int64_t> ids(sh.topk.begin(), sh.topk.end());
    obs->ids("indexer_topk", layer, ids, {n, K});
    if (cand_source) {
      std::vector<int64_t> m(sh.candidates.begin(), sh.candidates.end());
      obs->ids("candidate_mask", layer, m, {n, sh.cand_width});
    }
  }
}

// The KV source's compressor for positions [start, start+n) of one sequence, from its projections
// kv/score [n, head_dim]: appends the latents of every group that completes to the compressed cache
// (RoPE'd, FP4) and, at index-key owners, their index keys. Advances the compressor frontier.
void update_compressed(const ModelConfig& c, const RopeTable& rope, LayerKvCache& lc, int layer,
                       const AttentionWeights& w, const float* kv, const float* score, int64_t n, int64_t start,
                       ThreadPool* pool, Observer* obs, AttentionEntryScratch& es, KvUndoLog* undo = nullptr,
                       kernels::RowPath path = kernels::RowPath::kAuto) {
  const int64_t D = c.head_dim, rd = c.rope_head_dim;
  const int ratio = c.compress_ratio(layer);
  STRATA_CHECK(lc.comp_pos == start, "compressor frontier is not at the chunk start");
  std::vector<float>& latents = es.latents;
  const int64_t first = compress_rows(c, layer, w, kv, score, n, start, lc, &latents, undo);
  const int64_t n_new = static_cast<int64_t>(latents.size()) / D;
  if (obs && n_new > 0) obs->tensor("compressor_latent", layer, latents, {n_new, D});
  // The indexer needs the latent before RoPE, so index keys come first (model.py _compress_kv).
  if (c.owns_index_keys(layer) && n_new > 0) append_index_keys(c, w, rope, latents.data(), n_new, first, ratio, lc, pool, path, es.index_k);
  for (int64_t g = 0; g < n_new; ++g) {
    float* lg = latents.data() + g * D;
    rope.apply(lg + D - rd, (first + g) * ratio);
    // ROUNDING: FP4 E2M1 with an E4M3 scale per 16 (model.py _compress_kv fp4_act_quant), stored as
    // codes + scales; readers decode the exact fake-quantised values.
    encode_compressed_row(lg, D, lc.compressed.append_row());
  }
  lc.comp_pos = start + n;
}

}  // namespace

void attention_compress(const AttentionContext& ctx, int layer, const AttentionWeights& w, const float* x, int64_t n,
                        int64_t start) {
  const ModelConfig& c = ctx.c;
  if (c.compress_ratio(layer) <= 0 || !c.is_kv_source(layer)) return;
  const int64_t D = c.head_dim;
  std::vector<float> kv(static_cast<size_t>(n * D)), score;
  w.comp_wkv.apply(x, n, kv.data(), ctx.pool);
  if (c.compress_ratio(layer) > 1) {
    score.resize(static_cast<size_t>(n * D));
    w.comp_wgate.apply(x, n, score.data(), ctx.pool);
  }
  AttentionEntryScratch es;
  update_compressed(c, ctx.rope, ctx.cache.layers[static_cast<size_t>(layer)], layer, w, kv.data(), score.data(), n,
                    start, ctx.pool, ctx.obs, es);
}

void attention_forward(const AttentionBatch& b, int layer, const AttentionWeights& w, const float* x, float* out,
                       RideAlong ride_along) {
  const ModelConfig& c = b.c;
  const int H = c.n_heads;
  const int64_t D = c.head_dim, rd = c.rope_head_dim, win = c.window_size, qrank = c.q_lora_rank;
  const int ratio = c.compress_ratio(layer);
  const Rows rows = b.rows;
  const int64_t N = rows.n;
  AttentionScratch& sc = b.scratch;
  // The position of every row of the batch.
  int64_t* pos = room(sc.pos, N);
  for (const AttentionEntry& e : b.entries)
    for (int64_t t = 0; t < e.n; ++t) pos[e.row0 + t] = e.start + t;
  if (sc.entries.size() < b.entries.size()) sc.entries.resize(b.entries.size());
  auto scratch_of = [&](const AttentionEntry& e) -> AttentionEntryScratch& {
    return sc.entries[static_cast<size_t>(&e - b.entries.data())];
  };

  // Projections in two passes over the pool, each linear as Linear::apply computes it (the same
  // bits): first those of x, then those of the normed q_lora. Separate passes for the compressor's
  // and the indexer's were a hand-off and a tail each at every KV and index source.
  const bool compress = ratio > 0 && c.is_kv_source(layer);
  const bool index = ratio > 0 && c.is_index_source(layer);
  const int64_t iw = static_cast<int64_t>(c.index_n_heads) * c.index_head_dim;
  LinearJobs& jobs = sc.jobs;
  auto add = [&](const Linear& l, const float* in, float* y) {
    if (!l.add_jobs(&jobs, in, rows, y)) l.apply(in, rows, y, b.pool);
  };
  // First pass: queries' q_lora = wq_a(x), the window KV wkv(x), the compressor's kv and gate
  // scores (KV sources), the indexer's head weights (index sources), and the block's mHC
  // projection riding along (model.cpp block_forward).
  sc.qr.resize(static_cast<size_t>(N * qrank));
  sc.kv.resize(static_cast<size_t>(N * D));
  jobs.clear();
  jobs.f32.assign(ride_along.begin(), ride_along.end());
  add(w.wq_a, x, sc.qr.data());
  add(w.wkv, x, sc.kv.data());
  if (compress) {
    sc.comp_kv.resize(static_cast<size_t>(N * D));
    add(w.comp_wkv, x, sc.comp_kv.data());
    if (ratio > 1) {
      sc.comp_score.resize(static_cast<size_t>(N * D));
      add(w.comp_wgate, x, sc.comp_score.data());
    }
  }
  if (index) {
    sc.idx_w.resize(static_cast<size_t>(N * c.index_n_heads));
    add(w.idx_weights_proj, x, sc.idx_w.data());
  }
  kernels::linear_batch(jobs.batch(), b.pool);
  rms_norm_rows(sc.qr.data(), N, qrank, w.q_norm, c.norm_eps);
  if (b.obs) {
    const std::span<const float> xs(x, static_cast<size_t>(N * c.dim)), qr(sc.qr.data(), static_cast<size_t>(N * qrank));
    b.obs->linear_input("attn.wq_a", layer, -1, xs, c.dim);
    b.obs->linear_input("attn.wkv", layer, -1, xs, c.dim);
    b.obs->linear_input("attn.wq_b", layer, -1, qr, qrank);
    if (index) b.obs->linear_input("attn.indexer.wq_b", layer, -1, qr, qrank);
  }
  // Second pass: q = wq_b(q_norm(q_lora)) (no per-head q re-norm in V4.1) and the indexer's queries.
  jobs.clear();
  sc.q.resize(static_cast<size_t>(N * H * D));
  add(w.wq_b, sc.qr.data(), sc.q.data());
  if (index) {
    sc.idx_q.resize(static_cast<size_t>(N * iw));
    add(w.idx_wq_b, sc.qr.data(), sc.idx_q.data());
  }
  kernels::linear_batch(jobs.batch(), b.pool);
  // RoPE on the tail of every head.
  for (int64_t t = 0; t < N; ++t)
    for (int h = 0; h < H; ++h) b.rope.apply(sc.q.data() + (t * H + h) * D + D - rd, pos[t]);

  // Window KV: kv_norm(wkv(x)), RoPE, then E4M3 over the whole post-RoPE vector. The rows attend to
  // the decoded codes, which are what the ring keeps.
  const int64_t wrow = window_row_bytes(D);
  sc.kvq.resize(static_cast<size_t>(N * wrow));
  rms_norm_rows(sc.kv.data(), N, D, w.kv_norm, c.norm_eps);
  for (int64_t t = 0; t < N; ++t) {
    b.rope.apply(sc.kv.data() + t * D + D - rd, pos[t]);
    // ROUNDING: FP8 E4M3, ue8m0 per 32 (model.py Attention._window_kv act_quant in place).
    encode_window_row(sc.kv.data() + t * D, D, sc.kvq.data() + t * wrow);
    decode_window_row(sc.kvq.data() + t * wrow, D, sc.kv.data() + t * D);
  }

  // Compressor (KV sources) and indexer (index sources): the state and the selection per entry.
  const int K = c.index_topk;
  // One entry's compressor state and indexer selection, against its own caches only; `pool` for
  // its own parallelism (null: serial, the same bits: kernels/indexer.h, the matvec regime).
  auto select_entry = [&](const AttentionEntry& e, ThreadPool* pool) {
    LayerKvCache& lc = e.cache->layers[static_cast<size_t>(layer)];
    STRATA_CHECK(static_cast<int64_t>(lc.window_pos.size()) == win, "KvCache was not shaped for this config");
    if (ratio <= 0) return;
    // A KV source compresses its rows unless bounded replay already did (Model::forward runs the
    // first decoder layer's compressor over every prompt token, then the decoder over the tail).
    if (compress && lc.comp_pos == e.start)
      update_compressed(c, b.rope, lc, layer, w, sc.comp_kv.data() + e.row0 * D,
                        ratio > 1 ? sc.comp_score.data() + e.row0 * D : nullptr, e.n, e.start, pool, b.obs, scratch_of(e),
                        e.undo, e.path);
    STRATA_CHECK(!compress || lc.comp_pos == e.start + e.n, "compressor frontier is not at the chunk end");
    if (index)
      run_indexer(c, b.rope, *e.cache, *e.shared, layer, sc.idx_q.data() + e.row0 * iw,
                  sc.idx_w.data() + e.row0 * c.index_n_heads, e.n, e.start, pool, b.obs, scratch_of(e));
    STRATA_CHECK(e.shared->have_topk, "compressed layer without an index source before it");
  };
  // Decode entries (one row each) side by side over the pool, each serial inside: a lone row's
  // selection is too small to split (a pool pass per entry and layer left the other thread idle
  // between them); prompt chunks one after another, each split over the pool. An observer sees
  // the entries in order, so with one they all run in order.
  std::vector<const AttentionEntry*>& one_row = sc.one_row;
  one_row.clear();
  for (const AttentionEntry& e : b.entries) {
    if (e.n == 1 && b.pool && !b.obs) one_row.push_back(&e);
    else select_entry(e, b.pool);
  }
  if (one_row.size() > 1) {
    b.pool->parallel_for(static_cast<int64_t>(one_row.size()), [&](int64_t i0, int64_t i1) {
      for (int64_t i = i0; i < i1; ++i) select_entry(*one_row[static_cast<size_t>(i)], nullptr);
    });
  } else {
    for (const AttentionEntry* e : one_row) select_entry(*e, b.pool);
  }

  // Sparse attention with sinks, one query at a time (sparse_attn shim): entries are the window
  // positions and the selected compressed groups; K = V = the entry. Per sequence: its ring
  // positions before its rows (decoded once), and the compressed entries its queries selected,
  // decoded once each (queries of a prefill chunk share most of their selections). Past a cap on
  // the union's size (very long contexts) each query decodes its own selection instead.
  sc.o.resize(static_cast<size_t>(N * H * D));
  const float scale = static_cast<float>(1.0 / std::sqrt(static_cast<double>(D)));
  const int src = ratio > 0 ? c.kv_source_of(layer) : -1;
  // One entry's queries, with `pool` for its own parallelism (null: serial).
  auto attend_entry = [&](const AttentionEntry& e, ThreadPool* pool) {
    AttentionEntryScratch& es = scratch_of(e);
    const LayerKvCache& lc = e.cache->layers[static_cast<size_t>(layer)];
    const int64_t n = e.n, start = e.start;
    const float* kv = sc.kv.data() + e.row0 * D;
    const int64_t ring_first = std::max<int64_t>(0, start - win + 1), n_ring = start - ring_first;
    if (es.ring.empty()) es.ring.resize(static_cast<size_t>(win * D));  // the ring's most, at once
    float* ring = room(es.ring, n_ring * D);
    const LayerKvCache* comp = ratio > 0 ? &e.cache->layers[static_cast<size_t>(src)] : nullptr;
    const int32_t* sel = ratio > 0 ? e.shared->topk.data() : nullptr;
    // The compressed rows the queries read, decoded once each: a lone query's own selection (row k
    // = its k-th pick), or a chunk's union of selections (row slot[g] = group g). Past a cap on the
    // union's size (very long contexts) each query of a chunk decodes its own selection instead.
    const bool lone = sel != nullptr && n == 1;
    std::vector<int32_t>& slot = es.slot;
    std::vector<int32_t>& groups = es.groups;
    slot.clear();
    groups.clear();
    bool per_query = false;
    const int32_t* to_decode = nullptr;
    int64_t n_decode = 0;
    if (lone) {
      to_decode = sel;
      n_decode = K;
    } else if (sel) {
      const int64_t n_groups = comp->compressed.size();
      const int64_t cap = std::max<int64_t>(4096, (int64_t{64} << 20) / (D * static_cast<int64_t>(sizeof(float))));
      slot.assign(static_cast<size_t>(n_groups), -1);
      for (int64_t i = 0; i < n * K && static_cast<int64_t>(groups.size()) <= cap; ++i) {
        const int32_t g = sel[i];
        if (g >= 0 && slot[static_cast<size_t>(g)] < 0) {
          slot[static_cast<size_t>(g)] = static_cast<int32_t>(groups.size());
          groups.push_back(g);
        }
      }
      per_query = static_cast<int64_t>(groups.size()) > cap;
      if (!per_query) {
        to_decode = groups.data();
        n_decode = static_cast<int64_t>(groups.size());
      }
    }
    // A lone query's selected rows are the same at every layer that reads this KV source with this
    // selection (the layers after an index source: 5 of the 8 GB scaled checkpoint's 6 layers per
    // source below layer 20, 3 of 4 above): decoded at the first, reused after. Within one forward
    // pass nothing writes a source's compressed rows after the source layer; topk_gen changes with
    // every selection, so rows decoded in an earlier pass never match.
    const bool reuse = lone && es.comp_cache == e.cache && es.comp_src == src && es.comp_gen == e.shared->topk_gen;
    if (lone) {
      es.comp_cache = e.cache;
      es.comp_src = src;
      es.comp_gen = e.shared->topk_gen;
    } else {
      es.comp_cache = nullptr;  // a chunk's union (or nothing) in comp_rows now
    }
    if (reuse) n_decode = 0;  // the rows below are already there
    float* comp_rows = room(es.comp_rows, (reuse ? K : n_decode) * D);
    // The ring and those rows in one pass over the pool (items [0, n_ring) are ring positions):
    // a lone decode query's ~100-640 rows, decoded on the main thread while the pool's worker
    // waited, were 2.8% of the main thread's decode samples on the 8 GB scaled checkpoint at 2
    // threads (perf, dwarf call graphs).
    auto decode = [&](int64_t i0, int64_t i1) {
      for (int64_t i = i0; i < std::min(i1, n_ring); ++i) {
        const int64_t p = ring_first + i;
        if (lc.window_pos[static_cast<size_t>(p % win)] == p) lc.window_row(p % win, D, ring + i * D);
      }
      for (int64_t k = std::max(i0, n_ring) - n_ring; k < i1 - n_ring; ++k)
        if (to_decode[k] >= 0) comp->compressed_row(to_decode[k], D, comp_rows + k * D);
    };
    if (pool) pool->parallel_for(n_ring + n_decode, decode, 16);
    else decode(0, n_ring + n_decode);
    // Queries [t0, t1): `ent` their entry list, `own` [K, D] rows for a per-query selection.
    auto queries = [&](int64_t t0, int64_t t1, std::vector<const float*>& ent, float* own) {
      for (int64_t t = t0; t < t1; ++t) {
        const int64_t p_q = start + t;
        ent.clear();
        for (int64_t p = std::max<int64_t>(0, p_q - win + 1); p <= p_q; ++p) {
          if (p >= start) ent.push_back(kv + (p - start) * D);
          else if (lc.window_pos[static_cast<size_t>(p % win)] == p) ent.push_back(ring + (p - ring_first) * D);
        }
        if (sel)
          for (int k = 0; k < K; ++k) {
            const int32_t g = sel[t * K + k];
            if (g < 0) continue;
            if (lone) {
              ent.push_back(comp_rows + static_cast<int64_t>(k) * D);
            } else if (!per_query) {
              ent.push_back(comp_rows + static_cast<int64_t>(slot[static_cast<size_t>(g)]) * D);
            } else {
              comp->compressed_row(g, D, own + static_cast<int64_t>(k) * D);
              ent.push_back(own + static_cast<int64_t>(k) * D);
            }
          }
        const int64_t m = static_cast<int64_t>(ent.size());
        float* ot = sc.o.data() + (e.row0 + t) * H * D;
        // Scores, softmax with the sink, weighted sum: kernels/attention.h, bit for bit the scalar
        // loop (heads in vector lanes; heads split over the pool for a lone query).
        kernels::sparse_attention(kernels::SparseAttentionArgs{sc.q.data() + (e.row0 + t) * H * D, H, D, ent.data(), m,
                                                               w.attn_sink.data(), scale, ot},
                                  pool);
        for (int h = 0; h < H; ++h) {
          // Remove the query's rotation from the output's RoPE tail (apply_rotary_emb inverse).
          b.rope.apply(ot + h * D + D - rd, p_q, /*inverse=*/true);
        }
      }
    };
    if (pool && n > 1) {
      // Prompt chunks: query ranges over the pool, each with its own lists.
      pool->parallel_for(n, [&](int64_t t0, int64_t t1) {
        std::vector<const float*> ent;
        std::unique_ptr<float[]> own = per_query ? std::make_unique_for_overwrite<float[]>(static_cast<size_t>(K * D)) : nullptr;
        queries(t0, t1, ent, own.get());
      });
    } else {
      queries(0, n, es.ent, per_query ? room(es.query_rows, int64_t{K} * D) : nullptr);
    }
  };
  // Entries of one query (decode rows) run side by side over the pool, each serial inside; longer
  // entries (prompt chunks) one after another, each split over the pool. Either way a query's
  // result is the same (kernels/attention.h: bit for bit the scalar loop).
  std::vector<const AttentionEntry*>& singles = sc.singles;
  singles.clear();
  for (const AttentionEntry& e : b.entries) {
    if (e.n == 1) singles.push_back(&e);
    else attend_entry(e, b.pool);
  }
  if (singles.size() > 1 && b.pool) {
    b.pool->parallel_for(static_cast<int64_t>(singles.size()), [&](int64_t i0, int64_t i1) {
      for (int64_t i = i0; i < i1; ++i) attend_entry(*singles[static_cast<size_t>(i)], nullptr);
    });
  } else {
    for (const AttentionEntry* e : singles) attend_entry(*e, b.pool);
  }

  // The newest window_size rows of each entry go into its ring (slot = pos % window), as bytes.
  for (const AttentionEntry& e : b.entries) {
    LayerKvCache& lc = e.cache->layers[static_cast<size_t>(layer)];
    for (int64_t t = std::max<int64_t>(0, e.n - win); t < e.n; ++t) {
      const int64_t slot = (e.start + t) % win;
      std::copy_n(sc.kvq.begin() + (e.row0 + t) * wrow, wrow, lc.window.begin() + slot * wrow);
      lc.window_pos[static_cast<size_t>(slot)] = e.start + t;
    }
  }
  attention_output(c, w, sc.o.data(), rows, out, b.pool, sc);
  if (b.obs) {
    // o [N, H * D] is [N * G, H * D / G]: row (t, g) is what group g of token t feeds wo_a.
    b.obs->linear_input("attn.wo_a", layer, -1, std::span<const float>(sc.o.data(), static_cast<size_t>(N * H * D)),
                        H * D / c.o_groups);
    b.obs->linear_input("attn.wo_b", layer, -1,
                        std::span<const float>(sc.ocat.data(), static_cast<size_t>(N * c.o_groups * c.o_lora_rank)),
                        static_cast<int64_t>(c.o_groups) * c.o_lora_rank);
  }
}

void attention_output(const ModelConfig& c, const AttentionWeights& w, const float* o, int64_t n, float* out,
                      ThreadPool* pool) {
  AttentionScratch sc;
  attention_output(c, w, o, Rows{n, -1}, out, pool, sc);
}

void attention_output(const ModelConfig& c, const AttentionWeights& w, const float* o, Rows rows, float* out,
                      ThreadPool* pool, AttentionScratch& sc) {
  std::vector<float>& ocat = sc.ocat;
  // Grouped low-rank output: group g's heads through wo_a[g] (bf16, no activation quantisation),
  // then wo_b (FP8).
  const int H = c.n_heads;
  const int64_t D = c.head_dim;
  const int G = c.o_groups;
  const int64_t gin = H * D / G, R = c.o_lora_rank, n = rows.n;
  ocat.resize(static_cast<size_t>(n * G * R));
  if (w.wo_a.kind == Linear::Kind::kBf16 && n <= 64) {
    // Decode-sized batches: every group's rows gathered ([G, n, gin]) and run as one job per group
    // in one pool pass, each group's weights read once for all rows. BF16 in the reference order:
    // the same bits as the loop below, in any regime.
    float* og = room(sc.og, G * n * gin);
    float* yg = room(sc.yg, G * n * R);
    std::vector<kernels::LinearJob<kernels::Bf16Weight>>& parts = sc.bf16_jobs;
    parts.clear();
    for (int g = 0; g < G; ++g) {
      for (int64_t t = 0; t < n; ++t) std::copy_n(o + t * H * D + g * gin, gin, og + (g * n + t) * gin);
      parts.push_back({og + g * n * gin, n, w.wo_a.bf16.rows(g * R, R),
                       yg + g * n * R,
                       !rows.by_size() && rows.n_decode == n ? kernels::RowPath::kDecode : kernels::RowPath::kAuto});
    }
    kernels::linear_bf16_batch(parts, pool);
    for (int g = 0; g < G; ++g)
      for (int64_t t = 0; t < n; ++t) std::copy_n(yg + (g * n + t) * R, R, ocat.data() + t * G * R + g * R);
    w.wo_b.apply(ocat.data(), rows, out, pool);
    return;
  }
  std::vector<float> og(static_cast<size_t>(n * gin)), yg(static_cast<size_t>(n * R));
  for (int g = 0; g < G; ++g) {
    for (int64_t t = 0; t < n; ++t) std::copy_n(o + t * H * D + g * gin, gin, og.data() + t * gin);
    Linear part = w.wo_a;
    part.out = R;
    // Group g is rows [g R, (g+1) R): at the same offset in the blocked layout (R % 16 == 0).
    part.bf16 = w.wo_a.bf16.rows(g * R, R);
    part.f32 = kernels::F32Weight{w.wo_a.f32.w ? w.wo_a.f32.w + g * R * gin : nullptr, R, gin};
    part.apply(og.data(), rows, yg.data(), pool);
    for (int64_t t = 0; t < n; ++t) std::copy_n(yg.data() + t * R, R, ocat.data() + t * G * R + g * R);
  }
  w.wo_b.apply(ocat.data(), rows, out, pool);
}

}  // namespace strata::model
