// Linear-layer microbenchmarks at DeepSeek V4.1 Flash shapes (dim 5120, expert inter 2304, q_lora
// 1280, o_lora 1024, Engram wkv 6144 -> 5*dim, vocab 129280).
//
//   decode  (n = 1):   bytes_per_second = weight bytes streamed; compare with BM_MemRead.
//   prefill (n = 512): FLOP/s counter (2 * n * out * in per call).
// Weights are random codes (no NaN codes, scales near 1). For decode the weights cycle through
// enough copies to exceed the L3 cache (>= 256 MiB), so the numbers are DRAM numbers, as in a real
// decode step that touches every layer once.
// References: BM_MemRead (read bandwidth, the decode denominator) and BM_PeakFlops (one core's
// f32-FMA and VDPBF16PS peak, the prefill denominator). BM_LinearBf16AnyOrder is the LM head's
// free-order BF16 path (kernels::linear_bf16_any_order). BM_LinearQuant: ggml block formats
// (kernels::linear_quant; weights from the reference quantiser on normal random rows).
// Arguments: threads, kernel level (0 scalar, 1 avx2, 2 avx512, 3 avx512bf16; skipped if unsupported).
// Example: build-kernels/bench/kernels_bench --benchmark_filter='fp8|fp4' --benchmark_min_time=0.5
#include <benchmark/benchmark.h>
#include <immintrin.h>
#include <sys/mman.h>

#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "core/aligned_buffer.h"
#include "core/huge_pages.h"
#include "core/thread_pool.h"
#include "kernels/dispatch.h"
#include "kernels/kquant_linear.h"
#include "kernels/linear.h"

