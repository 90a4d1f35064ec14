// PipelinePart: the layers one process of a pipeline runs (`--mpi-pipeline`, issue 18 item 1).
//
// A pipeline splits the backbone at clean cuts (model/pipeline_cuts.h) into contiguous layer
// ranges, one per process. The first process embeds the tokens and runs [0, cut_1); process r runs
// [cut_r, cut_{r+1}) on the residual streams the one before it sends; the last one also runs the
// final norm and the head. Each process binds only its layers' weights (the first the embedding,
// the last the norm and head) and keeps the KV caches of its layers only: a clean cut leaves no
// cache and no attention selection crossing it, so the same layers run the same code on the same
// bytes in the same row regimes and the logits are bit-identical to one process.
// The model floor defines the contract; dist/mpi_pipeline.h implements the transport.
// Source: issue 18 item 1; docs/distributed.md "Pipeline parallelism".
#pragma once

#include <span>

#include "core/status.h"
#include "model/forward_request.h"

namespace strata::model {

// The stages after the first process (its Model::forward hands them its streams).
class PipelineNext {
 public:
  virtual ~PipelineNext() = default;
  // Runs the layers after this process's and the head for one forward: `entries` in batch order
  // (decode entries first; their caches still at the positions the forward starts at), x
  // [N, hc_mult, dim] and pre_mix [N, hc_mult] f32 the residual streams after this process's last
  // layer, N the entries' tokens. Writes every entry's requested logits rows into its logits_out.
  // Errors: the transport's, a stage's (an out-of-step mirror, a read failure, non-finite logits),
  // a stage that did not answer in time; each names the rank.
  [[nodiscard]] virtual Status forward_rest(std::span<const ForwardEntry* const> entries, std::span<const float> x,
                                            std::span<const float> pre_mix) = 0;
};

struct PipelinePart {
  int layer_lo = 0, layer_hi = 0;  // this process's layers [layer_lo, layer_hi)
  PipelineNext* next = nullptr;    // the first process: the stages after it; null on the stages
};

}  // namespace strata::model
