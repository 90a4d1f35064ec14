// The per-token ops (kernels/detail/ops_table.h) written once over the vector traits of
// kernels/x86/simd.h, instantiated by ops_avx2.cpp (VF8) and ops_avx512.cpp (VF16).
//
// Exactness: every loop here performs, for each output element, the operations of its kernels::ref
// loop in the same order, with the same roundings (separate multiply and add, never FMA on f32
// values; V::exp equals kernels::exp_f32). Vector lanes run over independent elements: dim
// (norms, SwiGLU, mHC pre/post, attention output), heads (attention scores and softmax), tokens
// (Sinkhorn) or keys (indexer), so no sum is split or reordered. Tails go through a zero-padded
// vector or the same scalar expression (also exact: -ffp-contract=off).
// Everything sits in an anonymous namespace (see common.h): instantiations stay in their ISA file.
#pragma once

#include <immintrin.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>

#include "kernels/activation.h"
#include "kernels/detail/ops_table.h"
#include "kernels/linear.h"
#include "kernels/x86/common.h"
#include "kernels/x86/simd.h"


namespace strata::kernels::x86 {
namespace {

template <class V>
struct OpsEngine {
  using F = typename V::F;
  static constexpr int kW = V::kW;

  static F neg(F x) { return V::mul(x, V::set1(-1.0f)); }  // exact
  static F sigmoid(F x) {
    const F one = V::set1(1.0f);
    return V::div(one, V::add(one, V::exp(neg(x))));
  }
  static F silu(F x) { return V::div(x, V::add(V::set1(1.0f), V::exp(neg(x)))); }

  // Applies fn to [0, n): full vectors, then the tail through a zero-padded vector.
  // fn(const float* in..., float* out) works on one vector of kW lanes.
  template <class Fn>
  static void tail_padded(const float* x, int64_t n, float* out, Fn fn) {
    alignas(64) float in[kW] = {};
    alignas(64) float res[kW];
    std::memcpy(in, x, static_cast<size_t>(n) * sizeof(float));
    fn(in, res);
    std::memcpy(out, res, static_cast<size_t>(n) * sizeof(float));
  }

  // ------------------------------------------------------------------ activation, norm, RoPE
  static void exp(const float* x, int64_t n, float* out) {
    int64_t i = 0;
    for (; i + kW <= n; i += kW) V::storeu(out + i, V::exp(V::loadu(x + i)));
    if (i < n) tail_padded(x + i, n - i, out + i, [](const float* a, float* b) { V::storeu(b, V::exp(V::loadu(a))); });
  }

  // The cascade of kernels/ref/norm.cpp cascade_sum_squares with its 8 lanes in one ymm register
  // (both levels: the reference order is defined by 8 lanes).
  static float sum_squares(const float* x, int64_t n) {
    using E = VF8;
    const int64_t vec = n / 8, rows = vec / 4;
    int64_t power = 0;
    while ((int64_t{1} << power) < rows) ++power;
    power = imax(4, power / 4);
    const int64_t step = int64_t{1} << power, mask = step - 1;
    __m256 acc[4][4];
    for (auto& level : acc)
      for (auto& a : level) a = E::zero();
    auto sq = [&](int64_t v) {
      const __m256 a = E::loadu(x + v * 8);
      return E::mul(a, a);
    };
    int64_t i = 0;
    while (i + step <= rows) {
      for (int64_t j = 0; j < step; ++j, ++i)
        for (int k = 0; k < 4; ++k) acc[0][k] = E::add(acc[0][k], sq(i * 4 + k));
      for (int j = 1; j < 4; ++j) {
        for (int k = 0; k < 4; ++k) {
          acc[j][k] = E::add(acc[j][k], acc[j - 1][k]);
          acc[j - 1][k] = E::zero();
        }
        if ((i & (mask << (j * power))) != 0) break;
      }
    }
    for (; i < rows; ++i)
      for (int k = 0; k < 4; ++k) acc[0][k] = E::add(acc[0][k], sq(i * 4 + k));
    for (int j = 1; j < 4; ++j)
      for (int k = 0; k < 4; ++k) acc[0][k] = E::add(acc[0][k], acc[j][k]);
    for (int64_t v = rows * 4; v < vec; ++v) acc[0][0] = E::add(acc[0][0], sq(v));
    for (int k = 1; k < 4; ++k) acc[0][0] = E::add(acc[0][0], acc[0][k]);
    alignas(32) float lanes[8];
    E::storeu(lanes, acc[0][0]);
    float total = 0.0f;
    for (int64_t k = vec * 8; k < n; ++k) total += x[k] * x[k];
    for (int l = 0; l < 8; ++l) total += lanes[l];
    return total;
  }

  static void scale_rows(const float* x, const float* w, float r, int64_t n, float* out) {
    const F rv = V::set1(r);
    int64_t i = 0;
    if (w != nullptr) {
      for (; i + kW <= n; i += kW) V::storeu(out + i, V::mul(V::loadu(w + i), V::mul(V::loadu(x + i), rv)));
      for (; i < n; ++i) out[i] = w[i] * (x[i] * r);
    } else {
      for (; i + kW <= n; i += kW) V::storeu(out + i, V::mul(V::loadu(x + i), rv));
      for (; i < n; ++i) out[i] = x[i] * r;
    }
  }