namespace strata::kernels {
namespace {

constexpr size_t kColdBytes = 256u << 20;  // decode weights rotate over at least this much memory

// Fast deterministic fill (xorshift); `valid` fixes up a byte (e.g. no E4M3 NaN codes).
template <class Fix>
void fill(uint8_t* p, size_t n, uint64_t seed, Fix valid) {
  uint64_t s = seed * 0x9E3779B97F4A7C15ull + 1;
  for (size_t i = 0; i < n; i += 8) {
    s ^= s << 13;
    s ^= s >> 7;
    s ^= s << 17;
    uint8_t b[8];
    std::memcpy(b, &s, 8);
    for (size_t j = 0; j < 8 && i + j < n; ++j) p[i + j] = valid(b[j]);
  }
}
uint8_t e4m3_ok(uint8_t c) { return (c & 0x7F) == 0x7F ? static_cast<uint8_t>(c ^ 1) : c; }
uint8_t scale_ok(uint8_t c) { return static_cast<uint8_t>(116 + c % 16); }
uint8_t any(uint8_t c) { return c; }

// One copy's bytes inside the Copies arena.
struct Bytes {
  uint8_t* p;
  size_t n;
  uint8_t* data() const { return p; }
  size_t size() const { return n; }
};

// Copies of a weight and its scales in one arena on transparent huge pages, as the resident store
// keeps a checkpoint's tensors (store/resident_tensors.cpp), so a decode matvec here walks the
// page tables as rarely as one in a real decode step.
struct Copies {
  HugePageBytes arena;
  std::vector<Bytes> w, s;  // per copy: weight codes, scales
};

// Decode-sized calls (n < 8 rows: the matvec regime) rotate over copies, so their weights come from
// DRAM as a decode step's do; prefill-sized calls reuse one copy (their cost is arithmetic).
Copies make_copies(size_t w_bytes, size_t s_bytes, int64_t n, bool fp8, bool hot = false) {
  const size_t copies = n < 8 && !hot ? std::max<size_t>(1, (kColdBytes + w_bytes - 1) / w_bytes) : 1;
  const size_t w_span = (w_bytes + 4095) / 4096 * 4096, s_span = (s_bytes + 63) / 64 * 64;
  Copies c;
  c.arena = alloc_huge_page_bytes(copies * (w_span + s_span));
  uint8_t* p = c.arena.get();
  for (size_t i = 0; i < copies; ++i, p += w_span) c.w.push_back({p, w_bytes});
  for (size_t i = 0; i < copies; ++i, p += s_span) c.s.push_back({p, s_bytes});
  for (size_t i = 0; i < copies; ++i) {
    if (fp8) fill(c.w[i].data(), w_bytes, 2 * i + 1, e4m3_ok);
    else fill(c.w[i].data(), w_bytes, 2 * i + 1, any);
    fill(c.s[i].data(), s_bytes, 2 * i + 2, scale_ok);
  }
  return c;
}

// Random bf16 weights with normal values only (sign and mantissa random, exponent 2^-7 .. 2^0):
// subnormal operands make Intel's FMA take a microcode assist (tens of times slower), which no
// trained weight triggers; clearing only the exponent's top bit left 1 in 128 subnormal.
void normal_bf16(Copies* c) {
  for (auto& w : c->w) {
    uint16_t* p = reinterpret_cast<uint16_t*>(w.data());
    for (size_t k = 0; k < w.size() / 2; ++k)
      p[k] = static_cast<uint16_t>((p[k] & 0x807F) | ((120 + ((p[k] >> 7) & 7)) << 7));
  }
}

std::vector<float> make_x(int64_t n, int64_t in) {
  std::vector<float> x(static_cast<size_t>(n * in));
  uint32_t s = 12345;
  for (auto& v : x) {
    s = s * 1664525u + 1013904223u;
    v = static_cast<float>(static_cast<int32_t>(s >> 8) - (1 << 23)) * (1.0f / (1 << 23));
  }
  return x;
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

void report(benchmark::State& state, int64_t n, int64_t out, int64_t in, double weight_bytes) {
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations() * weight_bytes));
  state.counters["FLOP/s"] = benchmark::Counter(2.0 * static_cast<double>(n) * out * in,
                                                benchmark::Counter::kIsIterationInvariantRate);
}

// hot: one copy of the weights, read again every iteration (from L2/L3 where it fits): the kernel's
// own arithmetic rate, apart from DRAM's.
void BM_LinearFp8(benchmark::State& state, int64_t n, int64_t out, int64_t in, bool hot = false) {
  KernelLevel level;
  std::unique_ptr<ThreadPool> pool;
  if (!setup(state, &level, &pool)) return;
  const size_t w_bytes = static_cast<size_t>(out * in), s_bytes = static_cast<size_t>(((out + 31) / 32) * (in / 32));
  Copies c = make_copies(w_bytes, s_bytes, n, true, hot);
  std::vector<float> x = make_x(n, in), y(static_cast<size_t>(n * out));
  std::vector<Fp8Weight> ws;  // with their scale ranges, as the model binds them (with_scale_range)
  for (size_t k = 0; k < c.w.size(); ++k)
    ws.push_back(with_scale_range(Fp8Weight{c.w[k].data(), c.s[k].data(), out, in}));
  size_t i = 0;
  for (auto _ : state) {
    linear_fp8(x.data(), n, ws[i], y.data(), pool.get(), level);
    benchmark::DoNotOptimize(y.data());
    i = (i + 1) % c.w.size();
  }
  report(state, n, out, in, static_cast<double>(w_bytes + s_bytes));
}

void BM_LinearFp4(benchmark::State& state, int64_t n, int64_t out, int64_t in, bool hot = false) {
  KernelLevel level;
  std::unique_ptr<ThreadPool> pool;
  if (!setup(state, &level, &pool)) return;
  const size_t w_bytes = static_cast<size_t>(out * in / 2), s_bytes = static_cast<size_t>(out * in / 32);
  Copies c = make_copies(w_bytes, s_bytes, n, false, hot);
  std::vector<float> x = make_x(n, in), y(static_cast<size_t>(n * out));
  size_t i = 0;
  for (auto _ : state) {
    const Fp4Weight w{c.w[i].data(), c.s[i].data(), out, in};
    linear_fp4(x.data(), n, w, y.data(), pool.get(), level);
    benchmark::DoNotOptimize(y.data());
    i = (i + 1) % c.w.size();
  }
  report(state, n, out, in, static_cast<double>(w_bytes + s_bytes));
}

// An expert's rows in a prefill (a few tokens per expert: the routing spreads 512 tokens over 139
// experts, most of them below 8 each) through one regime or the other (RowPath::kDecode: the
// matvec, kPrompt: the GEMM), weights cold: where the level's gemm_min_rows should sit.
void BM_LinearFp4Path(benchmark::State& state, int64_t n, int64_t out, int64_t in, bool matvec) {
  KernelLevel level;
  std::unique_ptr<ThreadPool> pool;
  if (!setup(state, &level, &pool)) return;
  const size_t w_bytes = static_cast<size_t>(out * in / 2), s_bytes = static_cast<size_t>(out * in / 32);
  Copies c = make_copies(w_bytes, s_bytes, n, false);
  std::vector<float> x = make_x(n, in), y(static_cast<size_t>(n * out));
  size_t i = 0;
  for (auto _ : state) {
    const Fp4Weight w{c.w[i].data(), c.s[i].data(), out, in};
    linear_fp4(x.data(), n, w, y.data(), pool.get(), level, matvec ? RowPath::kDecode : RowPath::kPrompt);
    benchmark::DoNotOptimize(y.data());
    i = (i + 1) % c.w.size();
  }
  report(state, n, out, in, static_cast<double>(w_bytes + s_bytes));
}

// One decode layer's expert passes as the model runs them (model/moe.cpp compute_batch): the
// top-k routed MXFP4 experts' w1 and w3 beside the FP8 shared expert's in one pass, then every w2
// in a second (kernels::linear_batch); SwiGLU left out. Weights rotate over copies (cold,
// as a decode step's); bytes = every matrix and its scales.
void BM_MoeDecodeLayer(benchmark::State& state, int64_t dim, int64_t inter, int top_k) {
  KernelLevel level;
  std::unique_ptr<ThreadPool> pool;
  if (!setup(state, &level, &pool)) return;
  const size_t f4 = static_cast<size_t>(inter * dim / 2), s4 = static_cast<size_t>(inter * dim / 32);
  const size_t f8 = static_cast<size_t>(inter * dim), s8 = static_cast<size_t>(((inter + 31) / 32) * ((dim + 31) / 32));
  // Per copy of the layer: 3 routed matrices per expert, then the shared expert's 3.
  const size_t layer_w = 3 * top_k * f4 + 3 * f8, layer_s = 3 * top_k * s4 + 3 * s8;
  Copies c = make_copies(layer_w, layer_s, 1, false);
  std::vector<float> x = make_x(1, dim), act = make_x(1, inter);
  std::vector<float> g(static_cast<size_t>(2 * (top_k + 1) * inter)), y(static_cast<size_t>((top_k + 1) * dim));
  std::vector<LinearJob<Fp8Weight>> j8;
  std::vector<LinearJob<Fp4Weight>> j4;
  size_t i = 0;
  for (auto _ : state) {
    uint8_t* w = c.w[i].data();
    uint8_t* sc = c.s[i].data();
    for (int pass = 0; pass < 2; ++pass) {
      j8.clear();
      j4.clear();
      for (int e = 0; e < top_k; ++e)
        for (int m = 0; m < 3; ++m) {
          const bool down = m == 2;
          if (down != (pass == 1)) continue;
          const size_t at = static_cast<size_t>(3 * e + m);
          j4.push_back({down ? act.data() : x.data(), 1,
                        Fp4Weight{w + at * f4, sc + at * s4, down ? dim : inter, down ? inter : dim},
                        down ? y.data() + e * dim : g.data() + (2 * e + m) * inter});
        }
      for (int m = 0; m < 3; ++m) {
        const bool down = m == 2;
        if (down != (pass == 1)) continue;
        const size_t base_w = 3 * top_k * f4, base_s = 3 * top_k * s4;
        j8.push_back({down ? act.data() : x.data(), 1,
                      Fp8Weight{w + base_w + m * f8, sc + base_s + m * s8, down ? dim : inter, down ? inter : dim},
                      down ? y.data() + top_k * dim : g.data() + (2 * top_k + m) * inter});
      }
      linear_batch(LinearBatch{j8, j4, {}, {}}, pool.get(), level);
    }
    benchmark::DoNotOptimize(y.data());
    i = (i + 1) % c.w.size();
  }
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations() * static_cast<double>(layer_w + layer_s)));
}

