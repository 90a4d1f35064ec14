// The generic linear driver: threading, scratch and the decode/prefill split, over the per-level
// kernels of kernels/detail/kernel_table.h. Compiled for baseline x86-64.
//
// decode (n < gemm_min_rows): the rows of x are prepared once (quantised, laid out for the level),
//   then output rows are split over the pool, each thread streaming its own contiguous share of
//   them in steps of about kMinChunkBytes of weights (ThreadPool::parallel_for_shares); each weight
//   byte is read from memory once and decoded once per group of max_nx rows.
// prefill (n >= gemm_min_rows): x is processed in chunks of kRowChunk rows. Per chunk the rows are quantised and
//   packed in groups of engine.xg (in parallel), then tasks = weight tiles x group ranges run in
//   parallel; a task dequantises its tile once and multiplies every group of its range with it, so
//   dequantisation costs 1/xg.. of the multiply work and each packed chunk stays in L2/L3.
#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <type_traits>
#include <vector>

#include <boost/container/small_vector.hpp>

#include "core/status.h"
#include "kernels/detail/inline_scratch.h"
#include "kernels/detail/kernel_table.h"

namespace strata::kernels::detail {
namespace {

// Weight bytes of a decode matvec's step and the floor of a batched pass's chunk size (rows rounded
// down to whole units; a job's last chunk is its remainder): a matvec of at most this many bytes
// (router, 8 x 64) stays serial.
constexpr int64_t kMinChunkBytes = 64 * 1024;
// Chunks a thread has of a batched pass (its share walked in order, ThreadPool::parallel_for_shares):
// the last step another thread may wait for is 1 / (16 T) of the pass.
constexpr int64_t kChunksPerThread = 16;
// Rows of x packed at a time in prefill: 256 rows x 5120 inputs x 2 B (bf16) = 2.5 MiB, L3-resident.
constexpr int64_t kRowChunk = 256;

// Decode-sized scratch: a decode step's prepared rows (8 rows of a 5120-wide FP8 input: 80 KiB)
// stay on the stack, so a decode matvec allocates nothing.
using DecodeScratch = InlineScratch<96 * 1024>;

// The per-job bookkeeping of a batched pass: inline up to a decode step's job count (8 rows pick
// at most 48 experts x 2 matrices), so the pass allocates nothing.
template <class T>
using JobVector = boost::container::small_vector<T, 96>;

int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

template <class W>
int64_t weight_row_bytes(const W& w) {
  if constexpr (std::is_same_v<W, Fp8Weight>) return w.in;
  else if constexpr (std::is_same_v<W, Fp4Weight>) return w.in / 2;
  else if constexpr (std::is_same_v<W, Bf16Weight>) return w.row_bytes();
  else return 4 * w.in;
}

void run_range(ThreadPool* pool, int64_t n, int64_t grain, FunctionRef<void(int64_t, int64_t)> fn) {
  if (n <= 0) return;
  if (pool != nullptr) pool->parallel_for(n, fn, grain);
  else fn(0, n);
}

// A decode pass over weight rows: each thread streams its own contiguous share of the rows, `step`
// units at a time, then helps with what is left of the others' (ThreadPool::parallel_for_shares).
// The chunk bounds then depend on timing; a row's bits do not (FormatKernels::matvec's contract).
void run_rows(ThreadPool* pool, int64_t n, int64_t step, FunctionRef<void(int64_t, int64_t)> fn) {
  if (n <= 0) return;
  if (pool != nullptr) pool->parallel_for_shares(n, fn, step);
  else fn(0, n);
}

template <class W>
void run_matvec(const FormatKernels<W>& f, const float* x, int64_t n, const W& w, float* y, ThreadPool* pool) {
  const size_t act_bytes = f.vec_act_bytes ? (f.vec_act_bytes(w.in) + 63) / 64 * 64 : 0;
  DecodeScratch act(act_bytes * static_cast<size_t>(n));
  for (int64_t i = 0; i < n && act_bytes != 0; ++i) f.vec_prep(x + i * w.in, w.in, act.get() + i * act_bytes);
  const void* a = act_bytes != 0 ? static_cast<const void*>(act.get()) : static_cast<const void*>(x);
  const size_t stride = act_bytes != 0 ? act_bytes : static_cast<size_t>(w.in) * sizeof(float);
  const int64_t unit = f.vec_row_unit;
  const int64_t n_units = ceil_div(w.out, unit);
  const int64_t grain = std::max<int64_t>(1, kMinChunkBytes / std::max<int64_t>(1, unit * weight_row_bytes(w)));
  // One pass over each chunk of weight rows serves every group of x rows (the chunk stays in L2:
  // with more than one group the kernels prefetch into every cache level, `once` false).
  run_rows(pool, n_units, grain, [&](int64_t u0, int64_t u1) {
    const int64_t r0 = u0 * unit, r1 = std::min(u1 * unit, w.out);
    for (int64_t i = 0; i < n; i += f.max_nx) {
      f.matvec(static_cast<const unsigned char*>(a) + static_cast<size_t>(i) * stride, std::min(f.max_nx, n - i),
               stride, w, r0, r1, y + i * w.out, w.out, n <= f.max_nx);
    }
  });
}

template <class W>
void run_gemm(const LevelKernels& level, const FormatKernels<W>& f, const float* x, int64_t n, const W& w, float* y,
              ThreadPool* pool) {
  const GemmEngine& e = *f.engine;
  const int64_t in = w.in, out = w.out;
  const int64_t ldw = ceil_div(in, e.k_align) * e.k_align;
  const int64_t xg = e.xg, tile_rows = e.tile_rows;
  const int64_t n_threads = pool != nullptr ? pool->n_threads() : 1;
  const int64_t row_chunk = std::max(xg, kRowChunk / xg * xg);
  const int64_t n_tiles = ceil_div(out, tile_rows);
  const size_t panel_bytes = e.x_panel_bytes(in);
  HeapScratch panels(static_cast<size_t>(ceil_div(std::min(n, row_chunk), xg)) * panel_bytes);

  for (int64_t i0 = 0; i0 < n; i0 += row_chunk) {
    const int64_t rows = std::min(row_chunk, n - i0);
    const int64_t n_groups = ceil_div(rows, xg);

    // Quantise and pack the groups of this chunk.
    run_range(pool, n_groups, 1, [&](int64_t g0, int64_t g1) {
      HeapScratch tmp(f.quantise_x ? static_cast<size_t>(xg * in) * sizeof(float) : 0);
      for (int64_t g = g0; g < g1; ++g) {
        const int64_t grows = std::min(xg, rows - g * xg);
        const float* src = x + (i0 + g * xg) * in;
        if (f.quantise_x) {
          float* t = reinterpret_cast<float*>(tmp.get());
          std::memcpy(t, src, static_cast<size_t>(grows * in) * sizeof(float));
          level.act_quant_fp8(t, grows * in);
          src = t;
        }
        e.pack_x(src, in, grows, in, panels.get() + g * panel_bytes);
      }
    });

    // Tiles x group ranges: split the groups only when there are too few tiles to feed the pool.
    int64_t splits = 1;
    if (n_threads > 1) splits = std::clamp<int64_t>(ceil_div(4 * n_threads, n_tiles), 1, n_groups);
    const int64_t groups_per_split = ceil_div(n_groups, splits);
    splits = ceil_div(n_groups, groups_per_split);
    run_range(pool, n_tiles * splits, 1, [&](int64_t t0, int64_t t1) {
      HeapScratch tile(f.pack_w ? static_cast<size_t>(tile_rows * ldw * e.w_elem_bytes) : 0);
      int64_t packed = -1;
      for (int64_t t = t0; t < t1; ++t) {
        const int64_t tile_index = t / splits, split = t % splits;
        const int64_t r0 = tile_index * tile_rows, r1 = std::min(out, r0 + tile_rows);
        const void* tile_ptr = nullptr;
        if (f.pack_w) {
          if (packed != tile_index) f.pack_w(w, r0, r1, ldw, tile.get());
          packed = tile_index;
          tile_ptr = tile.get();
        } else if constexpr (std::is_same_v<W, F32Weight>) {
          tile_ptr = w.w + r0 * in;
        }
        const int64_t g_end = std::min(n_groups, (split + 1) * groups_per_split);
        for (int64_t g = split * groups_per_split; g < g_end; ++g) {
          e.gemm(panels.get() + g * panel_bytes, std::min(xg, rows - g * xg), tile_ptr, ldw, r1 - r0, in,
                 y + (i0 + g * xg) * out + r0, out);
        }
      }
    });
  }
}

template <class W>
const FormatKernels<W>& format_of(const LevelKernels& level) {
  if constexpr (std::is_same_v<W, Fp8Weight>) return level.fp8;
  else if constexpr (std::is_same_v<W, Fp4Weight>) return level.fp4;
  else if constexpr (std::is_same_v<W, Bf16Weight>) return level.bf16;
  else return level.f32;
}

// Whether the rows of a call take the matvec (RowPath; kAuto: n below the GEMM threshold).
template <class W>
bool use_matvec(const FormatKernels<W>& f, int64_t n, RowPath path) {
  if (f.engine == nullptr) return true;
  if (path == RowPath::kDecode) return true;
  if (path == RowPath::kPrompt) return false;
  return n < f.gemm_min_rows;
}

// The row count `supports` judges: the regime is what matters to it (the BF16 level's FP4 matvec
// takes any scale, its GEMM does not), so a forced regime is shown as a count inside it.
template <class W>
int64_t regime_rows(const FormatKernels<W>& f, int64_t n, RowPath path) {
  if (path == RowPath::kDecode) return 1;
  if (path == RowPath::kPrompt) return std::max(n, f.gemm_min_rows);
  return n;
}

// The scalar definition, where the lowest level refuses a weight (FP4 scale codes whose values leave
// the floats: F32Engine::fp4_supports). Slow, and only for weights no checkpoint has.
template <class W>
void reference(const float* x, int64_t n, const W& w, float* y) {
  if constexpr (std::is_same_v<W, Fp8Weight>) ref::linear_fp8(x, n, w, y);
  else if constexpr (std::is_same_v<W, Fp4Weight>) ref::linear_fp4(x, n, w, y);
  else if constexpr (std::is_same_v<W, Bf16Weight>) ref::linear_bf16(x, n, w, y);
  else ref::linear_f32(x, n, w, y);
}

template <class W>
void run(const LevelKernels& level, const float* x, int64_t n, const W& w, float* y, ThreadPool* pool, RowPath path) {
  if (n <= 0 || w.out <= 0) return;
  if constexpr (std::is_same_v<W, Bf16Weight>) {
    STRATA_DCHECK(!w.blocked || w.out % kBf16BlockRows == 0, "blocked bf16 weight: out must be a multiple of 16");
    STRATA_DCHECK(w.e4m3 == nullptr || w.blocked, "bf16 weight with E4M3 storage: must be blocked");
  }
  if constexpr (std::is_same_v<W, Fp8Weight> || std::is_same_v<W, Fp4Weight>) {
    STRATA_DCHECK(w.in % 32 == 0, "linear_fp8/fp4: in must be a multiple of 32");
  }
  const FormatKernels<W>& f = format_of<W>(level);
  if (f.supports != nullptr && !f.supports(w, regime_rows(f, n, path))) {
    if (level.fallback != nullptr) run(*level.fallback, x, n, w, y, pool, path);
    else reference(x, n, w, y);
    return;
  }
  if (use_matvec(f, n, path)) run_matvec(f, x, n, w, y, pool);
  else run_gemm(level, f, x, n, w, y, pool);
}

// A range of weight rows of one batched job, for the shared pool pass.
struct BatchChunk {
  size_t job;
  int64_t r0, r1;
};
// A pass's row chunks: kChunksPerThread a thread plus the jobs' remainders (one or more a job),
// inline up to 8 threads' worth beside a decode step's jobs (24 bytes a chunk: 6 KiB of stack a
// format), so the pass allocates nothing.
using ChunkVector = boost::container::small_vector<BatchChunk, 256>;

// One format's share of a batched pass: which jobs the matvec takes (the others have run by the
// time the constructor returns), their prepared activations and their row chunks.
template <class W>
class BatchPass {
 public:
  BatchPass(const LevelKernels& level, std::span<const LinearJob<W>> jobs, ThreadPool* pool)
      : f_(format_of<W>(level)), jobs_(jobs) {
    // Decode-sized jobs this level computes itself share the pass; the rest run one by one.
    for (size_t j = 0; j < jobs.size(); ++j) {
      const LinearJob<W>& job = jobs[j];
      if (job.n <= 0 || job.w.out <= 0) continue;
      const bool here = f_.supports == nullptr || f_.supports(job.w, regime_rows(f_, job.n, job.path));
      if constexpr (std::is_same_v<W, Bf16Weight>) {
        STRATA_DCHECK(!job.w.blocked || job.w.out % kBf16BlockRows == 0, "blocked bf16 weight: out must be a multiple of 16");
        STRATA_DCHECK(job.w.e4m3 == nullptr || job.w.blocked, "bf16 weight with E4M3 storage: must be blocked");
      }
      if (here && use_matvec(f_, job.n, job.path)) {
        if constexpr (std::is_same_v<W, Fp8Weight> || std::is_same_v<W, Fp4Weight>) {
          STRATA_DCHECK(job.w.in % 32 == 0, "linear batch: in must be a multiple of 32");
        }
        vec_.push_back(j);
        bytes_ += job.w.out * weight_row_bytes(job.w);
      } else {
        run(level, job.x, job.n, job.w, job.y, pool, job.path);
      }
    }
  }

