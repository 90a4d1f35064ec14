// Microbenchmarks of the per-token ops at DeepSeek V4.1 Flash shapes (dim 5120, hc_mult 4, 64 heads
// x 512, window 128 + top-512 compressed entries, indexer 32 heads x 128, expert inter 2304).
//
// Counters: bytes_per_second = bytes the op must read (weights, cache entries, activations);
// FLOP/s = its multiply-adds x 2. Decode-shaped benches whose operands a real decode step reads
// from DRAM (the mHC projections: 80 sites x 2 MB) rotate through >= 256 MiB of copies.
// Arguments: threads, kernel level (0 scalar, 1 avx2, 2 avx512, 3 avx512bf16; skipped if unsupported).
// Example: build/bench/ops_bench --benchmark_filter=Attention --benchmark_min_time=0.3
#include <benchmark/benchmark.h>

#include <cstdint>
#include <cstring>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "core/aligned_buffer.h"
#include "core/thread_pool.h"
#include "kernels/activation.h"
#include "kernels/attention.h"
#include "kernels/dispatch.h"
#include "kernels/indexer.h"
#include "kernels/linear.h"
#include "kernels/mhc.h"
#include "kernels/norm.h"
#include "kernels/quant.h"

namespace strata::kernels {
namespace {

constexpr size_t kColdBytes = 256u << 20;

std::vector<float> randn(size_t n, uint32_t seed, float scale = 1.0f) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> nd(0.0f, scale);
  std::vector<float> v(n);
  for (auto& x : v) x = nd(rng);
  return v;
}

bool setup(benchmark::State& state, KernelLevel* level, std::unique_ptr<ThreadPool>* pool) {
  *level = static_cast<KernelLevel>(state.range(1));
  if (!kernel_level_supported(*level)) {
    state.SkipWithError("kernel level not supported on this CPU");
    return false;
  }
  const int threads = static_cast<int>(state.range(0));
  if (threads > 1) *pool = std::make_unique<ThreadPool>(threads);
  state.SetLabel(std::string(kernel_level_name(*level)) + " t=" + std::to_string(threads));
  return true;
}

void counters(benchmark::State& state, double bytes, double flop) {
  state.SetBytesProcessed(static_cast<int64_t>(static_cast<double>(state.iterations()) * bytes));
  if (flop > 0) state.counters["FLOP/s"] = benchmark::Counter(flop, benchmark::Counter::kIsIterationInvariantRate);
}

// RMSNorm of n rows of 5120 (the attention/FFN input norms).
void BM_RmsNorm(benchmark::State& state, int64_t n) {
  KernelLevel level;
  std::unique_ptr<ThreadPool> pool;
  if (!setup(state, &level, &pool)) return;
  const int64_t dim = 5120;
  std::vector<float> x = randn(static_cast<size_t>(n * dim), 1), w = randn(static_cast<size_t>(dim), 2);
  std::vector<float> y(x.size());
  for (auto _ : state) {
    rms_norm(x.data(), n, dim, w.data(), 1e-6f, y.data(), pool.get(), level);
    benchmark::DoNotOptimize(y.data());
  }
  counters(state, 4.0 * static_cast<double>(n * dim), 0);
}

// SwiGLU over n rows of 2304 (n = 6: one token's routed experts; 512: a prefill chunk of the shared expert).
void BM_Swiglu(benchmark::State& state, int64_t n) {
  KernelLevel level;
  std::unique_ptr<ThreadPool> pool;
  if (!setup(state, &level, &pool)) return;
  const int64_t inter = 2304;
  std::vector<float> g = randn(static_cast<size_t>(n * inter), 3, 4.0f), u = randn(g.size(), 4, 4.0f);
  std::vector<float> s = randn(static_cast<size_t>(n), 5), y(g.size());
  for (auto _ : state) {
    swiglu(SwigluArgs{g.data(), u.data(), s.data(), n, inter, 10.0f, y.data()}, pool.get(), level);
    benchmark::DoNotOptimize(y.data());
  }
  counters(state, 8.0 * static_cast<double>(n * inter), 0);
}

// One mHC mixing site: the [24, 4*5120] f32 projection (linear_f32, k in order), the RMS factor and
// the pre/post/Sinkhorn split, for n tokens. Decode rotates the projection over cold copies.
void BM_HcMixes(benchmark::State& state, int64_t n) {
  KernelLevel level;
  std::unique_ptr<ThreadPool> pool;
  if (!setup(state, &level, &pool)) return;
  const int hc = 4, mix = (2 + hc) * hc;
  const int64_t width = hc * 5120;
  const size_t w_bytes = static_cast<size_t>(mix * width) * sizeof(float);
  const size_t copies = n == 1 ? kColdBytes / w_bytes + 1 : 1;
  std::vector<std::vector<float>> fn;
  for (size_t c = 0; c < copies; ++c) fn.push_back(randn(static_cast<size_t>(mix * width), 10 + static_cast<uint32_t>(c), 0.01f));
  std::vector<float> x = randn(static_cast<size_t>(n * width), 6), base = randn(static_cast<size_t>(mix), 7);
  const float scale[3] = {0.5f, 0.5f, 1.0f};
  std::vector<float> m(static_cast<size_t>(n * mix)), pre(static_cast<size_t>(n * hc)), post(pre.size()),
      comb(static_cast<size_t>(n * hc * hc));
  size_t i = 0;
  for (auto _ : state) {
    linear_f32(x.data(), n, F32Weight{fn[i].data(), mix, width}, m.data(), pool.get(), level);
    for (int64_t t = 0; t < n; ++t) {
      const float r = rms_rsqrt(x.data() + t * width, width, 1e-6f);
      for (int k = 0; k < mix; ++k) m[static_cast<size_t>(t * mix + k)] *= r;
    }
    hc_split_sinkhorn(m.data(), n, HcSplitParams{hc, 20, 1e-6f, scale, base.data()}, pre.data(), post.data(),
                      comb.data(), pool.get(), level);
    benchmark::DoNotOptimize(comb.data());
    i = (i + 1) % copies;
  }
  counters(state, static_cast<double>(w_bytes), 2.0 * static_cast<double>(n * mix * width));
}

// hc_pre then hc_post over n tokens of 4 x 5120 streams.
void BM_HcPrePost(benchmark::State& state, int64_t n) {
  KernelLevel level;
  std::unique_ptr<ThreadPool> pool;
  if (!setup(state, &level, &pool)) return;
  const int hc = 4;
  const int64_t dim = 5120;
  std::vector<float> x = randn(static_cast<size_t>(n * hc * dim), 8), f = randn(static_cast<size_t>(n * dim), 9);
  std::vector<float> pre = randn(static_cast<size_t>(n * hc), 10), post = randn(pre.size(), 11);
  std::vector<float> comb = randn(static_cast<size_t>(n * hc * hc), 12), y(f.size());
  for (auto _ : state) {
    hc_pre(x.data(), pre.data(), n, hc, dim, y.data(), pool.get(), level);
    hc_post(x.data(), f.data(), post.data(), comb.data(), n, hc, dim, pool.get(), level);
    benchmark::DoNotOptimize(x.data());
  }
  counters(state, 4.0 * static_cast<double>(n * (2 * hc + 1) * dim), 0);
}

// Decode attention of one query: H heads x D over `entries` cache entries (the release: 64 x 512 over
// window 128 + top-512).
void BM_Attention(benchmark::State& state, int H, int64_t D, int64_t entries) {
  KernelLevel level;
  std::unique_ptr<ThreadPool> pool;
  if (!setup(state, &level, &pool)) return;
  std::vector<float> cache = randn(static_cast<size_t>(entries * D), 13, 0.5f);
  act_quant_fp8_inplace(cache.data(), static_cast<int64_t>(cache.size()), 32);
  std::vector<const float*> ent;
  for (int64_t j = 0; j < entries; ++j) ent.push_back(cache.data() + j * D);
  std::vector<float> q = randn(static_cast<size_t>(H * D), 14, 0.2f), sinks = randn(H, 15), out(q.size());
  const SparseAttentionArgs a{q.data(), H, D, ent.data(), entries, sinks.data(), 0.0441941738f, out.data()};
  for (auto _ : state) {
    sparse_attention(a, pool.get(), level);
    benchmark::DoNotOptimize(out.data());
  }
  counters(state, 4.0 * static_cast<double>(entries * D), 4.0 * H * static_cast<double>(entries * D));
}

// Indexer scores of one query (32 heads x 128) against n_keys FP4-rounded keys.
void BM_IndexScores(benchmark::State& state, int64_t n_keys) {
  KernelLevel level;
  std::unique_ptr<ThreadPool> pool;
  if (!setup(state, &level, &pool)) return;
  const int H = 32;
  const int64_t dim = 128;
  std::vector<float> keys = randn(static_cast<size_t>(n_keys * dim), 16), q = randn(static_cast<size_t>(H * dim), 17);
  fp4_quant_e8m0_inplace(keys.data(), static_cast<int64_t>(keys.size()), 32);
  fp4_quant_e8m0_inplace(q.data(), static_cast<int64_t>(q.size()), 32);
  std::vector<float> w = randn(H, 18), s(static_cast<size_t>(n_keys));
  for (auto _ : state) {
    index_scores(IndexScoreArgs{q.data(), w.data(), H, dim, keys.data(), dim, n_keys, s.data()}, pool.get(), level);
    benchmark::DoNotOptimize(s.data());
  }
  counters(state, 4.0 * static_cast<double>(n_keys * dim), 2.0 * H * static_cast<double>(n_keys * dim));
}

// Top-512 of n index scores: range(0) = 0 the reference (partial sort), 1 the fast path.
void BM_TopK(benchmark::State& state) {
  const int64_t n = state.range(1);
  const bool fast = state.range(0) != 0;
  std::vector<float> s = randn(static_cast<size_t>(n), 19);
  std::vector<int32_t> out(512);
  for (auto _ : state) {
    if (fast) topk_ascending(s.data(), n, 512, out.data());
    else ref::topk_ascending(s.data(), n, 512, out.data());
    benchmark::DoNotOptimize(out.data());
  }
  state.SetLabel(fast ? "sample bound + select" : "ref partial_sort");
  counters(state, 4.0 * static_cast<double>(n), 0);
}

// exp_f32 over 64K values (the softmax / SiLU building block).
void BM_Exp(benchmark::State& state) {
  KernelLevel level;
  std::unique_ptr<ThreadPool> pool;
  if (!setup(state, &level, &pool)) return;
  std::vector<float> x = randn(1 << 16, 20, 10.0f), y(x.size());
  for (auto _ : state) {
    exp_f32(x.data(), static_cast<int64_t>(x.size()), y.data(), level);
    benchmark::DoNotOptimize(y.data());
  }
  counters(state, 4.0 * static_cast<double>(x.size()), 0);
}

void levels(benchmark::internal::Benchmark* b) {
  for (int l : {0, 1, 2}) b->Args({1, l});
  b->UseRealTime()->Unit(benchmark::kMicrosecond);
}
void levels_and_threads(benchmark::internal::Benchmark* b) {
  for (int t : {1, 2})
    for (int l : {0, 1, 2}) b->Args({t, l});
  b->UseRealTime()->Unit(benchmark::kMicrosecond);
}

BENCHMARK_CAPTURE(BM_RmsNorm, decode_5120, 1)->Apply(levels);
BENCHMARK_CAPTURE(BM_RmsNorm, prefill512_5120, 512)->Apply(levels_and_threads);
BENCHMARK_CAPTURE(BM_Swiglu, decode_6x2304, 6)->Apply(levels);
BENCHMARK_CAPTURE(BM_Swiglu, prefill512_2304, 512)->Apply(levels_and_threads);
BENCHMARK_CAPTURE(BM_HcMixes, decode_24x20480, 1)->Apply(levels_and_threads);
BENCHMARK_CAPTURE(BM_HcMixes, prefill512_24x20480, 512)->Apply(levels_and_threads);
BENCHMARK_CAPTURE(BM_HcPrePost, decode_4x5120, 1)->Apply(levels);
BENCHMARK_CAPTURE(BM_HcPrePost, prefill512_4x5120, 512)->Apply(levels_and_threads);
BENCHMARK_CAPTURE(BM_Attention, decode_64x512_640, 64, 512, 640)->Apply(levels_and_threads);
// The 8 GB scaled checkpoint's shape (48 heads x 128, ~450 entries at the roofline's context).
BENCHMARK_CAPTURE(BM_Attention, decode_48x128_450, 48, 128, 450)->Apply(levels_and_threads);
BENCHMARK_CAPTURE(BM_IndexScores, decode_32x128_8k, 8192)->Apply(levels_and_threads);
BENCHMARK_CAPTURE(BM_IndexScores, decode_32x128_32k, 32768)->Apply(levels_and_threads);
BENCHMARK(BM_TopK)->Args({0, 32768})->Args({1, 32768})->Args({0, 262144})->Args({1, 262144})->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_Exp)->Apply(levels);

}  // namespace
}  // namespace strata::kernels

BENCHMARK_MAIN();
