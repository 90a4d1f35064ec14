// AVX2 table of the per-token ops: kernels/x86/ops_engine.h over 8-lane ymm vectors.
#include "kernels/x86/ops_engine.h"

namespace strata::kernels::detail {
const OpsKernels& avx2_ops() {
  static const OpsKernels t = x86::OpsEngine<x86::VF8>::table();
  return t;
}
}  // namespace strata::kernels::detail