  // Whether any job is in the pass, and their weight bytes.
  bool empty() const { return vec_.empty(); }
  int64_t bytes() const { return bytes_; }
  int64_t n_chunks() const { return static_cast<int64_t>(chunks_.size()); }

  // Prepares the activations (one per distinct (x, n, in); w1 and w3 of an expert share theirs;
  // formats whose matvec reads x itself, bf16 and f32, use the rows of x) and cuts each job into
  // chunks of about chunk_bytes of weights, each a whole number of the level's row units.
  void prepare(int64_t chunk_bytes) {
    prep_ = f_.vec_act_bytes != nullptr;
    act_offset_.resize(vec_.size());
    owner_.resize(vec_.size());
    size_t act_total = 0;
    for (size_t i = 0; i < vec_.size() && prep_; ++i) {
      const LinearJob<W>& job = jobs_[vec_[i]];
      owner_[i] = i;
      for (size_t k = 0; k < i; ++k) {
        const LinearJob<W>& o = jobs_[vec_[k]];
        if (owner_[k] == k && o.x == job.x && o.n == job.n && o.w.in == job.w.in) {
          owner_[i] = k;
          break;
        }
      }
      if (owner_[i] == i) {
        act_offset_[i] = act_total;
        act_total += stride_of(job) * static_cast<size_t>(job.n);
      }
    }
    act_.resize(act_total);
    for (size_t i = 0; i < vec_.size() && prep_; ++i) {
      if (owner_[i] != i) continue;
      const LinearJob<W>& job = jobs_[vec_[i]];
      for (int64_t r = 0; r < job.n; ++r)
        f_.vec_prep(job.x + r * job.w.in, job.w.in, act_.get() + act_offset_[i] + r * stride_of(job));
    }
    for (size_t i = 0; i < vec_.size(); ++i) {
      const LinearJob<W>& job = jobs_[vec_[i]];
      const int64_t unit = f_.vec_row_unit;
      const int64_t rows = unit * std::max<int64_t>(1, chunk_bytes / std::max<int64_t>(1, unit * weight_row_bytes(job.w)));
      for (int64_t r0 = 0; r0 < job.w.out; r0 += rows) chunks_.push_back({i, r0, std::min(job.w.out, r0 + rows)});
    }
  }

