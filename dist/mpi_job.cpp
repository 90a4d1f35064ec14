// MpiJob over OpenMPI (dist/mpi_job.h). At start (agree_partition): MPI_Gather of each rank's
// uint64 weight to rank 0, MPI_Bcast of int32 n, then n int32 bounds (or -n chars of an error).
// Then messages between rank 0 and a rank r:
//   0 -> r  kTagHeader  int64 [layer, n_tasks, (expert, m, n_decode) x n_tasks]; layer -1: stop
//   0 -> r  kTagRows    float32 [sum m * dim] rows, then [sum m] routing weights
//   r -> 0  kTagAnswer  float32 [sum m * dim] expert outputs, or
//   r -> 0  kTagError   char [] the error that kept rank r from answering
// Waiting polls (MPI_Iprobe / MPI_Test) with short sleeps once nothing came for a while, so an
// idle rank does not take a core from a busy one on an oversubscribed machine and a missing answer
// ends in an error after the timeout instead of a hang.
#include <mpi.h>

#include <chrono>
#include <cstdio>
#include <string>
#include <thread>
#include <vector>

#include "dist/mpi_job.h"
#include "dist/mpi_wait.h"
#include "model/moe.h"
#include "store/system_memory.h"

namespace strata::dist {

namespace {

constexpr int kTagHeader = 11, kTagRows = 12, kTagAnswer = 13, kTagError = 14;

}  // namespace

bool mpi_built() { return true; }

// Rank 0's side of the transport (model::ExpertPeers).
class MpiJob::Peers : public model::ExpertPeers {
 public:
  Peers(int size, const MpiOptions& o) : size_(size), o_(o), out_(static_cast<size_t>(size)) {}

  int owner(int layer, int32_t expert) const override { return model::owner_in_ranges(bounds_, expert); }
  void set_bounds(std::vector<int32_t> b) { bounds_ = std::move(b); }

  Status submit(int peer, int layer, std::span<const model::ExpertTask> tasks, std::span<const float> x,
                std::span<const float> scale) override {
    if (peer <= 0 || peer >= size_) return InvalidArgument("expert peer " + std::to_string(peer) + " is not a rank");
    Outbox& ob = out_[static_cast<size_t>(peer)];
    // An answer never collected (a forward that failed half-way) is drained first, so answers and
    // layers cannot get out of step.
    STRATA_RETURN_IF_ERROR(drain(peer));
    ob.header.assign({layer, static_cast<int64_t>(tasks.size())});
    for (const model::ExpertTask& t : tasks) ob.header.insert(ob.header.end(), {t.expert, t.m, t.n_decode});
    ob.rows.assign(x.begin(), x.end());
    ob.rows.insert(ob.rows.end(), scale.begin(), scale.end());
    // Non-blocking sends from ob's own copies: a peer that stops taking messages must not block
    // this process, whose wait for the answer (receive) has the deadline. Same tag order per peer
    // is kept by MPI's non-overtaking rule.
    int rc = MPI_Isend(ob.header.data(), static_cast<int>(ob.header.size()), MPI_INT64_T, peer, kTagHeader,
                       MPI_COMM_WORLD, &ob.requests[0]);
    if (rc == MPI_SUCCESS)
      rc = MPI_Isend(ob.rows.data(), static_cast<int>(ob.rows.size()), MPI_FLOAT, peer, kTagRows, MPI_COMM_WORLD,
                     &ob.requests[1]);
    if (rc != MPI_SUCCESS) {
      failed_ = true;
      return IOError("MPI rank " + std::to_string(peer) + ": sending layer " + std::to_string(layer) + ": " + mpi_error(rc));
    }
    ob.layer = layer;
    ob.pending = true;
    return Status();
  }

  Status collect(int peer, std::span<float> y) override {
    if (peer <= 0 || peer >= size_) return InvalidArgument("expert peer " + std::to_string(peer) + " is not a rank");
    Outbox& ob = out_[static_cast<size_t>(peer)];
    if (!ob.pending) return Internal("collect from MPI rank " + std::to_string(peer) + " without a submit");
    ob.pending = false;
    Status s = receive(peer, ob.layer, y);
    if (!s.ok()) failed_ = true;
    return s;
  }

  // True once a rank failed to answer: the job cannot end in step (MpiJob aborts it).
  bool failed() const { return failed_; }

