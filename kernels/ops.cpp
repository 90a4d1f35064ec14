// Drivers of the per-token ops (activation.h, norm.h, rope.h, mhc.h, attention.h, indexer.h):
// level choice, threading and scratch over the per-level vector kernels of
// kernels/detail/ops_table.h. Compiled for baseline x86-64. The scalar level runs kernels::ref.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <functional>
#include <memory>
#include <utility>
#include <vector>

#include <boost/container/small_vector.hpp>

#include "core/status.h"
#include "kernels/attention.h"
#include "kernels/detail/inline_scratch.h"
#include "kernels/detail/ops_table.h"
#include "kernels/indexer.h"
#include "kernels/linear.h"
#include "kernels/mhc.h"
#include "kernels/norm.h"

namespace strata::kernels {
namespace {

// The vector table of a level; null for kScalar (and on builds without x86 kernels).
const detail::OpsKernels* ops_of(KernelLevel level) {
  STRATA_CHECK(kernel_level_supported(level), "kernels: level not supported by this CPU");
#if !defined(STRATA_KERNELS_NO_X86)
  switch (level) {
    case KernelLevel::kScalar: return nullptr;
    case KernelLevel::kAvx2: return &detail::avx2_ops();
    case KernelLevel::kAvx512:
    case KernelLevel::kAvx512Bf16: return &detail::avx512_ops();
    case KernelLevel::kAmx: return &detail::amx_ops();
  }
#endif
  return nullptr;
}

int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

// Elementwise work is split into chunks of at least this many elements (smaller jobs stay serial:
// a thread-pool hand-off costs about a microsecond).
constexpr int64_t kMinChunkElements = 16 * 1024;

void run_range(ThreadPool* pool, int64_t n, int64_t grain, FunctionRef<void(int64_t, int64_t)> fn) {
  if (n <= 0) return;
  if (pool != nullptr && n > grain) pool->parallel_for(n, fn, grain);
  else fn(0, n);
}
int64_t rows_grain(int64_t row_elements) { return std::max<int64_t>(1, kMinChunkElements / std::max<int64_t>(1, row_elements)); }

}  // namespace

// ---------------------------------------------------------------- activation.h
void exp_f32(const float* x, int64_t n, float* out, KernelLevel level) {
  const detail::OpsKernels* t = ops_of(level);
  if (t == nullptr) ref::exp_f32(x, n, out);
  else t->exp(x, n, out);
}
void exp_f32(const float* x, int64_t n, float* out) { exp_f32(x, n, out, best_kernel_level()); }

void swiglu(const SwigluArgs& a, ThreadPool* pool, KernelLevel level) {
  const detail::OpsKernels* t = ops_of(level);
  if (t == nullptr) {
    ref::swiglu(a);
    return;
  }
  run_range(pool, a.n, rows_grain(a.inter), [&](int64_t t0, int64_t t1) { t->swiglu_rows(a, t0, t1); });
}
void swiglu(const SwigluArgs& a, ThreadPool* pool) { swiglu(a, pool, best_kernel_level()); }

// ---------------------------------------------------------------- norm.h
float mean_square(const float* x, int64_t n, KernelLevel level) {
  const detail::OpsKernels* t = ops_of(level);
  if (t == nullptr || n < 8) return ref::mean_square(x, n);
  return t->sum_squares(x, n) / static_cast<float>(n);
}
float mean_square(const float* x, int64_t n) { return mean_square(x, n, best_kernel_level()); }

float rms_rsqrt(const float* x, int64_t n, float eps) { return 1.0f / std::sqrt(mean_square(x, n) + eps); }

void rms_norm(const float* x, int64_t n_rows, int64_t dim, const float* w, float eps, float* out, ThreadPool* pool,
              KernelLevel level) {
  const detail::OpsKernels* t = ops_of(level);
  if (t == nullptr) {
    ref::rms_norm(x, n_rows, dim, w, eps, out);
    return;
  }
  run_range(pool, n_rows, rows_grain(dim), [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r) {
      const float* xr = x + r * dim;
      const float ms = dim < 8 ? ref::mean_square(xr, dim) : t->sum_squares(xr, dim) / static_cast<float>(dim);
      t->scale_rows(xr, w, 1.0f / std::sqrt(ms + eps), dim, out + r * dim);
    }
  });
}
void rms_norm(const float* x, int64_t n_rows, int64_t dim, const float* w, float eps, float* out, ThreadPool* pool) {
  rms_norm(x, n_rows, dim, w, eps, out, pool, best_kernel_level());
}

