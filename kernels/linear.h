// Linear layers over the checkpoint's stored formats: y[n, out] = x[n, in] . W^T.
//
// Weights are read in their stored format and dequantised exactly inside the kernel; activations
// and outputs are f32. The FP8 and MXFP4 variants first quantise each row of x to E4M3 per block of
// 32 with a ue8m0 scale (kernels::act_quant_fp8), as the official `linear()` does before fp8_gemm /
// fp4_gemm; the BF16/F32 variants use x as is (F.linear). FP8/FP4: products of E4M3 x E4M3/E2M1
// values are exact in f32 and the summation order is free (fixtures README), so the fast paths
// differ from ref in the last bits only. BF16/F32: products round, and the model is sensitive to it
// (attn.wo_a feeds act_quant_fp8, where one ulp can flip an E4M3 step), so every level reproduces
// ref bit for bit: k in order, product and sum rounded separately.
//
// Dispatch: each entry point picks the best path for the running CPU (AVX-512 BF16, AVX-512, AVX2,
// scalar) once; kernels/dispatch.h can force a level. The scalar reference versions in kernels/ref
// are the definition and are tested against (tests/kernels/linear_test.cpp states the tolerance).
// Small n (decode, n < 4..8 by level) streams each weight byte once; larger n (prefill) runs a
// blocked GEMM over dequantised weight tiles (kernels/linear.cpp).
// Threading: parallel over output features (and rows) on `pool`; pool may be null (serial). Results
// do not depend on the thread count.
// Cannot fail: shapes were validated at load. No allocation on the hot path beyond per-call scratch
// (the prepared activations; in prefill also the packed x chunk and one weight tile per task).
// Source: model.py `linear`, `Linear`; fixtures README "Kernel shims" (fp8_gemm, fp4_gemm).
#pragma once

#include <cstdint>
#include <span>

#include "core/thread_pool.h"

