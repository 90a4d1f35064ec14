// Reference quantisers of ggml's block formats (kernels/kquant.h), written from the formats and the
// search each ggml reference quantiser runs, so that the bytes equal ggml's quantize_row_<type>_ref.
//
// ROUNDING: everything here is f32 arithmetic whose every operation (order, operand types, ties) is
// the one ggml performs, because one ulp in a candidate scale can flip which candidate wins and so
// every byte after it. In particular: no fused multiply-adds (-ffp-contract=off for the library),
// products like w*x*l evaluated left to right with the integer converted at its use, fp16 stored
// with round-to-nearest-even (f32_to_f16), and rounding to integers through nearest_int (below).
// Source: ggml-quants.c quantize_row_{q8_0,q2_K,q3_K,q4_K,q6_K,iq4_nl}_ref, make_qx_quants,
// make_q3_quants, make_qkx2_quants, quantize_row_iq4_nl_impl, best_index_int8, nearest_int.
#include <algorithm>
#include <bit>
#include <cmath>
#include <cstring>

#include "core/dtype.h"
#include "core/status.h"
#include "kernels/kquant.h"
#include "kernels/kquant_unpack.h"

namespace strata::kernels {
namespace {

// ggml's GROUP_MAX_EPS: a group whose largest |x| is below it is all zeros.
constexpr float kGroupMaxEps = 1e-15f;

// Round to the nearest integer, ties to even, for |f| <= 2^22: adding 1.5 * 2^23 puts the integer in
// the low mantissa bits (the f32 add rounds to nearest even). ggml nearest_int.
int nearest_int(float f) {
  const float v = f + 12582912.0f;
  return static_cast<int>(std::bit_cast<uint32_t>(v) & 0x007FFFFFu) - 0x00400000;
}

int clamp_int(int v, int lo, int hi) { return std::max(lo, std::min(hi, v)); }

// Index of the grid value nearest v (grid ascending; a tie goes to the upper value). ggml best_index_int8.
int nearest_grid_index(const int8_t* grid, int n, float v) {
  if (v <= grid[0]) return 0;
  if (v >= grid[n - 1]) return n - 1;
  int hi = 1;
  while (!(v < grid[hi])) ++hi;  // grid[hi - 1] <= v < grid[hi]
  return v - grid[hi - 1] < grid[hi] - v ? hi - 1 : hi;
}

// Index and value of the element with the largest |x| (the first one on a tie).
float signed_absmax(const float* x, int n, float* amax_out) {
  float amax = 0.0f, max = 0.0f;
  for (int i = 0; i < n; ++i) {
    const float ax = std::fabs(x[i]);
    if (ax > amax) {
      amax = ax;
      max = x[i];
    }
  }
  *amax_out = amax;
  return max;
}

// Symmetric quants L[i] in [0, 2 nmax) (biased by nmax) and their scale for a group of n, weighting
// each element by x^2: start from the scale that maps the largest |x| to -nmax, take the weighted
// least-squares scale of its rounding, then try 18 nearby starting scales and keep the best fit.
// ggml make_qx_quants with rmse_type 1: weights qw[i] when given (the imatrix paths of Q6_K and
// Q3_K), else x[i]^2 (Q6_K's reference path).
float fit_symmetric_x2(int n, int nmax, const float* x, int8_t* L, const float* qw = nullptr) {
  float amax;
  const float max = signed_absmax(x, n, &amax);
  if (amax < kGroupMaxEps) {
    std::fill(L, L + n, int8_t{0});
    return 0.0f;
  }
  auto sums = [&](float iscale, float* sumlx, float* suml2, bool store) {
    *sumlx = 0.0f;
    *suml2 = 0.0f;
    for (int i = 0; i < n; ++i) {
      const int l = clamp_int(nearest_int(iscale * x[i]), -nmax, nmax - 1);
      if (store) L[i] = static_cast<int8_t>(l + nmax);
      const float w = qw ? qw[i] : x[i] * x[i];
      *sumlx += w * x[i] * static_cast<float>(l);
      *suml2 += w * static_cast<float>(l) * static_cast<float>(l);
    }
  };
  float sumlx, suml2;
  sums(static_cast<float>(-nmax) / max, &sumlx, &suml2, true);
  float scale = suml2 != 0.0f ? sumlx / suml2 : 0.0f;
  float best = scale * sumlx;
  for (int is = -9; is <= 9; ++is) {
    if (is == 0) continue;
    const float iscale = -(static_cast<float>(nmax) + 0.1f * static_cast<float>(is)) / max;
    sums(iscale, &sumlx, &suml2, false);
    if (suml2 > 0.0f && sumlx * sumlx > best * suml2) {
      sums(iscale, &sumlx, &suml2, true);
      scale = sumlx / suml2;
      best = scale * sumlx;
    }
  }
  return scale;
}

// Symmetric quants L[i] in [0, 2 nmax) (biased) for Q3_K: round at the scale mapping max|x| to -nmax,
// then up to 5 sweeps of coordinate descent, each moving one quant to its best value given the others
// when that improves the x^2-weighted fit. ggml make_q3_quants with do_rmse. Note that an all-zero
// group returns L = 0 unbiased, as ggml does (its scale is 0, so it decodes to zeros anyway).
float fit_symmetric_q3(int n, int nmax, const float* x, int8_t* L) {
  float amax;
  const float max = signed_absmax(x, n, &amax);
  if (amax < kGroupMaxEps) {
    std::fill(L, L + n, int8_t{0});
    return 0.0f;
  }
  const float iscale = static_cast<float>(-nmax) / max;
  float sumlx = 0.0f, suml2 = 0.0f;
  for (int i = 0; i < n; ++i) {
    const int l = clamp_int(nearest_int(iscale * x[i]), -nmax, nmax - 1);
    L[i] = static_cast<int8_t>(l);
    const float w = x[i] * x[i];
    sumlx += w * x[i] * static_cast<float>(l);
    suml2 += w * static_cast<float>(l) * static_cast<float>(l);
  }
  for (int sweep = 0; sweep < 5; ++sweep) {
    int n_changed = 0;
    for (int i = 0; i < n; ++i) {
      const float w = x[i] * x[i];
      const float li = static_cast<float>(L[i]);
      float slx = sumlx - w * x[i] * li;
      if (!(slx > 0.0f)) continue;
      float sl2 = suml2 - w * li * li;
      const int new_l = clamp_int(nearest_int(x[i] * sl2 / slx), -nmax, nmax - 1);
      if (new_l == L[i]) continue;
      const float nl = static_cast<float>(new_l);
      slx += w * x[i] * nl;
      sl2 += w * nl * nl;
      if (sl2 > 0.0f && slx * slx * suml2 > sumlx * sumlx * sl2) {
        L[i] = static_cast<int8_t>(new_l);
        sumlx = slx;
        suml2 = sl2;
        ++n_changed;
      }
    }
    if (n_changed == 0) break;
  }
  for (int i = 0; i < n; ++i) L[i] = static_cast<int8_t>(L[i] + nmax);
  return suml2 > 0.0f ? sumlx / suml2 : 0.0f;
}

// How fit_affine rounds on the refit grid. kClamped: clamp(nearest(v), 0, nmax) (ggml
// make_qkx2_quants). kPositiveOnly: nearest(min(v, nmax)) where v > 0, else 0 (ggml
// make_qkx3_quants, the imatrix paths: min may sit at or near max, so v can be huge).
enum class GridRounding { kClamped, kPositiveOnly };

// Asymmetric quants L[i] in [0, nmax] with x ~ scale * L - min (min >= 0 returned in *neg_min) for a
// group of n with weights w: round on the full range [min(x, 0), max(x)] (that rounding's error is
// the baseline), then try nstep + 1 grid widths (nmax + rmin + rdelta * is), each refitted by
// weighted least squares for scale and offset (offset clamped to <= 0), keeping the one of least
// weighted error (|diff| if use_mad, else diff^2). ggml make_qkx2_quants (GridRounding::kClamped)
// and make_qkx3_quants with weights and use_mad false (kPositiveOnly).
float fit_affine(int n, int nmax, const float* x, const float* w, uint8_t* L, float* neg_min, uint8_t* Laux, float rmin,
                 float rdelta, int nstep, bool use_mad, GridRounding rounding = GridRounding::kClamped) {
  float min = x[0], max = x[0];
  float sum_w = w[0];
  float sum_x = sum_w * x[0];
  for (int i = 1; i < n; ++i) {
    if (x[i] < min) min = x[i];
    if (x[i] > max) max = x[i];
    sum_w += w[i];
    sum_x += w[i] * x[i];
  }
  if (min > 0.0f) min = 0.0f;
  if (max <= min) {  // all values equal (min <= max always; qkx2 tests ==, qkx3 <=)
    std::fill(L, L + n, uint8_t{0});
    *neg_min = -min;
    return 0.0f;
  }
  auto err = [&](float d, float m, const uint8_t* q) {
    float e = 0.0f;
    for (int i = 0; i < n; ++i) {
      float diff = d * static_cast<float>(q[i]) + m - x[i];
      diff = use_mad ? std::fabs(diff) : diff * diff;
      e += w[i] * diff;
    }
    return e;
  };
  float iscale = static_cast<float>(nmax) / (max - min);
  float scale = 1.0f / iscale;
  for (int i = 0; i < n; ++i) L[i] = static_cast<uint8_t>(clamp_int(nearest_int(iscale * (x[i] - min)), 0, nmax));
  float best_error = err(scale, min, L);
  for (int is = 0; is <= nstep; ++is) {
    iscale = (rmin + rdelta * static_cast<float>(is) + static_cast<float>(nmax)) / (max - min);
    float sum_l = 0.0f, sum_l2 = 0.0f, sum_xl = 0.0f;
    for (int i = 0; i < n; ++i) {
      const float v = iscale * (x[i] - min);
      const int l = rounding == GridRounding::kClamped ? clamp_int(nearest_int(v), 0, nmax)
                                                       : (v > 0.0f ? nearest_int(std::min(v, static_cast<float>(nmax))) : 0);
      Laux[i] = static_cast<uint8_t>(l);
      const float fl = static_cast<float>(l);
      sum_l += w[i] * fl;
      sum_l2 += w[i] * fl * fl;
      sum_xl += w[i] * fl * x[i];
    }
    const float det = sum_w * sum_l2 - sum_l * sum_l;
    if (!(det > 0.0f)) continue;
    float this_scale = (sum_w * sum_xl - sum_x * sum_l) / det;
    float this_min = (sum_l2 * sum_x - sum_l * sum_xl) / det;
    if (this_min > 0.0f) {
      this_min = 0.0f;
      this_scale = sum_xl / sum_l2;
    }
    const float cur_error = err(this_scale, this_min, Laux);
    if (cur_error < best_error) {
      std::copy(Laux, Laux + n, L);
      best_error = cur_error;
      scale = this_scale;
      min = this_min;
    }
  }
  *neg_min = -min;
  return scale;
}

// Packs 2-bit quants L[256] four planes per byte (the Q2_K / Q3_K qs layout, see k_low2).
void pack_2bit(const uint8_t* L, uint8_t* qs) {
  for (int half = 0; half < 2; ++half)
    for (int l = 0; l < 32; ++l) {
      const uint8_t* s = L + half * 128 + l;
      qs[half * 32 + l] = static_cast<uint8_t>(s[0] | (s[32] << 2) | (s[64] << 4) | (s[96] << 6));
    }
}

// Quantises n non-negative values (the group scales or mins of a super-block) to L[i] in [0, nmax]
// with weights qw: start at the scale mapping max(x) to nmax, keep the best of 8 nearby scales by
// weighted squared error, then up to 5 sweeps of coordinate descent as fit_symmetric_q3 does.
// ggml make_qp_quants. ggml keeps L in uint8_t: the first rounding is stored unclamped (a negative
// value wraps), and the sweeps read it back as that byte; we keep the same bytes.
float fit_positive(int n, int nmax, const float* x, uint8_t* L, const float* qw) {
  float max = 0.0f;
  for (int i = 0; i < n; ++i) max = std::max(max, x[i]);
  if (max < kGroupMaxEps) {
    std::fill(L, L + n, uint8_t{0});
    return 0.0f;
  }
  float iscale = static_cast<float>(nmax) / max;
  for (int i = 0; i < n; ++i) L[i] = static_cast<uint8_t>(nearest_int(iscale * x[i]));
  const float scale = 1.0f / iscale;
  float best_mse = 0.0f;
  for (int i = 0; i < n; ++i) {
    const float diff = x[i] - scale * static_cast<float>(L[i]);
    best_mse += qw[i] * diff * diff;
  }
  for (int is = -4; is <= 4; ++is) {
    if (is == 0) continue;
    const float iscale_is = (0.1f * static_cast<float>(is) + static_cast<float>(nmax)) / max;
    const float scale_is = 1.0f / iscale_is;
    float mse = 0.0f;
    for (int i = 0; i < n; ++i) {
      const int l = std::min(nmax, nearest_int(iscale_is * x[i]));
      const float diff = x[i] - scale_is * static_cast<float>(l);
      mse += qw[i] * diff * diff;
    }
    if (mse < best_mse) {
      best_mse = mse;
      iscale = iscale_is;
    }
  }
  float sumlx = 0.0f, suml2 = 0.0f;
  for (int i = 0; i < n; ++i) {
    const int l = std::min(nmax, nearest_int(iscale * x[i]));
    L[i] = static_cast<uint8_t>(l);  // the sums below take l itself, the sweeps the stored byte (as ggml)
    const float fl = static_cast<float>(l);
    sumlx += qw[i] * x[i] * fl;
    suml2 += qw[i] * fl * fl;
  }
  for (int sweep = 0; sweep < 5; ++sweep) {
    int n_changed = 0;
    for (int i = 0; i < n; ++i) {
      const float w = qw[i];
      const float li = static_cast<float>(L[i]);
      float slx = sumlx - w * x[i] * li;
      float sl2 = suml2 - w * li * li;
      if (!(slx > 0.0f && sl2 > 0.0f)) continue;
      const int new_l = std::min(nmax, nearest_int(x[i] * sl2 / slx));
      if (new_l == L[i]) continue;
      const float nl = static_cast<float>(new_l);
      slx += w * x[i] * nl;
      sl2 += w * nl * nl;
      if (slx * slx * suml2 > sumlx * sumlx * sl2) {
        L[i] = static_cast<uint8_t>(new_l);
        sumlx = slx;
        suml2 = sl2;
        ++n_changed;
      }
    }
    if (n_changed == 0) break;
  }
  return suml2 > 0.0f ? sumlx / suml2 : 0.0f;
}

// Sum of x[i]^2 over n values, in index order (the imatrix paths' sigma^2 numerator).
float sum_sq(const float* x, int n) {
  float s = 0.0f;
  for (int i = 0; i < n; ++i) s += x[i] * x[i];
  return s;
}

// Packs 6-bit quants L[256] (biased, [0, 63]) into Q6_K's ql/qh.
void pack_q6_K(const int8_t* L, BlockQ6_K& b) {
  for (int half = 0; half < 2; ++half)
    for (int l = 0; l < 32; ++l) {
      const int8_t* s = L + half * 128 + l;
      b.ql[half * 64 + l] = static_cast<uint8_t>((s[0] & 0xF) | ((s[64] & 0xF) << 4));
      b.ql[half * 64 + l + 32] = static_cast<uint8_t>((s[32] & 0xF) | ((s[96] & 0xF) << 4));
      b.qh[half * 32 + l] =
          static_cast<uint8_t>((s[0] >> 4) | ((s[32] >> 4) << 2) | ((s[64] >> 4) << 4) | ((s[96] >> 4) << 6));
    }
}

// Q3_K's high bits and low two bits of biased quants L[256] in [0, 7].
void pack_q3_K(const int8_t* L, BlockQ3_K& b) {
  std::memset(b.hmask, 0, sizeof(b.hmask));
  uint8_t low[kQkK];
  for (int e = 0; e < kQkK; ++e) {
    int v = L[e];
    if (v > 3) {
      b.hmask[e % 32] |= static_cast<uint8_t>(1u << (e / 32));
      v -= 4;
    }
    low[e] = static_cast<uint8_t>(v);
  }
  pack_2bit(low, b.qs);
}

// Q4_K's packed 6-bit scale ls and min lm of group g (ggml's layout, see get_scale_min_k4).
void put_q4_K_scale_min(BlockQ4_K& b, int g, uint8_t ls, uint8_t lm) {
  if (g < 4) {
    b.scales[g] = ls;
    b.scales[g + 4] = lm;
  } else {
    b.scales[g + 4] = static_cast<uint8_t>((ls & 0xF) | ((lm & 0xF) << 4));
    b.scales[g - 4] |= static_cast<uint8_t>((ls >> 4) << 6);
    b.scales[g] |= static_cast<uint8_t>((lm >> 4) << 6);
  }
}

// Q3_K's packed 6-bit biased scale l of group g.
void put_q3_K_scale(BlockQ3_K& b, int g, int l) {
  if (g < 8)
    b.scales[g] = static_cast<uint8_t>(l & 0xF);
  else
    b.scales[g - 8] |= static_cast<uint8_t>((l & 0xF) << 4);
  b.scales[g % 4 + 8] |= static_cast<uint8_t>((l >> 4) << (2 * (g / 4)));
}

}  // namespace

void quantize_row_q8_0_ref(const float* x, BlockQ8_0* y, int64_t k) {
  for (int64_t i = 0; i < k / kQk8_0; ++i, x += kQk8_0) {
    float amax = 0.0f;
    for (int j = 0; j < kQk8_0; ++j) amax = std::max(amax, std::fabs(x[j]));
    const float d = amax / 127.0f;
    const float id = d != 0.0f ? 1.0f / d : 0.0f;
    y[i].d = f32_to_f16(d);
    // ROUNDING: halves away from zero (roundf), as ggml; the f32 scale d, not its fp16, divides.
    for (int j = 0; j < kQk8_0; ++j) y[i].qs[j] = static_cast<int8_t>(std::round(x[j] * id));
  }
}

void quantize_row_q6_K_ref(const float* x, BlockQ6_K* y, int64_t k) {
  int8_t L[kQkK];
  float scales[16];
  for (int64_t i = 0; i < k / kQkK; ++i, x += kQkK) {
    float max_scale = 0.0f, max_abs_scale = 0.0f;
    for (int g = 0; g < 16; ++g) {
      scales[g] = fit_symmetric_x2(16, 32, x + 16 * g, L + 16 * g);
      if (std::fabs(scales[g]) > max_abs_scale) {
        max_abs_scale = std::fabs(scales[g]);
        max_scale = scales[g];
      }
    }
    BlockQ6_K& b = y[i];
    if (max_abs_scale < kGroupMaxEps) {
      std::memset(&b, 0, sizeof(b));
      continue;
    }
    // The super-block scale maps the largest group scale to -128; group scales round to int8.
    const float iscale = -128.0f / max_scale;
    b.d = f32_to_f16(1.0f / iscale);
    for (int g = 0; g < 16; ++g) b.scales[g] = static_cast<int8_t>(std::min(127, nearest_int(iscale * scales[g])));
    // Requantise each group at its stored (rounded) scale; a zero scale keeps the fit's quants.
    const float d_all = f16_to_f32(b.d);
    for (int g = 0; g < 16; ++g) {
      const float d = d_all * static_cast<float>(b.scales[g]);
      if (d == 0.0f) continue;
      for (int j = 0; j < 16; ++j)
        L[16 * g + j] = static_cast<int8_t>(clamp_int(nearest_int(x[16 * g + j] / d), -32, 31) + 32);
    }
    for (int half = 0; half < 2; ++half)
      for (int l = 0; l < 32; ++l) {
        const int8_t* s = L + half * 128 + l;
        b.ql[half * 64 + l] = static_cast<uint8_t>((s[0] & 0xF) | ((s[64] & 0xF) << 4));
        b.ql[half * 64 + l + 32] = static_cast<uint8_t>((s[32] & 0xF) | ((s[96] & 0xF) << 4));
        b.qh[half * 32 + l] =
            static_cast<uint8_t>((s[0] >> 4) | ((s[32] >> 4) << 2) | ((s[64] >> 4) << 4) | ((s[96] >> 4) << 6));
      }
  }
}

void quantize_row_q4_K_ref(const float* x, BlockQ4_K* y, int64_t k) {
  uint8_t L[kQkK], Laux[32];
  float w[32], mins[8], scales[8];
  for (int64_t i = 0; i < k / kQkK; ++i, x += kQkK) {
    float max_scale = 0.0f, max_min = 0.0f;
    for (int g = 0; g < 8; ++g) {
      const float* xg = x + 32 * g;
      // Weights: |x| plus the group's RMS, so small values still count.
      float sum_x2 = 0.0f;
      for (int l = 0; l < 32; ++l) sum_x2 += xg[l] * xg[l];
      const float av_x = std::sqrt(sum_x2 / 32.0f);
      for (int l = 0; l < 32; ++l) w[l] = av_x + std::fabs(xg[l]);
      scales[g] = fit_affine(32, 15, xg, w, L + 32 * g, &mins[g], Laux, -1.0f, 0.1f, 20, false);
      if (scales[g] > max_scale) max_scale = scales[g];
      if (mins[g] > max_min) max_min = mins[g];
    }
    BlockQ4_K& b = y[i];
    const float inv_scale = max_scale > 0.0f ? 63.0f / max_scale : 0.0f;
    const float inv_min = max_min > 0.0f ? 63.0f / max_min : 0.0f;
    for (int g = 0; g < 8; ++g) {
      // ggml stores nearest_int into a uint8_t before the min(63): a negative value wraps to >= 193.
      const uint8_t ls = std::min<uint8_t>(63, static_cast<uint8_t>(nearest_int(inv_scale * scales[g])));
      const uint8_t lm = std::min<uint8_t>(63, static_cast<uint8_t>(nearest_int(inv_min * mins[g])));
      if (g < 4) {
        b.scales[g] = ls;
        b.scales[g + 4] = lm;
      } else {
        b.scales[g + 4] = static_cast<uint8_t>((ls & 0xF) | ((lm & 0xF) << 4));
        b.scales[g - 4] |= static_cast<uint8_t>((ls >> 4) << 6);
        b.scales[g] |= static_cast<uint8_t>((lm >> 4) << 6);
      }
    }
    b.d = f32_to_f16(max_scale / 63.0f);
    b.dmin = f32_to_f16(max_min / 63.0f);
    const float d_all = f16_to_f32(b.d), dmin_all = f16_to_f32(b.dmin);
    for (int g = 0; g < 8; ++g) {
      uint8_t sc, m;
      kquant::q4_K_scale_min(b.scales, g, &sc, &m);
      const float d = d_all * static_cast<float>(sc);
      if (d == 0.0f) continue;
      const float dm = dmin_all * static_cast<float>(m);
      for (int l = 0; l < 32; ++l)
        L[32 * g + l] = static_cast<uint8_t>(clamp_int(nearest_int((x[32 * g + l] + dm) / d), 0, 15));
    }
    for (int c = 0; c < 4; ++c)
      for (int l = 0; l < 32; ++l) b.qs[32 * c + l] = static_cast<uint8_t>(L[64 * c + l] | (L[64 * c + l + 32] << 4));
  }
}

void quantize_row_q3_K_ref(const float* x, BlockQ3_K* y, int64_t k) {
  int8_t L[kQkK];
  float scales[16];
  for (int64_t i = 0; i < k / kQkK; ++i, x += kQkK) {
    float max_scale = 0.0f, amax = 0.0f;
    for (int g = 0; g < 16; ++g) {
      scales[g] = fit_symmetric_q3(16, 4, x + 16 * g, L + 16 * g);
      if (std::fabs(scales[g]) > amax) {
        amax = std::fabs(scales[g]);
        max_scale = scales[g];
      }
    }
    BlockQ3_K& b = y[i];
    std::memset(b.scales, 0, sizeof(b.scales));
    if (max_scale != 0.0f) {
      const float iscale = -32.0f / max_scale;
      for (int g = 0; g < 16; ++g) {
        // ggml keeps the rounded value in an int8_t before clamping (no wrap: |iscale * scale| <= 32).
        const int8_t r = static_cast<int8_t>(nearest_int(iscale * scales[g]));
        const int l = clamp_int(r, -32, 31) + 32;
        if (g < 8)
          b.scales[g] = static_cast<uint8_t>(l & 0xF);
        else
          b.scales[g - 8] |= static_cast<uint8_t>((l & 0xF) << 4);
        b.scales[g % 4 + 8] |= static_cast<uint8_t>((l >> 4) << (2 * (g / 4)));
      }
      b.d = f32_to_f16(1.0f / iscale);
    } else {
      b.d = f32_to_f16(0.0f);
    }
    const float d_all = f16_to_f32(b.d);
    for (int g = 0; g < 16; ++g) {
      const float d = d_all * static_cast<float>(kquant::q3_K_scale(b.scales, g) - 32);
      if (d == 0.0f) continue;
      for (int j = 0; j < 16; ++j)
        L[16 * g + j] = static_cast<int8_t>(clamp_int(nearest_int(x[16 * g + j] / d), -4, 3) + 4);
    }
    // High bit of element e at bit e / 32 of hmask[e % 32]; the low two bits go to qs.
    std::memset(b.hmask, 0, sizeof(b.hmask));
    uint8_t low[kQkK];
    for (int e = 0; e < kQkK; ++e) {
      int v = L[e];
      if (v > 3) {
        b.hmask[e % 32] |= static_cast<uint8_t>(1u << (e / 32));
        v -= 4;
      }
      low[e] = static_cast<uint8_t>(v);
    }
    pack_2bit(low, b.qs);
  }
}

void quantize_row_q2_K_ref(const float* x, BlockQ2_K* y, int64_t k) {
  uint8_t L[kQkK], Laux[16];
  float w[16], mins[16], scales[16];
  for (int64_t i = 0; i < k / kQkK; ++i, x += kQkK) {
    float max_scale = 0.0f, max_min = 0.0f;
    for (int g = 0; g < 16; ++g) {
      for (int l = 0; l < 16; ++l) w[l] = std::fabs(x[16 * g + l]);
      scales[g] = fit_affine(16, 3, x + 16 * g, w, L + 16 * g, &mins[g], Laux, -0.5f, 0.1f, 15, true);
      if (scales[g] > max_scale) max_scale = scales[g];
      if (mins[g] > max_min) max_min = mins[g];
    }
    BlockQ2_K& b = y[i];
    // 4-bit scales and mins relative to the largest of each, over 15.
    if (max_scale > 0.0f) {
      const float iscale = 15.0f / max_scale;
      for (int g = 0; g < 16; ++g) b.scales[g] = static_cast<uint8_t>(nearest_int(iscale * scales[g]));
      b.d = f32_to_f16(max_scale / 15.0f);
    } else {
      std::memset(b.scales, 0, sizeof(b.scales));
      b.d = f32_to_f16(0.0f);
    }
    if (max_min > 0.0f) {
      const float iscale = 15.0f / max_min;
      for (int g = 0; g < 16; ++g)
        b.scales[g] = static_cast<uint8_t>(b.scales[g] | (nearest_int(iscale * mins[g]) << 4));
      b.dmin = f32_to_f16(max_min / 15.0f);
    } else {
      b.dmin = f32_to_f16(0.0f);
    }
    const float d_all = f16_to_f32(b.d), dmin_all = f16_to_f32(b.dmin);
    for (int g = 0; g < 16; ++g) {
      const float d = d_all * static_cast<float>(b.scales[g] & 0xF);
      if (d == 0.0f) continue;
      const float dm = dmin_all * static_cast<float>(b.scales[g] >> 4);
      for (int l = 0; l < 16; ++l)
        L[16 * g + l] = static_cast<uint8_t>(clamp_int(nearest_int((x[16 * g + l] + dm) / d), 0, 3));
    }
    pack_2bit(L, b.qs);
  }
}

void quantize_row_iq4_nl_ref(const float* x, BlockIq4Nl* y, int64_t k) {
  // Indices persist across the blocks of a call, as ggml's L does: an all-zero block packs the
  // previous block's (see kernels/kquant.h).
  uint8_t L[kQk4Nl] = {};
  const int8_t* grid = kIq4nlValues;
  for (int64_t i = 0; i < k / kQk4Nl; ++i, x += kQk4Nl) {
    BlockIq4Nl& b = y[i];
    b.d = f32_to_f16(0.0f);
    float amax;
    const float max = signed_absmax(x, kQk4Nl, &amax);
    if (!(amax < kGroupMaxEps)) {
      // Scale mapping the largest |x| onto the grid end -127, rounded to the nearest grid values, then
      // the x^2-weighted least-squares scale of those indices (the reference runs no further tries).
      const float id = 1.0f / (max / static_cast<float>(grid[0]));
      float sumqx = 0.0f, sumq2 = 0.0f;
      for (int j = 0; j < kQk4Nl; ++j) {
        const int l = nearest_grid_index(grid, 16, id * x[j]);
        L[j] = static_cast<uint8_t>(l);
        const float q = static_cast<float>(grid[l]), w = x[j] * x[j];
        sumqx += w * q * x[j];
        sumq2 += w * q * q;
      }
      b.d = f32_to_f16(sumq2 > 0.0f ? sumqx / sumq2 : 0.0f);
    }
    for (int j = 0; j < 16; ++j) b.qs[j] = static_cast<uint8_t>(L[j] | (L[j + 16] << 4));
  }
}

void quantize_row_ref(QuantType t, const float* x, void* y, int64_t k) {
  switch (t) {
    case QuantType::kQ8_0:
      return quantize_row_q8_0_ref(x, static_cast<BlockQ8_0*>(y), k);
    case QuantType::kQ6_K:
      return quantize_row_q6_K_ref(x, static_cast<BlockQ6_K*>(y), k);
    case QuantType::kQ4_K:
      return quantize_row_q4_K_ref(x, static_cast<BlockQ4_K*>(y), k);
    case QuantType::kQ3_K:
      return quantize_row_q3_K_ref(x, static_cast<BlockQ3_K*>(y), k);
    case QuantType::kQ2_K:
      return quantize_row_q2_K_ref(x, static_cast<BlockQ2_K*>(y), k);
    case QuantType::kIq4Nl:
      return quantize_row_iq4_nl_ref(x, static_cast<BlockIq4Nl*>(y), k);
  }
  STRATA_CHECK(false, "quantize_row_ref: unknown QuantType");
}


// ---- Importance-weighted quantisers (ggml quantize_<type>(..., quant_weights) with weights given).
// Each block's element weights are qw[j] * sqrt(sigma2 + x[j]^2), sigma2 a multiple of the block's
// mean square (Q2_K: 1x, Q3_K / Q4_K / IQ4_NL: 2x); Q6_K takes qw as they are. The group scales and
// mins are then fitted to the super-block scale by fit_positive (Q2_K, Q4_K) or fit_symmetric_x2
// (Q3_K), weighted by each group's summed weights, instead of the reference's max-based rounding.
// Source: ggml-quants.c quantize_row_{q2_K,q3_K,q4_K,q6_K}_impl, quantize_iq4_nl /
// quantize_row_iq4_nl_impl (ntry 7), make_qkx3_quants, make_qp_quants, make_qx_quants.

void quantize_row_q2_K_weighted(const float* x, const float* qw, BlockQ2_K* y, int64_t k) {
  uint8_t L[kQkK], Laux[16], Ls[16], Lm[16];
  float mins[16], scales[16], sw[16], weight[16];
  for (int64_t i = 0; i < k / kQkK; ++i, x += kQkK, qw += kQkK) {
    const float sigma2 = sum_sq(x, kQkK) / static_cast<float>(kQkK);
    for (int g = 0; g < 16; ++g) {
      for (int l = 0; l < 16; ++l) weight[l] = qw[16 * g + l] * std::sqrt(sigma2 + x[16 * g + l] * x[16 * g + l]);
      sw[g] = 0.0f;
      for (int l = 0; l < 16; ++l) sw[g] += weight[l];
      scales[g] = fit_affine(16, 3, x + 16 * g, weight, L + 16 * g, &mins[g], Laux, -0.9f, 0.05f, 36, false, GridRounding::kPositiveOnly);
    }
    BlockQ2_K& b = y[i];
    float dm = fit_positive(16, 15, scales, Ls, sw);
    float mm = fit_positive(16, 15, mins, Lm, sw);
    b.d = f32_to_f16(dm);
    b.dmin = f32_to_f16(mm);
    dm = f16_to_f32(b.d);
    mm = f16_to_f32(b.dmin);
    for (int g = 0; g < 16; ++g) b.scales[g] = static_cast<uint8_t>(Ls[g] | (Lm[g] << 4));
    for (int g = 0; g < 16; ++g) {
      const float d = dm * static_cast<float>(b.scales[g] & 0xF);
      if (d == 0.0f) continue;
      const float m = mm * static_cast<float>(b.scales[g] >> 4);
      for (int l = 0; l < 16; ++l)
        L[16 * g + l] = static_cast<uint8_t>(clamp_int(nearest_int((x[16 * g + l] + m) / d), 0, 3));
    }
    pack_2bit(L, b.qs);
  }
}

void quantize_row_q3_K_weighted(const float* x, const float* qw, BlockQ3_K* y, int64_t k) {
  int8_t L[kQkK], Ls[16];
  float scales[16], sw[16], weight[16];
  for (int64_t i = 0; i < k / kQkK; ++i, x += kQkK, qw += kQkK) {
    const float sigma2 = 2.0f * sum_sq(x, kQkK) / static_cast<float>(kQkK);
    for (int g = 0; g < 16; ++g) {
      for (int l = 0; l < 16; ++l) weight[l] = qw[16 * g + l] * std::sqrt(sigma2 + x[16 * g + l] * x[16 * g + l]);
      float sumw = 0.0f;
      for (int l = 0; l < 16; ++l) sumw += weight[l];
      sw[g] = sumw;
      scales[g] = fit_symmetric_x2(16, 4, x + 16 * g, L + 16 * g, weight);
    }
    BlockQ3_K& b = y[i];
    std::memset(b.scales, 0, sizeof(b.scales));
    const float d_block = fit_symmetric_x2(16, 32, scales, Ls, sw);
    for (int g = 0; g < 16; ++g) put_q3_K_scale(b, g, Ls[g]);
    b.d = f32_to_f16(d_block);
    const float d_all = f16_to_f32(b.d);
    for (int g = 0; g < 16; ++g) {
      const float d = d_all * static_cast<float>(kquant::q3_K_scale(b.scales, g) - 32);
      if (d == 0.0f) continue;
      for (int j = 0; j < 16; ++j)
        L[16 * g + j] = static_cast<int8_t>(clamp_int(nearest_int(x[16 * g + j] / d), -4, 3) + 4);
    }
    pack_q3_K(L, b);
  }
}

void quantize_row_q4_K_weighted(const float* x, const float* qw, BlockQ4_K* y, int64_t k) {
  uint8_t L[kQkK], Laux[32], Ls[8], Lm[8];
  float weights[32], sw[8], mins[8], scales[8];
  for (int64_t i = 0; i < k / kQkK; ++i, x += kQkK, qw += kQkK) {
    const float sigma2 = 2.0f * sum_sq(x, kQkK) / static_cast<float>(kQkK);
    for (int g = 0; g < 8; ++g) {
      for (int l = 0; l < 32; ++l) weights[l] = qw[32 * g + l] * std::sqrt(sigma2 + x[32 * g + l] * x[32 * g + l]);
      float sumw = 0.0f;
      for (int l = 0; l < 32; ++l) sumw += weights[l];
      sw[g] = sumw;
      scales[g] = fit_affine(32, 15, x + 32 * g, weights, L + 32 * g, &mins[g], Laux, -0.9f, 0.05f, 36, false, GridRounding::kPositiveOnly);
    }
    BlockQ4_K& b = y[i];
    const float d_block = fit_positive(8, 63, scales, Ls, sw);
    const float m_block = fit_positive(8, 63, mins, Lm, sw);
    for (int g = 0; g < 8; ++g) put_q4_K_scale_min(b, g, Ls[g], Lm[g]);
    b.d = f32_to_f16(d_block);
    b.dmin = f32_to_f16(m_block);
    const float d_all = f16_to_f32(b.d), dmin_all = f16_to_f32(b.dmin);
    for (int g = 0; g < 8; ++g) {
      uint8_t sc, m;
      kquant::q4_K_scale_min(b.scales, g, &sc, &m);
      const float d = d_all * static_cast<float>(sc);
      if (d == 0.0f) continue;
      const float dm = dmin_all * static_cast<float>(m);
      for (int l = 0; l < 32; ++l)
        L[32 * g + l] = static_cast<uint8_t>(clamp_int(nearest_int((x[32 * g + l] + dm) / d), 0, 15));
    }
    for (int c = 0; c < 4; ++c)
      for (int l = 0; l < 32; ++l) b.qs[32 * c + l] = static_cast<uint8_t>(L[64 * c + l] | (L[64 * c + l + 32] << 4));
  }
}

void quantize_row_q6_K_weighted(const float* x, const float* qw, BlockQ6_K* y, int64_t k) {
  int8_t L[kQkK];
  float scales[16];
  for (int64_t i = 0; i < k / kQkK; ++i, x += kQkK, qw += kQkK) {
    float max_scale = 0.0f, max_abs_scale = 0.0f;
    for (int g = 0; g < 16; ++g) {
      scales[g] = fit_symmetric_x2(16, 32, x + 16 * g, L + 16 * g, qw + 16 * g);
      if (std::fabs(scales[g]) > max_abs_scale) {
        max_abs_scale = std::fabs(scales[g]);
        max_scale = scales[g];
      }
    }
    BlockQ6_K& b = y[i];
    if (max_abs_scale < kGroupMaxEps) {
      std::memset(&b, 0, sizeof(b));
      continue;
    }
    const float iscale = -128.0f / max_scale;
    b.d = f32_to_f16(1.0f / iscale);
    for (int g = 0; g < 16; ++g) b.scales[g] = static_cast<int8_t>(std::min(127, nearest_int(iscale * scales[g])));
    const float d_all = f16_to_f32(b.d);
    for (int g = 0; g < 16; ++g) {
      const float d = d_all * static_cast<float>(b.scales[g]);
      if (d == 0.0f) continue;
      for (int j = 0; j < 16; ++j)
        L[16 * g + j] = static_cast<int8_t>(clamp_int(nearest_int(x[16 * g + j] / d), -32, 31) + 32);
    }
    pack_q6_K(L, b);
  }
}

void quantize_row_iq4_nl_weighted(const float* x, const float* qw, BlockIq4Nl* y, int64_t k) {
  const int8_t* grid = kIq4nlValues;
  constexpr int kTries = 7;  // ggml quantize_iq4_nl's ntry
  uint8_t L[kQk4Nl];
  float weight[kQk4Nl];
  for (int64_t i = 0; i < k / kQk4Nl; ++i, x += kQk4Nl, qw += kQk4Nl) {
    BlockIq4Nl& b = y[i];
    float sigma2 = sum_sq(x, kQk4Nl);
    sigma2 *= 2.0f / static_cast<float>(kQk4Nl);
    for (int j = 0; j < kQk4Nl; ++j) weight[j] = qw[j] * std::sqrt(sigma2 + x[j] * x[j]);
    float amax;
    const float max = signed_absmax(x, kQk4Nl, &amax);
    float d = 0.0f;
    if (!(amax < kGroupMaxEps)) {
      // The scale mapping the largest |x| onto -127, its weighted least-squares refit, then 15
      // starting scales around it (each refitted; the best weighted fit wins).
      d = -max / static_cast<float>(grid[0]);
      float id = 1.0f / d;
      float sumqx = 0.0f, sumq2 = 0.0f;
      for (int j = 0; j < kQk4Nl; ++j) {
        const float q = static_cast<float>(grid[nearest_grid_index(grid, 16, id * x[j])]);
        sumqx += weight[j] * q * x[j];
        sumq2 += weight[j] * q * q;
      }
      d = sumq2 > 0.0f ? sumqx / sumq2 : 0.0f;
      float best = d * sumqx;
      for (int itry = -kTries; itry <= kTries; ++itry) {
        id = static_cast<float>(itry + grid[0]) / max;
        sumqx = sumq2 = 0.0f;
        for (int j = 0; j < kQk4Nl; ++j) {
          const float q = static_cast<float>(grid[nearest_grid_index(grid, 16, id * x[j])]);
          sumqx += weight[j] * q * x[j];
          sumq2 += weight[j] * q * q;
        }
        if (sumq2 > 0.0f && sumqx * sumqx > best * sumq2) {
          d = sumqx / sumq2;
          best = d * sumqx;
        }
      }
    }
    // The indices are re-rounded at the final (f32) scale; a zero scale sends every value to 0,
    // whose nearest grid value is 1 (index 8).
    b.d = f32_to_f16(d);
    const float id = d != 0.0f ? 1.0f / d : 0.0f;
    for (int j = 0; j < kQk4Nl; ++j) L[j] = static_cast<uint8_t>(nearest_grid_index(grid, 16, id * x[j]));
    for (int j = 0; j < 16; ++j) b.qs[j] = static_cast<uint8_t>(L[j] | (L[j + 16] << 4));
  }
}

void quantize_row_weighted(QuantType t, const float* x, const float* qw, void* y, int64_t k) {
  switch (t) {
    case QuantType::kQ8_0:
      return quantize_row_q8_0_ref(x, static_cast<BlockQ8_0*>(y), k);  // ggml quantize_q8_0 ignores the weights
    case QuantType::kQ6_K:
      return quantize_row_q6_K_weighted(x, qw, static_cast<BlockQ6_K*>(y), k);
    case QuantType::kQ4_K:
      return quantize_row_q4_K_weighted(x, qw, static_cast<BlockQ4_K*>(y), k);
    case QuantType::kQ3_K:
      return quantize_row_q3_K_weighted(x, qw, static_cast<BlockQ3_K*>(y), k);
    case QuantType::kQ2_K:
      return quantize_row_q2_K_weighted(x, qw, static_cast<BlockQ2_K*>(y), k);
    case QuantType::kIq4Nl:
      return quantize_row_iq4_nl_weighted(x, qw, static_cast<BlockIq4Nl*>(y), k);
  }
  STRATA_CHECK(false, "quantize_row_weighted: unknown QuantType");
}

}  // namespace strata::kernels
