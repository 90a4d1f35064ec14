// MpiJob: this process's place in an MPI job (`mpirun -np N strata ... --mpi`), and the transport
// of expert parallelism over it.
//
// Rank 0 owns the tokenizer, sessions, server and dense weights and runs every forward pass; the
// routed experts of every main layer are partitioned across all ranks (rank 0 included) in
// contiguous id ranges proportional to each rank's weight (agree_partition: RAM or declared);
// ranks 1.. run serve_experts() until rank 0 ends the job. Per MoE sublayer rank 0 sends each rank
// owning a picked expert one message (a header of int64 [layer, n_tasks, (expert, rows, decode
// rows) x n_tasks] and the float32 rows + routing weights) and receives that rank's expert outputs,
// which it adds in ascending expert id: the logits are bit-identical to one process
// (model/expert_peers.h).
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
#include <vector>

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
  // A measurement aid, not for production (bench/mpi_overhead.sh, docs/distributed.md): every
  // message between rank 0 and a rank >= 1 takes this many microseconds longer, as on a link with
  // that much more one-way latency. Applied by the ranks >= 1, which hold each request this long
  // after it arrives before they start on it and each answer this long before they send it, so
  // rank 0 goes on with its own experts meanwhile, as it would on a slow link. 0: off. Stands in
  // for netem (`tc qdisc ... netem delay`), which needs the sch_netem kernel module.
  double inject_latency_us = 0.0;
  // Declared partition weights, one per rank (--mpi-weights): rank r owns a contiguous share of
  // every layer's routed experts proportional to weights[r] (model::weighted_expert_ranges). Empty:
  // each rank's MemAvailable in GiB (at least 1), read at start by that rank.
  std::vector<uint64_t> weights;
  std::vector<double> declared_weights;  // --mpi-weights as given, for the start-up lines
  // Without declared weights: this rank's disk rate (model::RankCapacity, from its `strata probe`
  // profile; 0 = none), and on rank 0 the checkpoint's routed expert bytes and resident bytes. With
  // expert_bytes > 0 the partition is model::capacity_weights over every rank's MemAvailable and
  // disk rate; 0 = in proportion to MemAvailable alone.
  uint64_t disk_bytes_per_s = 0;
  uint64_t expert_bytes = 0;
  uint64_t rank0_resident_bytes = 0;
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

  // Collective: every rank calls it once, before peers() or serve_experts(). Each rank sends rank 0
  // its weight (MpiOptions::weights[rank] when declared, else its MemAvailable and disk rate, weighed
  // by model::capacity_weights when rank 0 knows expert_bytes, else MemAvailable in GiB, at least 1);
  // rank 0 computes model::weighted_expert_ranges over `n_experts` (its config's; the value is not
  // used on other ranks) and sends every rank the bounds [size() + 1]. `rank0_error` (rank 0): a
  // failure (e.g. its config did not load) sent to every rank instead of bounds, so none waits.
  // Errors: rank0_error, declared weights not one per rank, all weights 0, MPI (kIOError); ranks
  // 1.. return rank 0's error with "MPI rank 0: " before it.
  [[nodiscard]] Status agree_partition(int n_experts, const Status& rank0_error = Status());
  // The agreed bounds: rank r owns experts [bounds[r], bounds[r + 1]) of every main layer. Empty
  // before agree_partition().
  const std::vector<int32_t>& bounds() const { return bounds_; }
  // Rank 0, after agree_partition(): one line per rank, what it reported (RAM, disk rate or
  // declared weight) and the experts it owns. Empty elsewhere.
  const std::string& partition_summary() const { return summary_; }

  // Rank 0's transport for a Model of config `c` (ModelOptions::expert_peers): owner() is
  // model::owner_in_ranges over bounds(). Owned by the job; valid until it is destroyed. Null on
  // ranks 1.., without MPI, and before agree_partition() (or when its bounds do not cover c's
  // experts).
  model::ExpertPeers* peers(const model::ModelConfig& c);

  // Ranks 1..: answers rank 0's expert messages with `store`'s experts of config `c` until rank 0
  // ends the job (its MpiJob is destroyed or it calls stop_peers()). Errors: called on rank 0 or
  // before agree_partition(), bounds that do not cover c's experts, a malformed message (kCorruption); an expert that cannot be computed is reported to rank 0 and
  // serving goes on.
  [[nodiscard]] Status serve_experts(const model::ModelConfig& c, store::WeightStore& store, ThreadPool* pool);
  // Collective: rank 0's `values` reach every rank (MPI_Bcast), or, when `rank0_error` (rank 0) is
  // not empty, that text instead. Errors: rank 0's text (kInvalidArgument; on ranks 1.. with
  // "MPI rank 0: " before it), MPI (kIOError). Used for the expert partition and the pipeline's cuts.
  [[nodiscard]] Status agree_ints(std::vector<int32_t>* values, const std::string& rank0_error = "");

  // Rank 0: tells every other rank to stop serving (idempotent; the destructor calls it; nothing
  // to do before agree_partition).
  void stop_peers();

 private:
  MpiJob() = default;
  class Peers;
  int rank_ = 0, size_ = 1;
  std::string summary_;
  MpiOptions o_;
  std::unique_ptr<Peers> peers_;
  bool stopped_ = false;
  std::vector<int32_t> bounds_;
};

}  // namespace strata::dist
