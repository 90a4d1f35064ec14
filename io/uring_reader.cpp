#include "io/uring_reader.h"

#include <liburing.h>

#include <cerrno>
#include <chrono>
#include <algorithm>
#include <cstring>
#include <string>

namespace strata::io {

Status UringReaderOptions::validate() const {
  if (queue_depth < 1 || queue_depth > 4096)
    return InvalidArgument("io queue depth " + std::to_string(queue_depth) + " is outside [1, 4096]");
  return Status();
}

// ---- ReadBatch ----

ReadBatch::~ReadBatch() {
  if (submitted_) (void)wait();
}

void ReadBatch::add(const File& file, uint64_t offset, size_t n, void* dst, int fd, size_t min_n) {
  STRATA_CHECK(!submitted_, "ReadBatch::add after submit");
  Op op;
  op.batch = this;
  op.file = &file;
  op.fd = fd;
  op.offset = offset;
  op.n = n;
  op.min_n = min_n > n ? n : min_n;
  op.dst = static_cast<uint8_t*>(dst);
  ops_.push_back(std::move(op));
  bytes_ += n;
}

Status ReadBatch::wait() {
  if (!submitted_) return Status();
  done_.wait(false, std::memory_order_acquire);
  for (const Op& op : ops_)
    if (!op.status.ok()) return op.status;
  return Status();
}

void ReadBatch::reset() {
  STRATA_CHECK(!submitted_ || done(), "ReadBatch::reset while reads are in flight");
  ops_.clear();
  bytes_ = 0;
  submitted_ = false;
  done_.store(false, std::memory_order_relaxed);
}

void ReadBatch::finish_one() {
  if (pending_.fetch_sub(1, std::memory_order_acq_rel) != 1) return;
  mark_done();
}

void ReadBatch::mark_done() {
  finished_ns_.store(static_cast<uint64_t>(std::chrono::duration_cast<std::chrono::nanoseconds>(
                                               std::chrono::steady_clock::now().time_since_epoch())
                                               .count()),
                     std::memory_order_relaxed);
  done_.store(true, std::memory_order_release);
  done_.notify_all();
}

// ---- UringReader ----

int UringSyscalls::submit(io_uring* ring) const { return io_uring_submit(ring); }

int UringSyscalls::wait_cqe_timeout(io_uring* ring, io_uring_cqe** cqe, __kernel_timespec* ts) const {
  // Without IORING_FEAT_EXT_ARG (kernels before 5.11) liburing would queue a timeout entry and
  // submit it together with our prepared reads; wait without a timeout there (the destructor's
  // stop marker still wakes the reaper).
  if (!(ring->features & IORING_FEAT_EXT_ARG)) return io_uring_wait_cqe(ring, cqe);
  return io_uring_wait_cqe_timeout(ring, cqe, ts);
}

namespace {

const UringSyscalls& default_syscalls() {
  static const UringSyscalls kLiburing;  // stateless
  return kLiburing;
}

// How long transient submission refusals (EAGAIN, EBUSY, EINTR) are retried before the reader
// gives up: long enough for a burst of completions to free kernel resources, short enough that a
// request ends with an error instead of hanging.
constexpr auto kSubmitRetryFor = std::chrono::seconds(2);

template <typename Op>  // ReadBatch::Op is private to the reader; deduced here
std::string read_what(const Op& op) {
  return op.file->path() + ": read of " + std::to_string(op.n) + " bytes at offset " + std::to_string(op.offset);
}

}  // namespace

UringReader::UringReader(int depth, const UringSyscalls* syscalls)
    : depth_(depth), sys_(syscalls ? syscalls : &default_syscalls()), ring_(std::make_unique<io_uring>()) {}

Result<std::unique_ptr<UringReader>> UringReader::create(const UringReaderOptions& options) {
  STRATA_RETURN_IF_ERROR(options.validate());
  auto r = std::unique_ptr<UringReader>(new UringReader(options.queue_depth, options.syscalls));
  // One extra entry for the stop marker.
  const int err = io_uring_queue_init(static_cast<unsigned>(options.queue_depth + 1), r->ring_.get(), 0);
  if (err < 0)
    return NotSupported("io_uring_queue_init(" + std::to_string(options.queue_depth) + "): " + std::strerror(-err) +
                        " (io_uring unavailable here; use --load-mode resident or mmap)");
  r->reaper_ = std::thread([p = r.get()] { p->reaper_loop(); });
  return r;
}

UringReader::~UringReader() {
  // Owners wait for their batches before the reader goes away; drain anything left regardless.
  for (;;) {
    {
      std::unique_lock<std::mutex> lk(mu_);
      if (in_ring_ == 0 && queue_.empty()) break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  stop_.store(true);
  {
    std::unique_lock<std::mutex> lk(mu_);
    // The stop marker (a no-op whose user data is null) wakes the reaper at once; if the kernel
    // refuses it, the reaper sees stop_ at its next timeout or poll.
    if (broken_.ok()) {
      if (io_uring_sqe* sqe = io_uring_get_sqe(ring_.get())) {
        io_uring_prep_nop(sqe);
        io_uring_sqe_set_data(sqe, nullptr);
        (void)sys_->submit(ring_.get());
      }
    }
  }
  reaper_.join();
  io_uring_queue_exit(ring_.get());
}

Status UringReader::broken() const {
  std::lock_guard<std::mutex> lk(mu_);
  return broken_;
}

void UringReader::submit(ReadBatch* batch) {
  STRATA_CHECK(!batch->submitted_ || batch->done(), "ReadBatch submitted twice while in flight");
  batch->submitted_ = true;
  for (auto& op : batch->ops_) {
    op.done = 0;
    op.status = Status();
  }
  batch->done_.store(false, std::memory_order_relaxed);
  batch->pending_.store(static_cast<int64_t>(batch->ops_.size()), std::memory_order_release);
  if (batch->ops_.empty()) {
    batch->mark_done();
    return;
  }
  std::vector<ReadBatch::Op*> sync, failed;
  {
    std::unique_lock<std::mutex> lk(mu_);
    for (auto& op : batch->ops_) {
      if (op.fd < 0) op.fd = op.file->native_fd();
      if (op.fd < 0) sync.push_back(&op);
      else queue_.push_back(&op);
    }
    pump_locked(&failed);
  }
  fail_all(failed);
  // Files without a descriptor (fault-injection wrappers): read through the File interface.
  for (ReadBatch::Op* op : sync) complete(op, op->file->read_at(op->offset, op->min_n, op->dst));
}

void UringReader::pump_locked(std::vector<ReadBatch::Op*>* failed) {
  if (!broken_.ok()) {
    failed->insert(failed->end(), queue_.begin(), queue_.end());
    queue_.clear();
    return;
  }
  while (in_ring_ < depth_ && !queue_.empty()) {
    io_uring_sqe* sqe = io_uring_get_sqe(ring_.get());
    if (!sqe) break;
    ReadBatch::Op* op = queue_.front();
    queue_.pop_front();
    io_uring_prep_read(sqe, op->fd, op->dst + op->done, static_cast<unsigned>(op->n - op->done),
                       op->offset + op->done);
    io_uring_sqe_set_data(sqe, op);
    prepared_.push_back(op);
    ++in_ring_;
  }
  if (!prepared_.empty()) submit_locked(failed);
}

void UringReader::submit_locked(std::vector<ReadBatch::Op*>* failed) {
  const auto give_up_at = std::chrono::steady_clock::now() + kSubmitRetryFor;
  for (int attempt = 0;; ++attempt) {
    const int r = sys_->submit(ring_.get());
    if (r >= 0) {
      // The kernel takes entries in ring order; the rest stay queued in the ring and go with the
      // next submit (liburing submits everything between the kernel's head and our tail).
      for (int i = 0; i < r && !prepared_.empty(); ++i) prepared_.pop_front();
      if (prepared_.empty() || r > 0) return;
    } else {
      const bool transient = r == -EAGAIN || r == -EBUSY || r == -EINTR;
      if (!transient || std::chrono::steady_clock::now() >= give_up_at) {
        // Entries left in the submission ring are never submitted again (no further enter), so
        // their buffers are the caller's once their reads fail here.
        broken_ = IOError("io_uring_enter failed" + std::string(transient ? " for " + std::to_string(attempt + 1) +
                                                                             " attempts over 2 s"
                                                                       : "") +
                              "; reads through io_uring are disabled for this reader",
                          -r);
        in_ring_ -= static_cast<int>(prepared_.size());
        failed->insert(failed->end(), prepared_.begin(), prepared_.end());
        prepared_.clear();
        failed->insert(failed->end(), queue_.begin(), queue_.end());
        queue_.clear();
        return;
      }
    }
    // Transient (or the kernel took none): give completions a moment to free resources.
    std::this_thread::sleep_for(std::chrono::milliseconds(std::min(1 << std::min(attempt, 4), 10)));
  }
}

void UringReader::fail_all(const std::vector<ReadBatch::Op*>& ops) {
  if (ops.empty()) return;
  const Status why = broken();
  for (ReadBatch::Op* op : ops)
    complete(op, Status(StatusCode::kIOError, read_what(*op) + " (io_uring): " + why.message()));
}

void UringReader::complete(ReadBatch::Op* op, Status s) {
  if (s.ok() && op->done == 0) op->done = op->min_n;  // a read done through File::read_at
  if (s.ok()) bytes_read_.fetch_add(op->done, std::memory_order_relaxed);
  reads_.fetch_add(1, std::memory_order_relaxed);
  op->status = std::move(s);
  op->batch->finish_one();  // the owner may free the batch from here on: do not touch op after this
}

void UringReader::reaper_loop() {
  int failures = 0;  // consecutive failed waits: completions are then polled from the ring
  for (;;) {
    io_uring_cqe* cqe = nullptr;
    int r;
    if (failures == 0) {
      __kernel_timespec ts{};
      ts.tv_nsec = 100'000'000;  // wake now and then to see stop_
      r = sys_->wait_cqe_timeout(ring_.get(), &cqe, &ts);
      if (r < 0 && r != -ETIME) ++failures;
    } else {
      // io_uring_enter failed: reads already in the kernel still post their completions to the
      // shared ring, which can be read without a system call. Poll it with a growing sleep (at
      // most 10 ms), never a spin; try a real wait again now and then.
      r = io_uring_peek_cqe(ring_.get(), &cqe);
      if (r < 0 || !cqe) {
        std::this_thread::sleep_for(std::chrono::milliseconds(std::min(failures, 10)));
        failures = failures >= 100 ? 0 : failures + 1;
      }
    }
    if (r < 0 || !cqe) {
      if (stop_.load()) {
        std::lock_guard<std::mutex> lk(mu_);
        if (in_ring_ - static_cast<int>(prepared_.size()) <= 0) return;
      }
      continue;
    }
    failures = 0;
    auto* op = static_cast<ReadBatch::Op*>(io_uring_cqe_get_data(cqe));
    const int res = cqe->res;
    io_uring_cqe_seen(ring_.get(), cqe);
    if (op == nullptr) return;  // stop marker (submitted once nothing is in flight)
    // The op's fields are touched only under mu_: the submitter wrote them before it took mu_ to
    // queue the read, and the pointer came back through the kernel, an edge ThreadSanitizer (and
    // the language) cannot see.
    std::unique_lock<std::mutex> lk(mu_);
    Status s;
    bool again = false;
    if (res == -EAGAIN || res == -EINTR) {
      again = true;
    } else if (res < 0) {
      s = IOError(read_what(*op) + " (io_uring)", -res);
    } else if (res == 0) {
      if (op->done < op->min_n)
        s = Corruption(op->file->path() + ": read of " + std::to_string(op->min_n) + " bytes at offset " +
                       std::to_string(op->offset) + ": short read (" + std::to_string(op->done) +
                       " bytes before end of file; file truncated?)");
    } else {
      op->done += static_cast<size_t>(res);
      again = op->done < op->min_n;
    }
    std::vector<ReadBatch::Op*> failed;
    --in_ring_;
    if (again) queue_.push_front(op);
    pump_locked(&failed);
    lk.unlock();
    fail_all(failed);
    if (!again) complete(op, std::move(s));
  }
}

}  // namespace strata::io