  static F swiglu_vec(F g, F u, bool clamp, F lim, F neg_lim) {
    if (clamp) {
      u = V::max(neg_lim, V::min(lim, u));  // std::clamp(u, -lim, lim)
      g = V::min(lim, g);                   // std::min(g, lim)
    }
    return V::mul(silu(g), u);
  }
  static void swiglu_rows(const SwigluArgs& a, int64_t t0, int64_t t1) {
    const bool clamp = a.limit > 0;
    const F lim = V::set1(a.limit), neg_lim = V::set1(-a.limit);
    for (int64_t t = t0; t < t1; ++t) {
      const float* g = a.gate + t * a.inter;
      const float* u = a.up + t * a.inter;
      float* o = a.out + t * a.inter;
      const bool scaled = a.row_scale != nullptr;
      const F rs = V::set1(scaled ? a.row_scale[t] : 1.0f);
      int64_t i = 0;
      for (; i + kW <= a.inter; i += kW) {
        F v = swiglu_vec(V::loadu(g + i), V::loadu(u + i), clamp, lim, neg_lim);
        if (scaled) v = V::mul(rs, v);
        V::storeu(o + i, v);
      }
      if (i < a.inter) {
        alignas(64) float gb[kW] = {}, ub[kW] = {}, ob[kW];
        const int64_t r = a.inter - i;
        std::memcpy(gb, g + i, static_cast<size_t>(r) * sizeof(float));
        std::memcpy(ub, u + i, static_cast<size_t>(r) * sizeof(float));
        F v = swiglu_vec(V::loadu(gb), V::loadu(ub), clamp, lim, neg_lim);
        if (scaled) v = V::mul(rs, v);
        V::storeu(ob, v);
        std::memcpy(o + i, ob, static_cast<size_t>(r) * sizeof(float));
      }
    }
  }

  // Pairs (re, im) in adjacent lanes: x * [c c ..] + swap(x) * [-s s ..] gives re*c - im*s and
  // im*c + re*s, each product rounded, as the reference.
  static void rope(const RopeArgs& a) {
    const int64_t n = a.rope_dim;
    alignas(64) float cd[256], sd[256];
    if (n > 256 || n % kW != 0) {
      ref::rope_rotate(a);
      return;
    }
    for (int64_t i = 0; i < n / 2; ++i) {
      const float s = a.inverse ? -a.sin[i] : a.sin[i];
      cd[2 * i] = cd[2 * i + 1] = a.cos[i];
      sd[2 * i] = -s;
      sd[2 * i + 1] = s;
    }
    for (int64_t v = 0; v < a.n_vec; ++v) {
      float* x = a.x + v * a.stride;
      for (int64_t i = 0; i < n; i += kW) {
        const F xv = V::loadu(x + i);
        V::storeu(x + i, V::add(V::mul(xv, V::loadu(cd + i)), V::mul(V::swap_pairs(xv), V::loadu(sd + i))));
      }
    }
  }

  // ------------------------------------------------------------------ mHC
  static void hc_pre(const float* x, const float* pre, int64_t t0, int64_t t1, int hc, int64_t dim, float* y) {
    for (int64_t t = t0; t < t1; ++t) {
      const float* xt = x + t * hc * dim;
      const float* pt = pre + t * hc;
      float* yt = y + t * dim;
      int64_t i = 0;
      for (; i + kW <= dim; i += kW) {
        F acc = V::zero();
        for (int j = 0; j < hc; ++j) acc = V::add(acc, V::mul(V::set1(pt[j]), V::loadu(xt + j * dim + i)));
        V::storeu(yt + i, acc);
      }
      for (; i < dim; ++i) {
        float acc = 0.0f;
        for (int j = 0; j < hc; ++j) acc += pt[j] * xt[j * dim + i];
        yt[i] = acc;
      }
    }
  }

  static constexpr int kMaxHc = 16;
  static void hc_post(float* x, const float* f, const float* post, const float* comb, int64_t t0, int64_t t1, int hc,
                      int64_t dim) {
    for (int64_t t = t0; t < t1; ++t) {
      float* xt = x + t * hc * dim;
      const float* ft = f + t * dim;
      const float* ct = comb + t * hc * hc;
      const float* pt = post + t * hc;
      int64_t i = 0;
      for (; i + kW <= dim; i += kW) {
        F old[kMaxHc];
        for (int j = 0; j < hc; ++j) old[j] = V::loadu(xt + j * dim + i);
        const F fv = V::loadu(ft + i);
        for (int k = 0; k < hc; ++k) {
          F acc = V::zero();
          for (int j = 0; j < hc; ++j) acc = V::add(acc, V::mul(V::set1(ct[j * hc + k]), old[j]));
          V::storeu(xt + k * dim + i, V::add(V::mul(V::set1(pt[k]), fv), acc));
        }
      }
      for (; i < dim; ++i) {
        float old[kMaxHc];
        for (int j = 0; j < hc; ++j) old[j] = xt[j * dim + i];
        for (int k = 0; k < hc; ++k) {
          float acc = 0.0f;
          for (int j = 0; j < hc; ++j) acc += ct[j * hc + k] * old[j];
          xt[k * dim + i] = pt[k] * ft[i] + acc;
        }
      }
    }
  }