  // Tells every rank to stop (a header with layer -1). Not after a failure (MpiJob aborts then).
  void stop() {
    for (int p = 1; p < size_ && !failed_; ++p) {
      (void)drain(p);
      const int64_t header[2] = {-1, 0};
      MPI_Send(header, 2, MPI_INT64_T, p, kTagHeader, MPI_COMM_WORLD);
    }
  }

 private:
  struct Outbox {
    std::vector<int64_t> header;
    std::vector<float> rows;
    std::vector<float> sink;  // an answer drained unread (drain)
    MPI_Request requests[2] = {MPI_REQUEST_NULL, MPI_REQUEST_NULL};  // the header's and the rows' sends
    int layer = -1;
    bool pending = false;
  };

  Status drain(int peer) {
    Outbox& ob = out_[static_cast<size_t>(peer)];
    if (!ob.pending) return Status();
    if (failed_) return IOError("MPI rank " + std::to_string(peer) + " is out of step");
    ob.pending = false;
    int64_t rows = 0;
    for (size_t i = 2; i + 2 < ob.header.size(); i += 3) rows += ob.header[i + 1];
    // The outbox's own buffer: a receive left posted by a timeout must not write into freed memory
    // before the job is aborted.
    ob.sink.resize(ob.rows.size() - static_cast<size_t>(rows));  // rows * (dim + 1) were sent
    Status s = receive(peer, ob.layer, ob.sink);
    if (!s.ok()) failed_ = true;
    return s;
  }

