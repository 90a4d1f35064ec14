// MpiPipeline: pipeline parallelism over MPI (`mpirun -np N strata logits|run|bench ... --mpi-pipeline`,
// issue 18 item 1): rank r runs the layers [bounds[r], bounds[r + 1]) of the backbone.
//
// Rank 0 owns the tokenizer, the session, sampling, the embedding and the first range; its
// Model::forward hands the streams after its last layer to forward_rest(), which sends rank 1 the
// forward's metadata and the streams and waits for the logits. Rank r >= 1 (serve_stage) keeps a
// mirror KvCache of its layers, repeats the forward's bookkeeping (positions, rope tables, Engram
// history and row ids from the tokens) in its own Model::forward over its layers, and sends its
// streams to rank r + 1; the last rank runs the final norm and head and sends the logits rows to
// rank 0. The cuts are clean (model/pipeline_cuts.h): no cache crosses a rank, so the logits are
// bit-identical to one process (same code, same bytes, same row regimes, same thread count).
// Messages of one forward, from rank r - 1 to rank r (tags in mpi_pipeline.cpp):
//   meta   int64 [n_entries, seq, (n_past, n_tokens, row kind, logits kind, n_rows) x n_entries,
//                 logits rows..., tokens...]; n_entries -1: stop
//   state  float32 [N * hc_mult * dim] x, then [N * hc_mult] pre_mix
// and to rank 0: from a middle rank int64 [seq] once it has passed the forward on; from the last
// rank float32 [rows * vocab] the logits; from any rank char [] an error instead; once, after
// loading, from every stage int [1 loaded / 0 failed].
// One sequence per forward: the stages keep one mirror; n_past 0 starts a fresh one, any other
// n_past must be the mirror's (else the stage reports the two positions: never wrong logits).
// Faults: rank 0 waits MpiOptions::answer_timeout_s for a forward's logits and then names the first
// rank that has not passed the forward on; it then calls MPI_Abort (no hang in MPI_Finalize). A
// rank that dies is mpirun's to report.
// Thread safety: used by one forward at a time (MPI_THREAD_SERIALIZED), as Model::forward is.
// Source: issue 18 item 1-2; docs/distributed.md "Pipeline parallelism".
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "core/status.h"
#include "dist/mpi_job.h"
#include "model/config.h"
#include "model/pipeline_part.h"

namespace strata::model {
class Model;
}

namespace strata::dist {

class MpiPipeline : public model::PipelineNext {
 public:
  // The pipeline of `job` (size() >= 2) over layer bounds [size() + 1] (0 = bounds[0] < ... <
  // bounds[size()] = n_layers, agreed with MpiJob::agree_ints) of a checkpoint of `vocab_size`
  // tokens. `o`: timeout, spin, injected latency.
  MpiPipeline(MpiJob& job, std::vector<int32_t> bounds, int64_t vocab_size, const MpiOptions& o);
  // Rank 0: tells rank 1 to stop (it tells the next), or aborts the job after a stage did not answer.
  ~MpiPipeline() override;
  MpiPipeline(const MpiPipeline&) = delete;
  MpiPipeline& operator=(const MpiPipeline&) = delete;

  // This rank's layers (and, on rank 0, this object as the next stages) for ModelOptions::pipeline.
  const model::PipelinePart& part() const { return part_; }

  // Once: stages report to rank 0 whether they loaded their layers (`mine`) after loading; rank 0
  // calls it at its first forward and waits for every stage's report (MpiOptions::answer_timeout_s
  // each). Errors: `mine`; on rank 0 a stage that failed to load (naming the rank; it printed its
  // own error) or did not report in time. After such an error (or when rank 0 ends before its
  // first forward) rank 0's destructor aborts the job, since other stages wait for work.
  [[nodiscard]] Status agree_loaded(const Status& mine);

  // Rank 0 (model::PipelineNext): one sequence per forward (several: kNotSupported).
  [[nodiscard]] Status forward_rest(std::span<const model::ForwardEntry* const> entries, std::span<const float> x,
                                    std::span<const float> pre_mix) override;

  // Ranks 1..: runs forwards with `m` (a pipeline part over this rank's layers) until rank 0 stops
  // the pipeline. A forward that fails (an out-of-step mirror, a read error) is reported to rank 0
  // and serving goes on. Errors: MPI (kIOError), a malformed message (kCorruption).
  [[nodiscard]] Status serve_stage(const model::Model& m);

 private:
  struct Sends;  // the last forward's messages to the next rank, whose sends may still run
  // Rank 0: waits for forward `seq`'s logits (the last rank's), a stage's error, or the timeout.
  [[nodiscard]] Status wait_logits(int64_t seq, std::span<float> logits);
  // "MPI rank R (pipeline stage, layers a-b)".
  std::string who(int rank) const;
  MpiJob& job_;
  std::vector<int32_t> bounds_;
  int64_t vocab_size_ = 0;
  MpiOptions o_;
  model::PipelinePart part_;
  bool agreed_ = false, loaded_ = false, failed_ = false, aborting_ = false;
  Status load_error_;
  int64_t seq_ = 0;
  std::unique_ptr<Sends> sends_;
  std::vector<float> logits_;
};

// "layers 20-39" for a range [lo, hi).
std::string layer_range_text(int lo, int hi);

}  // namespace strata::dist
