// AVX-512 table of the per-token ops: kernels/x86/ops_engine.h over 16-lane zmm vectors.
#include "kernels/x86/ops_engine.h"

namespace strata::kernels::detail {
const OpsKernels& avx512_ops() {
  static const OpsKernels t = x86::OpsEngine<x86::VF16>::table();
  return t;
}
}  // namespace strata::kernels::detail