  // Waits for rank `peer`'s answer to `layer`: y, or its error, or the timeout.
  Status receive(int peer, int layer, std::span<float> y) {
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(o_.answer_timeout_s);
    const std::string who = "MPI rank " + std::to_string(peer) + " (layer " + std::to_string(layer) + " experts)";
    Backoff backoff(o_.spin_us);
    for (;;) {
      int flag = 0;
      MPI_Status st;
      int rc = MPI_Iprobe(peer, MPI_ANY_TAG, MPI_COMM_WORLD, &flag, &st);
      if (rc != MPI_SUCCESS) return IOError(who + ": " + mpi_error(rc));
      if (flag) {
        int count = 0;
        if (st.MPI_TAG == kTagError) {
          MPI_Get_count(&st, MPI_CHAR, &count);
          std::string msg(static_cast<size_t>(count), '\0');
          MPI_Recv(msg.data(), count, MPI_CHAR, peer, kTagError, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
          MPI_Waitall(2, out_[static_cast<size_t>(peer)].requests, MPI_STATUSES_IGNORE);
          return IOError(who + " failed: " + msg);
        }
        if (st.MPI_TAG != kTagAnswer)
          return Corruption(who + ": unexpected message tag " + std::to_string(st.MPI_TAG));
        MPI_Get_count(&st, MPI_FLOAT, &count);
        if (static_cast<size_t>(count) != y.size()) {
          std::vector<float> sink(static_cast<size_t>(count));
          MPI_Recv(sink.data(), count, MPI_FLOAT, peer, kTagAnswer, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
          return Corruption(who + ": answer of " + std::to_string(count) + " floats, expected " +
                            std::to_string(y.size()));
        }
        // Non-blocking, under the same deadline: an answer above the transport's eager size comes in
        // fragments the peer must push, and a peer stopped half-way held a blocking receive forever
        // (cli.mpi_check's stalled rank hung the job at 120 s once in CI, no error printed; the
        // pipeline's logits had the same hang, mpi_pipeline.cpp). On the deadline the job fails
        // (failed_, set by collect): MpiJob aborts it, the receive still posted.
        MPI_Request req = MPI_REQUEST_NULL;
        rc = MPI_Irecv(y.data(), count, MPI_FLOAT, peer, kTagAnswer, MPI_COMM_WORLD, &req);
        for (int done = 0; rc == MPI_SUCCESS && !done;) {
          rc = MPI_Test(&req, &done, MPI_STATUS_IGNORE);
          if (done || rc != MPI_SUCCESS) break;
          if (std::chrono::steady_clock::now() > deadline)
            return IOError(who + " did not answer within " + seconds_text(o_.answer_timeout_s) +
                           " s (--mpi-timeout): its answer stopped half-way");
          backoff.wait();
        }
        if (rc != MPI_SUCCESS) return IOError(who + ": " + mpi_error(rc));
        // The peer answered, so it took both messages: their sends are complete.
        rc = MPI_Waitall(2, out_[static_cast<size_t>(peer)].requests, MPI_STATUSES_IGNORE);
        if (rc != MPI_SUCCESS) return IOError(who + ": " + mpi_error(rc));
        return Status();
      }
      if (std::chrono::steady_clock::now() > deadline)
        return IOError(who + " did not answer within " + seconds_text(o_.answer_timeout_s) + " s (--mpi-timeout)");
      backoff.wait();
    }
  }

  int size_ = 1;
  std::vector<int32_t> bounds_;
  bool failed_ = false;
  MpiOptions o_;
  std::vector<Outbox> out_;
};

Result<std::unique_ptr<MpiJob>> MpiJob::init(const MpiOptions& o) {
  int provided = 0;
  int rc = MPI_Init_thread(nullptr, nullptr, MPI_THREAD_SERIALIZED, &provided);
  if (rc != MPI_SUCCESS) return IOError("MPI_Init_thread: " + mpi_error(rc));
  if (provided < MPI_THREAD_SERIALIZED) {
    MPI_Finalize();
    return IOError("MPI gives thread level " + std::to_string(provided) + ", strata needs MPI_THREAD_SERIALIZED");
  }
  // Errors come back as codes (turned into Status), not as an abort of the job from inside MPI.
  MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
  auto job = std::unique_ptr<MpiJob>(new MpiJob());
  MPI_Comm_rank(MPI_COMM_WORLD, &job->rank_);
  MPI_Comm_size(MPI_COMM_WORLD, &job->size_);
  job->o_ = o;
  if (job->rank_ == 0) job->peers_ = std::make_unique<Peers>(job->size_, o);
  return job;
}

MpiJob::~MpiJob() {
  // A rank that did not answer may never take the stop message, and MPI_Finalize would wait for
  // it: end the whole job instead (mpirun then stops every rank and exits non-zero).
  if (peers_ && peers_->failed()) MPI_Abort(MPI_COMM_WORLD, 1);
  stop_peers();
  if (peers_ && peers_->failed()) MPI_Abort(MPI_COMM_WORLD, 1);  // an answer drained by the stop timed out
  MPI_Finalize();
}

model::ExpertPeers* MpiJob::peers(const model::ModelConfig& c) {
  if (!peers_ || bounds_.size() != static_cast<size_t>(size_) + 1 || bounds_.back() != c.n_routed_experts)
    return nullptr;
  peers_->set_bounds(bounds_);
  return peers_.get();
}

Status MpiJob::agree_partition(int n_experts, const Status& rank0_error) {
  // What this rank reports: [declared weight or MemAvailable bytes (0 when unreadable, which rank 0
  // reports), disk bytes/s (0: no probe profile)].
  uint64_t mine[2] = {0, o_.disk_bytes_per_s};
  if (!o_.weights.empty()) {
    mine[0] = static_cast<size_t>(rank_) < o_.weights.size() ? o_.weights[static_cast<size_t>(rank_)] : 0;
  } else if (auto avail = store::available_memory_bytes(); avail.ok()) {
    mine[0] = std::max<uint64_t>(1, *avail);
  }
  std::vector<uint64_t> reported(2 * static_cast<size_t>(size_), 0);
  int rc = MPI_Gather(mine, 2, MPI_UINT64_T, reported.data(), 2, MPI_UINT64_T, 0, MPI_COMM_WORLD);
  if (rc != MPI_SUCCESS) return IOError("MPI rank " + std::to_string(rank_) + ": partition weights: " + mpi_error(rc));
  // Rank 0 sends the bounds, or its error, to every rank (agree_ints).
  std::vector<int32_t> bounds;
  std::string error;
  if (rank_ == 0) {
    if (!rank0_error.ok()) {
      error = rank0_error.to_string();
    } else if (!o_.weights.empty() && o_.weights.size() != static_cast<size_t>(size_)) {
      error = "--mpi-weights gives " + std::to_string(o_.weights.size()) + " weights for " + std::to_string(size_) +
              " ranks (one per rank, rank 0 first)";
    } else {
      std::vector<uint64_t> weights(static_cast<size_t>(size_));
      std::vector<model::RankCapacity> caps(static_cast<size_t>(size_));
      for (int r = 0; r < size_ && error.empty(); ++r) {
        const size_t i = static_cast<size_t>(r);
        caps[i] = model::RankCapacity{reported[2 * i], reported[2 * i + 1]};
        weights[i] = reported[2 * i];
        if (o_.weights.empty() && weights[i] == 0)
          error = "MPI rank " + std::to_string(r) + " could not read its MemAvailable (give --mpi-weights)";
      }
      if (error.empty() && o_.weights.empty()) {
        if (o_.expert_bytes > 0) weights = model::capacity_weights(caps, o_.expert_bytes, o_.rank0_resident_bytes);
        else for (uint64_t& w : weights) w = std::max<uint64_t>(1, w >> 30);  // MemAvailable in GiB
      }
      if (error.empty()) {
        auto b = model::weighted_expert_ranges(n_experts, weights);
        if (b.ok()) bounds = std::move(*b);
        else error = b.error().message() + " (--mpi-weights)";
      }
      if (error.empty())
        for (int r = 0; r < size_; ++r) {
          const size_t i = static_cast<size_t>(r);
          const int n_owned = bounds[i + 1] - bounds[i];
          const std::string owns = n_owned == 0   ? "no experts"
                                   : n_owned == 1 ? "expert " + std::to_string(bounds[i]) + " of every layer"
                                                  : "experts " + std::to_string(bounds[i]) + "-" +
                                                        std::to_string(bounds[i + 1] - 1) + " of every layer";
          char line[160];
          if (!o_.weights.empty())
            std::snprintf(line, sizeof line, "rank %d: declared weight %g", r,
                          i < o_.declared_weights.size() ? o_.declared_weights[i] : 0.0);
          else if (reported[2 * i + 1] > 0)
            std::snprintf(line, sizeof line, "rank %d: %.1f GiB available, disk %.2f GB/s (strata probe)", r,
                          static_cast<double>(reported[2 * i]) / (1ull << 30), static_cast<double>(reported[2 * i + 1]) / 1e9);
          else
            std::snprintf(line, sizeof line, "rank %d: %.1f GiB available, disk not probed", r,
                          static_cast<double>(reported[2 * i]) / (1ull << 30));
          summary_ += std::string(line) + " -> " + owns + "\n";
        }
    }
  }
  Status s = agree_ints(&bounds, error);
  if (!s.ok()) {
    stopped_ = true;  // the other ranks end too: no stop message to send
    return rank_ == 0 && !rank0_error.ok() ? rank0_error : s;
  }
  if (bounds.size() != static_cast<size_t>(size_) + 1)
    return Corruption("MPI rank " + std::to_string(rank_) + ": partition of " + std::to_string(bounds.size()) + " bounds");
  bounds_ = std::move(bounds);
  return Status();
}

Status MpiJob::agree_ints(std::vector<int32_t>* values, const std::string& rank0_error) {
  // Rank 0 sends int32 n: n > 0, then n values; n <= 0, then -n chars of an error.
  std::string error = rank0_error;
  int32_t n = rank_ == 0 ? (error.empty() ? static_cast<int32_t>(values->size()) : -static_cast<int32_t>(error.size())) : 0;
  int rc = MPI_Bcast(&n, 1, MPI_INT32_T, 0, MPI_COMM_WORLD);
  if (rc == MPI_SUCCESS) {
    if (n > 0) {
      values->resize(static_cast<size_t>(n));
      rc = MPI_Bcast(values->data(), n, MPI_INT32_T, 0, MPI_COMM_WORLD);
    } else {
      error.resize(static_cast<size_t>(-n));
      rc = MPI_Bcast(error.data(), -n, MPI_CHAR, 0, MPI_COMM_WORLD);
    }
  }
  if (rc != MPI_SUCCESS) return IOError("MPI rank " + std::to_string(rank_) + ": agreeing with rank 0: " + mpi_error(rc));
  if (n <= 0) return InvalidArgument(rank_ == 0 ? error : "MPI rank 0: " + error);
  return Status();
}

void MpiJob::stop_peers() {
  if (stopped_ || rank_ != 0 || bounds_.empty()) return;  // no partition agreed: no rank serves experts
  stopped_ = true;
  if (peers_) peers_->stop();
}

Status MpiJob::serve_experts(const model::ModelConfig& c, store::WeightStore& store, ThreadPool* pool) {
  if (rank_ == 0) return InvalidArgument("serve_experts runs on ranks 1.., not on rank 0");
  if (bounds_.size() != static_cast<size_t>(size_) + 1 || bounds_.back() != c.n_routed_experts)
    return InvalidArgument("MPI rank " + std::to_string(rank_) + ": the agreed partition does not cover the " +
                           std::to_string(c.n_routed_experts) + " experts of this checkpoint (same checkpoint on every rank?)");
  const auto owner = [&](int32_t e) { return model::owner_in_ranges(bounds_, e); };
  // A store that keeps experts in RAM reads this rank's share now (one bulk pass, then per layer),
  // so no request waits for a first use; tiered stores read on demand as usual.
  auto mine = [&](int layer, int expert) {
    return layer < c.n_layers && expert < c.n_routed_experts &&
           owner(expert) == rank_;
  };
  STRATA_RETURN_IF_ERROR(store.load_resident(
      [&](const io::TensorInfo& t) {
        int l = -1, e = -1;
        return model::routed_expert_tensor(t.name, &l, &e) && mine(l, e);
      },
      {}));
  for (int l = 0; l < c.n_layers; ++l)
    STRATA_RETURN_IF_ERROR(store.preload_layer(l, c.n_routed_experts, [&](int e) { return mine(l, e); }));
  const auto inject = std::chrono::duration_cast<std::chrono::steady_clock::duration>(
      std::chrono::duration<double, std::micro>(o_.inject_latency_us));
  model::MoeScratch scratch;
  std::vector<int64_t> header;
  std::vector<float> rows, y;
  std::vector<model::ExpertTask> tasks;
  for (;;) {
    MPI_Status st;
    int flag = 0;
    Backoff backoff(o_.spin_us);
    for (;;) {
      int rc = MPI_Iprobe(0, kTagHeader, MPI_COMM_WORLD, &flag, &st);
      if (rc != MPI_SUCCESS) return IOError("MPI rank " + std::to_string(rank_) + " waiting for rank 0: " + mpi_error(rc));
      if (flag) break;
      backoff.wait();
    }
    // The request counts as arriving --mpi-inject-latency-us later than it did.
    const auto arrived = std::chrono::steady_clock::now() + inject;
    int count = 0;
    MPI_Get_count(&st, MPI_INT64_T, &count);
    header.resize(static_cast<size_t>(count));
    MPI_Recv(header.data(), count, MPI_INT64_T, 0, kTagHeader, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
    if (count < 2 || header[0] < -1 || header[1] < 0 || static_cast<int64_t>(count) != 2 + 3 * header[1])
      return Corruption("MPI rank " + std::to_string(rank_) + ": malformed expert header of " + std::to_string(count) +
                        " values");
    if (header[0] == -1) return Status();
    const int layer = static_cast<int>(header[0]);
    tasks.clear();
    int64_t m_total = 0;
    for (int64_t i = 0; i < header[1]; ++i) {
      const int64_t* t = header.data() + 2 + 3 * i;
      tasks.push_back({static_cast<int32_t>(t[0]), t[1], t[2]});
      m_total += std::max<int64_t>(t[1], 0);
    }
    MPI_Probe(0, kTagRows, MPI_COMM_WORLD, &st);
    MPI_Get_count(&st, MPI_FLOAT, &count);
    rows.resize(static_cast<size_t>(count));
    MPI_Recv(rows.data(), count, MPI_FLOAT, 0, kTagRows, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
    Status s;
    if (layer >= c.n_layers) {
      s = InvalidArgument("layer " + std::to_string(layer) + " is not a main layer (0.." + std::to_string(c.n_layers - 1) + ")");
    } else if (static_cast<int64_t>(count) != m_total * (c.dim + 1)) {
      s = Corruption("rows message of " + std::to_string(count) + " floats for " + std::to_string(m_total) +
                     " rows of " + std::to_string(c.dim));
    } else {
      for (const model::ExpertTask& t : tasks)
        if (t.expert < 0 || t.expert >= c.n_routed_experts ||
            owner(t.expert) != rank_)
          s = InvalidArgument("expert " + std::to_string(t.expert) + " of layer " + std::to_string(layer) +
                              " is not rank " + std::to_string(rank_) + "'s");
    }
    hold_until(arrived);
    if (s.ok()) {
      y.resize(static_cast<size_t>(m_total * c.dim));
      s = model::run_expert_tasks(c, layer, store, tasks, rows.data(), rows.data() + m_total * c.dim, y.data(), pool,
                                  &scratch);
    }
    // The answer leaves --mpi-inject-latency-us late (its flight takes that much longer).
    hold_until(std::chrono::steady_clock::now() + inject);
    if (s.ok()) {
      MPI_Send(y.data(), static_cast<int>(y.size()), MPI_FLOAT, 0, kTagAnswer, MPI_COMM_WORLD);
    } else {
      const std::string msg = s.to_string();
      MPI_Send(msg.data(), static_cast<int>(msg.size()), MPI_CHAR, 0, kTagError, MPI_COMM_WORLD);
    }
  }
}

}  // namespace strata::dist
