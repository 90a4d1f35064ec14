// strata probe: CPU, RAM, memory bandwidth, kernel rates, attention / top-k rates, GPUs; the disk
// part is in probe_disk.cpp. Numbers are GB = 1e9 bytes per second.
#include "tools/probe.h"

#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <filesystem>
#include <initializer_list>
#include <memory>
#include <nlohmann/json.hpp>
#include <thread>
#include <utility>

#include "core/aligned_buffer.h"
#include "core/cpu_features.h"
#include "core/huge_pages.h"
#include "core/thread_pool.h"
#include "io/file.h"
#include "kernels/dispatch.h"
#include "kernels/linear.h"
#include "kernels/attention.h"
#include "kernels/indexer.h"
#include "kernels/activation.h"
#include "kernels/mhc.h"
#include "kernels/norm.h"

namespace strata::tools {

namespace {

using clock_type = std::chrono::steady_clock;
using ojson = nlohmann::ordered_json;

double seconds_since(clock_type::time_point t0) {
  return std::chrono::duration<double>(clock_type::now() - t0).count();
}

// Seconds per call of f(i): one warm-up call, then calls until `budget` seconds (at least 3).
template <class F>
double time_per_call(F&& f, double budget) {
  f(0);
  int64_t calls = 0;
  const auto t0 = clock_type::now();
  double el = 0;
  do {
    f(++calls);
    el = seconds_since(t0);
  } while (el < budget || calls < 3);
  return el / static_cast<double>(calls);
}

// xorshift64 fill; `fix` maps each byte (keeps E4M3 codes finite, scales in a safe range).
template <class Fix>
void fill_bytes(uint8_t* p, size_t n, uint64_t seed, Fix fix) {
  uint64_t s = seed * 0x9E3779B97F4A7C15ull + 1;
  for (size_t i = 0; i < n; i += 8) {
    s ^= s << 13;
    s ^= s >> 7;
    s ^= s << 17;
    uint8_t b[8];
    std::memcpy(b, &s, 8);
    for (size_t j = 0; j < 8 && i + j < n; ++j) p[i + j] = fix(b[j]);
  }
}
uint8_t finite_e4m3(uint8_t c) { return (c & 0x7F) == 0x7F ? static_cast<uint8_t>(c ^ 1) : c; }
uint8_t safe_scale(uint8_t c) { return static_cast<uint8_t>(120 + c % 8); }
// Finite values of modest magnitude: bf16 / f32 words with exponent near 127 (no denormals, which
// some cores run slowly, and no NaN).
void fill_bf16(uint16_t* p, size_t n, uint64_t seed) {
  uint64_t s = seed * 0x9E3779B97F4A7C15ull + 7;
  for (size_t i = 0; i < n; ++i) {
    s ^= s << 13;
    s ^= s >> 7;
    s ^= s << 17;
    p[i] = static_cast<uint16_t>(((s & 1) << 15) | ((120 + (s >> 1) % 8) << 7) | ((s >> 8) & 0x7F));
  }
}
void fill_f32(float* p, size_t n, uint64_t seed) {
  uint32_t s = static_cast<uint32_t>(seed) * 2654435761u + 1;
  for (size_t i = 0; i < n; ++i) {
    s = s * 1664525u + 1013904223u;
    p[i] = static_cast<float>(static_cast<int32_t>(s >> 8) - (1 << 23)) * (1.0f / (1 << 23));
  }
}

// One weight of a kind over caller-owned bytes.
struct AnyWeight {
  LinearKind kind;
  const uint8_t* w;
  const uint8_t* s;
  int64_t out, in;
  kernels::Fp8Weight fp8{};  // kFp8: with its scale range, as the model binds it (kernels::with_scale_range)
  void apply(const float* x, int64_t n, float* y, ThreadPool* pool) const {
    switch (kind) {
      case LinearKind::kFp8:
        kernels::linear_fp8(x, n, fp8, y, pool);
        break;
      case LinearKind::kFp4: kernels::linear_fp4(x, n, kernels::Fp4Weight{w, s, out, in}, y, pool); break;
      case LinearKind::kBf16:
        kernels::linear_bf16(x, n, kernels::Bf16Weight{reinterpret_cast<const uint16_t*>(w), out, in}, y, pool);
        break;
      case LinearKind::kBf16Any:  // the layout the model binds the LM head in (model/weights.cpp)
        kernels::linear_bf16_any_order(
            x, n,
            kernels::Bf16Weight{reinterpret_cast<const uint16_t*>(w), out, in, kernels::any_order_prefers_blocked(out)},
            y, pool);
        break;
      case LinearKind::kF32:
        kernels::linear_f32(x, n, kernels::F32Weight{reinterpret_cast<const float*>(w), out, in}, y, pool);
        break;
      case LinearKind::kBf16E4m3: {  // as model/weights.cpp binds an FP8 attn.wo_a
        kernels::Bf16Weight b{nullptr, out, in, /*blocked=*/true};
        b.e4m3 = w;
        b.e4m3_scale = s;
        kernels::linear_bf16(x, n, b, y, pool);
        break;
      }
    }
  }
};

// Weight and scale bytes of a kind and shape.
size_t weight_bytes(LinearKind k, int64_t out, int64_t in) {
  switch (k) {
    case LinearKind::kFp8:
    case LinearKind::kBf16E4m3: return static_cast<size_t>(out * in);
    case LinearKind::kFp4: return static_cast<size_t>(out * in / 2);
    case LinearKind::kBf16:
    case LinearKind::kBf16Any: return static_cast<size_t>(out * in * 2);
    case LinearKind::kF32: return static_cast<size_t>(out * in * 4);
  }
  return 0;
}
size_t scale_bytes(LinearKind k, int64_t out, int64_t in) {
  switch (k) {
    case LinearKind::kFp8:
    case LinearKind::kBf16E4m3: return static_cast<size_t>(((out + 31) / 32) * ((in + 31) / 32));
    case LinearKind::kFp4: return static_cast<size_t>(out * (in / 32));
    default: return 0;
  }
}

// `copies` weights of one kind and shape, filled with valid codes, in one arena on huge pages at
// 64-byte boundaries, as the resident store holds a checkpoint's tensors (core/huge_pages.h: a
// matvec rate timed on 4 KiB pages is not the rate decode meets).
struct WeightSet {
  HugePageBytes arena;
  std::vector<uint8_t*> w, s;
  std::vector<AnyWeight> views;
  WeightSet(LinearKind k, int64_t out, int64_t in, size_t copies) {
    const size_t wb = weight_bytes(k, out, in), sb = std::max<size_t>(scale_bytes(k, out, in), 1);
    auto span = [](size_t n) { return (n + 63) / 64 * 64; };
    arena = alloc_huge_page_bytes(copies * (span(wb) + span(sb)));
    uint8_t* at = arena.get();
    for (size_t i = 0; i < copies; ++i, at += span(wb) + span(sb)) {
      w.push_back(at);
      s.push_back(at + span(wb));
      uint8_t* wp = w.back();
      if (k == LinearKind::kFp8 || k == LinearKind::kBf16E4m3) fill_bytes(wp, wb, 2 * i + 1, finite_e4m3);
      else if (k == LinearKind::kFp4) fill_bytes(wp, wb, 2 * i + 1, [](uint8_t c) { return c; });
      else if (k == LinearKind::kBf16 || k == LinearKind::kBf16Any) fill_bf16(reinterpret_cast<uint16_t*>(wp), wb / 2, 2 * i + 1);
      else fill_f32(reinterpret_cast<float*>(wp), wb / 4, 2 * i + 1);
      fill_bytes(s.back(), sb, 2 * i + 2, safe_scale);
    }
    for (size_t i = 0; i < copies; ++i) {
      views.push_back(AnyWeight{k, w[i], s[i], out, in});
      if (k == LinearKind::kFp8)
        views.back().fp8 = kernels::with_scale_range(kernels::Fp8Weight{w[i], s[i], out, in});
    }
  }
};

constexpr size_t kColdBytes = 256u << 20;  // matvec weights rotate through at least this much memory

// `matmul_budget`: the time base of the prefill rates in this round (a share of `budget`: they are
// measured in every round, and the caller keeps each one's median).
KernelRates measure_kernel(LinearKind k, ThreadPool* pool, double budget, double matmul_budget) {
  KernelRates r;
  // Decode: matvecs of rows of kMatvecIn[i] values, >= kLargeMatvecBytes and >= kSmallMatvecBytes per
  // weight, rotating through >= 256 MiB so the weights come from DRAM.
  auto matvec = [&](int64_t in, int64_t least_bytes, double share) {
    int64_t out = 32;
    while (weight_bytes(k, out, in) < static_cast<size_t>(least_bytes)) out *= 2;
    const size_t per = weight_bytes(k, out, in) + scale_bytes(k, out, in);
    WeightSet ws(k, out, in, (kColdBytes + per - 1) / per);
    std::vector<float> x(static_cast<size_t>(in)), y(static_cast<size_t>(out));
    fill_f32(x.data(), x.size(), 3);
    const double s = time_per_call(
        [&](int64_t c) { ws.views[static_cast<size_t>(c) % ws.views.size()].apply(x.data(), 1, y.data(), pool); },
        budget * share);
    return static_cast<double>(per) / s / 1e9;
  };
  // Both sizes in every round: one round's small-weight rates moved 30-50% between probes minutes
  // apart (2026-12-06, AVX2 EPYC VM), and the median of three moves less.
  for (size_t i = 0; i < kMatvecIn.size(); ++i) {
    r.matvec_gbps[i] = matvec(kMatvecIn[i], kLargeMatvecBytes, 0.5);
    r.matvec_small_gbps[i] = matvec(kMatvecIn[i], kSmallMatvecBytes, 0.25);
  }
  // Fixed cost of a call, as decode meets it: small weights (a small model's expert or projection,
  // 256 x 512) that are not in cache, one after another; what streaming them at the measured rate
  // does not explain is per call (the pool hand-off, activation preparation, the tail of the split).
  {
    constexpr int64_t out = 256, in = 512;
    const size_t per = weight_bytes(k, out, in) + scale_bytes(k, out, in);
    WeightSet ws(k, out, in, std::max<size_t>(2, (kColdBytes + per - 1) / per));
    std::vector<float> x(in), y(out);
    fill_f32(x.data(), x.size(), 5);
    const double s = time_per_call(
        [&](int64_t c) { ws.views[static_cast<size_t>(c) % ws.views.size()].apply(x.data(), 1, y.data(), pool); },
        budget / 2);
    r.call_us =
        std::max(0.0, s - static_cast<double>(per) / (matvec_gbps_at(r, in, static_cast<double>(per)) * 1e9)) * 1e6;
  }
  // Prefill: a large and a small weight times n rows.
  auto matmul = [&](int64_t out, int64_t in, std::array<double, 4>* gflops, double share) {
    WeightSet ws(k, out, in, 1);
    const int max_n = kMatmulRows.back();
    std::vector<float> x(static_cast<size_t>(max_n * in)), y(static_cast<size_t>(max_n * out));
    fill_f32(x.data(), x.size(), 7);
    for (size_t i = 0; i < kMatmulRows.size(); ++i) {
      const int n = kMatmulRows[i];
      const double s = time_per_call([&](int64_t) { ws.views[0].apply(x.data(), n, y.data(), pool); }, budget * share);
      (*gflops)[i] = 2.0 * n * static_cast<double>(out * in) / s / 1e9;
    }
  };
  matmul(kLargeMatmulOut, kLargeMatmulIn, &r.matmul_gflops, 0.5 * matmul_budget / budget);
  matmul(kSmallMatmulOut, kSmallMatmulIn, &r.matmul_small_gflops, 0.25 * matmul_budget / budget);
  return r;
}

// Read bandwidth of `threads` threads summing disjoint slices of `buf`; best of a few passes.
double measure_mem_read(const uint8_t* buf, size_t bytes, int threads, double budget) {
  const size_t n64 = bytes / 8;
  const auto* words = reinterpret_cast<const uint64_t*>(buf);
  std::atomic<uint64_t> sink{0};
  double best = 0;
  const auto t_start = clock_type::now();
  do {
    std::vector<std::thread> ts;
    std::atomic<int> ready{0};
    std::atomic<bool> go{false};
    std::vector<double> secs(static_cast<size_t>(threads));
    for (int t = 0; t < threads; ++t) {
      ts.emplace_back([&, t] {
        const size_t b = n64 * static_cast<size_t>(t) / static_cast<size_t>(threads);
        const size_t e = n64 * static_cast<size_t>(t + 1) / static_cast<size_t>(threads);
        ready.fetch_add(1);
        while (!go.load(std::memory_order_acquire)) std::this_thread::yield();
        const auto t0 = clock_type::now();
        uint64_t a0 = 0, a1 = 0, a2 = 0, a3 = 0;
        for (size_t i = b; i + 4 <= e; i += 4) {
          a0 += words[i];
          a1 += words[i + 1];
          a2 += words[i + 2];
          a3 += words[i + 3];
        }
        secs[static_cast<size_t>(t)] = seconds_since(t0);
        sink.fetch_add(a0 ^ a1 ^ a2 ^ a3, std::memory_order_relaxed);
      });
    }
    while (ready.load() < threads) std::this_thread::yield();
    go.store(true, std::memory_order_release);
    for (auto& th : ts) th.join();
    const double slowest = *std::max_element(secs.begin(), secs.end());
    if (slowest > 0) best = std::max(best, static_cast<double>(bytes) / slowest / 1e9);
  } while (seconds_since(t_start) < budget);
  return best;
}

// Seconds of one kernels::sparse_attention query of `H` heads x `D` over `m` entries.
double attention_seconds(int H, int64_t D, int64_t m, ThreadPool* pool, double budget) {
  std::vector<float> q(static_cast<size_t>(H * D)), ent(static_cast<size_t>(m * D)), o(static_cast<size_t>(H * D));
  std::vector<float> sinks(static_cast<size_t>(H), 0.5f);
  fill_f32(q.data(), q.size(), 11);
  fill_f32(ent.data(), ent.size(), 13);
  std::vector<const float*> ptrs(static_cast<size_t>(m));
  for (int64_t j = 0; j < m; ++j) ptrs[static_cast<size_t>(j)] = ent.data() + j * D;
  kernels::SparseAttentionArgs a;
  a.q = q.data();
  a.n_heads = H;
  a.head_dim = D;
  a.entries = ptrs.data();
  a.n_entries = m;
  a.sinks = sinks.data();
  a.scale = 1.0f / std::sqrt(static_cast<float>(D));
  a.out = o.data();
  return time_per_call([&](int64_t) { kernels::sparse_attention(a, pool); }, budget);
}

// Seconds of one kernels::index_scores query of `H` heads x `D` against `n` keys.
double index_seconds(int H, int64_t D, int64_t n, ThreadPool* pool, double budget) {
  std::vector<float> q(static_cast<size_t>(H * D)), w(static_cast<size_t>(H)), keys(static_cast<size_t>(n * D)),
      scores(static_cast<size_t>(n));
  fill_f32(q.data(), q.size(), 19);
  fill_f32(w.data(), w.size(), 23);
  fill_f32(keys.data(), keys.size(), 29);
  kernels::IndexScoreArgs a;
  a.q = q.data();
  a.w = w.data();
  a.n_heads = H;
  a.dim = D;
  a.keys = keys.data();
  a.key_stride = D;
  a.n_keys = n;
  a.scores = scores.data();
  return time_per_call([&](int64_t) { kernels::index_scores(a, pool); }, budget);
}

// Fits time = call + work / rate through a small and a large case (work in FLOPs).
void fit_rate(double small_work, double small_s, double big_work, double big_s, double* gflops, double* call_us) {
  const double slope = (big_s - small_s) / (big_work - small_work);
  if (slope > 0) {
    *gflops = 1.0 / slope / 1e9;
    *call_us = std::max(0.0, (small_s - small_work * slope)) * 1e6;
  } else {  // noise: all of it as rate
    *gflops = big_work / big_s / 1e9;
    *call_us = 0;
  }
}

void measure_attention(ThreadRates* r, ThreadPool* pool, double budget) {
  // Head counts that give each of up to 2 threads whole pairs of 8-head vectors, as the release's 64
  // heads do (the AVX2 score kernel takes two at a time; kernels/x86/ops_engine.h): with 16 heads
  // each thread of 2 had one vector, and the rate came out below one thread's. The 8 GB checkpoint's
  // 48 heads give each of 2 threads a pair and a single vector, a few percent slower per FLOP than
  // this rate (a new-user trial: 1.16-1.34x from the second thread at 48 heads, 1.45 at 64); at 4
  // threads the small case is one vector each.
  const double big = 4.0 * 64 * 640 * 512, small = 4.0 * 32 * 128 * 128;
  fit_rate(small, attention_seconds(32, 128, 128, pool, budget / 2), big, attention_seconds(64, 512, 640, pool, budget / 2),
           &r->attn_gflops, &r->attn_call_us);
  const double ibig = 2.0 * 32 * 128 * 4096, ismall = 2.0 * 32 * 128 * 256;
  fit_rate(ismall, index_seconds(32, 128, 256, pool, budget / 2), ibig, index_seconds(32, 128, 4096, pool, budget / 2),
           &r->index_gflops, &r->index_call_us);
  // Few heads: what the FLOPs at the fitted rate do not explain is per key and dimension.
  const double few = index_seconds(2, 128, 4096, pool, budget / 4);
  const double flops_s = 2.0 * 2 * 128 * 4096 / (r->index_gflops * 1e9);
  r->index_key_ns = std::max(0.0, few - flops_s - r->index_call_us * 1e-6) / (4096.0 * 128) * 1e9;
  // Packed key decode (kernels::dequant_index_key) on one thread; the plan divides it by the
  // threads the model splits the keys over.
  const int64_t keys = 4096, dim = 128, row = dim / 2 + dim / 32;
  std::vector<uint8_t> packed(static_cast<size_t>(keys * row));
  fill_bytes(packed.data(), packed.size(), 31, [](uint8_t c) { return c; });
  for (int64_t g = 0; g < keys; ++g) packed[static_cast<size_t>(g * row + dim / 2)] = 120;  // sane scales
  std::vector<float> out(static_cast<size_t>(keys * dim));
  const double dec = time_per_call(
      [&](int64_t) {
        for (int64_t g = 0; g < keys; ++g) kernels::dequant_index_key(packed.data() + g * row, dim, out.data() + g * dim);
      },
      budget / 4);
  r->key_decode_ns = dec / static_cast<double>(keys * dim) * 1e9;
}

// One mHC sublayer's elementwise kernels over n tokens of [4, dim] residual streams: ns per value.
double sublayer_ns(int64_t n, ThreadPool* pool, double budget) {
  const int hc = 4;
  const int64_t dim = 2048;
  std::vector<float> x(static_cast<size_t>(n * hc * dim)), y(static_cast<size_t>(n * dim)), w(static_cast<size_t>(dim), 1.0f);
  std::vector<float> pre(static_cast<size_t>(n * hc), 0.25f), post(static_cast<size_t>(n * hc), 0.5f),
      comb(static_cast<size_t>(n * hc * hc), 0.25f);
  fill_f32(x.data(), x.size(), 31);
  const double s = time_per_call(
      [&](int64_t) {
        kernels::hc_pre(x.data(), pre.data(), n, hc, dim, y.data(), pool);
        kernels::rms_norm(y.data(), n, dim, w.data(), 1e-6f, y.data(), pool);
        kernels::hc_post(x.data(), y.data(), post.data(), comb.data(), n, hc, dim, pool);
      },
      budget);
  return s / static_cast<double>(n * hc * dim) * 1e9;
}

double swiglu_ns(ThreadPool* pool, double budget) {
  const int64_t n = 64, inter = 2048;
  std::vector<float> g(static_cast<size_t>(n * inter)), u(static_cast<size_t>(n * inter)), out(static_cast<size_t>(n * inter));
  fill_f32(g.data(), g.size(), 37);
  fill_f32(u.data(), u.size(), 41);
  kernels::SwigluArgs a;
  a.gate = g.data();
  a.up = u.data();
  a.n = n;
  a.inter = inter;
  a.limit = 10.0f;
  a.out = out.data();
  return time_per_call([&](int64_t) { kernels::swiglu(a, pool); }, budget) / static_cast<double>(n * inter) * 1e9;
}

double measure_alloc(double budget) {
  const size_t n = (4u << 20) / sizeof(float);
  volatile float sink = 0;
  const double s = time_per_call(
      [&](int64_t i) {
        std::vector<float> v(n);
        v[static_cast<size_t>(i) % n] = 1.0f;
        sink = sink + v[(static_cast<size_t>(i) * 7) % n];
      },
      budget);
  return static_cast<double>(n * sizeof(float)) / s / 1e9;
}

double measure_topk(double budget) {
  const int64_t n = 4096;
  std::vector<float> scores(static_cast<size_t>(n));
  std::vector<int32_t> out(512);
  fill_f32(scores.data(), scores.size(), 17);
  const double s = time_per_call([&](int64_t i) {
    scores[static_cast<size_t>(i % n)] += 1e-3f;  // a different input each call
    (void)kernels::topk_ascending(scores.data(), n, 512, out.data());
  }, budget);
  return s / static_cast<double>(n) * 1e9;
}

std::string read_small(const std::string& path) {
  auto r = io::read_file_to_string(path, 1 << 20);
  return r.ok() ? *r : std::string();
}

std::string cpu_model_name() {
  const std::string info = read_small("/proc/cpuinfo");
  const size_t p = info.find("model name");
  if (p == std::string::npos) return "unknown";
  const size_t colon = info.find(':', p), eol = info.find('\n', p);
  if (colon == std::string::npos || colon > eol) return "unknown";
  std::string v = info.substr(colon + 1, eol - colon - 1);
  while (!v.empty() && v.front() == ' ') v.erase(v.begin());
  return v;
}

// cgroup v2 limit and usage of this process's group (0 when unlimited / unknown).
void cgroup_memory(uint64_t* limit, uint64_t* usage) {
  *limit = *usage = 0;
  std::string max = read_small("/sys/fs/cgroup/memory.max");
  if (!max.empty() && max.rfind("max", 0) != 0) *limit = std::strtoull(max.c_str(), nullptr, 10);
  std::string cur = read_small("/sys/fs/cgroup/memory.current");
  if (!cur.empty()) *usage = std::strtoull(cur.c_str(), nullptr, 10);
}

std::string utc_now() {
  const std::time_t t = std::time(nullptr);
  std::tm tm{};
  gmtime_r(&t, &tm);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%SZ", &tm);
  return buf;
}

// Thread counts to measure: 1, 2, 4, ... below max, and max.
std::vector<int> thread_counts(int max) {
  std::vector<int> v;
  for (int t = 1; t < max; t *= 2) v.push_back(t);
  v.push_back(max);
  return v;
}

// --- JSON helpers -------------------------------------------------------------------------------
// Every measured time and rate of a profile is >= 0 (0: not measured); a negative one (a hand-edited
// or damaged file) would make the plan print negative times. kInvalidArgument naming the field.
Status non_negative(const std::string& where, std::initializer_list<std::pair<const char*, double>> fields) {
  for (const auto& [name, v] : fields)
    if (!(v >= 0)) return InvalidArgument(where + ": '" + name + "' is " + std::to_string(v) + ", expected >= 0");
  return Status();
}

template <class T>
Status get_field(const ojson& j, const char* key, const std::string& where, T* out) {
  auto it = j.find(key);
  if (it == j.end()) return InvalidArgument(where + ": missing field '" + key + "'");
  try {
    *out = it->get<T>();
  } catch (const std::exception&) {
    return InvalidArgument(where + ": field '" + key + "' has the wrong type");
  }
  return Status();
}

}  // namespace

double log_interp(const std::array<int, 4>& xs, const std::array<double, 4>& ys, double x) {
  if (x <= xs.front()) return std::max(1e-3, ys.front());
  for (size_t i = 0; i + 1 < xs.size(); ++i) {
    const double a = xs[i], b = xs[i + 1];
    if (x <= b) {
      const double w = std::log(x / a) / std::log(b / a);
      return std::max(1e-3, ys[i] * (1 - w) + ys[i + 1] * w);
    }
  }
  return std::max(1e-3, ys.back());
}

double matvec_gbps_at(const KernelRates& k, int64_t in, double bytes) {
  const double row = static_cast<double>(std::max<int64_t>(in, 1));
  const double large = log_interp(kMatvecIn, k.matvec_gbps, row);
  // Rates built in code without the small-weight ones (zero) read as the large ones.
  const double small = k.matvec_small_gbps[0] > 0 ? log_interp(kMatvecIn, k.matvec_small_gbps, row) : large;
  const double lo = std::log(static_cast<double>(kSmallMatvecBytes)),
               hi = std::log(static_cast<double>(kLargeMatvecBytes));
  const double t = std::clamp((std::log(std::max(bytes, 1.0)) - lo) / (hi - lo), 0.0, 1.0);
  return small + t * (large - small);
}

const ThreadRates& MachineProfile::at_threads(int t) const {
  STRATA_CHECK(!threads.empty(), "machine profile without thread rates");
  const ThreadRates* best = &threads.front();
  for (const ThreadRates& r : threads)
    if (r.threads <= t) best = &r;
  return *best;
}

double MachineProfile::age_days() const {
  std::tm tm{};
  if (!strptime(date.c_str(), "%Y-%m-%dT%H:%M:%SZ", &tm)) return 1e9;
  const std::time_t then = timegm(&tm);
  return std::difftime(std::time(nullptr), then) / 86400.0;
}

std::string MachineProfile::to_json() const {
  ojson j;
  j["format"] = kFormat;
  j["date"] = date;
  j["hostname"] = hostname;
  j["cpu_model"] = cpu_model;
  j["simd"] = simd;
  j["kernel_level"] = kernel_level;
  j["logical_cores"] = logical_cores;
  j["physical_cores"] = physical_cores;
  j["ram_total_bytes"] = ram_total;
  j["ram_available_bytes"] = ram_available;
  j["topk_ns_per_elem"] = topk_ns_per_elem;
  j["alloc_gbps"] = alloc_gbps;
  j["engine_note"] = engine_note;
  ojson ts = ojson::array();
  for (const ThreadRates& r : threads) {
    ojson t;
    t["threads"] = r.threads;
    t["mem_read_gbps"] = r.mem_read_gbps;
    t["attn_gflops"] = r.attn_gflops;
    t["attn_call_us"] = r.attn_call_us;
    t["index_gflops"] = r.index_gflops;
    t["index_call_us"] = r.index_call_us;
    t["index_key_ns"] = r.index_key_ns;
    t["key_decode_ns"] = r.key_decode_ns;
    t["sublayer_ns_prefill"] = r.sublayer_ns_prefill;
    t["sublayer_ns_decode"] = r.sublayer_ns_decode;
    t["swiglu_ns"] = r.swiglu_ns;
    t["glue_us_prefill"] = r.glue_us_prefill;
    t["glue_us_decode"] = r.glue_us_decode;
    for (int k = 0; k < kLinearKinds; ++k) {
      const KernelRates& kr = r.kernel(static_cast<LinearKind>(k));
      ojson kj;
      kj["matvec_in"] = kMatvecIn;
      kj["matvec_gbps"] = kr.matvec_gbps;
      kj["matvec_small_gbps"] = kr.matvec_small_gbps;
      kj["call_us"] = kr.call_us;
      kj["matmul_rows"] = kMatmulRows;
      kj["matmul_gflops"] = kr.matmul_gflops;
      kj["matmul_small_gflops"] = kr.matmul_small_gflops;
      t["kernels"][linear_kind_name(static_cast<LinearKind>(k))] = kj;
    }
    ts.push_back(t);
  }
  j["threads"] = ts;
  ojson d;
  d["measured"] = disk.measured;
  d["dir"] = disk.dir;
  d["device"] = disk.device;
  d["file_bytes"] = disk.file_bytes;
  d["direct_supported"] = disk.direct_supported;
  d["io_uring"] = disk.io_uring;
  d["seq_gbps_direct"] = disk.seq_gbps_direct;
  d["seq_gbps_buffered"] = disk.seq_gbps_buffered;
  d["seq_gbps_pread"] = disk.seq_gbps_pread;
  d["seq_gbps_load"] = disk.seq_gbps_load;
  d["iops_qd1_direct"] = disk.iops_qd1_direct;
  d["iops_qd32_direct"] = disk.iops_qd32_direct;
  d["iops_qd1_buffered"] = disk.iops_qd1_buffered;
  d["iops_qd32_buffered"] = disk.iops_qd32_buffered;
  d["note"] = disk.note;
  j["disk"] = d;
  ojson g = ojson::array();
  for (const GpuInfo& gi : gpus) g.push_back({{"name", gi.name}, {"vram_total_bytes", gi.vram_total}, {"vram_free_bytes", gi.vram_free}});
  j["gpus"] = g;
  return j.dump(2, ' ', false, nlohmann::json::error_handler_t::replace) + "\n";
}

Result<MachineProfile> MachineProfile::from_json(const std::string& text, const std::string& what) {
  ojson j;
  try {
    j = ojson::parse(text);
  } catch (const nlohmann::json::exception& e) {  // parse_error, and out_of_range for 1e400
    return Corruption(what + ": not valid JSON (" + e.what() + ")");
  }
  if (!j.is_object()) return Corruption(what + ": not a JSON object");
  std::string format;
  STRATA_RETURN_IF_ERROR(get_field(j, "format", what, &format));
  // An older strata profile is NotSupported: it is whole, and `plan` measures again over it, where a
  // damaged one is refused naming its field (cli/cmd_plan.cpp). A newer strata's is refused like a
  // damaged one: this build's measurement would replace a file it cannot read.
  if (format != kFormat) {
    const std::string prefix = "strata-probe/";
    const int have = std::atoi(kFormat + prefix.size());
    if (format.rfind(prefix, 0) == 0 && std::atoi(format.c_str() + prefix.size()) > have)
      return InvalidArgument(what + ": format '" + format + "' is newer than this build's '" + kFormat + "'");
    return NotSupported(what + ": format '" + format + "', expected '" + kFormat + "'");
  }
  MachineProfile p;
  STRATA_RETURN_IF_ERROR(get_field(j, "date", what, &p.date));
  STRATA_RETURN_IF_ERROR(get_field(j, "hostname", what, &p.hostname));
  STRATA_RETURN_IF_ERROR(get_field(j, "cpu_model", what, &p.cpu_model));
  STRATA_RETURN_IF_ERROR(get_field(j, "simd", what, &p.simd));
  STRATA_RETURN_IF_ERROR(get_field(j, "kernel_level", what, &p.kernel_level));
  STRATA_RETURN_IF_ERROR(get_field(j, "logical_cores", what, &p.logical_cores));
  STRATA_RETURN_IF_ERROR(get_field(j, "physical_cores", what, &p.physical_cores));
  STRATA_RETURN_IF_ERROR(get_field(j, "ram_total_bytes", what, &p.ram_total));
  STRATA_RETURN_IF_ERROR(get_field(j, "ram_available_bytes", what, &p.ram_available));
  STRATA_RETURN_IF_ERROR(get_field(j, "topk_ns_per_elem", what, &p.topk_ns_per_elem));
  STRATA_RETURN_IF_ERROR(get_field(j, "alloc_gbps", what, &p.alloc_gbps));
  STRATA_RETURN_IF_ERROR(get_field(j, "engine_note", what, &p.engine_note));
  STRATA_RETURN_IF_ERROR(
      non_negative(what, {{"topk_ns_per_elem", p.topk_ns_per_elem}, {"alloc_gbps", p.alloc_gbps}}));
  if (p.logical_cores < 1 || p.physical_cores < 0)
    return InvalidArgument(what + ": 'logical_cores' " + std::to_string(p.logical_cores) + " and 'physical_cores' " +
                           std::to_string(p.physical_cores) + ": expected at least 1 and at least 0");
  auto ts = j.find("threads");
  if (ts == j.end() || !ts->is_array() || ts->empty()) return InvalidArgument(what + ": 'threads' must be a non-empty array");
  for (size_t i = 0; i < ts->size(); ++i) {
    const ojson& t = (*ts)[i];
    const std::string w = what + ": threads[" + std::to_string(i) + "]";
    if (!t.is_object()) return InvalidArgument(w + ": not an object");
    ThreadRates r;
    STRATA_RETURN_IF_ERROR(get_field(t, "threads", w, &r.threads));
    STRATA_RETURN_IF_ERROR(get_field(t, "mem_read_gbps", w, &r.mem_read_gbps));
    STRATA_RETURN_IF_ERROR(get_field(t, "attn_gflops", w, &r.attn_gflops));
    STRATA_RETURN_IF_ERROR(get_field(t, "attn_call_us", w, &r.attn_call_us));
    STRATA_RETURN_IF_ERROR(get_field(t, "index_gflops", w, &r.index_gflops));
    STRATA_RETURN_IF_ERROR(get_field(t, "index_call_us", w, &r.index_call_us));
    if (t.contains("index_key_ns")) STRATA_RETURN_IF_ERROR(get_field(t, "index_key_ns", w, &r.index_key_ns));
    if (t.contains("key_decode_ns")) STRATA_RETURN_IF_ERROR(get_field(t, "key_decode_ns", w, &r.key_decode_ns));
    STRATA_RETURN_IF_ERROR(get_field(t, "sublayer_ns_prefill", w, &r.sublayer_ns_prefill));
    STRATA_RETURN_IF_ERROR(get_field(t, "sublayer_ns_decode", w, &r.sublayer_ns_decode));
    STRATA_RETURN_IF_ERROR(get_field(t, "swiglu_ns", w, &r.swiglu_ns));
    STRATA_RETURN_IF_ERROR(non_negative(w, {{"mem_read_gbps", r.mem_read_gbps},
                                            {"attn_gflops", r.attn_gflops},
                                            {"attn_call_us", r.attn_call_us},
                                            {"index_gflops", r.index_gflops},
                                            {"index_call_us", r.index_call_us},
                                            {"index_key_ns", r.index_key_ns},
                                            {"key_decode_ns", r.key_decode_ns},
                                            {"sublayer_ns_prefill", r.sublayer_ns_prefill},
                                            {"sublayer_ns_decode", r.sublayer_ns_decode},
                                            {"swiglu_ns", r.swiglu_ns}}));
    if (t.contains("glue_us_prefill") || !t.contains("glue_ns_prefill")) {
      STRATA_RETURN_IF_ERROR(get_field(t, "glue_us_prefill", w, &r.glue_us_prefill));
    } else {  // the older unit: ns per dim value, measured at the probe preset's dim
      double per_value = 0;
      STRATA_RETURN_IF_ERROR(get_field(t, "glue_ns_prefill", w, &per_value));
      if (!(per_value >= 0 && per_value < 1e6))
        return InvalidArgument(w + ": 'glue_ns_prefill' is " + std::to_string(per_value) + ", expected a time in [0, 1e6)");
      r.glue_us_prefill = per_value * kProbeEngineDim * 1e-3;
    }
    STRATA_RETURN_IF_ERROR(get_field(t, "glue_us_decode", w, &r.glue_us_decode));
    for (auto [name, v] : {std::pair{"glue_us_prefill", r.glue_us_prefill}, std::pair{"glue_us_decode", r.glue_us_decode}})
      if (!(v >= 0 && v < 1e6))  // us per token and layer: a million is seconds of glue per token
        return InvalidArgument(w + ": '" + name + "' is " + std::to_string(v) + ", expected a time in [0, 1e6)");
    auto ks = t.find("kernels");
    if (ks == t.end() || !ks->is_object()) return InvalidArgument(w + ": missing field 'kernels'");
    for (int k = 0; k < kLinearKinds; ++k) {
      const char* name = linear_kind_name(static_cast<LinearKind>(k));
      auto kj = ks->find(name);
      if (kj == ks->end() && static_cast<LinearKind>(k) == LinearKind::kBf16E4m3) {
        // Profiles written before it was measured: the bf16 kernel's rates at half the bytes per
        // second (E4M3 codes cost about the bf16 copy's time: what plan assumed then).
        KernelRates& kr = r.kernel(static_cast<LinearKind>(k));
        kr = r.kernel(LinearKind::kBf16);
        for (double& g : kr.matvec_gbps) g /= 2;
        for (double& g : kr.matvec_small_gbps) g /= 2;
        continue;
      }
      if (kj == ks->end()) return InvalidArgument(w + ": missing kernel '" + name + "'");
      const std::string wk = w + ".kernels." + name;
      KernelRates& kr = r.kernel(static_cast<LinearKind>(k));
      std::vector<int> ins;
      STRATA_RETURN_IF_ERROR(get_field(*kj, "matvec_in", wk, &ins));
      if (ins != std::vector<int>(kMatvecIn.begin(), kMatvecIn.end()))
        return InvalidArgument(wk + ": matvec_in differs from this build's (re-run strata probe)");
      // A rate array of this build's length; `fallback` (older profiles: no small-weight rates) when
      // the field is absent and a fallback is given.
      auto rates = [&](const char* field, std::array<double, 4>* a, const std::array<double, 4>* fallback) -> Status {
        if (fallback != nullptr && !kj->contains(field)) {
          *a = *fallback;
          return Status();
        }
        std::vector<double> v;
        STRATA_RETURN_IF_ERROR(get_field(*kj, field, wk, &v));
        if (v.size() != a->size())
          return InvalidArgument(wk + ": " + field + " has " + std::to_string(v.size()) + " values, expected " +
                                 std::to_string(a->size()));
        for (double x : v)
          if (!(x > 0)) return InvalidArgument(wk + ": " + field + " holds " + std::to_string(x) + ", not a rate > 0");
        std::copy(v.begin(), v.end(), a->begin());
        return Status();
      };
      STRATA_RETURN_IF_ERROR(rates("matvec_gbps", &kr.matvec_gbps, nullptr));
      STRATA_RETURN_IF_ERROR(rates("matvec_small_gbps", &kr.matvec_small_gbps, &kr.matvec_gbps));
      STRATA_RETURN_IF_ERROR(get_field(*kj, "call_us", wk, &kr.call_us));
      STRATA_RETURN_IF_ERROR(non_negative(wk, {{"call_us", kr.call_us}}));
      std::vector<int> rows;
      STRATA_RETURN_IF_ERROR(get_field(*kj, "matmul_rows", wk, &rows));
      if (rows != std::vector<int>(kMatmulRows.begin(), kMatmulRows.end()))
        return InvalidArgument(wk + ": matmul_rows differ from this build's (re-run strata probe)");
      STRATA_RETURN_IF_ERROR(rates("matmul_gflops", &kr.matmul_gflops, nullptr));
      STRATA_RETURN_IF_ERROR(rates("matmul_small_gflops", &kr.matmul_small_gflops, &kr.matmul_gflops));
    }
    if (!p.threads.empty() && r.threads <= p.threads.back().threads)
      return InvalidArgument(w + ": thread counts must ascend");
    p.threads.push_back(r);
  }
  auto d = j.find("disk");
  if (d == j.end() || !d->is_object()) return InvalidArgument(what + ": missing field 'disk'");
  const std::string wd = what + ": disk";
  STRATA_RETURN_IF_ERROR(get_field(*d, "measured", wd, &p.disk.measured));
  STRATA_RETURN_IF_ERROR(get_field(*d, "dir", wd, &p.disk.dir));
  STRATA_RETURN_IF_ERROR(get_field(*d, "device", wd, &p.disk.device));
  STRATA_RETURN_IF_ERROR(get_field(*d, "file_bytes", wd, &p.disk.file_bytes));
  STRATA_RETURN_IF_ERROR(get_field(*d, "direct_supported", wd, &p.disk.direct_supported));
  STRATA_RETURN_IF_ERROR(get_field(*d, "io_uring", wd, &p.disk.io_uring));
  STRATA_RETURN_IF_ERROR(get_field(*d, "seq_gbps_direct", wd, &p.disk.seq_gbps_direct));
  STRATA_RETURN_IF_ERROR(get_field(*d, "seq_gbps_buffered", wd, &p.disk.seq_gbps_buffered));
  STRATA_RETURN_IF_ERROR(get_field(*d, "seq_gbps_pread", wd, &p.disk.seq_gbps_pread));
  // Optional: profiles measured before issue 15's O_DIRECT resident pass lack it (plan then uses the
  // 1 MiB rates).
  if (d->contains("seq_gbps_load")) STRATA_RETURN_IF_ERROR(get_field(*d, "seq_gbps_load", wd, &p.disk.seq_gbps_load));
  STRATA_RETURN_IF_ERROR(get_field(*d, "iops_qd1_direct", wd, &p.disk.iops_qd1_direct));
  STRATA_RETURN_IF_ERROR(get_field(*d, "iops_qd32_direct", wd, &p.disk.iops_qd32_direct));
  STRATA_RETURN_IF_ERROR(get_field(*d, "iops_qd1_buffered", wd, &p.disk.iops_qd1_buffered));
  STRATA_RETURN_IF_ERROR(get_field(*d, "iops_qd32_buffered", wd, &p.disk.iops_qd32_buffered));
  STRATA_RETURN_IF_ERROR(get_field(*d, "note", wd, &p.disk.note));
  STRATA_RETURN_IF_ERROR(non_negative(wd, {{"seq_gbps_direct", p.disk.seq_gbps_direct},
                                           {"seq_gbps_buffered", p.disk.seq_gbps_buffered},
                                           {"seq_gbps_pread", p.disk.seq_gbps_pread},
                                           {"seq_gbps_load", p.disk.seq_gbps_load},
                                           {"iops_qd1_direct", p.disk.iops_qd1_direct},
                                           {"iops_qd32_direct", p.disk.iops_qd32_direct},
                                           {"iops_qd1_buffered", p.disk.iops_qd1_buffered},
                                           {"iops_qd32_buffered", p.disk.iops_qd32_buffered}}));
  auto g = j.find("gpus");
  if (g == j.end() || !g->is_array()) return InvalidArgument(what + ": missing field 'gpus'");
  for (size_t i = 0; i < g->size(); ++i) {
    GpuInfo gi;
    const std::string w = what + ": gpus[" + std::to_string(i) + "]";
    STRATA_RETURN_IF_ERROR(get_field((*g)[i], "name", w, &gi.name));
    STRATA_RETURN_IF_ERROR(get_field((*g)[i], "vram_total_bytes", w, &gi.vram_total));
    STRATA_RETURN_IF_ERROR(get_field((*g)[i], "vram_free_bytes", w, &gi.vram_free));
    p.gpus.push_back(gi);
  }
  return p;
}

Status MachineProfile::save(const std::string& path) const {
  std::error_code ec;
  const std::filesystem::path parent = std::filesystem::path(path).parent_path();
  if (!parent.empty()) std::filesystem::create_directories(parent, ec);
  if (ec) return IOError(parent.string() + ": create directory: " + ec.message());
  const std::string text = to_json();
  return io::write_file_atomic(path, text.data(), text.size());
}

Result<MachineProfile> MachineProfile::load(const std::string& path) {
  STRATA_ASSIGN_OR_RETURN(std::string text, io::read_file_to_string(path, 16u << 20));
  return from_json(text, path);
}

Status ProbeOptions::validate() const {
  if (max_threads < 0 || max_threads > ThreadPool::kMaxThreads)
    return InvalidArgument("probe threads must be in [0, " + std::to_string(ThreadPool::kMaxThreads) + "]");
  if (!(seconds_per_test > 0 && seconds_per_test <= 60)) return InvalidArgument("probe seconds per test must be in (0, 60]");
  if (rounds < 1 || rounds > 20) return InvalidArgument("probe rounds must be in [1, 20]");
  if (!(disk_seconds > 0 && disk_seconds <= 600)) return InvalidArgument("probe disk seconds must be in (0, 600]");
  if (disk_file_bytes < (16ull << 20)) return InvalidArgument("probe disk test file must be at least 16 MiB");
  return Status();
}

uint64_t read_meminfo_field(const std::string& text, const std::string& field) {
  const std::string key = field + ":";
  size_t p = 0;
  while ((p = text.find(key, p)) != std::string::npos) {
    if (p == 0 || text[p - 1] == '\n') {
      const uint64_t kib = std::strtoull(text.c_str() + p + key.size(), nullptr, 10);
      return kib * 1024;
    }
    p += key.size();
  }
  return 0;
}

std::vector<GpuInfo> parse_nvidia_smi(const std::string& csv) {
  std::vector<GpuInfo> out;
  size_t pos = 0;
  while (pos < csv.size()) {
    size_t eol = csv.find('\n', pos);
    if (eol == std::string::npos) eol = csv.size();
    const std::string line = csv.substr(pos, eol - pos);
    pos = eol + 1;
    const size_t c1 = line.find(','), c2 = c1 == std::string::npos ? c1 : line.find(',', c1 + 1);
    if (c2 == std::string::npos) continue;
    GpuInfo g;
    g.name = line.substr(0, c1);
    char* end1 = nullptr;
    char* end2 = nullptr;
    const double total = std::strtod(line.c_str() + c1 + 1, &end1);
    const double free_mib = std::strtod(line.c_str() + c2 + 1, &end2);
    if (end1 == line.c_str() + c1 + 1 || end2 == line.c_str() + c2 + 1 || !(total > 0)) continue;
    g.vram_total = static_cast<uint64_t>(total * 1048576.0);
    g.vram_free = static_cast<uint64_t>(std::max(0.0, free_mib) * 1048576.0);
    out.push_back(g);
  }
  return out;
}

std::vector<GpuInfo> detect_gpus() {
  // nvidia-smi is the one portable way to ask the NVIDIA driver without linking CUDA; its absence
  // means no NVIDIA GPU is usable here.
  FILE* p = ::popen("nvidia-smi --query-gpu=name,memory.total,memory.free --format=csv,noheader,nounits 2>/dev/null", "r");
  if (!p) return {};
  std::string out;
  char buf[512];
  size_t n;
  while ((n = std::fread(buf, 1, sizeof buf, p)) > 0) out.append(buf, n);
  const int rc = ::pclose(p);
  if (rc != 0) return {};
  return parse_nvidia_smi(out);
}

Result<MachineProfile> measure_machine(const ProbeOptions& o) {
  STRATA_RETURN_IF_ERROR(o.validate());
  MachineProfile p;
  p.date = utc_now();
  char host[256] = {};
  if (::gethostname(host, sizeof host - 1) == 0) p.hostname = host;
  p.cpu_model = cpu_model_name();
  p.simd = CpuFeatures::detect().best_level();
  p.kernel_level = kernels::kernel_level_name(kernels::best_kernel_level());
  p.logical_cores = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  p.physical_cores = ThreadPool::hardware_cores();
  const std::string meminfo = read_small("/proc/meminfo");
  p.ram_total = read_meminfo_field(meminfo, "MemTotal");
  p.ram_available = read_meminfo_field(meminfo, "MemAvailable");
  uint64_t cg_limit = 0, cg_usage = 0;
  cgroup_memory(&cg_limit, &cg_usage);
  if (cg_limit > 0 && cg_limit < p.ram_total) p.ram_total = cg_limit;
  if (cg_limit > 0) p.ram_available = std::min(p.ram_available, cg_limit > cg_usage ? cg_limit - cg_usage : 0);

  const int max_threads = o.max_threads > 0 ? o.max_threads : p.logical_cores;
  const std::vector<int> counts = thread_counts(max_threads);
  const uint64_t n_steps = counts.size() * (1 + (o.kernels ? kLinearKinds + 1 : 0)) + (o.kernels ? 1 : 0) +
                           (o.kernels && o.engine ? 1 : 0) +
                           (o.disk_dir.empty() ? 0 : 1) + 1;
  uint64_t step = 0;
  auto tick = [&](std::string_view what) {
    report_progress(o.progress, ProgressEvent{"probe", "steps", ++step, n_steps, what, false});
  };
  // Memory-bound values: `rounds` interleaved passes over every thread count and kind, then the
  // median of each. The compute-bound matmuls get a 1 / rounds share of their time in every pass and
  // keep the median too: one disturbed pass no longer decides a rate (a 2026-12-07 probe that timed
  // them once measured the 2-thread fp4 matmul at 78 GFLOP/s, one thread's rate, against 127-152 in
  // the probes around it, and the plan's prefill came out 30% off), and the best of the passes would
  // be a rate the forward pass, run under the same VM, meets less often than the plan assumes. The
  // rest is measured once, after them.
  const int rounds = std::max(1, o.rounds);
  auto median = [](std::vector<double> v) {
    std::sort(v.begin(), v.end());
    return v[v.size() / 2];
  };
  {
    // On huge pages, as the weights it stands for are held (core/huge_pages.h).
    constexpr size_t kBytes = 512u << 20;
    HugePageBytes buf = alloc_huge_page_bytes(kBytes);
    std::memset(buf.get(), 1, kBytes);
    std::vector<std::vector<double>> bw(counts.size());
    for (int round = 0; round < rounds; ++round)
      for (size_t i = 0; i < counts.size(); ++i) bw[i].push_back(measure_mem_read(buf.get(), kBytes, counts[i], o.seconds_per_test / rounds));
    for (size_t i = 0; i < counts.size(); ++i) {
      ThreadRates r;
      r.threads = counts[i];
      r.mem_read_gbps = median(bw[i]);
      p.threads.push_back(r);
      tick("memory bandwidth");
    }
  }
  if (o.kernels) {
    // samples[thread index][kind][round]
    std::vector<std::vector<std::vector<KernelRates>>> samples(
        p.threads.size(), std::vector<std::vector<KernelRates>>(static_cast<size_t>(kLinearKinds)));
    for (int round = 0; round < rounds; ++round) {
      for (size_t i = 0; i < p.threads.size(); ++i) {
        ThreadPool pool(p.threads[i].threads);
        for (int k = 0; k < kLinearKinds; ++k) {
          samples[i][static_cast<size_t>(k)].push_back(
              measure_kernel(static_cast<LinearKind>(k), &pool, o.seconds_per_test, o.seconds_per_test / rounds));
          if (round == rounds - 1) tick(linear_kind_name(static_cast<LinearKind>(k)));
        }
      }
    }
    for (size_t i = 0; i < p.threads.size(); ++i) {
      for (int k = 0; k < kLinearKinds; ++k) {
        const std::vector<KernelRates>& v = samples[i][static_cast<size_t>(k)];
        KernelRates kr = v.front();
        for (auto rates : {&KernelRates::matvec_gbps, &KernelRates::matvec_small_gbps, &KernelRates::matmul_gflops,
                           &KernelRates::matmul_small_gflops})
          for (size_t j = 0; j < (kr.*rates).size(); ++j) {
            std::vector<double> x;
            for (const KernelRates& s : v) x.push_back((s.*rates)[j]);
            (kr.*rates)[j] = median(x);
          }
        std::vector<double> c;
        for (const KernelRates& s : v) c.push_back(s.call_us);
        kr.call_us = median(c);
        p.threads[i].kernel(static_cast<LinearKind>(k)) = kr;
      }
    }
    for (ThreadRates& r : p.threads) {
      ThreadPool pool(r.threads);
      measure_attention(&r, &pool, o.seconds_per_test);
      r.sublayer_ns_prefill = sublayer_ns(64, &pool, o.seconds_per_test / 2);
      r.sublayer_ns_decode = sublayer_ns(1, &pool, o.seconds_per_test / 2);
      r.swiglu_ns = swiglu_ns(&pool, o.seconds_per_test / 2);
      tick("attention");
    }
    p.topk_ns_per_elem = measure_topk(o.seconds_per_test);
    p.alloc_gbps = measure_alloc(o.seconds_per_test);
    tick("top-k");
    if (!o.engine) p.engine_note = "engine glue not measured (not asked)";
    if (o.engine) {
      // Last: the glue is what the rates above do not predict. A failure (e.g. no room for the
      // 0.2 GB checkpoint) leaves it 0 and says why, like a refused disk test.
      if (Status s = measure_engine_glue(&p, o.engine_dir, 512, 16, rounds); !s.ok()) {
        for (ThreadRates& r : p.threads) r.glue_us_prefill = r.glue_us_decode = 0;
        p.engine_note = "engine glue not measured (" + s.to_string() + ")";
        log_to(o.logger, LogLevel::kWarn, p.engine_note);
      }
      tick("engine");
    }
  }
  if (!o.kernels) p.engine_note = "engine glue not measured (kernel rates not probed)";
  if (!o.disk_dir.empty()) {
    STRATA_ASSIGN_OR_RETURN(p.disk, measure_disk(o.disk_dir, o.disk_file_bytes, o.disk_seconds, o.logger));
    tick("disk");
  }
  p.gpus = detect_gpus();
  tick("gpu");
  report_progress(o.progress, ProgressEvent{"probe", "steps", n_steps, n_steps, "", true});
  return p;
}

}  // namespace strata::tools
