// MpiJob in a build without MPI (dist/CMakeLists.txt): every entry point says what is missing.
#include "dist/mpi_job.h"
#include "dist/mpi_pipeline.h"

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

Status MpiJob::agree_ints(std::vector<int32_t>*, const std::string&) {
  return NotSupported("--mpi: this strata was built without MPI");
}

model::ExpertPeers* MpiJob::peers(const model::ModelConfig&) { return nullptr; }

Status MpiJob::serve_experts(const model::ModelConfig&, store::WeightStore&, ThreadPool*) {
  return NotSupported("--mpi: this strata was built without MPI");
}

void MpiJob::stop_peers() {}

struct MpiPipeline::Sends {};

std::string layer_range_text(int lo, int hi) { return "layers " + std::to_string(lo) + "-" + std::to_string(hi - 1); }

MpiPipeline::MpiPipeline(MpiJob& job, std::vector<int32_t> bounds, int64_t vocab_size, const MpiOptions& o)
    : job_(job), bounds_(std::move(bounds)), vocab_size_(vocab_size), o_(o) {}

MpiPipeline::~MpiPipeline() = default;

Status MpiPipeline::agree_loaded(const Status&) { return NotSupported("--mpi-pipeline: this strata was built without MPI"); }

Status MpiPipeline::forward_rest(std::span<const model::ForwardEntry* const>, std::span<const float>,
                                 std::span<const float>) {
  return NotSupported("--mpi-pipeline: this strata was built without MPI");
}

Status MpiPipeline::serve_stage(const model::Model&) {
  return NotSupported("--mpi-pipeline: this strata was built without MPI");
}

}  // namespace strata::dist