// ---------------------------------------------------------------- rope.h
void rope_rotate(const RopeArgs& a, KernelLevel level) {
  const detail::OpsKernels* t = ops_of(level);
  if (t == nullptr) ref::rope_rotate(a);
  else t->rope(a);
}
void rope_rotate(const RopeArgs& a) { rope_rotate(a, best_kernel_level()); }

// ---------------------------------------------------------------- mhc.h
void hc_pre(const float* x, const float* pre, int64_t n, int hc, int64_t dim, float* y, ThreadPool* pool,
            KernelLevel level) {
  const detail::OpsKernels* t = ops_of(level);
  if (t == nullptr) {
    ref::hc_pre(x, pre, n, hc, dim, y);
    return;
  }
  run_range(pool, n, rows_grain(hc * dim), [&](int64_t t0, int64_t t1) { t->hc_pre(x, pre, t0, t1, hc, dim, y); });
}
void hc_pre(const float* x, const float* pre, int64_t n, int hc, int64_t dim, float* y, ThreadPool* pool) {
  hc_pre(x, pre, n, hc, dim, y, pool, best_kernel_level());
}

void hc_post(float* x, const float* f, const float* post, const float* comb, int64_t n, int hc, int64_t dim,
             ThreadPool* pool, KernelLevel level) {
  const detail::OpsKernels* t = ops_of(level);
  if (t == nullptr || hc > 16) {
    ref::hc_post(x, f, post, comb, n, hc, dim);
    return;
  }
  run_range(pool, n, rows_grain(hc * dim),
            [&](int64_t t0, int64_t t1) { t->hc_post(x, f, post, comb, t0, t1, hc, dim); });
}
void hc_post(float* x, const float* f, const float* post, const float* comb, int64_t n, int hc, int64_t dim,
             ThreadPool* pool) {
  hc_post(x, f, post, comb, n, hc, dim, pool, best_kernel_level());
}

void hc_split_sinkhorn(const float* mixes, int64_t n, const HcSplitParams& p, float* pre, float* post, float* comb,
                       ThreadPool* pool, KernelLevel level) {
  STRATA_CHECK(p.hc >= 1 && p.hc <= 16, "hc_split_sinkhorn: hc must be in [1, 16]");
  const detail::OpsKernels* t = ops_of(level);
  if (t == nullptr || p.hc > 8) {
    ref::hc_split_sinkhorn(mixes, n, p, pre, post, comb);
    return;
  }
  // Tokens are lanes: chunks are whole vectors of tokens.
  const int64_t w = t->lanes;
  run_range(pool, ceil_div(n, w), 4, [&](int64_t u0, int64_t u1) {
    t->hc_split(mixes, u0 * w, std::min(n, u1 * w), p, pre, post, comb);
  });
}
void hc_split_sinkhorn(const float* mixes, int64_t n, const HcSplitParams& p, float* pre, float* post, float* comb,
                       ThreadPool* pool) {
  hc_split_sinkhorn(mixes, n, p, pre, post, comb, pool, best_kernel_level());
}