namespace strata::kernels {

// FP8 E4M3 weight [out, in] with one UE8M0 scale per [32, 32] block: scale [ceil(out/32), ceil(in/32)].
struct Fp8Weight {
  const uint8_t* w = nullptr;      // [out, in] e4m3 codes
  const uint8_t* scale = nullptr;  // [ceil(out/32), ceil(in/32)] e8m0 codes
  int64_t out = 0, in = 0;
  // The smallest and largest scale code where known (scale_lo <= scale_hi; the default says
  // unknown): a level that takes only some scales (the AVX-512 BF16 one) checks these two instead
  // of reading every scale on every call. with_scale_range() fills them; they must describe `scale`.
  uint8_t scale_lo = 1, scale_hi = 0;
};

// A copy of w with scale_lo / scale_hi set to the min and max of its ceil(out/32) * ceil(in/32) E8M0
// scale codes (read once; `scale` non-null when there are any; none: the range stays unknown).
// Allocates nothing, cannot fail. A model calls it when it binds the weight. Why: the BF16 level read
// a weight's every scale on each call, 0.3-0.8% of a decode token on the 8 GB scaled checkpoint
// (docs/performance.md#a-tokens-passes-from-dram-and-from-cache-what-did-not-help-2026-12-06-midday-issue-15).
// Source: issue 15 item 1.
Fp8Weight with_scale_range(Fp8Weight w);

// MXFP4 weight [out, in]: two E2M1 codes per byte (even element in the low nibble) and one UE8M0
// scale per 32 inputs.
struct Fp4Weight {
  const uint8_t* w = nullptr;      // [out, in/2] packed e2m1
  const uint8_t* scale = nullptr;  // [out, in/32] e8m0 codes
  int64_t out = 0, in = 0;
};

// Rows per block of the blocked BF16 layout.
inline constexpr int64_t kBf16BlockRows = 16;

struct Bf16Weight {
  const uint16_t* w = nullptr;  // [out, in] bf16 bits, row-major; or blocked (below)
  int64_t out = 0, in = 0;
  // Blocked: rows in blocks of kBf16BlockRows, k-major inside a block, so w(r, k) is at
  // (r / 16) * 16 * in + k * 16 + r % 16 and one load gives 16 rows' values at one k. The bit-exact
  // order runs k in order per row; with rows in vector lanes it needs no transposes (attn.wo_a and
  // the LM head, model/weights.cpp). REQUIRES out % 16 == 0. linear_bf16 (and its batch) and
  // linear_bf16_any_order.
  bool blocked = false;
  // E4M3 storage of a blocked weight whose values are E4M3 codes times a power-of-two scale per
  // [32, 32] block (the release's FP8 attn.wo_a): w is null and value(r, k) = e4m3(code) * 2^(scale
  // - 127), exactly a bf16 value, so every level computes the same bits as from the widened bf16
  // copy at half its bytes. Codes in the blocked layout (block_e4m3_rows); scale [ceil(out / 32),
  // ceil(in / 32)] E8M0 codes. REQUIRES blocked; no NaN code (0x7F / 0xFF); every value and product
  // a normal float or zero (model/weights.cpp takes scales within 2^-60 .. 2^60).
  const uint8_t* e4m3 = nullptr;
  const uint8_t* e4m3_scale = nullptr;
  // w(r, k) as bf16 bits in any layout. Out of line (kernels/ref/linear.cpp), so that the ISA files
  // call the baseline build (kernels/x86/common.h: no inline code shared across -m flags).
  uint16_t at(int64_t r, int64_t k) const;
  // Rows [r0, r0 + n) as a weight of their own. REQUIRES (checked): r0 a multiple of 16 when
  // blocked, of 32 with E4M3 storage (a scale row).
  Bf16Weight rows(int64_t r0, int64_t n) const;
  // Stored bytes of one row (2 in, or in with E4M3 storage).
  int64_t row_bytes() const { return e4m3 != nullptr ? in : 2 * in; }
};
// Writes the blocked layout of a row-major [out, in] bf16 matrix (out % 16 == 0) to dst.
void block_bf16_rows(const uint16_t* src, int64_t out, int64_t in, uint16_t* dst);
// The same for one-byte codes (E4M3 storage of a blocked Bf16Weight).
void block_e4m3_rows(const uint8_t* src, int64_t out, int64_t in, uint8_t* dst);

struct F32Weight {
  const float* w = nullptr;  // [out, in]
  int64_t out = 0, in = 0;
};

// Which regime computes the rows of one call. FP8/MXFP4 products are exact but the decode matvec
// and the prefill GEMM sum them in different orders, so a row's last bits depend on the regime;
// within one regime they do not depend on how many rows the call has or where the row sits.
// kAuto picks by n (matvec below the level's GEMM threshold: fastest for one sequence); kDecode
// always the matvec and kPrompt always the GEMM, so that a batched forward can give every row the
// bits it would get alone (model/forward_request.h "Batch invariance"). BF16/F32 linears are
// bit-exact with ref in both regimes; the any-order BF16 head follows the same rule.
enum class RowPath : uint8_t { kAuto, kDecode, kPrompt };

// y[n, out] = act_quant_fp8(x[n, in]) . dequant(W)^T. `in` is a multiple of 32.
void linear_fp8(const float* x, int64_t n, const Fp8Weight& w, float* y, ThreadPool* pool,
                RowPath path = RowPath::kAuto);
// y[n, out] = act_quant_fp8(x[n, in]) . dequant(W)^T for MXFP4 W. `in` is a multiple of 32.
void linear_fp4(const float* x, int64_t n, const Fp4Weight& w, float* y, ThreadPool* pool,
                RowPath path = RowPath::kAuto);
// y[n, out] = x[n, in] . W^T, W bf16 widened to f32 exactly (no activation quantisation).
void linear_bf16(const float* x, int64_t n, const Bf16Weight& w, float* y, ThreadPool* pool,
                 RowPath path = RowPath::kAuto);
// y[n, out] = x[n, in] . W^T in f32.
void linear_f32(const float* x, int64_t n, const F32Weight& w, float* y, ThreadPool* pool,
                RowPath path = RowPath::kAuto);

// One linear of a batch: y[n, out] = x[n, in] . W^T. REQUIRES: the jobs' y ranges are disjoint and
// overlap no job's x (jobs run in no fixed order, some through a shared pass that reads x in place).
template <class W>
struct LinearJob {
  const float* x = nullptr;  // [n, in]
  int64_t n = 0;
  W w;
  float* y = nullptr;  // [n, out]
  RowPath path = RowPath::kAuto;
};

// Runs each job exactly as linear_fp8 / linear_fp4 would (bit for bit), but the decode-sized jobs
// (n below the GEMM threshold) share one pass over the pool: one hand-off for all of them and one
// activation preparation per distinct x, instead of one of each per call. Decode calls these for the
// top-k routed experts of a layer (w1 and w3 of every expert, then every w2) and for the shared
// expert's w1/w3: at dim 1024 a routed expert matrix is ~0.25 MB, so per-call costs were as large
// as the weight streaming. Jobs with larger n (prefill) run one after another through the GEMM.
void linear_fp8_batch(std::span<const LinearJob<Fp8Weight>> jobs, ThreadPool* pool);
void linear_fp4_batch(std::span<const LinearJob<Fp4Weight>> jobs, ThreadPool* pool);
// Jobs of several formats for one pass over the pool.
struct LinearBatch {
  std::span<const LinearJob<Fp8Weight>> fp8;
  std::span<const LinearJob<Fp4Weight>> fp4;
  std::span<const LinearJob<Bf16Weight>> bf16;  // linear_bf16: the bit-exact order
  std::span<const LinearJob<F32Weight>> f32;
};
// Every job of `jobs` computed as its format's batch call would (linear_fp8_batch ...,
// linear_f32 for f32 jobs: bit for bit), the decode-sized ones of all formats in one pass over the
// pool: a decode step's shared expert (FP8) beside its routed experts (MXFP4), an mHC projection
// (F32) beside the sublayer's first linears, one hand-off and one tail instead of one per format.
// Rows of x are [n, in] f32, y [n, out] f32. Jobs must not write what another job reads.
void linear_batch(const LinearBatch& jobs, ThreadPool* pool);
// The same for linear_bf16 (bit-exact order): the o_groups parts of attn.wo_a in one pass.
void linear_bf16_batch(std::span<const LinearJob<Bf16Weight>> jobs, ThreadPool* pool);

// y[n, out] = x[n, in] . W^T like linear_bf16, but with the summation order free (several FMA
// accumulators per output, as the FP8/FP4 paths): for outputs that feed no rounding point, such as
// the LM head's logits, where the bit-exact order of linear_bf16 costs about half the bandwidth.
// Within (in/16 + 64) * 2^-24 * sum_k |x_k w_k| of ref::linear_bf16 (tests/kernels/linear_test.cpp);
// at KernelLevel::kAmx (AMX tiles, `in` a multiple of 32) products below 2^-110 of a row's largest
// |x| and subnormal weights count as zero, and an infinite weight can give NaN where the others
// give inf (kernels/x86/bf16_any_amx.cpp). A row's result does not depend on n or its place in x.
// A blocked weight (the LM head, model/weights.cpp) takes one fused chain per output, k in order,
// with outputs in vector lanes (no horizontal sums: at 8 decode rows it runs at the FMA or memory
// rate); its worst-case distance from ref::linear_bf16 is 2 in 2^-24 sum_k |x_k w_k| (two chains of
// `in` roundings), tested within the bound above on random data. AMX tiles take row-major weights
// only. E4M3 storage runs linear_bf16 itself.
// n >= 8 and the scalar level run linear_bf16 itself (its GEMM is already compute-efficient).
// kDecode rows always take the free-order matvec, kPrompt rows linear_bf16 (RowPath).
void linear_bf16_any_order(const float* x, int64_t n, const Bf16Weight& w, float* y, ThreadPool* pool,
                           RowPath path = RowPath::kAuto);
// The same, x row i's outputs written to y[i] (w.out floats each) instead of one [n, out] block, with
// the same bits: the LM head writes each batch entry's logits into the entry's own buffer, where a
// shared block cost a 0.5 MB copy per decode row and step (the demo's V = 129280).
// REQUIRES (checked): any_order_writes_rows(w, n, path), i.e. the blocked free-order kernel runs.
void linear_bf16_any_order_rows(const float* x, int64_t n, const Bf16Weight& w, float* const* y, ThreadPool* pool,
                                RowPath path = RowPath::kAuto);
// Whether linear_bf16_any_order(x, n, w, ..., path) runs a kernel that can write rows anywhere (a
// blocked weight's free-order matvec on a vector level), so linear_bf16_any_order_rows may be called.
bool any_order_writes_rows(const Bf16Weight& w, int64_t n, RowPath path = RowPath::kAuto);
// Whether a weight of `out` rows for linear_bf16_any_order is best stored blocked on this CPU: its
// rows whole blocks and the best level a vector one without AMX (AMX tiles read row-major rows; the
// scalar level would read a blocked weight value by value). The model (the LM head) and the probe
// (its timing) both ask.
bool any_order_prefers_blocked(int64_t out);

// Exact dequantisation helpers (used at load for small tensors, e.g. attn.wo_a -> bf16 values as
// the official convert.py does, and by tests).
void dequant_fp8(const Fp8Weight& w, float* out);    // out [out, in]
void dequant_fp4(const Fp4Weight& w, float* out);    // out [out, in]
void dequant_bf16(const uint16_t* w, int64_t n, float* out);

namespace ref {
// Scalar references: the definition of the functions above. FP8/FP4: per-32-block partial sums in K
// order, as the official GEMM shims accumulate. BF16/F32: acc += x[k] * w[k] for k in order, the
// product and the sum each rounded to f32 (no FMA).
void linear_fp8(const float* x, int64_t n, const Fp8Weight& w, float* y);
void linear_fp4(const float* x, int64_t n, const Fp4Weight& w, float* y);
void linear_bf16(const float* x, int64_t n, const Bf16Weight& w, float* y);
void linear_f32(const float* x, int64_t n, const F32Weight& w, float* y);
}  // namespace ref

}  // namespace strata::kernels
