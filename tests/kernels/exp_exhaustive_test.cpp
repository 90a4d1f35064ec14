// exp_f32 over every one of the 2^32 f32 inputs: each kernel level against kernels::ref, and the
// reference against glibc's expf (FMA variant) where that is the C library. About a minute: `slow`.
#include <gtest/gtest.h>

#include "tests/kernels/exp_check.h"

namespace strata::kernels {
namespace {

TEST(ExpExhaustive, AllLevelsAndLibmOnEveryInput) { check_exp_range(0, 1); }

}  // namespace
}  // namespace strata::kernels
