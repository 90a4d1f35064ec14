// Peer comparison: strata's linear kernels against llama.cpp's ggml CPU backend on the same shapes,
// in one process on the same machine, timed the same way (bench/ggml_peer.sh builds and runs it).
//
// Pairs (same shape, same or nearest bits per weight):
//   strata MXFP4 (E2M1 + E8M0 per 32, 4.25 bit)   vs  ggml MXFP4 (the same format)
//   strata FP8   (E4M3 + E8M0 per 32x32, ~8 bit)   vs  ggml Q8_0  (int8 + f16 per 32, 8.5 bit)
// Decode (n = 1): each call reads a different copy of the weights (>= 256 MiB in all, past the L3),
// as a decode step touches every layer once; reported as weight bytes per second and as a share of
// the machine's read bandwidth measured here at the same thread count. Prefill (n = 512): GFLOP/s.
// Both libraries use a persistent thread pool of the same size (ggml: ggml_threadpool_new, as
// llama.cpp does); both quantise the f32 activations inside the timed call (strata to E4M3, ggml to
// its vec_dot type). Rounds alternate strata and ggml so machine noise hits both; the median of the
// per-round times is reported. Only one pool is awake at a time: ggml's threadpool is paused
// (ggml_threadpool_pause) while strata and the bandwidth pass run, and strata's workers go to sleep
// on their own after ~50 us without work, so on a machine with as many cores as threads neither
// side's idle workers take cycles from the other's.
//
// --kquant: instead, ggml's own block formats on both sides (Q8_0, Q6_K, Q4_K, Q3_K, Q2_K, IQ4_NL),
// decode only (n = 1): the same weight bytes (ggml_quantize_chunk's) through strata's
// kernels::linear_quant (f32 x, kernels/kquant_linear.h) and ggml's mul_mat (x quantised to Q8_K /
// Q8_0 inside the call, integer dot products).
//
// Usage: ggml_peer [--threads N] [--rounds R] [--round-ms MS] [--quick] [--kquant] [--level NAME]
//   --level NAME  strata's kernel level (scalar, avx2, avx512, avx512bf16; default: the best this CPU
//                 runs), e.g. `--kquant --level avx2` against ggml's haswell variant (ggml_peer.sh
//                 --variant haswell) to measure the AVX2 kernels on an AVX-512 machine.
// Output: one markdown table on stdout (ratio = ggml time / strata time: > 1 means strata is faster).
#include <emmintrin.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "core/aligned_buffer.h"
#include "core/thread_pool.h"
#include "ggml-cpu.h"
#include "ggml.h"
#include "kernels/dispatch.h"
#include "kernels/kquant_linear.h"
#include "kernels/linear.h"

namespace {

using Clock = std::chrono::steady_clock;
constexpr size_t kColdBytes = 256u << 20;

struct Shape {
  const char* name;
  int64_t out, in;
};

// V4.1 shapes (ARCHITECTURE.md): routed expert w1/w3 and w2, attention wq_a / wo_b-like, Engram wkv.
const Shape kShapes[] = {
    {"expert w1/w3 2304x5120", 2304, 5120},
    {"expert w2 5120x2304", 5120, 2304},
    {"attn wq_a 1280x5120", 1280, 5120},
    {"attn 5120x1024", 5120, 1024},
    {"engram wkv 25600x6144", 25600, 6144},
};

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0.0 : v[v.size() / 2];
}

// Calls fn(i) for ~round_ms milliseconds (at least 2 calls), i counting calls; returns seconds per call.
double time_round(const std::function<void(size_t)>& fn, double round_ms) {
  size_t calls = 0;
  const auto t0 = Clock::now();
  double el = 0;
  while (calls < 2 || el * 1e3 < round_ms) {
    fn(calls++);
    el = std::chrono::duration<double>(Clock::now() - t0).count();
  }
  return el / static_cast<double>(calls);
}

