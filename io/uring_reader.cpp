#include "io/uring_reader.h"

#include <liburing.h>

#include <cerrno>
#include <chrono>
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

UringReader::UringReader(int depth) : depth_(depth), ring_(std::make_unique<io_uring>()) {}

Result<std::unique_ptr<UringReader>> UringReader::create(const UringReaderOptions& options) {
  STRATA_RETURN_IF_ERROR(options.validate());
  auto r = std::unique_ptr<UringReader>(new UringReader(options.queue_depth));
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
      if (in_flight_ == 0 && queue_.empty()) break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  {
    std::unique_lock<std::mutex> lk(mu_);
    // The stop marker: a no-op whose user data is null.
    io_uring_sqe* sqe = io_uring_get_sqe(ring_.get());
    while (!sqe) {
      io_uring_submit(ring_.get());
      sqe = io_uring_get_sqe(ring_.get());
    }
    io_uring_prep_nop(sqe);
    io_uring_sqe_set_data(sqe, nullptr);
    io_uring_submit(ring_.get());
  }
  reaper_.join();
  io_uring_queue_exit(ring_.get());
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
  std::vector<ReadBatch::Op*> sync;
  {
    std::unique_lock<std::mutex> lk(mu_);
    for (auto& op : batch->ops_) {
      if (op.fd < 0) op.fd = op.file->native_fd();
      if (op.fd < 0) sync.push_back(&op);
      else queue_.push_back(&op);
    }
    pump_locked();
  }
  // Files without a descriptor (fault-injection wrappers): read through the File interface.
  for (ReadBatch::Op* op : sync) complete(op, op->file->read_at(op->offset, op->min_n, op->dst));
}

void UringReader::pump_locked() {
  int added = 0;
  while (in_flight_ < depth_ && !queue_.empty()) {
    io_uring_sqe* sqe = io_uring_get_sqe(ring_.get());
    if (!sqe) break;
    ReadBatch::Op* op = queue_.front();
    queue_.pop_front();
    io_uring_prep_read(sqe, op->fd, op->dst + op->done, static_cast<unsigned>(op->n - op->done),
                       op->offset + op->done);
    io_uring_sqe_set_data(sqe, op);
    ++in_flight_;
    ++added;
  }
  if (added > 0) io_uring_submit(ring_.get());
}

void UringReader::complete(ReadBatch::Op* op, Status s) {
  if (s.ok() && op->done == 0) op->done = op->min_n;  // a read done through File::read_at
  if (s.ok()) bytes_read_.fetch_add(op->done, std::memory_order_relaxed);
  reads_.fetch_add(1, std::memory_order_relaxed);
  op->status = std::move(s);
  op->batch->finish_one();  // the owner may free the batch from here on: do not touch op after this
}

void UringReader::reaper_loop() {
  for (;;) {
    io_uring_cqe* cqe = nullptr;
    const int r = io_uring_wait_cqe(ring_.get(), &cqe);
    if (r < 0) {
      // EINTR or a transient kernel refusal: in-flight reads are still owned by the kernel and will
      // complete; keep waiting for them.
      continue;
    }
    auto* op = static_cast<ReadBatch::Op*>(io_uring_cqe_get_data(cqe));
    const int res = cqe->res;
    io_uring_cqe_seen(ring_.get(), cqe);
    if (op == nullptr) return;  // stop marker (submitted once nothing is in flight)
    Status s;
    bool again = false;
    if (res == -EAGAIN || res == -EINTR) {
      again = true;
    } else if (res < 0) {
      s = IOError(op->file->path() + ": read of " + std::to_string(op->n) + " bytes at offset " +
                      std::to_string(op->offset) + " (io_uring)",
                  -res);
    } else if (res == 0) {
      if (op->done < op->min_n)
        s = Corruption(op->file->path() + ": read of " + std::to_string(op->min_n) + " bytes at offset " +
                       std::to_string(op->offset) + ": short read (" + std::to_string(op->done) +
                       " bytes before end of file; file truncated?)");
    } else {
      op->done += static_cast<size_t>(res);
      again = op->done < op->min_n;
    }
    std::unique_lock<std::mutex> lk(mu_);
    --in_flight_;
    if (again) queue_.push_front(op);
    pump_locked();
    lk.unlock();
    if (!again) complete(op, std::move(s));
  }
}

}  // namespace strata::io