  // One token at hc = 4 on 16 lanes (a decode step): its 16 comb entries in one vector, lane 4 j + k,
  // each lane running the operations of the tokens-in-lanes loop below in the same order (the same
  // bits); a row's or a column's sum is taken through lane permutes, added in the reference's
  // order. Two divisions a Sinkhorn round instead of 32 vectors' worth with one lane in use: that
  // loop spent ~2 us a call on a decode token (two calls a layer; docs/performance.md, "The serial
  // stretches of a decode layer").
  static void hc_split_one4(const float* m, const HcSplitParams& p, float* pre, float* post, float* comb) {
    alignas(64) static constexpr int32_t kRow[4][16] = {
        {0, 0, 0, 0, 4, 4, 4, 4, 8, 8, 8, 8, 12, 12, 12, 12},
        {1, 1, 1, 1, 5, 5, 5, 5, 9, 9, 9, 9, 13, 13, 13, 13},
        {2, 2, 2, 2, 6, 6, 6, 6, 10, 10, 10, 10, 14, 14, 14, 14},
        {3, 3, 3, 3, 7, 7, 7, 7, 11, 11, 11, 11, 15, 15, 15, 15}};
    alignas(64) static constexpr int32_t kCol[4][16] = {
        {0, 1, 2, 3, 0, 1, 2, 3, 0, 1, 2, 3, 0, 1, 2, 3},
        {4, 5, 6, 7, 4, 5, 6, 7, 4, 5, 6, 7, 4, 5, 6, 7},
        {8, 9, 10, 11, 8, 9, 10, 11, 8, 9, 10, 11, 8, 9, 10, 11},
        {12, 13, 14, 15, 12, 13, 14, 15, 12, 13, 14, 15, 12, 13, 14, 15}};
    const F eps = V::set1(p.eps);
    // pre (lanes 0-3) and post (lanes 4-7) in one vector; lanes 8-15 are unused zeros.
    const F scale = _mm512_mask_blend_ps(0xFFF0, V::set1(p.scale[0]), V::set1(p.scale[1]));
    const F sg = sigmoid(V::add(V::mul(_mm512_maskz_loadu_ps(0xFF, m), scale), _mm512_maskz_loadu_ps(0xFF, p.base)));
    _mm_storeu_ps(pre, _mm512_castps512_ps128(V::add(sg, eps)));
    _mm_storeu_ps(post, _mm512_extractf32x4_ps(V::mul(V::set1(2.0f), sg), 1));
    // Row softmax + eps, then Sinkhorn: columns, then (iters - 1) rounds of rows and columns.
    F c = V::add(V::mul(V::loadu(m + 8), V::set1(p.scale[2])), V::loadu(p.base + 8));
    F mx = V::set1(-__builtin_inff());
    for (int k = 0; k < 4; ++k) mx = V::max(V::permute(kRow[k], c), mx);
    c = V::exp(V::sub(c, mx));
    F sum = V::zero();
    for (int k = 0; k < 4; ++k) sum = V::add(sum, V::permute(kRow[k], c));
    c = V::add(V::div(c, sum), eps);
    auto norm = [&](const int32_t (*idx)[16]) {
      F s = V::zero();
      for (int i = 0; i < 4; ++i) s = V::add(s, V::permute(idx[i], c));
      c = V::div(c, V::add(s, eps));
    };
    norm(kCol);
    for (int it = 1; it < p.sinkhorn_iters; ++it) {
      norm(kRow);
      norm(kCol);
    }
    V::storeu(comb, c);
  }

  // Sinkhorn with tokens in lanes; hc <= 8 (the driver sends larger hc to kernels::ref).
  static constexpr int kMaxSplitHc = 8;
  static void hc_split(const float* mixes, int64_t t0, int64_t t1, const HcSplitParams& p, float* pre, float* post,
                       float* comb) {
    const int hc = p.hc, mix = (2 + hc) * hc;
    if constexpr (kW == 16) {
      if (hc == 4 && t1 - t0 == 1)
        return hc_split_one4(mixes + t0 * mix, p, pre + t0 * 4, post + t0 * 4, comb + t0 * 16);
    }
    const F eps = V::set1(p.eps), two = V::set1(2.0f);
    const F s0 = V::set1(p.scale[0]), s1 = V::set1(p.scale[1]), s2 = V::set1(p.scale[2]);
    alignas(64) float m[(2 + kMaxSplitHc) * kMaxSplitHc][kW];
    alignas(64) float o_pre[kMaxSplitHc][kW], o_post[kMaxSplitHc][kW], o_comb[kMaxSplitHc * kMaxSplitHc][kW];
    for (int64_t t = t0; t < t1; t += kW) {
      const int nt = static_cast<int>(imin(kW, t1 - t));
      for (int k = 0; k < mix; ++k)
        for (int l = 0; l < kW; ++l) m[k][l] = l < nt ? mixes[(t + l) * mix + k] : 0.0f;
      for (int j = 0; j < hc; ++j) {
        const F a = V::add(V::mul(V::loadu(m[j]), s0), V::set1(p.base[j]));
        V::storeu(o_pre[j], V::add(sigmoid(a), eps));
        const F b = V::add(V::mul(V::loadu(m[hc + j]), s1), V::set1(p.base[hc + j]));
        V::storeu(o_post[j], V::mul(two, sigmoid(b)));
      }
      F cm[kMaxSplitHc * kMaxSplitHc];
      for (int j = 0; j < hc; ++j) {
        F mx = V::set1(-__builtin_inff());
        for (int k = 0; k < hc; ++k) {
          const int idx = 2 * hc + j * hc + k;
          cm[j * hc + k] = V::add(V::mul(V::loadu(m[idx]), s2), V::set1(p.base[idx]));
          mx = V::max(cm[j * hc + k], mx);  // std::max(mx, v)
        }
        F sum = V::zero();
        for (int k = 0; k < hc; ++k) {
          cm[j * hc + k] = V::exp(V::sub(cm[j * hc + k], mx));
          sum = V::add(sum, cm[j * hc + k]);
        }
        for (int k = 0; k < hc; ++k) cm[j * hc + k] = V::add(V::div(cm[j * hc + k], sum), eps);
      }
      auto norm_cols = [&] {
        for (int k = 0; k < hc; ++k) {
          F s = V::zero();
          for (int j = 0; j < hc; ++j) s = V::add(s, cm[j * hc + k]);
          const F d = V::add(s, eps);
          for (int j = 0; j < hc; ++j) cm[j * hc + k] = V::div(cm[j * hc + k], d);
        }
      };
      auto norm_rows = [&] {
        for (int j = 0; j < hc; ++j) {
          F s = V::zero();
          for (int k = 0; k < hc; ++k) s = V::add(s, cm[j * hc + k]);
          const F d = V::add(s, eps);
          for (int k = 0; k < hc; ++k) cm[j * hc + k] = V::div(cm[j * hc + k], d);
        }
      };
      norm_cols();
      for (int it = 1; it < p.sinkhorn_iters; ++it) {
        norm_rows();
        norm_cols();
      }
      for (int k = 0; k < hc * hc; ++k) V::storeu(o_comb[k], cm[k]);
      for (int l = 0; l < nt; ++l) {
        for (int j = 0; j < hc; ++j) {
          pre[(t + l) * hc + j] = o_pre[j][l];
          post[(t + l) * hc + j] = o_post[j][l];
        }
        for (int k = 0; k < hc * hc; ++k) comb[(t + l) * hc * hc + k] = o_comb[k][l];
      }
    }
  }