std::vector<float> random_matrix(int64_t rows, int64_t cols, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  std::vector<float> m(static_cast<size_t>(rows * cols));
  for (auto& v : m) v = nd(rng);
  return m;
}

// ---- strata side ----------------------------------------------------------------------------------
struct StrataWeights {
  std::vector<strata::AlignedBytes> w, s;
  bool fp4 = false;
  int64_t out = 0, in = 0;
  uint8_t scale_lo = 1, scale_hi = 0;  // FP8: the copies' scale range, as the model binds it
  size_t bytes() const { return w[0].size() + s[0].size(); }
};

// Quantises m [out, in] once (E4M3 + [32,32] E8M0 scales, or E2M1 + E8M0 per 32), then copies.
StrataWeights strata_weights(const std::vector<float>& m, int64_t out, int64_t in, bool fp4, size_t copies) {
  StrataWeights sw;
  sw.fp4 = fp4;
  sw.out = out;
  sw.in = in;
  const size_t wb = fp4 ? static_cast<size_t>(out * in / 2) : static_cast<size_t>(out * in);
  const size_t sb = fp4 ? static_cast<size_t>(out * in / 32) : static_cast<size_t>(((out + 31) / 32) * (in / 32));
  strata::AlignedBytes w(wb), s(sb);
  // Scales near 2^0; codes: E4M3 from the rounded value, E2M1 magnitude 0..7 with the sign.
  for (size_t i = 0; i < sb; ++i) s[i] = 127;
  for (int64_t r = 0; r < out; ++r)
    for (int64_t k = 0; k < in; ++k) {
      const float v = m[static_cast<size_t>(r * in + k)];
      if (fp4) {
        static const float mags[8] = {0, 0.5f, 1, 1.5f, 2, 3, 4, 6};
        const float a = std::fabs(v) * 2.0f;
        int best = 0;
        for (int c = 1; c < 8; ++c)
          if (std::fabs(mags[c] - a) < std::fabs(mags[best] - a)) best = c;
        const uint8_t code = static_cast<uint8_t>(best | (v < 0 ? 8 : 0));
        uint8_t& byte = w[static_cast<size_t>((r * in + k) / 2)];
        byte = (k & 1) ? static_cast<uint8_t>((byte & 0x0F) | (code << 4)) : static_cast<uint8_t>((byte & 0xF0) | code);
      } else {
        const int e = std::max(-6, std::min(8, static_cast<int>(std::floor(std::log2(std::fabs(v) + 1e-30f)))));
        const int mant = std::max(0, std::min(7, static_cast<int>(std::fabs(v) / std::ldexp(1.0f, e) * 8.0f) - 8));
        const int m7 = (e == 8 && mant == 7) ? 6 : mant;  // 0x7F is NaN
        w[static_cast<size_t>(r * in + k)] = static_cast<uint8_t>((v < 0 ? 0x80 : 0) | ((e + 7) << 3) | m7);
      }
    }
  for (size_t c = 0; c < copies; ++c) {
    sw.w.emplace_back(wb);
    sw.s.emplace_back(sb);
    std::memcpy(sw.w.back().data(), w.data(), wb);
    std::memcpy(sw.s.back().data(), s.data(), sb);
  }
  if (!fp4) {
    const strata::kernels::Fp8Weight ranged = strata::kernels::with_scale_range({w.data(), s.data(), out, in});
    sw.scale_lo = ranged.scale_lo;
    sw.scale_hi = ranged.scale_hi;
  }
  return sw;
}

// strata's kernel level for every strata call (--level; default the best one).
strata::kernels::KernelLevel g_level = strata::kernels::KernelLevel::kScalar;

void strata_call(const StrataWeights& sw, size_t copy, const float* x, int64_t n, float* y, strata::ThreadPool* pool) {
  if (sw.fp4) {
    strata::kernels::linear_fp4(x, n, strata::kernels::Fp4Weight{sw.w[copy].data(), sw.s[copy].data(), sw.out, sw.in},
                                y, pool, g_level);
  } else {
    strata::kernels::Fp8Weight w{sw.w[copy].data(), sw.s[copy].data(), sw.out, sw.in};
    w.scale_lo = sw.scale_lo;
    w.scale_hi = sw.scale_hi;
    strata::kernels::linear_fp8(x, n, w, y, pool, g_level);
  }
}

