// MpiJob: this process's place in an MPI job (`mpirun -np N strata ... --mpi`), and the transport
// of expert parallelism over it.
//
// Rank 0 owns the tokenizer, sessions, server and dense weights and runs every forward pass; the
// routed experts of every main layer are partitioned across all ranks (rank 0 included) in
// contiguous id ranges (model::expert_owner); ranks 1.. run serve_experts() until rank 0 ends the
// job. Per MoE sublayer rank 0 sends each rank owning a picked expert one message (a header of
// int64 [layer, n_tasks, (expert, rows, decode rows) x n_tasks] and the float32 rows + routing
// weights) and receives that rank's expert outputs, which it adds in ascending expert id: the
// logits are bit-identical to one process (model/expert_peers.h).
// Faults: an answer that does not come within MpiOptions::answer_timeout_s ends the forward with an
// error naming the rank and layer (no hang); a rank that reports an error (e.g. a failed read)
// sends its message instead of an answer. A rank that dies is mpirun's to report: OpenMPI then
// ends the whole job.
// Thread safety: one MpiJob per process; the ExpertPeers it makes is used by one forward at a time
// (MPI_THREAD_SERIALIZED), as Model::forward is.
// Source: issue 18 item 1-2.
#pragma once

#include <memory>
#include <string>

#include "core/status.h"
#include "core/thread_pool.h"
#include "model/config.h"
#include "model/expert_peers.h"
#include "store/weight_store.h"

namespace strata::dist {

// True when this binary was built with MPI (dist/CMakeLists.txt).
bool mpi_built();

struct MpiOptions {
  // Seconds rank 0 waits for one rank's answer to one layer before the forward fails. A layer's
  // experts on a rank that streams them from disk take well under a second; the default leaves
  // room for a cold first read of a large checkpoint.
  double answer_timeout_s = 120.0;
  // Microseconds a waiting rank polls without giving up its core before it sleeps 20 us between
  // polls. A rank with a core of its own answers fastest spinning (bench/mpi_overhead.sh: np 2 on
  // 2 cores, 0.96x of one process at 500 us, 0.63x at 100 us); with more ranks than cores on one
  // machine a spinning rank takes the core from a computing one: set 0 there.
  double spin_us = 500.0;
};

class MpiJob {
 public:
  // MPI_Init_thread (MPI_THREAD_SERIALIZED). Errors: built without MPI (kNotSupported, saying what
  // to install), MPI unable to start or to give SERIALIZED threading (kIOError).
  [[nodiscard]] static Result<std::unique_ptr<MpiJob>> init(const MpiOptions& o = {});
  ~MpiJob();  // MPI_Finalize (after telling the ranks to stop, on rank 0)
  MpiJob(const MpiJob&) = delete;
  MpiJob& operator=(const MpiJob&) = delete;

  int rank() const { return rank_; }
  int size() const { return size_; }
  // Rank 0's transport for a Model of config `c` (ModelOptions::expert_peers): owner() is
  // model::expert_owner over size() ranks. Owned by the job; valid until it is destroyed. Null on
  // ranks 1.. and without MPI.
  model::ExpertPeers* peers(const model::ModelConfig& c);

  // Ranks 1..: answers rank 0's expert messages with `store`'s experts of config `c` until rank 0
  // ends the job (its MpiJob is destroyed or it calls stop_peers()). Errors: called on rank 0, a
  // malformed message (kCorruption); an expert that cannot be computed is reported to rank 0 and
  // serving goes on.
  [[nodiscard]] Status serve_experts(const model::ModelConfig& c, store::WeightStore& store, ThreadPool* pool);
  // Rank 0: tells every other rank to stop serving (idempotent; the destructor calls it).
  void stop_peers();

 private:
  MpiJob() = default;
  class Peers;
  int rank_ = 0, size_ = 1;
  MpiOptions o_;
  std::unique_ptr<Peers> peers_;
  bool stopped_ = false;
};

}  // namespace strata::dist