  // ------------------------------------------------------------------ attention
  // E entries x NV head vectors: acc[c][i] += qT[d] (vector c) * e_i[d] for d in order. Each entry's
  // broadcast serves NV vectors of heads.
  template <int E, int NV>
  static void score_block(const float* qv, int64_t hp, int64_t D, const float* const* ent, float scale, float* s) {
    F acc[NV][E];
    const float* e[E];
    for (int i = 0; i < E; ++i) {
      for (int c = 0; c < NV; ++c) acc[c][i] = V::zero();
      e[i] = ent[i];
    }
    for (int64_t d = 0; d < D; ++d) {
      F q[NV];
      for (int c = 0; c < NV; ++c) q[c] = V::loadu(qv + d * hp + c * kW);
      for (int i = 0; i < E; ++i) {
        const F b = V::set1(e[i][d]);
        for (int c = 0; c < NV; ++c) acc[c][i] = V::add(acc[c][i], V::mul(q[c], b));
      }
    }
    const F sc = V::set1(scale);
    for (int i = 0; i < E; ++i)
      for (int c = 0; c < NV; ++c) V::storeu(s + i * hp + c * kW, V::mul(acc[c][i], sc));
  }
  // All m entries for head vectors [v, v + NV), E at a time.
  template <int E, int NV>
  static void score_vectors(const float* qv, int64_t hp, int64_t D, const float* const* ent, int64_t m, float scale,
                            float* s) {
    int64_t j = 0;
    for (; j + E <= m; j += E) score_block<E, NV>(qv, hp, D, ent + j, scale, s + j * hp);
    with_count<E - 1>(m - j,
                      [&](auto mc) { score_block<decltype(mc)::value, NV>(qv, hp, D, ent + j, scale, s + j * hp); });
  }
  static void attn_scores(const float* qt, int64_t hp, int64_t D, const float* const* ent, int64_t m, float scale,
                          int64_t v0, int64_t v1, float* s) {
    // Registers: NV * E accumulators + NV queries + 1 broadcast. AVX2 (16 ymm): 2 vectors x 6 entries
    // halves the entry broadcasts of 1 x 8 (ops_bench BM_Attention, docs/performance.md). AVX-512
    // (32 zmm) keeps 1 x 8 until it is measured on such a machine.
    constexpr int kNV = kW == 8 ? 2 : 1, kE = kW == 8 ? 6 : 8;
    int64_t v = v0;
    for (; v + kNV <= v1; v += kNV) score_vectors<kE, kNV>(qt + v * kW, hp, D, ent, m, scale, s + v * kW);
    for (; v < v1; ++v) score_vectors<kE, 1>(qt + v * kW, hp, D, ent, m, scale, s + v * kW);
  }

  static void attn_softmax(float* s, int64_t m, int64_t hp, const float* sinks, int64_t v0, int64_t v1) {
    for (int64_t v = v0; v < v1; ++v) {
      float* col = s + v * kW;
      F mx = V::set1(-1e30f);
      for (int64_t j = 0; j < m; ++j) mx = V::max(V::loadu(col + j * hp), mx);  // std::max(mx, s_j)
      F den = V::zero();
      for (int64_t j = 0; j < m; ++j) {
        const F p = V::exp(V::sub(V::loadu(col + j * hp), mx));
        V::storeu(col + j * hp, p);
        den = V::add(den, p);
      }
      den = V::add(den, V::exp(V::sub(V::loadu(sinks + v * kW), mx)));
      for (int64_t j = 0; j < m; ++j) V::storeu(col + j * hp, V::div(V::loadu(col + j * hp), den));
    }
  }