// ---------------------------------------------------------------- attention.h
void sparse_attention(const SparseAttentionArgs& a, ThreadPool* pool, KernelLevel level) {
  const detail::OpsKernels* t = ops_of(level);
  if (t == nullptr) {
    ref::sparse_attention(a);
    return;
  }
  const int64_t H = a.n_heads, D = a.head_dim, m = a.n_entries;
  if (H <= 0 || D <= 0) return;
  if (m == 0) {  // no entry: every weighted sum is empty
    std::fill(a.out, a.out + H * D, 0.0f);
    return;
  }
  const int64_t w = t->lanes, nv = ceil_div(H, w), hp = nv * w;
  // Scratch: q transposed [D, hp], sinks padded [hp], scores/probabilities [m, hp]. Padding heads
  // are zero queries with zero sinks: finite, never written out.
  // One stack block at decode sizes (64 heads x 512 dims + 640 entries x 64 heads: 293 KiB).
  // Every score is written (attn_scores covers all nv vectors) before it is read: no zero fill,
  // which was a memset of m x hp floats per query and layer on the main thread.
  const size_t qt_n = static_cast<size_t>(D * hp), s_n = static_cast<size_t>(m * hp);
  detail::InlineScratch<320 * 1024> buf((qt_n + static_cast<size_t>(hp) + s_n) * sizeof(float));
  float* qt = buf.as<float>();
  float* sinks = qt + qt_n;
  float* s = sinks + hp;
  std::fill(qt, qt + qt_n + hp, 0.0f);
  for (int64_t h = 0; h < H; ++h) {
    sinks[h] = a.sinks[h];
    for (int64_t d = 0; d < D; ++d) qt[d * hp + h] = a.q[h * D + d];
  }
  auto body = [&](int64_t v0, int64_t v1) {
    t->attn_scores(qt, hp, D, a.entries, m, a.scale, v0, v1, s);
    t->attn_softmax(s, m, hp, sinks, v0, v1);
    t->attn_out(s, hp, a.entries, m, D, v0 * w, std::min(H, v1 * w), a.out);
  };
  // Split heads only when each thread gets real work (decode at full size: 64 heads x 640 entries).
  const bool split = pool != nullptr && nv > 1 && m * D * H >= 4 * kMinChunkElements;
  if (!split) {
    body(0, nv);
    return;
  }
  const int64_t T = pool->n_threads();
  if (nv % T == 0) {
    // Each thread takes one contiguous share of the head vectors (not guided chunks of one vector),
    // so the score kernel's pairs of vectors and the output kernel's blocks of heads stay whole.
    pool->parallel_for_shares(nv, body, nv / T);
    return;
  }
  // Head vectors that do not divide among the threads (48 heads = 3 vectors of 16 on 2 threads: one
  // thread did two, the other waited; 4-5% of a decode token on the 8 GB checkpoint): three passes
  // that do divide. Scores by entries (every head vector of a run of entries), the softmax by head
  // vector (the cheap pass), the weighted sums by heads. Every score, probability and output is
  // computed as in one pass (each independent of the others and of the split): the same bits.
  const int64_t entry_step = std::max<int64_t>(8, ceil_div(m, 4 * T));
  pool->parallel_for_shares(ceil_div(m, entry_step), [&](int64_t c0, int64_t c1) {
    const int64_t j0 = c0 * entry_step, j1 = std::min(m, c1 * entry_step);
    t->attn_scores(qt, hp, D, a.entries + j0, j1 - j0, a.scale, 0, nv, s + j0 * hp);
  });
  pool->parallel_for(nv, [&](int64_t v0, int64_t v1) { t->attn_softmax(s, m, hp, sinks, v0, v1); });
  pool->parallel_for_shares(ceil_div(H, 8), [&](int64_t b0, int64_t b1) {
    t->attn_out(s, hp, a.entries, m, D, b0 * 8, std::min(H, b1 * 8), a.out);
  });
}
void sparse_attention(const SparseAttentionArgs& a, ThreadPool* pool) { sparse_attention(a, pool, best_kernel_level()); }

// ---------------------------------------------------------------- linear.h (any-order BF16)
namespace {

// Whether linear_bf16_any_order runs the blocked free-order kernel (which writes rows anywhere).
bool any_order_blocked(const detail::OpsKernels* t, int64_t n, const Bf16Weight& w, RowPath path) {
  const bool matvec = path == RowPath::kDecode || (path == RowPath::kAuto && n < 8);
  return t != nullptr && matvec && w.e4m3 == nullptr && w.blocked;
}

// The blocked kernel: x row i's outputs to y[i]. Blocks of 16 rows split over the pool in chunks of
// >= 64 KiB, each block one thread's.
void any_order_blocked_rows(const detail::OpsKernels* t, const float* x, int64_t n, const Bf16Weight& w,
                            float* const* y, ThreadPool* pool) {
  const int64_t br = kBf16BlockRows, block_bytes = 2 * w.in * br;
  const int64_t grain = std::max<int64_t>(1, (64 * 1024) / std::max<int64_t>(1, block_bytes));
  run_range(pool, w.out / br, grain, [&](int64_t b0, int64_t b1) {
    t->bf16_blocked_any(x, n, w.in, w.w, w.in, b0 * br, b1 * br, y);
  });
}

}  // namespace