// ---- ggml side ------------------------------------------------------------------------------------
struct GgmlCase {
  ggml_context* ctx = nullptr;
  std::vector<ggml_cgraph*> graphs;  // one per weight copy
  std::vector<ggml_tensor*> weights;  // the weight tensor of each graph
  ggml_tensor* x = nullptr;
  size_t weight_bytes = 0;
  std::vector<uint8_t> work;
  ggml_threadpool* tp = nullptr;
  int threads = 1;
  ~GgmlCase() {
    if (ctx) ggml_free(ctx);
  }
};

std::unique_ptr<GgmlCase> ggml_case(const std::vector<float>& m, int64_t out, int64_t in, int64_t n, ggml_type type,
                                    size_t copies, ggml_threadpool* tp, int threads) {
  auto c = std::make_unique<GgmlCase>();
  c->weight_bytes = ggml_row_size(type, in) * static_cast<size_t>(out);
  const size_t ctx_bytes = copies * (c->weight_bytes + static_cast<size_t>(out * n) * 4 + 4096) +
                           static_cast<size_t>(in * n) * 4 + copies * ggml_graph_overhead() + (16u << 20);
  c->ctx = ggml_init(ggml_init_params{ctx_bytes, nullptr, false});
  if (c->ctx == nullptr) return nullptr;
  c->x = ggml_new_tensor_2d(c->ctx, GGML_TYPE_F32, in, n);
  std::vector<float> xv = random_matrix(n, in, 99);
  std::memcpy(c->x->data, xv.data(), xv.size() * sizeof(float));
  std::vector<uint8_t> q(c->weight_bytes);
  ggml_quantize_chunk(type, m.data(), q.data(), 0, out, in, nullptr);
  c->tp = tp;
  c->threads = threads;
  size_t work = 0;
  for (size_t i = 0; i < copies; ++i) {
    ggml_tensor* w = ggml_new_tensor_2d(c->ctx, type, in, out);
    std::memcpy(w->data, q.data(), c->weight_bytes);
    c->weights.push_back(w);
    ggml_tensor* y = ggml_mul_mat(c->ctx, w, c->x);
    ggml_cgraph* g = ggml_new_graph(c->ctx);
    ggml_build_forward_expand(g, y);
    c->graphs.push_back(g);
    work = std::max(work, ggml_graph_plan(g, threads, tp).work_size);
  }
  c->work.resize(work + 64);
  return c;
}

void ggml_call(GgmlCase& c, size_t copy) {
  ggml_cplan plan = ggml_graph_plan(c.graphs[copy], c.threads, c.tp);
  plan.work_data = c.work.data();
  ggml_graph_compute(c.graphs[copy], &plan);
}

// ---- memory bandwidth reference -------------------------------------------------------------------
// Reads 512 MiB with 16-byte loads into four accumulators, split over the pool: what a streaming
// kernel could at best read. Measured inside every round, so it sees the same machine load.
class ReadBandwidth {
 public:
  explicit ReadBandwidth(strata::ThreadPool* pool) : pool_(pool), buf_(kBytes / 16), sums_(64) {
    for (size_t k = 0; k < buf_.size(); ++k) buf_[k] = _mm_set1_epi64x(static_cast<long long>(k));
  }
  // Seconds for one pass.
  double time_pass(double round_ms) {
    auto body = [&](int64_t c0, int64_t c1) {
      const size_t per = buf_.size() / 64;
      for (int64_t c = c0; c < c1; ++c) {
        const __m128i* p = buf_.data() + static_cast<size_t>(c) * per;
        __m128i a = _mm_setzero_si128(), b = a, d = a, e = a;
        for (size_t k = 0; k < per; k += 4) {
          a = _mm_add_epi64(a, _mm_load_si128(p + k));
          b = _mm_add_epi64(b, _mm_load_si128(p + k + 1));
          d = _mm_add_epi64(d, _mm_load_si128(p + k + 2));
          e = _mm_add_epi64(e, _mm_load_si128(p + k + 3));
        }
        sums_[static_cast<size_t>(c)] = _mm_add_epi64(_mm_add_epi64(a, b), _mm_add_epi64(d, e));
      }
    };
    return time_round([&](size_t) { pool_ ? pool_->parallel_for(64, body) : body(0, 64); }, round_ms);
  }
  static constexpr size_t kBytes = 512u << 20;

