// Linear::add_jobs: linears of every format a pass takes (FP8, BF16 in the bit-exact order, F32)
// give, through one kernels::linear_batch, the bits Linear::apply gives them one by one, in every
// regime of a batch (decode rows, prompt rows, both, by size), two FP8 linears of the same x (one
// prepared activation, as attention's wq_a and wkv) and an F32 job already in the pass (the mHC
// projection riding along) included; what a batch cannot take (an F32 copy of an FP8 weight, a ggml
// block format) is refused and adds nothing.
#include <gtest/gtest.h>

#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "core/dtype.h"
#include "core/thread_pool.h"
#include "kernels/kquant_linear.h"
#include "model/weights.h"

namespace strata::model {
namespace {

std::vector<float> normal(size_t n, std::mt19937& rng, float sd) {
  std::normal_distribution<float> d(0.0f, sd);
  std::vector<float> v(n);
  for (float& x : v) x = d(rng);
  return v;
}

TEST(LinearJobs, OnePassGivesTheBitsOfApply) {
  std::mt19937 rng(41);
  const int64_t in = 256, out = 96, n = 5;
  // FP8: codes without the NaN code, scales near 1.
  std::vector<uint8_t> w8(static_cast<size_t>(out * in)), s8(static_cast<size_t>((out / 32) * (in / 32)));
  for (uint8_t& c : w8) {
    c = static_cast<uint8_t>(rng() % 256);
    if ((c & 0x7F) == 0x7F) c = 0;
  }
  for (uint8_t& c : s8) c = static_cast<uint8_t>(124 + rng() % 5);
  std::vector<uint16_t> w16(static_cast<size_t>(out * in));
  const std::vector<float> wf = normal(static_cast<size_t>(out * in), rng, 0.05f);
  for (size_t i = 0; i < w16.size(); ++i) w16[i] = f32_to_bf16(wf[i] * 0.5f);
  Linear fp8, fp8b, bf16, f32;
  fp8.kind = fp8b.kind = Linear::Kind::kFp8;
  bf16.kind = Linear::Kind::kBf16;
  f32.kind = Linear::Kind::kF32;
  for (Linear* l : {&fp8, &bf16, &f32}) {
    l->out = out;
    l->in = in;
  }
  fp8.fp8 = kernels::Fp8Weight{w8.data(), s8.data(), out, in};
  const int64_t out_b = 64;  // the first 64 rows: their codes and scale rows lead both tensors
  fp8b.out = out_b;
  fp8b.in = in;
  fp8b.fp8 = kernels::Fp8Weight{w8.data(), s8.data(), out_b, in};
  bf16.bf16 = kernels::Bf16Weight{w16.data(), out, in};
  f32.f32 = kernels::F32Weight{wf.data(), out, in};
  const std::vector<float> x = normal(static_cast<size_t>(n * in), rng, 1.0f);
  ThreadPool pool(2);
  for (const Rows rows : {Rows{1, 1}, Rows{n, n}, Rows{n, 2}, Rows{n, 0}, Rows{n, -1}, Rows{2, -1}}) {
    const std::string what = "rows " + std::to_string(rows.n) + ", decode rows " + std::to_string(rows.n_decode);
    LinearJobs jobs;
    // One slice of rows.n * out per job; the narrower jobs leave the rest of theirs as filled.
    std::vector<float> y_pass(static_cast<size_t>(5 * rows.n * out), -1.0f), y_one(y_pass);
    // An F32 job already in the pass, as a ride-along one is.
    const kernels::F32Weight ride{wf.data() + 7 * in, 24, in};
    jobs.f32.push_back({x.data(), rows.n, ride, y_pass.data() + 4 * rows.n * out, kernels::RowPath::kAuto});
    kernels::linear_f32(x.data(), rows.n, ride, y_one.data() + 4 * rows.n * out, &pool);
    int k = 0;
    for (const Linear* l : {&fp8, &fp8b, &bf16, &f32}) {
      ASSERT_TRUE(l->add_jobs(&jobs, x.data(), rows, y_pass.data() + k * rows.n * out)) << what;
      l->apply(x.data(), rows, y_one.data() + k * rows.n * out, &pool);
      ++k;
    }
    EXPECT_FALSE(jobs.fp8.empty());
    EXPECT_FALSE(jobs.bf16.empty());
    EXPECT_FALSE(jobs.f32.empty());
    EXPECT_TRUE(jobs.fp4.empty());
    kernels::linear_batch(jobs.batch(), &pool);
    EXPECT_EQ(std::memcmp(y_pass.data(), y_one.data(), y_pass.size() * sizeof(float)), 0) << what;
    jobs.clear();
    EXPECT_TRUE(jobs.fp8.empty() && jobs.fp4.empty() && jobs.bf16.empty() && jobs.f32.empty());
  }
}

TEST(LinearJobs, WhatABatchCannotTakeIsRefused) {
  std::vector<float> w(64 * 32, 0.25f), x(32, 1.0f), y(64);
  Linear f16_copy;  // an F16 copy of an FP8 weight (ds4 / ik_llama.cpp GGUFs): x rounds to E4M3 first
  f16_copy.kind = Linear::Kind::kF32;
  f16_copy.out = 64;
  f16_copy.in = 32;
  f16_copy.f32 = kernels::F32Weight{w.data(), 64, 32};
  f16_copy.act_fp8 = true;
  std::vector<uint8_t> q8(static_cast<size_t>(64 * kernels::quant_row_bytes(kernels::QuantType::kQ8_0, 32)), 0);
  Linear block;
  block.kind = Linear::Kind::kQuant;
  block.out = 64;
  block.in = 32;
  block.quant = kernels::QuantWeight{kernels::QuantType::kQ8_0, q8.data(), 64, 32};
  const Linear none;
  LinearJobs jobs;
  for (const Linear* l : {static_cast<const Linear*>(&f16_copy), static_cast<const Linear*>(&block), &none}) {
    EXPECT_FALSE(l->add_jobs(&jobs, x.data(), Rows{1, 1}, y.data()));
    EXPECT_TRUE(jobs.fp8.empty() && jobs.fp4.empty() && jobs.bf16.empty() && jobs.f32.empty());
  }
}

}  // namespace
}  // namespace strata::model
