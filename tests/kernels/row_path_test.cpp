// Batch invariance at the kernel level (kernels::RowPath): with the regime fixed, a row's result
// does not depend on how many rows the call has, where the row sits among them, or the thread
// count — bit for bit, at every level, for every weight format. The batched forward relies on it
// (model/forward_request.h "Batch invariance"). Also pins down that kAuto still switches regime at
// the GEMM threshold, i.e. that the forced paths are what makes a batch invariant.
#include <gtest/gtest.h>

#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "core/dtype.h"
#include "core/thread_pool.h"
#include "kernels/dispatch.h"
#include "kernels/linear.h"

namespace strata::kernels {
namespace {

constexpr int64_t kOut = 80, kIn = 320;

std::vector<float> random_rows(int64_t n, int64_t in, std::mt19937& rng) {
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<float> x(static_cast<size_t>(n * in));
  for (float& v : x) v = normal(rng);
  return x;
}

struct Weights {
  std::vector<uint8_t> fp8, fp8_scale, fp4, fp4_scale;
  std::vector<uint16_t> bf16;
  std::vector<float> f32;
  explicit Weights(std::mt19937& rng) {
    fp8.resize(kOut * kIn);
    for (auto& c : fp8) do c = static_cast<uint8_t>(rng()); while ((c & 0x7F) == 0x7F);
    fp8_scale.resize(((kOut + 31) / 32) * (kIn / 32));
    for (auto& s : fp8_scale) s = static_cast<uint8_t>(118 + rng() % 12);
    fp4.resize(kOut * kIn / 2);
    for (auto& c : fp4) c = static_cast<uint8_t>(rng());
    fp4_scale.resize(kOut * kIn / 32);
    for (auto& s : fp4_scale) s = static_cast<uint8_t>(118 + rng() % 12);
    std::normal_distribution<float> normal(0.0f, 0.05f);
    f32.resize(kOut * kIn);
    bf16.resize(kOut * kIn);
    for (size_t i = 0; i < f32.size(); ++i) {
      bf16[i] = f32_to_bf16(normal(rng));
      f32[i] = bf16_to_f32(bf16[i]);
    }
  }
};

// Runs the format `fmt` over x [n, kIn] into y [n, kOut].
void run(const Weights& w, int fmt, const float* x, int64_t n, float* y, ThreadPool* pool, KernelLevel level, RowPath path) {
  switch (fmt) {
    case 0: linear_fp8(x, n, Fp8Weight{w.fp8.data(), w.fp8_scale.data(), kOut, kIn}, y, pool, level, path); break;
    case 1: linear_fp4(x, n, Fp4Weight{w.fp4.data(), w.fp4_scale.data(), kOut, kIn}, y, pool, level, path); break;
    case 2: linear_bf16(x, n, Bf16Weight{w.bf16.data(), kOut, kIn}, y, pool, level, path); break;
    case 3: linear_f32(x, n, F32Weight{w.f32.data(), kOut, kIn}, y, pool, level, path); break;
    default: linear_bf16_any_order(x, n, Bf16Weight{w.bf16.data(), kOut, kIn}, y, pool, level, path); break;
  }
}
const char* kFormats[] = {"fp8", "fp4", "bf16", "f32", "bf16_any_order"};

class RowPathLevel : public ::testing::TestWithParam<KernelLevel> {
 protected:
  void SetUp() override {
    if (!kernel_level_supported(GetParam())) GTEST_SKIP() << "CPU lacks " << kernel_level_name(GetParam());
  }
};

TEST_P(RowPathLevel, ForcedPathRowsEqualTheRowAlone) {
  std::mt19937 rng(7);
  const Weights w(rng);
  ThreadPool pool(3);
  const int64_t sizes[] = {1, 2, 3, 4, 5, 6, 7, 8, 13, 40};  // every matvec width 1..8; groups of 8 + 5
  for (int fmt = 0; fmt < 5; ++fmt) {
    for (RowPath path : {RowPath::kDecode, RowPath::kPrompt}) {
      const std::vector<float> x = random_rows(40, kIn, rng);
      // Each row alone, serial.
      std::vector<float> alone(40 * kOut);
      for (int64_t i = 0; i < 40; ++i) run(w, fmt, x.data() + i * kIn, 1, alone.data() + i * kOut, nullptr, GetParam(), path);
      for (int64_t n : sizes) {
        for (int64_t first : {int64_t{0}, 40 - n}) {  // the rows at the start and at the end of the batch
          std::vector<float> y(static_cast<size_t>(n * kOut));
          run(w, fmt, x.data() + first * kIn, n, y.data(), &pool, GetParam(), path);
          EXPECT_EQ(0, std::memcmp(y.data(), alone.data() + first * kOut, y.size() * sizeof(float)))
              << kFormats[fmt] << " " << kernel_level_name(GetParam()) << " path " << static_cast<int>(path) << " n=" << n
              << " first=" << first;
        }
      }
    }
  }
}

TEST_P(RowPathLevel, BatchJobsFollowTheirPath) {
  std::mt19937 rng(11);
  const Weights w(rng);
  ThreadPool pool(2);
  const std::vector<float> x = random_rows(12, kIn, rng);
  const Fp4Weight w4{w.fp4.data(), w.fp4_scale.data(), kOut, kIn};
  for (RowPath path : {RowPath::kDecode, RowPath::kPrompt}) {
    std::vector<float> a(12 * kOut), b(12 * kOut), one(kOut);
    const LinearJob<Fp4Weight> jobs[] = {{x.data(), 3, w4, a.data(), path}, {x.data() + 3 * kIn, 9, w4, a.data() + 3 * kOut, path}};
    linear_fp4_batch(jobs, &pool, GetParam());
    for (int64_t i = 0; i < 12; ++i) {
      linear_fp4(x.data() + i * kIn, 1, w4, one.data(), nullptr, GetParam(), path);
      EXPECT_EQ(0, std::memcmp(one.data(), a.data() + i * kOut, kOut * sizeof(float)))
          << kernel_level_name(GetParam()) << " path " << static_cast<int>(path) << " row " << i;
    }
  }
}

// The free-order BF16 decode path (the LM head) over shapes the fixed 80 x 320 above does not reach:
// `in` not a multiple of 64 (a scalar tail after the vector main loop; `in` < 64: tail only), row
// tiles that do not divide out (more than four x rows go over 16 KiB tiles of weight rows: 81, 15
// and 1 row here), and pool chunks (>= 64 KiB of weight rows, about four per thread) that split out
// elsewhere than the tiles do, and for 515 x 1000 differently at 2 and 3 threads (125, 84 rows). Every x row of a batch of 1..11, 13, 16
// or 17 rows, at the start or the end of 17, equals bit for bit that row alone with no pool.
TEST_P(RowPathLevel, Bf16AnyOrderDecodeRowsAloneOverTilesAndSplits) {
  struct Shape {
    int64_t in, out;
  };
  std::mt19937 rng(31);
  ThreadPool pool2(2), pool3(3);
  // Every batch of w's rows equals its rows alone; `layout` names w in the failure message.
  auto check = [&](const Shape& s, const Bf16Weight& w, const char* layout) {
    constexpr int64_t kRows = 17;
    const std::vector<float> x = random_rows(kRows, s.in, rng);
    std::vector<float> alone(static_cast<size_t>(kRows * s.out));
    for (int64_t i = 0; i < kRows; ++i)
      linear_bf16_any_order(x.data() + i * s.in, 1, w, alone.data() + i * s.out, nullptr, GetParam(), RowPath::kDecode);
    for (ThreadPool* pool : {static_cast<ThreadPool*>(nullptr), &pool2, &pool3}) {
      for (int64_t n : {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 13, 16, 17}) {
        for (int64_t first : {int64_t{0}, kRows - n}) {
          std::vector<float> y(static_cast<size_t>(n * s.out));
          linear_bf16_any_order(x.data() + first * s.in, n, w, y.data(), pool, GetParam(), RowPath::kDecode);
          for (int64_t i = 0; i < n; ++i)
            EXPECT_EQ(0, std::memcmp(y.data() + i * s.out, alone.data() + (first + i) * s.out, s.out * sizeof(float)))
                << kernel_level_name(GetParam()) << " " << layout << " in=" << s.in << " out=" << s.out << " n=" << n
                << " first=" << first << " row=" << i << " threads=" << (pool ? pool->n_threads() : 0);
        }
      }
    }
  };
  auto random_weight = [&](const Shape& s) {
    std::normal_distribution<float> normal(0.0f, 0.05f);
    std::vector<uint16_t> wb(static_cast<size_t>(s.out * s.in));
    for (auto& v : wb) v = f32_to_bf16(normal(rng));
    return wb;
  };
  // `in` a multiple of 32 (512, 96) takes the AMX tiles at that level: 700 rows are 14 blocks of 48
  // and a rest of 28 (a full 16 and a 12-row tile), 33 rows end in a 1-row tile; 10, 11, 16 and 17 x
  // rows change the packed columns (1, 2, 3 tiles; a second group of 16).
  for (const Shape s : {Shape{100, 700}, Shape{515, 1000}, Shape{8200, 24}, Shape{17, 9}, Shape{1, 5}, Shape{512, 700},
                        Shape{96, 33}}) {
    const std::vector<uint16_t> wb = random_weight(s);
    check(s, Bf16Weight{wb.data(), s.out, s.in}, "row-major");
  }
  // Blocked weights (the LM head's layout): one chain per output. Over pool chunks of >= 64 KiB of
  // 16-row blocks (uneven at 2 and 3 threads), tiles of weight rows past eight x rows, the step's
  // two to eight weight vectors and its one-vector tail (704 = 44 blocks).
  for (const Shape s : {Shape{100, 704}, Shape{515, 1008}, Shape{8200, 32}, Shape{17, 16}, Shape{512, 704},
                        Shape{96, 48}, Shape{1, 16}}) {
    const std::vector<uint16_t> wr = random_weight(s);
    std::vector<uint16_t> wb(wr.size());
    block_bf16_rows(wr.data(), s.out, s.in, wb.data());
    check(s, Bf16Weight{wb.data(), s.out, s.in, true}, "blocked");
  }
  // in = 0 (an empty dot): zeros for a batch past four rows too (the row tile once divided by 2 * in).
  std::vector<uint16_t> none(1);
  const std::vector<float> x(8, 1.0f);
  std::vector<float> y(15, 7.0f);
  linear_bf16_any_order(x.data(), 5, Bf16Weight{none.data(), 3, 0}, y.data(), nullptr, GetParam(), RowPath::kDecode);
  for (float v : y) EXPECT_EQ(v, 0.0f) << kernel_level_name(GetParam());
}

INSTANTIATE_TEST_SUITE_P(Levels, RowPathLevel, ::testing::ValuesIn(kAllKernelLevels),
                         [](const auto& info) { return std::string(kernel_level_name(info.param)); });

// The reason the forced paths exist: under kAuto the FP8 bits of a row change with the batch size
// at the levels whose matvec and GEMM sum in different orders (if this stops failing somewhere,
// kAuto became invariant there and the forced paths are merely harmless).
TEST(RowPath, AutoSwitchesRegimeWithBatchSize) {
  const KernelLevel level = best_kernel_level();
  if (level == KernelLevel::kScalar) GTEST_SKIP() << "the scalar reference has one regime";
  std::mt19937 rng(3);
  const Weights w(rng);
  const std::vector<float> x = random_rows(16, kIn, rng);
  std::vector<float> alone(16 * kOut), batched(16 * kOut);
  for (int64_t i = 0; i < 16; ++i) run(w, 0, x.data() + i * kIn, 1, alone.data() + i * kOut, nullptr, level, RowPath::kAuto);
  run(w, 0, x.data(), 16, batched.data(), nullptr, level, RowPath::kAuto);
  EXPECT_NE(0, std::memcmp(alone.data(), batched.data(), alone.size() * sizeof(float)));
}

}  // namespace
}  // namespace strata::kernels