void BM_LinearBf16(benchmark::State& state, int64_t n, int64_t out, int64_t in) {
  KernelLevel level;
  std::unique_ptr<ThreadPool> pool;
  if (!setup(state, &level, &pool)) return;
  const size_t w_bytes = static_cast<size_t>(out * in) * 2;
  Copies c = make_copies(w_bytes, 1, n, false);
  normal_bf16(&c);
  std::vector<float> x = make_x(n, in), y(static_cast<size_t>(n * out));
  size_t i = 0;
  for (auto _ : state) {
    const Bf16Weight w{reinterpret_cast<const uint16_t*>(c.w[i].data()), out, in};
    linear_bf16(x.data(), n, w, y.data(), pool.get(), level);
    benchmark::DoNotOptimize(y.data());
    i = (i + 1) % c.w.size();
  }
  report(state, n, out, in, static_cast<double>(w_bytes));
}

// attn.wo_a as the model binds it: one output group, blocked, bit-exact order, in bf16 bits or as
// the release's E4M3 codes with [32, 32] scales (kernels::Bf16Weight::e4m3: half the bytes).
void BM_LinearWoA(benchmark::State& state, int64_t n, int64_t out, int64_t in, bool e4m3) {
  KernelLevel level;
  std::unique_ptr<ThreadPool> pool;
  if (!setup(state, &level, &pool)) return;
  const size_t w_bytes = static_cast<size_t>(out * in) * (e4m3 ? 1 : 2);
  const size_t s_bytes = e4m3 ? static_cast<size_t>((out + 31) / 32 * ((in + 31) / 32)) : 1;
  Copies c = make_copies(w_bytes, s_bytes, n, e4m3);
  if (!e4m3) normal_bf16(&c);
  std::vector<float> x = make_x(n, in), y(static_cast<size_t>(n * out));
  size_t i = 0;
  for (auto _ : state) {
    Bf16Weight w{nullptr, out, in, true};
    if (e4m3) {
      w.e4m3 = c.w[i].data();
      w.e4m3_scale = c.s[i].data();
    } else {
      w.w = reinterpret_cast<const uint16_t*>(c.w[i].data());
    }
    linear_bf16(x.data(), n, w, y.data(), pool.get(), level, RowPath::kDecode);
    benchmark::DoNotOptimize(y.data());
    i = (i + 1) % c.w.size();
  }
  report(state, n, out, in, static_cast<double>(w_bytes + s_bytes));
}

