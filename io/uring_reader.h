// UringReader: asynchronous reads through io_uring (liburing) with many reads in flight.
//
// Callers group reads into a ReadBatch, submit it (non-blocking) and wait on it later, so disk time
// overlaps compute: the tiered store issues the misses of a layer's experts and the Engram rows of a
// whole prompt this way. At most `queue_depth` reads are in the kernel at once; the rest wait in a
// FIFO and enter as earlier ones complete. One reaper thread takes completions, resubmits the rest
// of a partial read, and marks each read done with its own Status.
// Reads come from File::native_fd() (buffered) or from an fd the caller gives (e.g. io::open_direct:
// then offset, length and buffer must be kDirectIoAlign-aligned). A File without a descriptor (the
// fault-injecting wrapper) is read with File::read_at on the submitting thread, so injected faults
// reach the caller exactly as a failed io_uring read would.
// Errors per read: kIOError (errno from the kernel), kCorruption for a read that hit end of file
// (short read); both name the file, offset and length. When io_uring_enter itself keeps failing
// (issue 13 item 6: the reaper used to spin at 100% CPU and the batch never finished), the reader
// is broken for good: every read not yet in the kernel ends with kIOError naming io_uring_enter
// and its errno, reads already in the kernel are still collected from the completion ring without
// a system call (polled with a sleep, never a spin), and later submits fail at once.
// Thread safety: submit() may be called from any thread; a batch is waited on by its owner.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "core/status.h"
#include "io/file.h"

struct io_uring;
struct io_uring_cqe;
struct __kernel_timespec;

namespace strata::io {

// The two io_uring calls that enter the kernel, behind an interface so tests can make them fail
// (LevelDB's Env pattern). Return values as liburing's: >= 0 or -errno.
class UringSyscalls {
 public:
  virtual ~UringSyscalls() = default;
  // io_uring_submit: the number of submission entries the kernel took.
  virtual int submit(io_uring* ring) const;
  // io_uring_wait_cqe_timeout: 0 with *cqe set, -ETIME on timeout, or -errno.
  virtual int wait_cqe_timeout(io_uring* ring, io_uring_cqe** cqe, __kernel_timespec* ts) const;
};

struct UringReaderOptions {
  // Most reads in flight in the kernel at once (io_uring submission entries), 1..4096. Deeper
  // queues keep an NVMe busy with small random reads (Engram rows); 64 covers both uses.
  int queue_depth = 64;
  // The kernel calls; null = liburing's. Must outlive the reader (tests inject failures).
  const UringSyscalls* syscalls = nullptr;

  [[nodiscard]] Status validate() const;
};

// Reads submitted and waited on together. Owned by the caller; must not move or be destroyed while
// reads are in flight (wait() first; the destructor waits too).
class ReadBatch {
 public:
  ReadBatch() = default;
  ~ReadBatch();
  ReadBatch(const ReadBatch&) = delete;
  ReadBatch& operator=(const ReadBatch&) = delete;

  // Adds a read of `n` bytes at byte `offset` of `file` into `dst`. `fd` >= 0 reads from that
  // descriptor instead of file.native_fd() (an O_DIRECT one; alignment is the caller's duty).
  // `min_n` (<= n, default n): the read succeeds once that many bytes arrived and end of file cuts
  // the rest (an aligned O_DIRECT read of a file's last bytes); fewer is a short read.
  // REQUIRES: not submitted yet (or reset() since).
  void add(const File& file, uint64_t offset, size_t n, void* dst, int fd = -1, size_t min_n = SIZE_MAX);

  size_t size() const { return ops_.size(); }
  uint64_t bytes() const { return bytes_; }
  bool submitted() const { return submitted_; }
  // True once every submitted read has finished (successfully or not).
  bool done() const { return done_.load(std::memory_order_acquire); }
  // Blocks until done(); returns OK or the Status of the first read (in add order) that failed.
  [[nodiscard]] Status wait();
  // steady_clock time (ns since its epoch) when the last read finished; REQUIRES done().
  uint64_t finished_ns() const { return finished_ns_.load(std::memory_order_acquire); }
  // Per-read result; REQUIRES done().
  const Status& status(size_t i) const { return ops_[i].status; }
  uint64_t offset(size_t i) const { return ops_[i].offset; }
  // Empties the batch for reuse. REQUIRES done() or never submitted.
  void reset();

 private:
  friend class UringReader;
  struct Op {
    ReadBatch* batch = nullptr;
    const File* file = nullptr;
    int fd = -1;
    uint64_t offset = 0;
    size_t n = 0;
    size_t min_n = 0;
    uint8_t* dst = nullptr;
    size_t done = 0;  // bytes read so far
    Status status;
  };
  void finish_one();
  void mark_done();

  std::vector<Op> ops_;
  uint64_t bytes_ = 0;
  bool submitted_ = false;
  std::atomic<int64_t> pending_{0};
  std::atomic<bool> done_{false};
  std::atomic<uint64_t> finished_ns_{0};
};

class UringReader {
 public:
  // Sets up the ring and starts the reaper thread. kNotSupported when the kernel refuses io_uring
  // (seccomp, old kernel), naming the errno.
  [[nodiscard]] static Result<std::unique_ptr<UringReader>> create(const UringReaderOptions& options);
  ~UringReader();
  UringReader(const UringReader&) = delete;
  UringReader& operator=(const UringReader&) = delete;

  // Starts every read of `batch`. Returns at once, except that reads of files without a descriptor
  // run here (synchronously). On a broken reader (see above) every read ends at once with its
  // error. REQUIRES: batch not already in flight.
  void submit(ReadBatch* batch);
  // OK, or why io_uring_enter stopped working (then every read fails).
  Status broken() const;

  int queue_depth() const { return depth_; }
  // Bytes delivered by completed reads since creation.
  uint64_t bytes_read() const { return bytes_read_.load(std::memory_order_relaxed); }
  // Read requests completed (a partial read that was resubmitted counts once).
  uint64_t reads_completed() const { return reads_.load(std::memory_order_relaxed); }

 private:
  UringReader(int depth, const UringSyscalls* syscalls);
  void reaper_loop();
  // Moves queued reads into the ring while fewer than depth_ are in it, and submits them. Reads
  // that can no longer reach the kernel (the reader broke) are moved to *failed for the caller to
  // complete outside the lock. REQUIRES mu_ held.
  void pump_locked(std::vector<ReadBatch::Op*>* failed);
  // Submits the prepared entries, retrying transient refusals for a bounded time; on a lasting
  // failure marks the reader broken and hands back every read not in the kernel. REQUIRES mu_.
  void submit_locked(std::vector<ReadBatch::Op*>* failed);
  // Records a finished read (any outcome).
  void complete(ReadBatch::Op* op, Status s);
  // Completes `ops` with the broken reader's error.
  void fail_all(const std::vector<ReadBatch::Op*>& ops);

  int depth_;
  const UringSyscalls* sys_;
  std::unique_ptr<io_uring> ring_;
  mutable std::mutex mu_;               // guards the submission side, queue_, prepared_, broken_
  std::deque<ReadBatch::Op*> queue_;    // reads waiting for a free ring entry
  std::deque<ReadBatch::Op*> prepared_; // in the submission ring, not yet taken by the kernel
  int in_ring_ = 0;                     // reads prepared or in the kernel (guarded by mu_)
  Status broken_;                       // set once io_uring_enter fails for good
  std::atomic<bool> stop_{false};       // the destructor asks the reaper to end
  std::thread reaper_;
  std::atomic<uint64_t> bytes_read_{0};
  std::atomic<uint64_t> reads_{0};
};

}  // namespace strata::io
