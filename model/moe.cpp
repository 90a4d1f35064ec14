#include "model/moe.h"

#include <algorithm>
#include <cmath>
#include <memory>

#include "kernels/activation.h"
#include "model/ops.h"

namespace strata::model {

void route(const ModelConfig& c, const MoeWeights& w, const float* x, int64_t n, RouterOutput* out, ThreadPool* pool,
           kernels::RowPath path) {
  const int E = w.n_experts, k = w.n_active;
  std::vector<float>& logits = out->logits;
  logits.resize(static_cast<size_t>(n * E));
  w.gate.apply(x, n, logits.data(), pool, path);
  out->ids.resize(static_cast<size_t>(n * k));
  out->weights.resize(static_cast<size_t>(n * k));
  const float temp = static_cast<float>(c.gate_temp);
  std::vector<float>& score = out->score;
  std::vector<float>& biased = out->biased;
  std::vector<int32_t>& order = out->order;
  score.resize(static_cast<size_t>(E));
  biased.resize(static_cast<size_t>(E));
  order.resize(static_cast<size_t>(E));
  for (int64_t t = 0; t < n; ++t) {
    const float* lt = logits.data() + t * E;
    if (c.score_func == ScoreFunc::kSoftmax) {
      float mx = -INFINITY, den = 0.0f;
      for (int e = 0; e < E; ++e) mx = std::max(mx, lt[e] / temp);
      for (int e = 0; e < E; ++e) den += (score[e] = std::exp(lt[e] / temp - mx));
      for (int e = 0; e < E; ++e) score[e] /= den;
    } else {
      for (int e = 0; e < E; ++e) {
        const float v = lt[e] / temp;
        score[static_cast<size_t>(e)] = c.score_func == ScoreFunc::kSigmoid ? sigmoid(v) : std::sqrt(softplus(v));
      }
    }
    // The bias picks experts but does not weight them (model.py Gate.forward).
    for (int e = 0; e < E; ++e) {
      biased[static_cast<size_t>(e)] = score[static_cast<size_t>(e)] + w.gate_bias[static_cast<size_t>(e)];
      order[static_cast<size_t>(e)] = e;
    }
    std::partial_sort(order.begin(), order.begin() + k, order.end(), [&](int32_t a, int32_t b) {
      return biased[a] > biased[b] || (biased[a] == biased[b] && a < b);
    });
    float sum = 0.0f;
    for (int i = 0; i < k; ++i) sum += score[static_cast<size_t>(order[static_cast<size_t>(i)])];
    for (int i = 0; i < k; ++i) {
      const int32_t e = order[static_cast<size_t>(i)];
      float wgt = score[static_cast<size_t>(e)];
      if (c.norm_topk_prob && k > 1) wgt /= (sum + 1e-20f);  // 1e-20, not norm_eps: matches training
      out->ids[static_cast<size_t>(t * k + i)] = e;
      out->weights[static_cast<size_t>(t * k + i)] = wgt * static_cast<float>(c.route_scale);
    }
  }
}

namespace {

// SwiGLU with the training clamps: up in [-limit, limit], gate <= limit; act = silu(gate) * up * scale
// (kernels/swiglu: vectorised, bit for bit the scalar definition, since act feeds w2's FP4 path).
// Rows split over `pool` (row-wise: the same bits).
void swiglu(const ModelConfig& c, const float* gate, const float* up, const float* row_scale, int64_t n, int64_t inter,
            float* act, ThreadPool* pool) {
  kernels::swiglu(kernels::SwigluArgs{gate, up, row_scale, n, inter, static_cast<float>(c.swiglu_limit), act}, pool);
}

// Scores the prediction made for this layer, then predicts the next layer's experts from this
// layer's input (its router applied to x: the residual stream changes little in one layer) and
// names them to the store, which reads them while this layer computes.
void lookahead(const ModelConfig& c, const MoeWeights& w, store::WeightStore& store, const float* x, int64_t n,
               const RouterOutput& r, MoeLookahead* ahead, ThreadPool* pool, kernels::RowPath path,
               const ExpertPeers* peers) {
  const int k = w.n_active;
  if (ahead->layer == w.layer && ahead->n == n && static_cast<int64_t>(ahead->ids.size()) == n * k) {
    uint64_t correct = 0;
    for (int64_t t = 0; t < n; ++t) {
      const int32_t* p = ahead->ids.data() + t * k;
      for (int i = 0; i < k; ++i) correct += std::find(p, p + k, r.ids[static_cast<size_t>(t * k + i)]) != p + k;
    }
    store.record_prediction(static_cast<uint64_t>(n * k), correct);
  }
  ahead->layer = -1;
  const size_t next = static_cast<size_t>(w.layer) + 1;
  if (!store.wants_prefetch() || next >= ahead->layers.size()) return;
  const MoeWeights& nw = ahead->layers[next].ffn;
  RouterOutput pr;
  route(c, nw, x, n, &pr, pool, path);
  std::vector<char> seen(static_cast<size_t>(nw.n_experts), 0);
  for (int32_t e : pr.ids) seen[static_cast<size_t>(e)] = 1;
  std::vector<int32_t> predicted;
  for (int e = 0; e < nw.n_experts; ++e)  // only experts this process computes
    if (seen[static_cast<size_t>(e)] && (!peers || peers->owner(nw.layer, e) == 0)) predicted.push_back(e);
  store.prefetch_experts(nw.layer, predicted, store::PrefetchKind::kPredict);
  ahead->layer = nw.layer;
  ahead->n = n;
  ahead->ids = std::move(pr.ids);
}

// The regime of an expert's rows: how many of its slots (token-ordered) are decode rows.
Rows regime_of(std::span<const int64_t> slots, int k, Rows rows) {
  const int64_t m = static_cast<int64_t>(slots.size());
  Rows regime{m, -1};
  if (!rows.by_size()) {
    regime.n_decode = 0;
    while (regime.n_decode < m && slots[static_cast<size_t>(regime.n_decode)] / k < rows.n_decode) ++regime.n_decode;
  }
  return regime;
}

// Work for compute_batch to run in its passes (kernels::linear_batch), two pool passes a layer
// fewer in decode: the shared expert (FP8) over every row, its w1/w3 beside the routed w1/w3 and
// its w2 beside the routed w2 (when `shared`; buffers are the caller's), and independent F32 jobs
// in the first pass (`ride_along`, emptied once run). `shared_done` is set when the expert ran.
struct CompanionJobs {
  bool shared = false;
  const float* x;
  Rows rows;
  kernels::Fp8Weight w1, w3, w2;
  float *g, *u, *act, *y;
  bool shared_done = false;
  RideAlong ride_along;
};

// Routed experts of one batch: each batch's w1/w3 products share one pass over the pool, then its
// w2 products another (kernels::linear_batch), so a decode step pays two hand-offs per layer
// instead of three per expert. sc.scale rows [b.row, b.row + b.m) hold the routing weights; the
// outputs land in sc.y rows [b.row, b.row + b.m). Each job's rows are computed independently of
// the other jobs, so a row's bits do not depend on the batch it is in. `more` (may be null): MXFP4
// routed experts take its shared expert into their passes; block-quantised ones leave that to the
// caller (shared_done stays false). Either runs its ride-along jobs.
Status compute_batch(const ModelConfig& c, int layer, store::WeightStore& store, std::vector<BatchedExpert>& batch,
                     int64_t rows_taken, MoeScratch& sc, ThreadPool* pool, Observer* obs = nullptr,
                     CompanionJobs* more = nullptr) {
  const int64_t dim = c.dim, inter = c.moe_inter_dim;
  if (obs)
    for (const BatchedExpert& b : batch)
      for (const char* name : {"ffn.experts.w1", "ffn.experts.w3"})
        obs->linear_input(name, layer, b.e, std::span<const float>(b.x, static_cast<size_t>(b.m * dim)), dim);
  // w2 reads the rows after SwiGLU (and the routing weight): sc.act rows [b.row, b.row + b.m).
  auto observe_w2 = [&] {
    if (obs)
      for (const BatchedExpert& b : batch)
        obs->linear_input("ffn.experts.w2", layer, b.e,
                          std::span<const float>(sc.act.data() + b.row * inter, static_cast<size_t>(b.m * inter)), inter);
  };
  sc.g.resize(static_cast<size_t>(rows_taken * inter));
  sc.u.resize(static_cast<size_t>(rows_taken * inter));
  sc.act.resize(static_cast<size_t>(rows_taken * inter));
  sc.y.resize(static_cast<size_t>(rows_taken * dim));
  for (BatchedExpert& b : batch) {
    auto held = store.held_expert(layer, b.e);
    if (!held.ok()) return held.error().with_context("layer " + std::to_string(layer) + " expert " + std::to_string(b.e));
    if (held->has_value()) {
      b.view = **held;
      continue;
    }
    auto lease = store.acquire_expert(layer, b.e);
    if (!lease.ok()) return lease.error().with_context("layer " + std::to_string(layer) + " expert " + std::to_string(b.e));
    b.lease = std::move(*lease);
    b.view = b.lease->view();
  }
  // Block-quantised experts (a quantised GGUF): each expert's matrices through the ggml-format
  // matvec (kernels/kquant_linear.h), expert by expert, after the E4M3 activation rounding the
  // official MXFP4 path applies; rows are computed independently, so the regimes need no split.
  kernels::QuantType qt;
  if (!batch.empty() && quant_type_of(batch.front().view.w1.dtype, &qt)) {
    if (more) {
      kernels::linear_batch(kernels::LinearBatch{{}, {}, {}, more->ride_along}, pool);
      more->ride_along = {};
    }
    for (const BatchedExpert& b : batch) {
      const store::ExpertView& ev = b.view;
      kernels::QuantType t1, t2, t3;
      if (!quant_type_of(ev.w1.dtype, &t1) || !quant_type_of(ev.w2.dtype, &t2) || !quant_type_of(ev.w3.dtype, &t3))
        return Internal("layer " + std::to_string(layer) + " expert " + std::to_string(b.e) +
                        ": routed experts mix block-quantised and MXFP4 matrices");
      Linear::apply_quant_fp8_act(b.x, b.m, kernels::QuantWeight{t1, ev.w1.data, inter, dim}, sc.g.data() + b.row * inter, pool);
      Linear::apply_quant_fp8_act(b.x, b.m, kernels::QuantWeight{t3, ev.w3.data, inter, dim}, sc.u.data() + b.row * inter, pool);
    }
    swiglu(c, sc.g.data(), sc.u.data(), sc.scale.data(), rows_taken, inter, sc.act.data(), pool);
    observe_w2();
    for (const BatchedExpert& b : batch) {
      const store::ExpertView& ev = b.view;
      kernels::QuantType t2;
      (void)quant_type_of(ev.w2.dtype, &t2);
      Linear::apply_quant_fp8_act(sc.act.data() + b.row * inter, b.m, kernels::QuantWeight{t2, ev.w2.data, dim, inter},
                            sc.y.data() + b.row * dim, pool);
    }
    return Status();
  }
  std::vector<kernels::LinearJob<kernels::Fp4Weight>>& jobs = sc.fp4_jobs;
  jobs.clear();
  for (const BatchedExpert& b : batch) {
    const store::ExpertView& ev = b.view;
    add_linear_jobs(&jobs, b.x, b.regime, kernels::Fp4Weight{ev.w1.as<uint8_t>(), ev.w1_scale.as<uint8_t>(), inter, dim},
                    sc.g.data() + b.row * inter);
    add_linear_jobs(&jobs, b.x, b.regime, kernels::Fp4Weight{ev.w3.as<uint8_t>(), ev.w3_scale.as<uint8_t>(), inter, dim},
                    sc.u.data() + b.row * inter);
  }
  const bool shared = more != nullptr && more->shared && !more->shared_done;
  std::vector<kernels::LinearJob<kernels::Fp8Weight>>& shared_jobs = sc.fp8_jobs;
  shared_jobs.clear();
  if (shared) {
    add_linear_jobs(&shared_jobs, more->x, more->rows, more->w1, more->g);
    add_linear_jobs(&shared_jobs, more->x, more->rows, more->w3, more->u);
  }
  kernels::linear_batch(kernels::LinearBatch{shared_jobs, jobs, {}, more ? more->ride_along : RideAlong()}, pool);
  if (more) more->ride_along = {};
  // The routing weight multiplies silu(gate) * up before w2 (model.py Expert.forward); row-wise.
  swiglu(c, sc.g.data(), sc.u.data(), sc.scale.data(), rows_taken, inter, sc.act.data(), pool);
  if (shared) swiglu(c, more->g, more->u, nullptr, more->rows.n, inter, more->act, pool);
  observe_w2();
  jobs.clear();
  for (const BatchedExpert& b : batch) {
    const store::ExpertView& ev = b.view;
    add_linear_jobs(&jobs, sc.act.data() + b.row * inter, b.regime,
                    kernels::Fp4Weight{ev.w2.as<uint8_t>(), ev.w2_scale.as<uint8_t>(), dim, inter},
                    sc.y.data() + b.row * dim);
  }
  shared_jobs.clear();
  if (shared) add_linear_jobs(&shared_jobs, more->act, more->rows, more->w2, more->y);
  kernels::linear_batch(kernels::LinearBatch{shared_jobs, jobs, {}, {}}, pool);
  if (shared) more->shared_done = true;
  return Status();
}

// out[token of slot i] += y row i, for an expert's slots in token order.
void add_expert_rows(std::span<const int64_t> slots, int k, const float* y, int64_t dim, float* out) {
  for (size_t i = 0; i < slots.size(); ++i) {
    float* o = out + (slots[i] / k) * dim;
    const float* yi = y + static_cast<int64_t>(i) * dim;
    for (int64_t d = 0; d < dim; ++d) o[d] += yi[d];
  }
}

}  // namespace

Status run_expert_tasks(const ModelConfig& c, int layer, store::WeightStore& store, std::span<const ExpertTask> tasks,
                        const float* x, const float* scale, float* y, ThreadPool* pool, MoeScratch* scratch) {
  const int64_t dim = c.dim;
  int64_t total = 0;
  std::vector<int32_t> ids;
  std::vector<uint32_t> uses;
  for (const ExpertTask& t : tasks) {
    if (t.expert < 0 || t.expert >= c.n_routed_experts || t.m <= 0 || t.n_decode < -1 || t.n_decode > t.m ||
        (!ids.empty() && t.expert <= ids.back()))
      return InvalidArgument("expert task (layer " + std::to_string(layer) + ", expert " + std::to_string(t.expert) +
                             ", rows " + std::to_string(t.m) + ", decode rows " + std::to_string(t.n_decode) +
                             "): expected ascending experts in [0, " + std::to_string(c.n_routed_experts) +
                             "), rows > 0, decode rows in [-1, rows]");
    ids.push_back(t.expert);
    uses.push_back(static_cast<uint32_t>(t.m));
    total += t.m;
  }
  store.prefetch_experts(layer, ids, store::PrefetchKind::kDemand, uses);
  MoeScratch local;
  MoeScratch& sc = scratch ? *scratch : local;
  const int k = std::max(1, c.n_activated_experts);
  const int64_t cap_rows = std::max<int64_t>(total, 64);
  std::vector<BatchedExpert> batch;
  size_t next = 0;
  int64_t row0 = 0;
  while (next < tasks.size()) {
    batch.clear();
    int64_t rows_taken = 0;
    for (; next < tasks.size() && static_cast<int>(batch.size()) < k; ++next) {
      const ExpertTask& t = tasks[next];
      if (!batch.empty() && rows_taken + t.m > cap_rows) break;
      batch.push_back({t.expert, {}, nullptr, x + (row0 + rows_taken) * dim, rows_taken, t.m, Rows{t.m, t.n_decode}});
      rows_taken += t.m;
    }
    sc.scale.assign(scale + row0, scale + row0 + rows_taken);
    STRATA_RETURN_IF_ERROR(compute_batch(c, layer, store, batch, rows_taken, sc, pool));
    std::copy_n(sc.y.data(), rows_taken * dim, y + row0 * dim);
    row0 += rows_taken;
  }
  return Status();
}

Status moe_forward(const ModelConfig& c, const MoeWeights& w, store::WeightStore& store, const float* x, Rows rows,
                   float* out, ThreadPool* pool, Observer* obs, MoeLookahead* ahead, ForwardProfile* prof,
                   MoeScratch* scratch, ExpertPeers* peers, RideAlong ride_along) {
  ScopedNs timer(prof ? &prof->moe_ns : nullptr);
  const int64_t n = rows.n;
  const int64_t dim = c.dim;
  const int k = w.n_active;
  MoeScratch local;
  MoeScratch& sc = scratch ? *scratch : local;
  RouterOutput& r = sc.router;
  // A decode-only batch takes the matvec for the bit-exact gate too (faster at these sizes).
  const kernels::RowPath path = !rows.by_size() && rows.n_decode == n ? kernels::RowPath::kDecode : kernels::RowPath::kAuto;
  route(c, w, x, n, &r, pool, path);
  if (obs) {
    std::vector<int64_t> ids(r.ids.begin(), r.ids.end());
    obs->ids("router_topk_idx", w.layer, ids, {n, k});
    obs->tensor("router_weights", w.layer, r.weights, {n, k});
  }
  std::fill(out, out + n * dim, 0.0f);

  // Group (token, slot) pairs by expert so each expert runs once over all its tokens: a counting
  // sort into one buffer (tokens stay ascending within an expert), no allocation per expert.
  std::vector<int32_t>& first = sc.slot_first;
  first.assign(static_cast<size_t>(w.n_experts) + 1, 0);
  for (int64_t s = 0; s < n * k; ++s) ++first[static_cast<size_t>(r.ids[static_cast<size_t>(s)]) + 1];
  for (int e = 0; e < w.n_experts; ++e) first[static_cast<size_t>(e) + 1] += first[static_cast<size_t>(e)];
  sc.slots.resize(static_cast<size_t>(n * k));
  {
    std::vector<int32_t>& fill = sc.slot_fill;
    fill.assign(first.begin(), first.end() - 1);
    for (int64_t s = 0; s < n * k; ++s) sc.slots[static_cast<size_t>(fill[static_cast<size_t>(r.ids[static_cast<size_t>(s)])]++)] = s;
  }
  auto by_expert = [&](int e) {
    return std::span<const int64_t>(sc.slots.data() + first[static_cast<size_t>(e)],
                                    static_cast<size_t>(first[static_cast<size_t>(e) + 1] - first[static_cast<size_t>(e)]));
  };
  std::vector<int32_t>& used = sc.used;
  std::vector<uint32_t>& uses = sc.uses;  // tokens per expert: a frequency-based cache weighs by them
  used.clear();
  uses.clear();
  for (int e = 0; e < w.n_experts; ++e) {
    if (by_expert(e).empty()) continue;
    used.push_back(e);
    uses.push_back(static_cast<uint32_t>(by_expert(e).size()));
  }

  // Experts other processes own (model/expert_peers.h) go out first, one message per peer, so they
  // compute while this process computes its own; `remote_row` is each such expert's first row in
  // its peer's answer.
  std::vector<int>& owner = sc.owner;
  std::vector<int64_t>& remote_row = sc.remote_row;
  owner.assign(used.size(), 0);
  remote_row.assign(used.size(), 0);
  if (peers) {
    for (PeerBuffers& pb : sc.peers) pb.clear();
    for (size_t i = 0; i < used.size(); ++i) {
      const int p = owner[i] = peers->owner(w.layer, used[i]);
      if (p == 0) continue;
      if (static_cast<size_t>(p) >= sc.peers.size()) sc.peers.resize(static_cast<size_t>(p) + 1);
      PeerBuffers& pb = sc.peers[static_cast<size_t>(p)];
      const auto slots = by_expert(used[i]);
      const Rows regime = regime_of(slots, k, rows);
      pb.tasks.push_back({used[i], regime.n, regime.n_decode});
      remote_row[i] = pb.rows;
      pb.rows += regime.n;
      for (int64_t s : slots) {
        pb.x.insert(pb.x.end(), x + (s / k) * dim, x + (s / k + 1) * dim);
        pb.scale.push_back(r.weights[static_cast<size_t>(s)]);
      }
    }
    for (size_t p = 1; p < sc.peers.size(); ++p) {
      PeerBuffers& pb = sc.peers[p];
      if (pb.tasks.empty()) continue;
      STRATA_RETURN_IF_ERROR(peers->submit(static_cast<int>(p), w.layer, pb.tasks, pb.x, pb.scale));
    }
  }

  // Name the layer's (own) experts before computing any, so the store reads every miss at queue depth.
  {
    std::vector<int32_t>& mine = sc.mine;
    std::vector<uint32_t>& mine_uses = sc.mine_uses;
    mine.clear();
    mine_uses.clear();
    for (size_t i = 0; i < used.size(); ++i)
      if (owner[i] == 0) {
        mine.push_back(used[i]);
        mine_uses.push_back(uses[i]);
      }
    store.prefetch_experts(w.layer, mine, store::PrefetchKind::kDemand, mine_uses);
  }
  if (ahead) lookahead(c, w, store, x, n, r, ahead, pool, path, peers);

  // Routed experts in batches of consecutive own experts (compute_batch). A batch holds at most
  // max(n, 64) token rows (prefill keeps the buffers of one expert at a time) and, on a store that
  // streams experts, at most top-k leases (its cache guarantees one layer's working set); where
  // every expert is in RAM or mapped, a decode step's distinct experts (~25 of 32 for 8 demo rows)
  // share one pool pass for w1/w3 and one for w2 instead of one pair per top-k of them. Every
  // expert's rows, own or a peer's, are added to `out` in ascending expert id, as one process
  // without batching would: bit-identical.
  // The shared expert runs in the first batch's passes where both are in the formats those passes
  // take (FP8 shared, MXFP4 routed: checked per batch); else after the routed experts, as before.
  // Either way its rows are added to `out` after every routed row, as the reference adds them.
  const int64_t inter = c.moe_inter_dim;
  std::vector<float>&g = sc.shared_g, &u = sc.shared_u, &act = sc.shared_act, &y = sc.shared_y;
  g.resize(static_cast<size_t>(n * inter));
  u.resize(static_cast<size_t>(n * inter));
  act.resize(static_cast<size_t>(n * inter));
  y.resize(static_cast<size_t>(n * dim));
  const bool fp8_shared = w.shared_w1.kind == Linear::Kind::kFp8 && w.shared_w3.kind == Linear::Kind::kFp8 &&
                          w.shared_w2.kind == Linear::Kind::kFp8;
  CompanionJobs more{fp8_shared, x, rows, w.shared_w1.fp8, w.shared_w3.fp8, w.shared_w2.fp8, g.data(), u.data(),
                     act.data(), y.data(), false, ride_along};
  const int64_t cap_rows = std::max<int64_t>(n, 64);
  const size_t cap_leases = store.expert_reads() == store::ExpertReads::kNotStreamed ? used.size() : static_cast<size_t>(k);
  std::vector<BatchedExpert>& batch = sc.batch;
  // The leases end with this call (a streaming store's cache holds one layer's working set).
  struct ReleaseLeases {
    std::vector<BatchedExpert>& b;
    ~ReleaseLeases() { b.clear(); }
  } release{batch};
  size_t next = 0;
  while (next < used.size()) {
    if (owner[next] != 0) {
      PeerBuffers& pb = sc.peers[static_cast<size_t>(owner[next])];
      if (!pb.collected) {
        pb.y.resize(static_cast<size_t>(pb.rows * dim));
        STRATA_RETURN_IF_ERROR(peers->collect(owner[next], pb.y));
        pb.collected = true;
      }
      add_expert_rows(by_expert(used[next]), k, pb.y.data() + remote_row[next] * dim, dim, out);
      ++next;
      continue;
    }
    // Take own experts while they fit.
    batch.clear();
    int64_t rows_taken = 0, gathered = 0;
    for (; next < used.size() && owner[next] == 0 && batch.size() < cap_leases; ++next) {
      const auto slots = by_expert(used[next]);
      const int64_t m = static_cast<int64_t>(slots.size());
      if (!batch.empty() && rows_taken + m > cap_rows) break;
      // Tokens t0, t0 + 1, ... (every token of a batch; any lone token) are read in place: no copy,
      // and experts that read the same token row share its prepared activations in the kernels'
      // batched pass (a four-row decode step's ~23 experts prepare four rows, not ~23).
      const int64_t t0 = slots[0] / k;
      bool consecutive = true;
      for (int64_t i = 1; consecutive && i < m; ++i) consecutive = slots[static_cast<size_t>(i)] / k == t0 + i;
      batch.push_back({used[next], {}, nullptr, consecutive ? x + t0 * dim : nullptr, rows_taken, m, regime_of(slots, k, rows)});
      if (!consecutive) gathered += m;
      rows_taken += m;
    }
    sc.xs.resize(static_cast<size_t>(gathered * dim));
    sc.scale.resize(static_cast<size_t>(rows_taken));
    int64_t xs_row = 0;
    for (BatchedExpert& b : batch) {
      const auto slots = by_expert(b.e);
      if (b.x == nullptr) {
        float* dst = sc.xs.data() + xs_row * dim;
        for (int64_t i = 0; i < b.m; ++i) std::copy_n(x + (slots[static_cast<size_t>(i)] / k) * dim, dim, dst + i * dim);
        b.x = dst;
        xs_row += b.m;
      }
      for (int64_t i = 0; i < b.m; ++i)
        sc.scale[static_cast<size_t>(b.row + i)] = r.weights[static_cast<size_t>(slots[static_cast<size_t>(i)])];
    }
    STRATA_RETURN_IF_ERROR(compute_batch(c, w.layer, store, batch, rows_taken, sc, pool, obs, &more));
    for (const BatchedExpert& b : batch)
      add_expert_rows(by_expert(b.e), k, sc.y.data() + b.row * dim, dim, out);
  }

  // No batch of own experts ran (each is another process's): the ride-along jobs on their own.
  if (!more.ride_along.empty()) kernels::linear_batch(kernels::LinearBatch{{}, {}, {}, more.ride_along}, pool);
  // Shared expert: every token, no routing weight.
  if (!more.shared_done) {
    if (fp8_shared) {
      std::vector<kernels::LinearJob<kernels::Fp8Weight>>& shared = sc.fp8_jobs;
      shared.clear();
      add_linear_jobs(&shared, x, rows, w.shared_w1.fp8, g.data());
      add_linear_jobs(&shared, x, rows, w.shared_w3.fp8, u.data());
      kernels::linear_fp8_batch(shared, pool);
    } else {
      w.shared_w1.apply(x, rows, g.data(), pool);
      w.shared_w3.apply(x, rows, u.data(), pool);
    }
    swiglu(c, g.data(), u.data(), nullptr, n, inter, act.data(), pool);
  }
  if (obs) {
    const std::span<const float> xs(x, static_cast<size_t>(n * dim));
    obs->linear_input("ffn.shared_experts.w1", w.layer, -1, xs, dim);
    obs->linear_input("ffn.shared_experts.w3", w.layer, -1, xs, dim);
    obs->linear_input("ffn.shared_experts.w2", w.layer, -1, std::span<const float>(act.data(), static_cast<size_t>(n * inter)), inter);
  }
  if (!more.shared_done) w.shared_w2.apply(act.data(), rows, y.data(), pool);
  for (int64_t i = 0; i < n * dim; ++i) out[i] += y[static_cast<size_t>(i)];
  return Status();
}

}  // namespace strata::model