  // NH heads x ND vectors of head_dim: acc[h][c] += p[j, h] * e_j[d] for j in order.
  template <int NH, int ND>
  static void out_block(const float* s, int64_t hp, const float* const* ent, int64_t m, int64_t d0, float* out,
                        int64_t D) {
    F acc[NH][ND];
    for (int h = 0; h < NH; ++h)
      for (int c = 0; c < ND; ++c) acc[h][c] = V::zero();
    for (int64_t j = 0; j < m; ++j) {
      const float* e = ent[j] + d0;
      F ev[ND];
      for (int c = 0; c < ND; ++c) ev[c] = V::loadu(e + c * kW);
      const float* pj = s + j * hp;
      for (int h = 0; h < NH; ++h) {
        const F p = V::set1(pj[h]);
        for (int c = 0; c < ND; ++c) acc[h][c] = V::add(acc[h][c], V::mul(p, ev[c]));
      }
    }
    for (int h = 0; h < NH; ++h)
      for (int c = 0; c < ND; ++c) V::storeu(out + h * D + c * kW, acc[h][c]);
  }
  template <int NH>
  static void out_heads(const float* s, int64_t hp, const float* const* ent, int64_t m, int64_t D, float* out) {
    int64_t d0 = 0;
    for (; d0 + 2 * kW <= D; d0 += 2 * kW) out_block<NH, 2>(s, hp, ent, m, d0, out + d0, D);
    for (; d0 + kW <= D; d0 += kW) out_block<NH, 1>(s, hp, ent, m, d0, out + d0, D);
    for (; d0 < D; ++d0) {
      for (int h = 0; h < NH; ++h) {
        float acc = 0.0f;
        for (int64_t j = 0; j < m; ++j) acc += s[j * hp + h] * ent[j][d0];
        out[h * D + d0] = acc;
      }
    }
  }
  static void attn_out(const float* s, int64_t hp, const float* const* ent, int64_t m, int64_t D, int64_t h0,
                       int64_t h1, float* out) {
    // Registers: kH * 2 accumulators + 2 entry vectors + 1 broadcast. On AVX2 (16 ymm), 8 heads need 19
    // and spill every step, so it takes 6 (ops_bench BM_Attention, docs/performance.md). AVX-512 keeps 8.
    constexpr int kH = kW == 8 ? 6 : 8;
    int64_t h = h0;
    for (; h + kH <= h1; h += kH) out_heads<kH>(s + h, hp, ent, m, D, out + h * D);
    with_count<kH - 1>(h1 - h, [&](auto hc) { out_heads<decltype(hc)::value>(s + h, hp, ent, m, D, out + h * D); });
  }

  // ------------------------------------------------------------------ indexer
  // NH heads over one tile of kW keys (kt [dim][kW]): dots in d order, then s += relu(dot) * w[h]
  // in head order.
  template <int NH>
  static F index_heads(const float* q, const float* w, int64_t dim, const float* kt, F s) {
    F acc[NH];
    for (int i = 0; i < NH; ++i) acc[i] = V::zero();
    for (int64_t d = 0; d < dim; ++d) {
      const F k = V::loadu(kt + d * kW);
      for (int i = 0; i < NH; ++i) acc[i] = V::add(acc[i], V::mul(V::set1(q[i * dim + d]), k));
    }
    for (int i = 0; i < NH; ++i) s = V::add(s, V::mul(V::max(V::zero(), acc[i]), V::set1(w[i])));  // std::max(dot, 0)
    return s;
  }
  static void index_scores(const float* q, const float* w, int n_heads, int64_t dim, const float* keys,
                           int64_t stride, int64_t g0, int64_t g1, float* scores) {
    Scratch buf(static_cast<size_t>(dim * kW) * sizeof(float));
    float* kt = buf.as<float>();
    constexpr int kH = 8;
    for (int64_t g = g0; g < g1; g += kW) {
      const int64_t nk = imin(kW, g1 - g);
      if (nk == kW && dim % kW == 0) {
        for (int64_t d0 = 0; d0 < dim; d0 += kW) {
          F r[kW];
          for (int l = 0; l < kW; ++l) r[l] = V::loadu(keys + (g + l) * stride + d0);
          V::transpose(r);
          for (int c = 0; c < kW; ++c) V::storeu(kt + (d0 + c) * kW, r[c]);
        }
      } else {
        for (int64_t d = 0; d < dim; ++d)
          for (int l = 0; l < kW; ++l) kt[d * kW + l] = l < nk ? keys[(g + l) * stride + d] : 0.0f;
      }
      F s = V::zero();
      int h = 0;
      for (; h + kH <= n_heads; h += kH) s = index_heads<kH>(q + h * dim, w + h, dim, kt, s);
      with_count<kH - 1>(n_heads - h, [&](auto hc) {
        s = index_heads<decltype(hc)::value>(q + h * dim, w + h, dim, kt, s);
      });
      if (nk == kW) {
        V::storeu(scores + g, s);
      } else {
        alignas(64) float tmp[kW];
        V::storeu(tmp, s);
        for (int64_t l = 0; l < nk; ++l) scores[g + l] = tmp[l];
      }
    }
  }

