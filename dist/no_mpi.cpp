// MpiJob in a build without MPI (dist/CMakeLists.txt): every entry point says what is missing.
#include "dist/mpi_job.h"

namespace strata::dist {

class MpiJob::Peers {};

bool mpi_built() { return false; }

Result<std::unique_ptr<MpiJob>> MpiJob::init(const MpiOptions&) {
  return NotSupported("--mpi: this strata was built without MPI (install libopenmpi-dev, e.g. with "
                      "scripts/install-deps.sh, then rebuild)");
}

MpiJob::~MpiJob() = default;

Status MpiJob::agree_partition(int, const Status&) {
  return NotSupported("--mpi: this strata was built without MPI");
}

model::ExpertPeers* MpiJob::peers(const model::ModelConfig&) { return nullptr; }

Status MpiJob::serve_experts(const model::ModelConfig&, store::WeightStore&, ThreadPool*) {
  return NotSupported("--mpi: this strata was built without MPI");
}

void MpiJob::stop_peers() {}

}  // namespace strata::dist
