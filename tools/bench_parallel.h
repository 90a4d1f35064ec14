// strata bench --parallel: N concurrent greedy streams through the one generation loop
// (runtime/engine.h), the measurement of issue 14 item 7. Every stream's prompt is added at once;
// the engine batches their prompt chunks under its token budget and then decodes all streams in one
// forward per step, so the aggregate decode rate shows what sharing each pass over the weights buys.
// Thread safety: runs on the caller's thread; uses the model's pool.
#pragma once

#include <atomic>
#include <cstdint>
#include <vector>

#include "core/status.h"
#include "tools/bench.h"

namespace strata::model {
class Model;
}

namespace strata::tools {

// The q-quantile (0..1) of `v` by nearest rank; 0 when empty.
double quantile(std::vector<double> v, double q);

// Runs one stream per prompt (all `gen` tokens greedy, no stop ids) through one engine with
// prefill chunk `chunk` and step budget `batch_tokens`. Errors: those of Engine::add (a prompt
// beyond the context) and of a forward; kCancelled once `cancel` (may be null) is set, each stream
// ending at its next prefill chunk or token.
[[nodiscard]] Result<ParallelPoint> run_parallel(model::Model& m, const std::vector<std::vector<int32_t>>& prompts,
                                                 int64_t gen, int64_t chunk, int64_t batch_tokens,
                                                 const std::atomic<bool>* cancel = nullptr);

}  // namespace strata::tools