  // ------------------------------------------------------------------ BF16 matvec, any order
  // One weight row at a time (a single sequential stream), four accumulators of kW lanes per row of
  // x, FMA: the accumulator of lane class j takes k = 4kW m + kW j + lane for m = 0, 1, ... in order,
  // then ((a0 + a1) + (a2 + a3)) is summed across lanes and the scalar tail added. NX (1-3) rows of
  // x share each widened weight vector; every row's arithmetic is the same as with NX = 1 (and in
  // bf16_block_any below), so a row's result does not depend on the batch it came in
  // (RowPath::kDecode). Each 64 weight bytes prefetch the bytes 2 KiB ahead: LM head time -6% in
  // decode on a Sapphire Rapids VM (strata run --stats), BM_LinearBf16AnyOrder decode_head_* 7.4 ->
  // 8.4 GB/s at 2 threads.
  static constexpr int64_t kBf16AnyPrefetchBytes = 2048;
  template <int NX>
  static void bf16_rows_any(const float* x, int64_t ldx, const uint16_t* w, int64_t in, int64_t r0, int64_t r1,
                            float* y, int64_t ldy, bool once) {
    const int64_t main = in / (4 * kW) * (4 * kW);
    for (int64_t r = r0; r < r1; ++r) {
      const uint16_t* wr = w + r * in;
      F acc[NX][4];
      for (int i = 0; i < NX; ++i) acc[i][0] = acc[i][1] = acc[i][2] = acc[i][3] = V::zero();
      for (int64_t k = 0; k < main; k += 4 * kW) {
        for (int b = 0; b < 4 * kW * 2; b += 64)
          prefetch_weights(reinterpret_cast<const char*>(wr + k) + b + kBf16AnyPrefetchBytes, once);
        for (int j = 0; j < 4; ++j) {
          const F wv = V::bf16(wr + k + j * kW);
          for (int i = 0; i < NX; ++i) acc[i][j] = V::fmadd(wv, V::loadu(x + i * ldx + k + j * kW), acc[i][j]);
        }
      }
      for (int i = 0; i < NX; ++i) {
        const float* xi = x + i * ldx;
        float t = V::hsum(V::add(V::add(acc[i][0], acc[i][1]), V::add(acc[i][2], acc[i][3])));
        for (int64_t k = main; k < in; ++k) t += xi[k] * bits_f32(static_cast<uint32_t>(wr[k]) << 16);
        y[i * ldy + r] = t;
      }
    }
  }
  // Four x rows: blocks of kAnyR weight rows x four x rows, with bf16_rows_any's four
  // accumulators per (weight row, x row) run as four separate passes (one per lane class j), each a
  // chain over m in the same order as bf16_rows_any's. The passes are independent, so every x row's
  // result is bit for bit bf16_rows_any's, but each widened weight vector feeds four x rows and
  // each x vector kAnyR weight rows from registers (8 loads per 16 FMAs; bf16_rows_any<4> has 5 per
  // 4 and spills, which bound it once the head is compute-bound at 4-8 x rows without AMX; at 2-3
  // rows bf16_rows_any stays faster: batch_bench head 2.1-3.2 ms against 2.3-4.3). kernels_bench
  // BM_LinearBf16AnyOrder decode{4,8}_head_129280x512 at 2 threads on a Zen 5 VM (2026-12-04):
  // 4.9 -> 2.4 ms and 8.6 -> 4.5 ms (one row 2.0 ms, at the memory's rate).
  // More than four x rows go in groups of four over a tile of weight rows at a time, so the tile is
  // read from DRAM once and from L1 for the other groups (one pass over the LM head per step, not
  // one per group of four). Eight x rows per pass (2 weight rows per block) measured 1.7x slower.
  static constexpr int64_t kAnyTileBytes = 16 * 1024;
  // Registers: 4 x 4 accumulators + 4 x + 1 w of 32 zmm; 2 x 4 + 4 + 1 of 16 ymm.
  static constexpr int kAnyR = kW >= 16 ? 4 : 2;
  static constexpr int kAnyX = 4;
  // pf: where this block's prefetches start (2 R kW bytes per step, a block's bytes in all).
  template <int R>
  static void bf16_block_any(const float* x, int64_t ldx, const uint16_t* w, int64_t in, int64_t r, float* y,
                             int64_t ldy, const char* pf, bool once) {
    constexpr int X = kAnyX;
    const int64_t main = in / (4 * kW) * (4 * kW);
    F part[4][R][X];
    for (int j = 0; j < 4; ++j) {
      F acc[R][X];
      for (int a = 0; a < R; ++a)
        for (int i = 0; i < X; ++i) acc[a][i] = V::zero();
      for (int64_t k = j * kW; k < main; k += 4 * kW) {
        prefetch_weights(pf, once);
        if constexpr (2 * R * kW >= 128) prefetch_weights(pf + 64, once);
        pf += 2 * R * kW;
        F xv[X];
        for (int i = 0; i < X; ++i) xv[i] = V::loadu(x + i * ldx + k);
        for (int a = 0; a < R; ++a) {
          const F wv = V::bf16(w + (r + a) * in + k);
          for (int i = 0; i < X; ++i) acc[a][i] = V::fmadd(wv, xv[i], acc[a][i]);
        }
      }
      for (int a = 0; a < R; ++a)
        for (int i = 0; i < X; ++i) part[j][a][i] = acc[a][i];
    }
    for (int a = 0; a < R; ++a) {
      const uint16_t* wr = w + (r + a) * in;
      for (int i = 0; i < X; ++i) {
        const float* xi = x + i * ldx;
        float t = V::hsum(V::add(V::add(part[0][a][i], part[1][a][i]), V::add(part[2][a][i], part[3][a][i])));
        for (int64_t k = main; k < in; ++k) t += xi[k] * bits_f32(static_cast<uint32_t>(wr[k]) << 16);
        y[i * ldy + r + a] = t;
      }
    }
  }
  static void bf16_rows_block_any(const float* x, int64_t ldx, const uint16_t* w, int64_t in, int64_t r0, int64_t r1,
                                  float* y, int64_t ldy, bool once) {
    constexpr int R = kAnyR;
    // Each block prefetches a block's worth of bytes starting min(2 blocks, 16 KiB) ahead, spread
    // over its iterations (bf16_block_any's pf: 2 R kW bytes per step). The first version issued the
    // next block's prefetches in one burst at the start of a block: fine while a block was 4 KiB
    // (in = 512: 4 x rows 4.0 -> 2.4 ms), but at in = 1024 (the 8 GB scaled checkpoint's head, 8 KiB
    // blocks) 4 x rows took 10.7-11.5 ms against 4.5-5.0 for one, most of a burst apparently lost
    // beyond the core's outstanding misses. Spread, two blocks ahead: 4.6-5.6 ms (median of 3 x 3
    // runs, 2 threads, Zen 5 VM, 2026-12-04); in = 512 and in = 5120 unchanged. One block ahead
    // spread: 7.7-8.9 ms; four: no better than two. Splitting k into segments that stay in L1: no gain.
    const int64_t block_bytes = R * 2 * in, ahead = std::min<int64_t>(2 * block_bytes, 16 * 1024);
    int64_t r = r0;
    for (; r + R <= r1; r += R)
      bf16_block_any<R>(x, ldx, w, in, r, y, ldy, reinterpret_cast<const char*>(w + r * in) + ahead, once);
    // The last rows (fewer than R) one at a time, each prefetching the row after it (a prefetch past
    // the matrix's end touches nothing: prefetches do not fault).
    for (; r < r1; ++r)
      bf16_block_any<1>(x, ldx, w, in, r, y, ldy, reinterpret_cast<const char*>(w + (r + 1) * in), once);
  }
  static void bf16_matvec_any(const float* x, int64_t nx, int64_t ldx, const uint16_t* w, int64_t in, int64_t r0,
                              int64_t r1, float* y, int64_t ldy) {
    const int64_t tile = nx <= kAnyX ? r1 - r0 : std::max<int64_t>(1, kAnyTileBytes / std::max<int64_t>(1, 2 * in));
    const bool once = nx <= kAnyX;  // more rows: each tile is read again for the next group
    for (int64_t t0 = r0; t0 < r1; t0 += tile) {
      const int64_t t1 = std::min(r1, t0 + tile);
      for (int64_t i = 0; i < nx; i += kAnyX) {
        const float* xi = x + i * ldx;
        float* yi = y + i * ldy;
        switch (nx - i) {
          case 1: bf16_rows_any<1>(xi, ldx, w, in, t0, t1, yi, ldy, once); break;
          case 2: bf16_rows_any<2>(xi, ldx, w, in, t0, t1, yi, ldy, once); break;
          case 3: bf16_rows_any<3>(xi, ldx, w, in, t0, t1, yi, ldy, once); break;
          // Its four passes over a block of rows each read part of every 64-byte line: T0.
      default: bf16_rows_block_any(xi, ldx, w, in, t0, t1, yi, ldy, false); break;
        }
      }
    }
  }