void linear_bf16_any_order(const float* x, int64_t n, const Bf16Weight& w, float* y, ThreadPool* pool,
                           KernelLevel level, RowPath path) {
  const detail::OpsKernels* t = ops_of(level);
  if (any_order_blocked(t, n, w, path)) {
    boost::container::small_vector<float*, 64> rows(static_cast<size_t>(n));
    for (int64_t i = 0; i < n; ++i) rows[static_cast<size_t>(i)] = y + i * w.out;
    any_order_blocked_rows(t, x, n, w, rows.data(), pool);
    return;
  }
  // Below 8 rows (or always, for decode rows) the free-order matvec; else the bit-exact order,
  // whose GEMM is already compute-efficient. Free-order kernels for row-major (AMX tiles or vector
  // rows) and blocked weights (above); E4M3 storage takes the bit-exact order.
  const bool matvec = path == RowPath::kDecode || (path == RowPath::kAuto && n < 8);
  if (t == nullptr || !matvec || w.e4m3 != nullptr) {
    linear_bf16(x, n, w, y, pool, level);
    return;
  }
  // Weight rows split over the pool in chunks of >= 64 KiB; each weight row is widened once per four
  // rows of x (the chunk stays in L2 for the next four).
  const int64_t grain = std::max<int64_t>(1, (64 * 1024) / std::max<int64_t>(1, 2 * w.in));
  if (t->amx_matvec != nullptr && w.in > 0 && w.in % t->amx_chunk == 0) {
    // AMX: x packed once per group of up to amx_max_rows rows (the tile columns), then the weight
    // rows split over the pool. Whether this path runs depends on the weight's shape only, so a row's
    // result is the same in any batch. Groups beyond the first re-read the weights (batches > 16).
    for (int64_t i0 = 0; i0 < n; i0 += t->amx_max_rows) {
      const int64_t nx = std::min(t->amx_max_rows, n - i0);
      std::vector<uint16_t> packed(t->amx_pack_bytes(nx, w.in) / sizeof(uint16_t));
      t->amx_pack(x + i0 * w.in, nx, w.in, w.in, packed.data());
      run_range(pool, w.out, grain, [&](int64_t r0, int64_t r1) {
        t->amx_matvec(packed.data(), nx, w.w, w.in, r0, r1, y + i0 * w.out, w.out);
      });
    }
    return;
  }
  run_range(pool, w.out, grain, [&](int64_t r0, int64_t r1) {
    t->bf16_matvec_any(x, n, w.in, w.w, w.in, r0, r1, y, w.out);
  });
}
void linear_bf16_any_order(const float* x, int64_t n, const Bf16Weight& w, float* y, ThreadPool* pool, RowPath path) {
  linear_bf16_any_order(x, n, w, y, pool, best_kernel_level(), path);
}
void linear_bf16_any_order_rows(const float* x, int64_t n, const Bf16Weight& w, float* const* y, ThreadPool* pool,
                                KernelLevel level, RowPath path) {
  const detail::OpsKernels* t = ops_of(level);
  STRATA_CHECK(n <= 0 || any_order_blocked(t, n, w, path), "linear_bf16_any_order_rows: not a row-writing path");
  if (n > 0) any_order_blocked_rows(t, x, n, w, y, pool);
}
void linear_bf16_any_order_rows(const float* x, int64_t n, const Bf16Weight& w, float* const* y, ThreadPool* pool,
                                RowPath path) {
  linear_bf16_any_order_rows(x, n, w, y, pool, best_kernel_level(), path);
}
bool any_order_writes_rows(const Bf16Weight& w, int64_t n, RowPath path, KernelLevel level) {
  return any_order_blocked(ops_of(level), n, w, path);
}
bool any_order_writes_rows(const Bf16Weight& w, int64_t n, RowPath path) {
  return any_order_writes_rows(w, n, path, best_kernel_level());
}
bool any_order_prefers_blocked(int64_t out) {
  const KernelLevel level = best_kernel_level();
  return out % kBf16BlockRows == 0 && level != KernelLevel::kScalar && level != KernelLevel::kAmx;
}

// ---------------------------------------------------------------- indexer.h
void index_scores(const IndexScoreArgs& a, ThreadPool* pool, KernelLevel level) {
  const detail::OpsKernels* t = ops_of(level);
  if (t == nullptr) {
    ref::index_scores(a);
    return;
  }
  if (a.n_keys <= 0) return;
  const int64_t w = t->lanes, units = ceil_div(a.n_keys, w);
  // A chunk scores at least ~64K multiply-adds' worth of keys.
  const int64_t per_unit = std::max<int64_t>(1, w * a.n_heads * a.dim);
  const int64_t grain = std::max<int64_t>(1, 4 * kMinChunkElements / per_unit);
  run_range(pool, units, grain, [&](int64_t u0, int64_t u1) {
    t->index_scores(a.q, a.w, a.n_heads, a.dim, a.keys, a.key_stride, u0 * w, std::min(a.n_keys, u1 * w), a.scores);
  });
}
void index_scores(const IndexScoreArgs& a, ThreadPool* pool) { index_scores(a, pool, best_kernel_level()); }