  void run_chunk(int64_t c) const {
    const BatchChunk& ch = chunks_[static_cast<size_t>(c)];
    const LinearJob<W>& job = jobs_[vec_[ch.job]];
    const size_t stride = stride_of(job);
    const unsigned char* a = prep_ ? act_.get() + act_offset_[owner_[ch.job]] : reinterpret_cast<const unsigned char*>(job.x);
    for (int64_t i = 0; i < job.n; i += f_.max_nx)
      f_.matvec(a + static_cast<size_t>(i) * stride, std::min(f_.max_nx, job.n - i), stride, job.w, ch.r0, ch.r1,
                job.y + i * job.w.out, job.w.out, job.n <= f_.max_nx);
  }

 private:
  size_t stride_of(const LinearJob<W>& job) const {
    return prep_ ? (f_.vec_act_bytes(job.w.in) + 63) / 64 * 64 : static_cast<size_t>(job.w.in) * sizeof(float);
  }

  const FormatKernels<W>& f_;
  std::span<const LinearJob<W>> jobs_;
  JobVector<size_t> vec_;
  int64_t bytes_ = 0;
  bool prep_ = false;
  JobVector<size_t> act_offset_;
  JobVector<size_t> owner_;  // index into vec_ of the job whose preparation is used
  // Prepared activations: formats whose matvec reads x itself (bf16, f32) keep nothing inline.
  InlineScratch<(std::is_same_v<W, Fp8Weight> || std::is_same_v<W, Fp4Weight>) ? 96 * 1024 : 0> act_{0};
  ChunkVector chunks_;
};

// The chunk size of a pass: about kChunksPerThread chunks a thread of the pass's bytes, at least
// kMinChunkBytes (a chunk holds at most this many bytes of whole row units).
int64_t batch_chunk_bytes(int64_t total_bytes, ThreadPool* pool) {
  const int64_t n_threads = pool != nullptr ? pool->n_threads() : 1;
  return std::max(kMinChunkBytes, total_bytes / (kChunksPerThread * n_threads));
}

template <class W>
void run_batch(const LevelKernels& level, std::span<const LinearJob<W>> jobs, ThreadPool* pool) {
  BatchPass<W> pass(level, jobs, pool);
  if (pass.empty()) return;
  pass.prepare(batch_chunk_bytes(pass.bytes(), pool));
  run_rows(pool, pass.n_chunks(), 1, [&](int64_t c0, int64_t c1) {
    for (int64_t c = c0; c < c1; ++c) pass.run_chunk(c);
  });
}

// Jobs of every format in one pass: each job's rows as run_batch computes them (the chunk bounds
// follow the pass's bytes; a row's bits do not depend on them).
void run_batch_all(const LevelKernels& level, const LinearBatch& jobs, ThreadPool* pool) {
  BatchPass<Fp8Weight> a(level, jobs.fp8, pool);
  BatchPass<Fp4Weight> b(level, jobs.fp4, pool);
  BatchPass<Bf16Weight> c(level, jobs.bf16, pool);
  BatchPass<F32Weight> d(level, jobs.f32, pool);
  if (a.empty() && b.empty() && c.empty() && d.empty()) return;
  const int64_t total = a.bytes() + b.bytes() + c.bytes() + d.bytes();
  const int64_t chunk_bytes = batch_chunk_bytes(total, pool);
  a.prepare(chunk_bytes);
  b.prepare(chunk_bytes);
  c.prepare(chunk_bytes);
  d.prepare(chunk_bytes);
  const int64_t na = a.n_chunks(), nb = na + b.n_chunks(), nc = nb + c.n_chunks();
  run_rows(pool, nc + d.n_chunks(), 1, [&](int64_t c0, int64_t c1) {
    for (int64_t i = c0; i < c1; ++i) {
      if (i < na) a.run_chunk(i);
      else if (i < nb) b.run_chunk(i - na);
      else if (i < nc) c.run_chunk(i - nb);
      else d.run_chunk(i - nc);
    }
  });
}

}  // namespace

void run_linear_batch(const LevelKernels& level, std::span<const LinearJob<Fp8Weight>> jobs, ThreadPool* pool) {
  run_batch(level, jobs, pool);
}
void run_linear_batch(const LevelKernels& level, std::span<const LinearJob<Fp4Weight>> jobs, ThreadPool* pool) {
  run_batch(level, jobs, pool);
}
void run_linear_batch(const LevelKernels& level, std::span<const LinearJob<Bf16Weight>> jobs, ThreadPool* pool) {
  run_batch(level, jobs, pool);
}
void run_linear_batch(const LevelKernels& level, const LinearBatch& jobs, ThreadPool* pool) {
  run_batch_all(level, jobs, pool);
}

void run_linear(const LevelKernels& level, const float* x, int64_t n, const Fp8Weight& w, float* y, ThreadPool* pool,
                RowPath path) {
  run(level, x, n, w, y, pool, path);
}
void run_linear(const LevelKernels& level, const float* x, int64_t n, const Fp4Weight& w, float* y, ThreadPool* pool,
                RowPath path) {
  run(level, x, n, w, y, pool, path);
}
void run_linear(const LevelKernels& level, const float* x, int64_t n, const Bf16Weight& w, float* y, ThreadPool* pool,
                RowPath path) {
  run(level, x, n, w, y, pool, path);
}
void run_linear(const LevelKernels& level, const float* x, int64_t n, const F32Weight& w, float* y, ThreadPool* pool,
                RowPath path) {
  run(level, x, n, w, y, pool, path);
}

}  // namespace strata::kernels::detail