  // Blocked weights (Bf16Weight::blocked, 16 rows k-major): each output's sum is one fused chain,
  // acc = fma(w[r][k], x[k], acc) for k = 0, 1, ... in order, in a vector lane with the outputs of
  // its kW rows; no horizontal sums, and each x value is a broadcast that feeds NB weight vectors.
  // NX rows of x share each widened weight vector; a row's chain is the same at any NX and NB, so
  // its result does not depend on the batch (RowPath::kDecode). At 8 x rows the head is bound by
  // the FMAs (8 per widened vector) and the row-major kernels above lose about half of the FMA rate
  // to horizontal sums and x loads; here one pass runs at the FMA or the memory rate, whichever is
  // lower (docs/performance.md, "The LM head in blocks"). Each stream prefetches kBlockedAheadBytes
  // / NB ahead, about 16 KiB ahead of the core in all: measured on the demo's head (129280 x 512),
  // 1 KiB per stream left the FMAs waiting on memory at 8 x rows (6.2-6.5 ms against 3.2-4.0).
  static constexpr int64_t kBlockedAheadBytes = 16 * 1024;
  // Weight vectors per step for NX rows of x: NX NB accumulators, up to 16 of 32 zmm or 8 of 16 ymm.
  static constexpr int blocked_nb(int nx) {
    if (kW >= 16) return nx <= 2 ? 8 : nx <= 4 ? 4 : 2;
    return nx == 1 ? 8 : nx == 2 ? 4 : nx <= 4 ? 2 : 1;
  }
  template <int NX, int NB>
  static void bf16_blocked_any_step(const float* x, int64_t ldx, const uint16_t* w, int64_t in, int64_t r,
                                    float* const* y, bool once) {
    constexpr int64_t br = kBf16BlockRows, ahead = kBlockedAheadBytes / NB;
    const uint16_t* p[NB];
    F acc[NX][NB];
    for (int j = 0; j < NB; ++j) {
      const int64_t row = r + j * kW;
      p[j] = w + (row / br) * br * in + row % br;
      for (int i = 0; i < NX; ++i) acc[i][j] = V::zero();
    }
    // Stream j reads its block at 32 bytes a k (one prefetch per 64-byte line) and continues, in
    // the next step, in the block a step's blocks on (kW = 16: the next step's stream j; kW = 8
    // with NB = 1: the next block, after the step on this block's other half), so a prefetch past
    // its block's end goes there: every stream is warm when a step starts.
    const int64_t block_bytes = 2 * br * in, next_step = std::max<int64_t>(1, NB * kW / br) * block_bytes;
    for (int64_t k = 0; k < in; ++k) {
      if ((k & 1) == 0) {
        const int64_t at = 2 * br * k + ahead;
        const int64_t off = at < block_bytes ? at : at - block_bytes + next_step;
        for (int j = 0; j < NB; ++j) prefetch_weights(reinterpret_cast<const char*>(p[j]) + off, once);
      }
      F xk[NX];
      for (int i = 0; i < NX; ++i) xk[i] = V::set1(x[i * ldx + k]);
      for (int j = 0; j < NB; ++j) {
        const F wv = V::bf16(p[j] + k * br);
        for (int i = 0; i < NX; ++i) acc[i][j] = V::fmadd(wv, xk[i], acc[i][j]);
      }
    }
    for (int i = 0; i < NX; ++i)
      for (int j = 0; j < NB; ++j) V::storeu(y[i] + r + j * kW, acc[i][j]);
  }
  template <int NX>
  static void bf16_blocked_any_rows(const float* x, int64_t ldx, const uint16_t* w, int64_t in, int64_t r0, int64_t r1,
                                    float* const* y, bool once) {
    constexpr int NB = blocked_nb(NX);
    // A step of fewer rows than a block (ymm: NB kW = 8 of 16) reads half of each 64-byte line and
    // the next step the other half, a block later: those lines go to every cache level.
    constexpr bool whole = NB * kW >= kBf16BlockRows, whole_tail = kW >= kBf16BlockRows;
    int64_t r = r0;
    for (; r + NB * kW <= r1; r += NB * kW) bf16_blocked_any_step<NX, NB>(x, ldx, w, in, r, y, once && whole);
    for (; r < r1; r += kW) bf16_blocked_any_step<NX, 1>(x, ldx, w, in, r, y, once && whole_tail);
  }
  // Rows [r0, r1) (multiples of kBf16BlockRows) of a blocked weight for nx rows of x; x row i's
  // outputs go to y[i] (kernels::linear_bf16_any_order_rows). More than eight x rows go in groups of
  // eight over tiles of weight rows, so a tile comes from DRAM once.
  static void bf16_blocked_any(const float* x, int64_t nx, int64_t ldx, const uint16_t* w, int64_t in, int64_t r0,
                               int64_t r1, float* const* y) {
    constexpr int64_t kGroup = 8;
    const int64_t br = kBf16BlockRows;
    const int64_t tile = nx <= kGroup ? r1 - r0 : std::max<int64_t>(br, (32 * 1024) / std::max<int64_t>(1, 2 * in * br) * br);
    const bool once = nx <= kGroup;  // more rows: each tile is read again for the next group
    for (int64_t t0 = r0; t0 < r1; t0 += tile) {
      const int64_t t1 = std::min(r1, t0 + tile);
      for (int64_t i = 0; i < nx; i += kGroup) {
        const float* xi = x + i * ldx;
        float* const* yi = y + i;
        with_count<kGroup>(std::min(kGroup, nx - i), [&](auto nxc) {
          bf16_blocked_any_rows<decltype(nxc)::value>(xi, ldx, w, in, t0, t1, yi, once);
        });
      }
    }
  }