void dequant_index_key(const uint8_t* row, int64_t dim, float* out, KernelLevel level) {
  const detail::OpsKernels* t = ops_of(level);
  if (t == nullptr) ref::dequant_index_key(row, dim, out);
  else t->dequant_fp4_e8m0_row(row, dim, out);
}
void dequant_index_key(const uint8_t* row, int64_t dim, float* out) {
  dequant_index_key(row, dim, out, best_kernel_level());
}

namespace {
// Order-preserving key of a score, branch-free (score signs are random): a larger score has a larger
// key; -0 and +0 share one key (they compare equal). -inf maps to kNegInfKey, below every other
// non-NaN score's key, and is never chosen.
constexpr uint32_t kNegInfKey = 0x007FFFFFu;
inline uint32_t score_key(float f) {
  uint32_t u;
  std::memcpy(&u, &f, sizeof u);
  u &= 0u - static_cast<uint32_t>((u & 0x7FFFFFFFu) != 0);  // -0 -> +0
  const uint32_t neg = static_cast<uint32_t>(static_cast<int32_t>(u) >> 31);
  return u ^ (neg | 0x80000000u);
}
}  // namespace

int topk_ascending(const float* scores, int64_t n, int k, int32_t* out) {
  if (k <= 0) return 0;
  using Cand = std::pair<uint32_t, int32_t>;  // (key, id)
  // A lower bound for the k-th largest key from a strided sample (with a margin of a few standard
  // deviations of the sample quantile), then one pass collecting the candidates at or above it, in
  // ascending id order. If fewer than k pass, the bound was too high: collect every valid score.
  uint32_t lower = kNegInfKey + 1;
  if (n > 4 * static_cast<int64_t>(k) && n > 4096) {
    constexpr int64_t kSample = 2048;
    boost::container::small_vector<uint32_t, kSample> sample(static_cast<size_t>(kSample));
    for (int64_t i = 0; i < kSample; ++i) sample[static_cast<size_t>(i)] = score_key(scores[i * (n / kSample)]);
    const double expect = static_cast<double>(k) * kSample / static_cast<double>(n);
    const int64_t idx = std::min<int64_t>(kSample - 1, static_cast<int64_t>(expect + 4.0 * std::sqrt(expect) + 8.0));
    std::nth_element(sample.begin(), sample.begin() + idx, sample.end(), std::greater<uint32_t>());
    lower = std::max(lower, sample[static_cast<size_t>(idx)]);
  }
  // Inline up to the selections of a decode step's indexer (top 512 of a few thousand keys).
  boost::container::small_vector<Cand, 2048> cand;
  for (;;) {
    cand.clear();
    for (int64_t i = 0; i < n; ++i) {
      const uint32_t kv = score_key(scores[i]);
      if (kv >= lower) cand.emplace_back(kv, static_cast<int32_t>(i));
    }
    if (static_cast<int64_t>(cand.size()) >= k || lower == kNegInfKey + 1) break;
    lower = kNegInfKey + 1;
  }
  int m = 0;
  if (static_cast<int64_t>(cand.size()) <= k) {
    for (const Cand& c : cand) out[m++] = c.second;
  } else {
    // The k-th best by (key desc, id asc) is the exact threshold of the selection.
    boost::container::small_vector<Cand, 2048> sel(cand.begin(), cand.end());
    std::nth_element(sel.begin(), sel.begin() + (k - 1), sel.end(), [](const Cand& a, const Cand& b) {
      return a.first > b.first || (a.first == b.first && a.second < b.second);
    });
    const Cand t = sel[static_cast<size_t>(k - 1)];
    for (const Cand& c : cand)
      if (c.first > t.first || (c.first == t.first && c.second <= t.second)) out[m++] = c.second;
  }
  for (int i = m; i < k; ++i) out[i] = -1;
  return m;
}

}  // namespace strata::kernels