// The LM head through the any-order BF16 path (kernels::linear_bf16_any_order).
void BM_LinearBf16AnyOrder(benchmark::State& state, int64_t n, int64_t out, int64_t in, bool blocked = false) {
  KernelLevel level;
  std::unique_ptr<ThreadPool> pool;
  if (!setup(state, &level, &pool)) return;
  const size_t w_bytes = static_cast<size_t>(out * in) * 2;
  Copies c = make_copies(w_bytes, 1, n, false);
  normal_bf16(&c);
  std::vector<float> x = make_x(n, in), y(static_cast<size_t>(n * out));
  size_t i = 0;
  for (auto _ : state) {
    const Bf16Weight w{reinterpret_cast<const uint16_t*>(c.w[i].data()), out, in, blocked};
    linear_bf16_any_order(x.data(), n, w, y.data(), pool.get(), level, RowPath::kDecode);
    benchmark::DoNotOptimize(y.data());
    i = (i + 1) % c.w.size();
  }
  report(state, n, out, in, static_cast<double>(w_bytes));
}

// Reference: read 512 MiB with plain loads split over the threads (what a matvec could reach).
// range(0): threads; range(1): 1 = huge pages (the default, the decode reference), 0 = 4 KiB pages
// (MADV_NOHUGEPAGE), to show what the pages alone cost.
void BM_MemRead(benchmark::State& state) {
  const int threads = static_cast<int>(state.range(0));
  const bool huge = state.range(1) != 0;
  std::unique_ptr<ThreadPool> pool = threads > 1 ? std::make_unique<ThreadPool>(threads) : nullptr;
  // On huge pages, as the weights whose rates it is the limit of (Copies; core/huge_pages.h: the
  // same loop on 4 KiB pages ran 15-26 GB/s where huge pages gave 26-33, minutes apart).
  const size_t n = (512u << 20) / sizeof(uint64_t);
  HugePageBytes arena = alloc_huge_page_bytes(n * sizeof(uint64_t));
  uint64_t* buf = reinterpret_cast<uint64_t*>(arena.get());
  if (!huge) (void)::madvise(buf, n * sizeof(uint64_t), MADV_NOHUGEPAGE);  // before the first touch
  for (size_t k = 0; k < n; ++k) buf[k] = k;
  std::vector<uint64_t> sums(64);
  for (auto _ : state) {
    auto body = [&](int64_t c0, int64_t c1) {
      for (int64_t c = c0; c < c1; ++c) {
        const uint64_t* p = buf + static_cast<size_t>(c) * (n / 64);
        uint64_t a = 0, b = 0, d = 0, e = 0;
        for (size_t k = 0; k < n / 64; k += 4) {
          a += p[k];
          b += p[k + 1];
          d += p[k + 2];
          e += p[k + 3];
        }
        sums[static_cast<size_t>(c)] = a + b + d + e;
      }
    };
    if (pool) pool->parallel_for(64, body);
    else body(0, 64);
    benchmark::DoNotOptimize(sums.data());
  }
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations() * n * sizeof(uint64_t)));
  state.SetLabel("t=" + std::to_string(threads) + (huge ? "" : " 4KiB pages"));
}

// Peak arithmetic of one core per instruction family, the reference for the prefill GFLOP/s:
// 12 independent accumulator chains (enough to cover the latency), nothing but the instruction.
// kind 0: f32 FMA on ymm (AVX2 level GEMMs), 1: f32 FMA on zmm (AVX-512), 2: VDPBF16PS on zmm
// (AVX-512 BF16 level: FP8/FP4 prefill). FLOP = 2 per multiply-add.
constexpr int kPeakChains = 12;
__attribute__((target("avx2,fma"))) float peak_fma256(int64_t iters) {
  __m256 acc[kPeakChains];
  const __m256 a = _mm256_set1_ps(1.0000001f), b = _mm256_set1_ps(0.9999999f);
  for (int j = 0; j < kPeakChains; ++j) acc[j] = _mm256_set1_ps(static_cast<float>(j));
  for (int64_t i = 0; i < iters; ++i)
    for (int j = 0; j < kPeakChains; ++j) acc[j] = _mm256_fmadd_ps(acc[j], a, b);
  float s = 0;
  for (int j = 0; j < kPeakChains; ++j) s += _mm256_cvtss_f32(acc[j]);
  return s;
}
__attribute__((target("avx512f"))) float peak_fma512(int64_t iters) {
  __m512 acc[kPeakChains];
  const __m512 a = _mm512_set1_ps(1.0000001f), b = _mm512_set1_ps(0.9999999f);
  for (int j = 0; j < kPeakChains; ++j) acc[j] = _mm512_set1_ps(static_cast<float>(j));
  for (int64_t i = 0; i < iters; ++i)
    for (int j = 0; j < kPeakChains; ++j) acc[j] = _mm512_fmadd_ps(acc[j], a, b);
  float s = 0;
  for (int j = 0; j < kPeakChains; ++j) s += _mm512_cvtss_f32(acc[j]);
  return s;
}
__attribute__((target("avx512f,avx512bf16"))) float peak_dpbf16(int64_t iters) {
  __m512 acc[kPeakChains];
  const __m512bh a = (__m512bh)_mm512_set1_epi16(0x3F80), b = (__m512bh)_mm512_set1_epi16(0x3F80);
  for (int j = 0; j < kPeakChains; ++j) acc[j] = _mm512_set1_ps(static_cast<float>(j));
  for (int64_t i = 0; i < iters; ++i)
    for (int j = 0; j < kPeakChains; ++j) acc[j] = _mm512_dpbf16_ps(acc[j], a, b);
  float s = 0;
  for (int j = 0; j < kPeakChains; ++j) s += _mm512_cvtss_f32(acc[j]);
  return s;
}

