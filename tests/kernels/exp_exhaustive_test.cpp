// exp_f32 over every f32 input where it computes anything: each kernel level against kernels::ref,
// and the reference against glibc's expf (FMA variant) where that is the C library. Every input
// with 2^-25 <= |x| < 128 (2^29 patterns, an eighth of all: the whole polynomial range and the
// overflow / underflow thresholds near 88.7 and -104); above 128 exp_f32 returns inf, 0 or NaN by
// its range check, and below 2^-25 the same arithmetic rounds to 1, so there every 61st pattern is
// checked (~60M, denormals included). All 2^32 took ~8 minutes of CI's 2 cores (`slow` label).
#include <gtest/gtest.h>

#include "tests/kernels/exp_check.h"

namespace strata::kernels {
namespace {

constexpr uint64_t kTiny = 0x33000000;  // 2^-25: below, exp(x) rounds to 1
constexpr uint64_t kHuge = 0x43000000;  // 128: above, exp is inf (x > 0) or 0 (x < 0)
constexpr uint64_t kSign = 0x80000000;

TEST(ExpExhaustive, EveryInputInTheComputedRange) {
  check_exp_range(kTiny, 1, kHuge);
  check_exp_range(kSign | kTiny, 1, kSign | kHuge);
}

TEST(ExpExhaustive, SampleOfTheSaturatedAndTrivialRanges) {
  check_exp_range(0, 61, kTiny);
  check_exp_range(kHuge, 61, kSign | kTiny);
  check_exp_range(kSign | kHuge, 61);
}

}  // namespace
}  // namespace strata::kernels