  // out[dim] = E2M1 codes x E8M0 scale per 32 of one packed index-key row (dim/2 code bytes, then
  // dim/32 scales); a power-of-two scale makes every product exact.
  static void dequant_fp4_e8m0_row(const uint8_t* row, int64_t dim, float* out) {
    const uint8_t* sc = row + dim / 2;
    for (int64_t b = 0; b < dim / 32; ++b) {
      // E8M0: 2^(code-127); code 0 is the subnormal 2^-127, 255 is NaN (core/dtype.h e8m0_to_f32).
      const uint32_t bits = sc[b] == 0 ? 0x00400000u : sc[b] == 255 ? 0x7FC00000u : static_cast<uint32_t>(sc[b]) << 23;
      const F s = V::set1(bits_f32(bits));
      for (int j = 0; j < 32; j += kW) V::storeu(out + b * 32 + j, V::mul(V::e2m1(row + (b * 32 + j) / 2), s));
    }
  }

  static detail::OpsKernels table() {
    detail::OpsKernels t;
    t.lanes = kW;
    t.exp = &exp;
    t.sum_squares = &sum_squares;
    t.scale_rows = &scale_rows;
    t.swiglu_rows = &swiglu_rows;
    t.rope = &rope;
    t.hc_pre = &hc_pre;
    t.hc_post = &hc_post;
    t.hc_split = &hc_split;
    t.attn_scores = &attn_scores;
    t.attn_softmax = &attn_softmax;
    t.attn_out = &attn_out;
    t.index_scores = &index_scores;
    t.bf16_matvec_any = &bf16_matvec_any;
    t.bf16_blocked_any = &bf16_blocked_any;
    t.dequant_fp4_e8m0_row = &dequant_fp4_e8m0_row;
    return t;
  }
};

}  // namespace
}  // namespace strata::kernels::x86