void BM_PeakFlops(benchmark::State& state) {
  const int kind = static_cast<int>(state.range(0)), threads = static_cast<int>(state.range(1));
  const KernelLevel need[3] = {KernelLevel::kAvx2, KernelLevel::kAvx512, KernelLevel::kAvx512Bf16};
  if (!kernel_level_supported(need[kind])) {
    state.SkipWithError("instruction set not supported on this CPU");
    return;
  }
  std::unique_ptr<ThreadPool> pool = threads > 1 ? std::make_unique<ThreadPool>(threads) : nullptr;
  constexpr int64_t kIters = 1 << 20;
  std::vector<float> sink(static_cast<size_t>(threads));
  auto body = [&](int64_t t0, int64_t t1) {
    for (int64_t t = t0; t < t1; ++t)
      sink[static_cast<size_t>(t)] = kind == 0 ? peak_fma256(kIters) : kind == 1 ? peak_fma512(kIters) : peak_dpbf16(kIters);
  };
  for (auto _ : state) {
    if (pool) pool->parallel_for(threads, body);
    else body(0, 1);
    benchmark::DoNotOptimize(sink.data());
  }
  const double lanes_madd[3] = {8, 16, 32};  // multiply-adds per instruction
  state.counters["FLOP/s"] = benchmark::Counter(2.0 * lanes_madd[kind] * kPeakChains * kIters * threads,
                                                benchmark::Counter::kIsIterationInvariantRate);
  const char* names[3] = {"fma ymm", "fma zmm", "vdpbf16ps zmm"};
  state.SetLabel(std::string(names[kind]) + " t=" + std::to_string(threads));
}

// ggml block formats: type (a QuantType value), n, out, in; weights quantised once from normal random
// rows with the reference quantiser, then copied (decode: past the L3, as above).
void BM_LinearQuant(benchmark::State& state, int type, int64_t n, int64_t out, int64_t in) {
  const int threads = static_cast<int>(state.range(0));
  const KernelLevel level = static_cast<KernelLevel>(state.range(1));
  if (!kernel_level_supported(level)) {
    state.SkipWithError("kernel level not supported on this CPU");
    return;
  }
  const QuantType t = static_cast<QuantType>(type);
  const size_t row_bytes = static_cast<size_t>(quant_row_bytes(t, in)), w_bytes = row_bytes * static_cast<size_t>(out);
  AlignedBytes q(w_bytes);
  std::vector<float> row(static_cast<size_t>(in));
  uint64_t s = 88172645463325252ull;
  for (int64_t r = 0; r < out; ++r) {
    for (float& f : row) {  // xorshift -> sum of 4 uniforms: roughly normal
      float acc = 0;
      for (int j = 0; j < 4; ++j) {
        s ^= s << 13;
        s ^= s >> 7;
        s ^= s << 17;
        acc += static_cast<float>(s >> 40) * 0x1p-24f - 0.5f;
      }
      f = acc;
    }
    quantize_row_ref(t, row.data(), q.data() + static_cast<size_t>(r) * row_bytes, in);
  }
  const size_t copies = n < 8 ? std::max<size_t>(1, (kColdBytes + w_bytes - 1) / w_bytes) : 1;
  std::vector<AlignedBytes> w;
  for (size_t c = 0; c < copies; ++c) {
    w.emplace_back(w_bytes);
    std::memcpy(w.back().data(), q.data(), w_bytes);
  }
  std::vector<float> x(static_cast<size_t>(n * in), 0.5f), y(static_cast<size_t>(n * out));
  std::unique_ptr<ThreadPool> pool = threads > 1 ? std::make_unique<ThreadPool>(threads) : nullptr;
  size_t i = 0;
  for (auto _ : state) {
    linear_quant(x.data(), n, QuantWeight{t, w[i++ % copies].data(), out, in}, y.data(), pool.get(), level);
    benchmark::DoNotOptimize(y.data());
  }
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations()) * static_cast<int64_t>(w_bytes));
  state.counters["FLOP/s"] =
      benchmark::Counter(2.0 * n * out * in, benchmark::Counter::kIsIterationInvariantRate);
  state.SetLabel(std::string(quant_type_name(t)) + " " + kernel_level_name(level) + " t=" + std::to_string(threads));
}

void levels_and_threads(benchmark::internal::Benchmark* b) {
  for (int t : {1, 2})
    for (int l : {1, 2, 3}) b->Args({t, l});
  b->UseRealTime()->Unit(benchmark::kMicrosecond);
}
// The any-order BF16 matvec also at KernelLevel::kAmx (4: the only op that level changes).
void levels_and_threads_amx(benchmark::internal::Benchmark* b) {
  for (int t : {1, 2})
    for (int l : {1, 2, 3, 4}) b->Args({t, l});
  b->UseRealTime()->Unit(benchmark::kMicrosecond);
}