 private:
  strata::ThreadPool* pool_;
  strata::AlignedArray<__m128i> buf_;
  std::vector<__m128i> sums_;
};

// --kquant: the same bytes of one ggml block format through strata and ggml, decode (n = 1).
int run_kquant(int threads, int rounds, double round_ms, bool quick, strata::ThreadPool* pool, ggml_threadpool* tp,
               ReadBandwidth& reader) {
  using strata::kernels::QuantType;
  struct Pair {
    QuantType strata;
    ggml_type ggml;
  };
  const Pair pairs[] = {{QuantType::kQ4_K, GGML_TYPE_Q4_K}, {QuantType::kQ2_K, GGML_TYPE_Q2_K},
                        {QuantType::kQ8_0, GGML_TYPE_Q8_0}, {QuantType::kQ6_K, GGML_TYPE_Q6_K},
                        {QuantType::kQ3_K, GGML_TYPE_Q3_K}, {QuantType::kIq4Nl, GGML_TYPE_IQ4_NL}};
  std::printf("| shape | type | read BW GB/s | strata us | ggml us | strata GB/s (%% BW) | ggml GB/s (%% BW) | "
              "ggml time / strata time |\n");
  std::printf("|---|---|---|---|---|---|---|---|\n");
  for (const Shape& s : kShapes) {
    if (quick && s.out > 6000) continue;
    const std::vector<float> m = random_matrix(s.out, s.in, 7);
    for (const Pair& p : pairs) {
      const size_t bytes = ggml_row_size(p.ggml, s.in) * static_cast<size_t>(s.out);
      const size_t copies = std::max<size_t>(1, (kColdBytes + bytes - 1) / bytes);
      std::unique_ptr<GgmlCase> gc = ggml_case(m, s.out, s.in, 1, p.ggml, copies, tp, threads);
      if (!gc) {
        std::fprintf(stderr, "ggml_peer: ggml_init failed for %s\n", s.name);
        return 1;
      }
      // strata reads the very bytes ggml holds (its weight tensors), so both sides decode one format.
      std::vector<strata::AlignedBytes> sw;
      for (size_t c = 0; c < copies; ++c) {
        sw.emplace_back(bytes);
        std::memcpy(sw.back().data(), gc->weights[c]->data, bytes);
      }
      const std::vector<float> x = random_matrix(1, s.in, 99);
      std::vector<float> y(static_cast<size_t>(s.out));
      auto run_strata = [&](size_t i) {
        strata::kernels::linear_quant(x.data(), 1, strata::kernels::QuantWeight{p.strata, sw[i % copies].data(), s.out, s.in},
                                      y.data(), pool, g_level);
      };
      auto run_ggml = [&](size_t i) { ggml_call(*gc, i % copies); };
      for (int w = 0; w < 3; ++w) {
        ggml_threadpool_pause(tp);
        for (size_t i = 0; i < copies; ++i) run_strata(i);
        ggml_threadpool_resume(tp);
        for (size_t i = 0; i < copies; ++i) run_ggml(i);
      }
      std::vector<double> ts, tg, tb, share_s, share_g;
      for (int r = 0; r < rounds; ++r) {
        ggml_threadpool_pause(tp);
        tb.push_back(reader.time_pass(round_ms));
        ts.push_back(time_round(run_strata, round_ms));
        ggml_threadpool_resume(tp);
        tg.push_back(time_round(run_ggml, round_ms));
        const double bw = ReadBandwidth::kBytes / tb.back();
        share_s.push_back(static_cast<double>(bytes) / ts.back() / bw);
        share_g.push_back(static_cast<double>(bytes) / tg.back() / bw);
      }
      const double t_s = median(ts), t_g = median(tg);
      std::printf("| %s | %s | %.1f | %.0f | %.0f | %.1f (%.0f%%) | %.1f (%.0f%%) | %.2f |\n", s.name,
                  strata::kernels::quant_type_name(p.strata), ReadBandwidth::kBytes / median(tb) / 1e9, t_s * 1e6,
                  t_g * 1e6, static_cast<double>(bytes) / t_s / 1e9, 100.0 * median(share_s),
                  static_cast<double>(bytes) / t_g / 1e9, 100.0 * median(share_g), t_g / t_s);
      std::fflush(stdout);
    }
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  int threads = strata::ThreadPool::hardware_cores(), rounds = 7;
  double round_ms = 150;
  bool quick = false, kquant = false;
  g_level = strata::kernels::best_kernel_level();
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--threads" && i + 1 < argc) threads = std::atoi(argv[++i]);
    else if (a == "--rounds" && i + 1 < argc) rounds = std::atoi(argv[++i]);
    else if (a == "--round-ms" && i + 1 < argc) round_ms = std::atof(argv[++i]);
    else if (a == "--quick") quick = true;
    else if (a == "--kquant") kquant = true;
    else if (a == "--level" && i + 1 < argc) {
      const std::string name = argv[++i];
      bool level_ok = false;
      for (strata::kernels::KernelLevel l : strata::kernels::kAllKernelLevels)
        if (name == strata::kernels::kernel_level_name(l)) {
          g_level = l;
          level_ok = true;
        }
      if (!level_ok || !strata::kernels::kernel_level_supported(g_level)) {
        std::fprintf(stderr, "ggml_peer: --level %s is not a kernel level this CPU runs\n", name.c_str());
        return 2;
      }
    } else {
      std::fprintf(stderr,
                   "usage: ggml_peer [--threads N] [--rounds R] [--round-ms MS] [--quick] [--kquant] [--level NAME]\n");
      return 2;
    }
  }
  if (threads < 1 || threads > strata::ThreadPool::kMaxThreads || rounds < 1) {
    std::fprintf(stderr, "ggml_peer: --threads must be in [1, %d] and --rounds >= 1\n", strata::ThreadPool::kMaxThreads);
    return 2;
  }
  ggml_cpu_init();
  std::unique_ptr<strata::ThreadPool> pool = threads > 1 ? std::make_unique<strata::ThreadPool>(threads) : nullptr;
  ggml_threadpool_params tpp = ggml_threadpool_params_default(threads);
  ggml_threadpool* tp = ggml_threadpool_new(&tpp);

  ReadBandwidth reader(pool.get());
  std::printf("strata kernel level: %s; threads: %d; rounds: %d x %.0f ms per side\n",
              strata::kernels::kernel_level_name(g_level), threads, rounds, round_ms);
  std::printf("%% BW: weight bytes per second over the read bandwidth measured in the same rounds "
              "(16-byte loads over 512 MiB, same thread count)\n\n");
  if (kquant) {
    const int rc = run_kquant(threads, rounds, round_ms, quick, pool.get(), tp, reader);
    ggml_threadpool_free(tp);
    return rc;
  }
  std::printf("| shape | n | strata | ggml | read BW GB/s | strata us | ggml us | strata GB/s (%% BW) | ggml GB/s (%% BW) | "
              "strata GFLOP/s | ggml GFLOP/s | ggml time / strata time |\n");
  std::printf("|---|---|---|---|---|---|---|---|---|---|---|---|\n");
  for (const Shape& s : kShapes) {
    const std::vector<float> m = random_matrix(s.out, s.in, 7);
    for (int64_t n : {int64_t{1}, int64_t{512}}) {
      if (quick && n > 1 && s.out > 6000) continue;
      for (bool fp4 : {true, false}) {
        const ggml_type gt = fp4 ? GGML_TYPE_MXFP4 : GGML_TYPE_Q8_0;
        const size_t sbytes_one = fp4 ? static_cast<size_t>(s.out * s.in / 2 + s.out * s.in / 32)
                                      : static_cast<size_t>(s.out * s.in + ((s.out + 31) / 32) * (s.in / 32));
        const size_t copies = n == 1 ? std::max<size_t>(1, (kColdBytes + sbytes_one - 1) / sbytes_one) : 1;
        StrataWeights sw = strata_weights(m, s.out, s.in, fp4, copies);
        std::unique_ptr<GgmlCase> gc = ggml_case(m, s.out, s.in, n, gt, copies, tp, threads);
        if (!gc) {
          std::fprintf(stderr, "ggml_peer: ggml_init failed for %s\n", s.name);
          return 1;
        }
        const std::vector<float> x = random_matrix(n, s.in, 99);
        std::vector<float> y(static_cast<size_t>(n * s.out));
        auto run_strata = [&](size_t i) { strata_call(sw, i % copies, x.data(), n, y.data(), pool.get()); };
        auto run_ggml = [&](size_t i) { ggml_call(*gc, i % copies); };
        for (int w = 0; w < 3; ++w) {  // warm-up: page in every copy once, threads spun up
          ggml_threadpool_pause(tp);
          for (size_t i = 0; i < copies; ++i) run_strata(i);
          ggml_threadpool_resume(tp);
          for (size_t i = 0; i < copies; ++i) run_ggml(i);
        }
        // Per round: the read bandwidth, strata, ggml. Shares of bandwidth are per-round ratios.
        std::vector<double> ts, tg, tb, share_s, share_g;
        const double sbytes = static_cast<double>(sw.bytes()), gbytes = static_cast<double>(gc->weight_bytes);
        for (int r = 0; r < rounds; ++r) {
          ggml_threadpool_pause(tp);
          if (n == 1) tb.push_back(reader.time_pass(round_ms));
          ts.push_back(time_round(run_strata, round_ms));
          ggml_threadpool_resume(tp);
          tg.push_back(time_round(run_ggml, round_ms));
          if (n == 1) {
            const double bw = ReadBandwidth::kBytes / tb.back();
            share_s.push_back(sbytes / ts.back() / bw);
            share_g.push_back(gbytes / tg.back() / bw);
          }
        }
        const double t_s = median(ts), t_g = median(tg);
        const double flop = 2.0 * static_cast<double>(n) * s.out * s.in;
        char bw_cells[160] = "- | - | -";
        if (n == 1) {
          std::snprintf(bw_cells, sizeof bw_cells, "%.1f | %.0f | %.0f", ReadBandwidth::kBytes / median(tb) / 1e9, t_s * 1e6,
                        t_g * 1e6);
        } else {
          std::snprintf(bw_cells, sizeof bw_cells, "- | %.0f | %.0f", t_s * 1e6, t_g * 1e6);
        }
        char gb_cells[160] = "- | -";
        if (n == 1) {
          std::snprintf(gb_cells, sizeof gb_cells, "%.1f (%.0f%%) | %.1f (%.0f%%)", sbytes / t_s / 1e9,
                        100.0 * median(share_s), gbytes / t_g / 1e9, 100.0 * median(share_g));
        }
        std::printf("| %s | %lld | %s | %s | %s | %s | %.0f | %.0f | %.2f |\n", s.name, static_cast<long long>(n),
                    fp4 ? "MXFP4" : "FP8", fp4 ? "MXFP4" : "Q8_0", bw_cells, gb_cells, flop / t_s / 1e9,
                    flop / t_g / 1e9, t_g / t_s);
        std::fflush(stdout);
      }
    }
  }
  ggml_threadpool_free(tp);
  return 0;
}