// Decode (n = 1).
BENCHMARK_CAPTURE(BM_LinearFp8, decode_attn_1280x5120, 1, 1280, 5120)->Apply(levels_and_threads);
BENCHMARK_CAPTURE(BM_LinearFp8, decode_attn_5120x1024, 1, 5120, 1024)->Apply(levels_and_threads);
BENCHMARK_CAPTURE(BM_LinearFp8, decode_engram_25600x6144, 1, 25600, 6144)->Apply(levels_and_threads);
// The 8 GB synth checkpoint's small decode shapes (dim 1024): attention wq_b and wo_b, one expert's w1.
BENCHMARK_CAPTURE(BM_LinearFp8, decode_wq_b_6144x256, 1, 6144, 256)->Apply(levels_and_threads);
BENCHMARK_CAPTURE(BM_LinearFp8, decode_wo_b_1024x1536, 1, 1024, 1536)->Apply(levels_and_threads);
BENCHMARK_CAPTURE(BM_LinearFp4, decode_expert_448x1024, 1, 448, 1024)->Apply(levels_and_threads);
// The same weights hot (one copy, re-read from the caches): the decode kernels' arithmetic rate.
BENCHMARK_CAPTURE(BM_LinearFp8, hot_wq_b_6144x256, 1, 6144, 256, true)->Apply(levels_and_threads);
BENCHMARK_CAPTURE(BM_LinearFp8, hot_wo_b_1024x1536, 1, 1024, 1536, true)->Apply(levels_and_threads);
BENCHMARK_CAPTURE(BM_LinearFp4, hot_expert_448x1024, 1, 448, 1024, true)->Apply(levels_and_threads);
BENCHMARK_CAPTURE(BM_LinearFp4, hot_expert_1024x448, 1, 1024, 448, true)->Apply(levels_and_threads);
// The same small shapes at four decode rows (a batch of four streams: each weight read once for all).
BENCHMARK_CAPTURE(BM_LinearFp8, decode4_wq_b_6144x256, 4, 6144, 256)->Apply(levels_and_threads);
BENCHMARK_CAPTURE(BM_LinearFp8, decode4_wo_b_1024x1536, 4, 1024, 1536)->Apply(levels_and_threads);
BENCHMARK_CAPTURE(BM_LinearFp4, decode4_expert_448x1024, 4, 448, 1024)->Apply(levels_and_threads);
BENCHMARK_CAPTURE(BM_LinearFp4, decode_expert_2304x5120, 1, 2304, 5120)->Apply(levels_and_threads);
// A prefill's few-token experts (8 GB checkpoint's w1 and w2), matvec vs GEMM at 4, 6 and 8 rows.
BENCHMARK_CAPTURE(BM_LinearFp4Path, rows4_matvec_448x1024, 4, 448, 1024, true)->Apply(levels_and_threads);
BENCHMARK_CAPTURE(BM_LinearFp4Path, rows4_gemm_448x1024, 4, 448, 1024, false)->Apply(levels_and_threads);
BENCHMARK_CAPTURE(BM_LinearFp4Path, rows6_matvec_448x1024, 6, 448, 1024, true)->Apply(levels_and_threads);
BENCHMARK_CAPTURE(BM_LinearFp4Path, rows6_gemm_448x1024, 6, 448, 1024, false)->Apply(levels_and_threads);
BENCHMARK_CAPTURE(BM_LinearFp4Path, rows8_matvec_448x1024, 8, 448, 1024, true)->Apply(levels_and_threads);
BENCHMARK_CAPTURE(BM_LinearFp4Path, rows8_gemm_448x1024, 8, 448, 1024, false)->Apply(levels_and_threads);
BENCHMARK_CAPTURE(BM_LinearFp4Path, rows6_matvec_1024x448, 6, 1024, 448, true)->Apply(levels_and_threads);
BENCHMARK_CAPTURE(BM_LinearFp4Path, rows6_gemm_1024x448, 6, 1024, 448, false)->Apply(levels_and_threads);
// The GEMM at the rows a prefill's routed experts see, on the probe's two matmul shapes (tools/probe.h
// kSmallMatmul*, kLargeMatmul*: the plan interpolates between them by size) and on the 8 GB scaled
// checkpoint's expert shapes, cold, so the plan's rate for an expert can be checked against its own.
BENCHMARK_CAPTURE(BM_LinearFp4Path, rows8_gemm_256x512, 8, 256, 512, false)->Apply(levels_and_threads);
BENCHMARK_CAPTURE(BM_LinearFp4Path, rows32_gemm_256x512, 32, 256, 512, false)->Apply(levels_and_threads);
BENCHMARK_CAPTURE(BM_LinearFp4Path, rows8_gemm_2048x2048, 8, 2048, 2048, false)->Apply(levels_and_threads);
BENCHMARK_CAPTURE(BM_LinearFp4Path, rows32_gemm_2048x2048, 32, 2048, 2048, false)->Apply(levels_and_threads);
BENCHMARK_CAPTURE(BM_LinearFp4Path, rows32_gemm_448x1024, 32, 448, 1024, false)->Apply(levels_and_threads);
BENCHMARK_CAPTURE(BM_LinearFp4Path, rows8_gemm_1024x448, 8, 1024, 448, false)->Apply(levels_and_threads);
BENCHMARK_CAPTURE(BM_LinearFp4Path, rows32_gemm_1024x448, 32, 1024, 448, false)->Apply(levels_and_threads);
// One decode layer's routed (top-6 MXFP4) and shared (FP8) expert passes: the 8 GB scaled
// checkpoint's shapes (dim 1024, moe_inter 448) and the release's (dim 5120, moe_inter 2304).
BENCHMARK_CAPTURE(BM_MoeDecodeLayer, decode_moe_1024x448_top6, 1024, 448, 6)->Apply(levels_and_threads);
BENCHMARK_CAPTURE(BM_MoeDecodeLayer, decode_moe_5120x2304_top6, 5120, 2304, 6)->Apply(levels_and_threads);
BENCHMARK_CAPTURE(BM_LinearFp4, decode_expert_5120x2304, 1, 5120, 2304)->Apply(levels_and_threads);
BENCHMARK_CAPTURE(BM_LinearBf16, decode_head_129280x5120, 1, 129280, 5120)->Apply(levels_and_threads);
// The 8 GB synth checkpoint's head (dim 1024) and one wo_a group (192 x 768), for the end-to-end profile.
BENCHMARK_CAPTURE(BM_LinearBf16, decode_head_129280x1024, 1, 129280, 1024)->Apply(levels_and_threads);
BENCHMARK_CAPTURE(BM_LinearBf16, decode_wo_a_192x768, 1, 192, 768)->Apply(levels_and_threads);
// The MoE router's gate (bf16, row-major, bit-exact order): the 8 GB checkpoint's 139 x 1024 and the
// release's 384 x 5120.
BENCHMARK_CAPTURE(BM_LinearBf16, decode_router_139x1024, 1, 139, 1024)->Apply(levels_and_threads);
BENCHMARK_CAPTURE(BM_LinearBf16, decode_router_384x5120, 1, 384, 5120)->Apply(levels_and_threads);
// wo_a blocked, bf16 bits against E4M3 codes: the 8 GB checkpoint's group and the release's.
BENCHMARK_CAPTURE(BM_LinearWoA, decode_bf16_192x768, 1, 192, 768, false)->Apply(levels_and_threads);
BENCHMARK_CAPTURE(BM_LinearWoA, decode_e4m3_192x768, 1, 192, 768, true)->Apply(levels_and_threads);
BENCHMARK_CAPTURE(BM_LinearWoA, decode4_bf16_192x768, 4, 192, 768, false)->Apply(levels_and_threads);
BENCHMARK_CAPTURE(BM_LinearWoA, decode4_e4m3_192x768, 4, 192, 768, true)->Apply(levels_and_threads);
BENCHMARK_CAPTURE(BM_LinearWoA, decode_bf16_1024x4096, 1, 1024, 4096, false)->Apply(levels_and_threads);
BENCHMARK_CAPTURE(BM_LinearWoA, decode_e4m3_1024x4096, 1, 1024, 4096, true)->Apply(levels_and_threads);
BENCHMARK_CAPTURE(BM_LinearWoA, decode4_bf16_1024x4096, 4, 1024, 4096, false)->Apply(levels_and_threads);
BENCHMARK_CAPTURE(BM_LinearWoA, decode4_e4m3_1024x4096, 4, 1024, 4096, true)->Apply(levels_and_threads);
BENCHMARK_CAPTURE(BM_LinearBf16AnyOrder, decode_head_129280x5120, 1, 129280, 5120)->Apply(levels_and_threads_amx);
BENCHMARK_CAPTURE(BM_LinearBf16AnyOrder, decode_head_129280x1024, 1, 129280, 1024)->Apply(levels_and_threads_amx);
// A batch of decode rows through the head (the demo's dim 512, the 8 GB scaled checkpoint's 1024, the
// release's 5120; RowPath::kDecode keeps them here).
BENCHMARK_CAPTURE(BM_LinearBf16AnyOrder, decode1_head_129280x512, 1, 129280, 512)->Apply(levels_and_threads_amx);
BENCHMARK_CAPTURE(BM_LinearBf16AnyOrder, decode4_head_129280x512, 4, 129280, 512)->Apply(levels_and_threads_amx);
BENCHMARK_CAPTURE(BM_LinearBf16AnyOrder, decode8_head_129280x512, 8, 129280, 512)->Apply(levels_and_threads_amx);
BENCHMARK_CAPTURE(BM_LinearBf16AnyOrder, decode4_head_129280x1024, 4, 129280, 1024)->Apply(levels_and_threads_amx);
BENCHMARK_CAPTURE(BM_LinearBf16AnyOrder, decode4_head_129280x5120, 4, 129280, 5120)->Apply(levels_and_threads_amx);
// The same heads in the blocked layout (model/weights.cpp blocks the LM head; one fused chain per
// output): the bytes and the FMAs are the same, the layout's horizontal sums and x loads are not.
BENCHMARK_CAPTURE(BM_LinearBf16AnyOrder, blocked1_head_129280x512, 1, 129280, 512, true)->Apply(levels_and_threads);
BENCHMARK_CAPTURE(BM_LinearBf16AnyOrder, blocked4_head_129280x512, 4, 129280, 512, true)->Apply(levels_and_threads);
BENCHMARK_CAPTURE(BM_LinearBf16AnyOrder, blocked8_head_129280x512, 8, 129280, 512, true)->Apply(levels_and_threads);
BENCHMARK_CAPTURE(BM_LinearBf16AnyOrder, blocked1_head_129280x1024, 1, 129280, 1024, true)->Apply(levels_and_threads);
BENCHMARK_CAPTURE(BM_LinearBf16AnyOrder, blocked4_head_129280x1024, 4, 129280, 1024, true)->Apply(levels_and_threads);
BENCHMARK_CAPTURE(BM_LinearBf16AnyOrder, blocked1_head_129280x5120, 1, 129280, 5120, true)->Apply(levels_and_threads);
BENCHMARK_CAPTURE(BM_LinearBf16AnyOrder, blocked4_head_129280x5120, 4, 129280, 5120, true)->Apply(levels_and_threads);
// Prefill (n = 512).
BENCHMARK_CAPTURE(BM_LinearFp8, prefill512_attn_1280x5120, 512, 1280, 5120)->Apply(levels_and_threads);
BENCHMARK_CAPTURE(BM_LinearFp8, prefill512_attn_5120x1024, 512, 5120, 1024)->Apply(levels_and_threads);
// Short K (the 8 GB checkpoint's wq_b from q_lora_rank 256, its shared expert's w2 from 448): the
// GEMM's output stores weigh more per FLOP; in-situ they ran at a third of the 1280 x 5120 rate.
BENCHMARK_CAPTURE(BM_LinearFp8, prefill512_wq_b_6144x256, 512, 6144, 256)->Apply(levels_and_threads);
BENCHMARK_CAPTURE(BM_LinearFp8, prefill512_shared_w2_1024x448, 512, 1024, 448)->Apply(levels_and_threads);
BENCHMARK_CAPTURE(BM_LinearFp4, prefill512_expert_2304x5120, 512, 2304, 5120)->Apply(levels_and_threads);
BENCHMARK_CAPTURE(BM_LinearFp4, prefill512_expert_5120x2304, 512, 5120, 2304)->Apply(levels_and_threads);
// attn.wo_a: BF16 (dequantised from FP8 at load, as convert.py does), one o_group of 1024 x 4096.
BENCHMARK_CAPTURE(BM_LinearBf16, prefill512_wo_a_1024x4096, 512, 1024, 4096)->Apply(levels_and_threads);
// ggml block formats (the acceptance's Q4_K / Q2_K experts, then the others), decode and n = 16.
BENCHMARK_CAPTURE(BM_LinearQuant, q4_K_decode_expert_2304x5120, 2, 1, 2304, 5120)->Apply(levels_and_threads);
BENCHMARK_CAPTURE(BM_LinearQuant, q2_K_decode_expert_2304x5120, 4, 1, 2304, 5120)->Apply(levels_and_threads);
BENCHMARK_CAPTURE(BM_LinearQuant, q8_0_decode_expert_2304x5120, 0, 1, 2304, 5120)->Apply(levels_and_threads);
BENCHMARK_CAPTURE(BM_LinearQuant, q6_K_decode_expert_2304x5120, 1, 1, 2304, 5120)->Apply(levels_and_threads);
BENCHMARK_CAPTURE(BM_LinearQuant, q3_K_decode_expert_2304x5120, 3, 1, 2304, 5120)->Apply(levels_and_threads);
BENCHMARK_CAPTURE(BM_LinearQuant, iq4_nl_decode_expert_2304x5120, 5, 1, 2304, 5120)->Apply(levels_and_threads);
BENCHMARK_CAPTURE(BM_LinearQuant, q4_K_n16_expert_2304x5120, 2, 16, 2304, 5120)->Apply(levels_and_threads);
BENCHMARK_CAPTURE(BM_LinearQuant, q2_K_n16_expert_2304x5120, 4, 16, 2304, 5120)->Apply(levels_and_threads);
// Memory bandwidth and peak arithmetic references.
BENCHMARK(BM_MemRead)->ArgsProduct({{1, 2, 4, 8, 16}, {1, 0}})->UseRealTime()->Unit(benchmark::kMillisecond);
BENCHMARK(BM_PeakFlops)->ArgsProduct({{0, 1, 2}, {1, 2}})->UseRealTime()->Unit(benchmark::kMillisecond);

}  // namespace
}  // namespace strata::kernels

BENCHMARK_MAIN();
