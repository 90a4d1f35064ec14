// strata probe, disk part: sequential bandwidth and 4 KiB random-read IOPS of the storage under a
// directory, measured on a temporary file written there (removed afterwards), through io_uring
// (liburing) at a fixed queue depth, with O_DIRECT and through the page cache.
//
// The file is written with O_DIRECT when the filesystem allows (so it never enters the page cache)
// and with pseudo-random bytes (a virtual disk cannot compress or deduplicate them). Buffered tests
// first evict the file's pages (posix_fadvise DONTNEED after fsync: clean pages leave the cache),
// turn readahead off for the random tests (POSIX_FADV_RANDOM) and read every 4 KiB page at most once,
// so the page cache cannot answer instead of the disk.
#include <fcntl.h>
#include <liburing.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <numeric>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "core/aligned_buffer.h"
#include "tools/probe.h"

namespace strata::tools {

namespace {

using clock_type = std::chrono::steady_clock;
constexpr size_t kPage = 4096;
constexpr size_t kSeqBlock = 1u << 20;
constexpr size_t kLoadBlock = 8u << 20;  // store::BulkReadOptions::chunk_bytes

double seconds_since(clock_type::time_point t0) {
  return std::chrono::duration<double>(clock_type::now() - t0).count();
}

class Fd {
 public:
  explicit Fd(int fd = -1) : fd_(fd) {}
  ~Fd() {
    if (fd_ >= 0) ::close(fd_);
  }
  Fd(const Fd&) = delete;
  Fd& operator=(const Fd&) = delete;
  int get() const { return fd_; }

 private:
  int fd_;
};

// Removes the test file however the probe ends.
struct Unlinker {
  std::string path;
  ~Unlinker() {
    if (!path.empty()) ::unlink(path.c_str());
  }
};

// 4 KiB-aligned buffers, one per queue slot.
struct Slots {
  AlignedBytes mem;
  size_t len;
  Slots(int depth, size_t len_) : len(len_) {
    // AlignedBytes aligns to 64; O_DIRECT wants 4096: over-allocate and align by hand.
    mem.resize(static_cast<size_t>(depth) * len + kPage);
  }
  uint8_t* at(int i) {
    auto base = reinterpret_cast<uintptr_t>(mem.data());
    base = (base + kPage - 1) / kPage * kPage;
    return reinterpret_cast<uint8_t*>(base) + static_cast<size_t>(i) * len;
  }
};

struct RunResult {
  uint64_t ops = 0;
  double seconds = 0;
};

// Reads `len` bytes at each offset in order, keeping `depth` reads in flight, until every offset is
// read or `max_s` seconds pass. io_uring when available (*used_uring), else `depth` threads of pread.
Result<RunResult> run_reads(int fd, const std::vector<uint64_t>& offsets, size_t len, int depth, double max_s,
                            const std::string& what, bool* used_uring) {
  Slots slots(depth, len);
  RunResult r;
  io_uring ring;
  const int init = io_uring_queue_init(static_cast<unsigned>(depth), &ring, 0);
  if (init == 0) {
    *used_uring = true;
    size_t next = 0;
    int in_flight = 0;
    const auto t0 = clock_type::now();
    auto submit = [&](int slot) {
      io_uring_sqe* sqe = io_uring_get_sqe(&ring);
      io_uring_prep_read(sqe, fd, slots.at(slot), static_cast<unsigned>(len), offsets[next++]);
      io_uring_sqe_set_data64(sqe, static_cast<uint64_t>(slot));
      ++in_flight;
    };
    for (int s = 0; s < depth && next < offsets.size(); ++s) submit(s);
    io_uring_submit(&ring);
    Status err;
    bool stop = false;
    while (in_flight > 0) {
      io_uring_cqe* cqe = nullptr;
      const int w = io_uring_wait_cqe(&ring, &cqe);
      if (w < 0) {
        err = IOError(what + ": io_uring wait", -w);
        break;
      }
      const int res = cqe->res;
      const int slot = static_cast<int>(io_uring_cqe_get_data64(cqe));
      io_uring_cqe_seen(&ring, cqe);
      --in_flight;
      if (res < 0 && err.ok()) err = IOError(what + ": read", -res);
      else if (static_cast<size_t>(res) != len && err.ok())
        err = Corruption(what + ": short read of " + std::to_string(res) + " bytes, expected " + std::to_string(len));
      ++r.ops;
      if (!stop && (!err.ok() || seconds_since(t0) >= max_s)) stop = true;
      if (!stop && next < offsets.size()) {
        submit(slot);
        io_uring_submit(&ring);
      }
    }
    r.seconds = seconds_since(t0);
    io_uring_queue_exit(&ring);
    if (!err.ok()) return err;
    return r;
  }
  // No io_uring (kernel too old, or blocked by a sandbox): `depth` threads of blocking pread.
  *used_uring = false;
  std::atomic<size_t> next{0};
  std::atomic<uint64_t> ops{0};
  std::atomic<int> bad_errno{0};
  std::atomic<bool> short_read{false};
  const auto t0 = clock_type::now();
  std::vector<std::thread> ts;
  for (int s = 0; s < depth; ++s)
    ts.emplace_back([&, s] {
      uint8_t* buf = slots.at(s);
      for (;;) {
        const size_t i = next.fetch_add(1);
        if (i >= offsets.size() || seconds_since(t0) >= max_s || bad_errno.load() || short_read.load()) break;
        const ssize_t n = ::pread(fd, buf, len, static_cast<off_t>(offsets[i]));
        if (n < 0) bad_errno.store(errno);
        else if (static_cast<size_t>(n) != len) short_read.store(true);
        ops.fetch_add(1);
      }
    });
  for (auto& t : ts) t.join();
  r.seconds = seconds_since(t0);
  r.ops = ops.load();
  if (bad_errno.load()) return IOError(what + ": read", bad_errno.load());
  if (short_read.load()) return Corruption(what + ": short read");
  return r;
}

// Writes `bytes` of pseudo-random data to `path` (O_DIRECT when possible) and syncs it.
Status write_test_file(const std::string& path, uint64_t bytes, bool* direct_ok) {
  int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC | O_DIRECT, 0600);
  *direct_ok = fd >= 0;
  if (fd < 0 && errno == EINVAL) fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
  if (fd < 0) return IOError(path + ": create disk test file", errno);
  Fd guard(fd);
  Slots buf(1, kSeqBlock);
  uint64_t s = 0x9E3779B97F4A7C15ull;
  for (uint64_t off = 0; off < bytes; off += kSeqBlock) {
    auto* w = reinterpret_cast<uint64_t*>(buf.at(0));
    for (size_t i = 0; i < kSeqBlock / 8; ++i) {
      s ^= s << 13;
      s ^= s >> 7;
      s ^= s << 17;
      w[i] = s;
    }
    size_t done = 0;
    while (done < kSeqBlock) {
      const ssize_t n = ::pwrite(fd, buf.at(0) + done, kSeqBlock - done, static_cast<off_t>(off + done));
      if (n < 0) {
        if (errno == EINTR) continue;
        if (done == 0 && *direct_ok && errno == EINVAL) return NotSupported("O_DIRECT write refused");
        return IOError(path + ": write disk test file", errno);
      }
      done += static_cast<size_t>(n);
    }
  }
  if (::fsync(fd) != 0) return IOError(path + ": fsync disk test file", errno);
  return Status();
}

// Drops the file's pages from the page cache (clean after fsync) and sets the access advice.
void evict(int fd, int advice) {
  ::fdatasync(fd);
  ::posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED);
  ::posix_fadvise(fd, 0, 0, advice);
}

}  // namespace

Result<DiskProfile> measure_disk(const std::string& dir, uint64_t file_bytes, double seconds, const Logger* logger) {
  DiskProfile d;
  d.dir = dir;
  struct stat st {};
  if (::stat(dir.c_str(), &st) != 0) return NotFound(dir + ": cannot measure its disk (" + std::strerror(errno) + ")");
  if (!S_ISDIR(st.st_mode)) return InvalidArgument(dir + ": not a directory (the disk probe measures a directory's storage)");
  d.device = static_cast<uint64_t>(st.st_dev);
  struct statvfs vfs {};
  if (::statvfs(dir.c_str(), &vfs) != 0) return IOError(dir + ": statvfs", errno);
  const uint64_t free_bytes = static_cast<uint64_t>(vfs.f_bavail) * vfs.f_frsize;
  uint64_t size = std::min<uint64_t>(file_bytes, free_bytes / 4) / kSeqBlock * kSeqBlock;
  if (size < (16ull << 20)) {
    d.note = "not measured: " + std::to_string(free_bytes >> 20) + " MiB free under " + dir + " (need 64 MiB for a 16 MiB test file)";
    return d;
  }
  d.file_bytes = size;
  Unlinker unlink_guard;
  const std::string path = dir + "/.strata-probe-" + std::to_string(::getpid()) + ".tmp";
  unlink_guard.path = path;
  bool direct_write = false;
  Status w = write_test_file(path, size, &direct_write);
  if (w.code() == StatusCode::kNotSupported) {
    ::unlink(path.c_str());
    w = write_test_file(path, size, &direct_write);
  }
  if (!w.ok()) return w;

  const size_t pages = size / kPage;
  std::mt19937_64 rng(12345);
  std::vector<uint64_t> perm(pages);
  std::iota(perm.begin(), perm.end(), 0);
  std::shuffle(perm.begin(), perm.end(), rng);
  for (auto& p : perm) p *= kPage;
  // Disjoint page sets for the four random tests (buffered ones must not hit pages read before).
  const size_t quarter = pages / 4;
  auto part = [&](int i) {
    return std::vector<uint64_t>(perm.begin() + static_cast<ptrdiff_t>(quarter * static_cast<size_t>(i)),
                                 perm.begin() + static_cast<ptrdiff_t>(quarter * static_cast<size_t>(i + 1)));
  };
  std::vector<uint64_t> seq;
  for (uint64_t off = 0; off + kSeqBlock <= size; off += kSeqBlock) seq.push_back(off);

  bool uring = false;
  std::vector<std::string> notes;
  // O_DIRECT.
  {
    const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_DIRECT);
    if (fd < 0) {
      notes.push_back(std::string("O_DIRECT refused: ") + std::strerror(errno));
    } else {
      Fd guard(fd);
      auto s = run_reads(fd, seq, kSeqBlock, 8, 2 * seconds, path, &uring);
      if (s.ok()) {
        d.direct_supported = true;
        d.seq_gbps_direct = static_cast<double>(s->ops * kSeqBlock) / s->seconds / 1e9;
        auto q1 = run_reads(fd, part(0), kPage, 1, seconds, path, &uring);
        if (!q1.ok()) return q1.error();
        d.iops_qd1_direct = static_cast<double>(q1->ops) / q1->seconds;
        auto q32 = run_reads(fd, part(1), kPage, 32, seconds, path, &uring);
        if (!q32.ok()) return q32.error();
        d.iops_qd32_direct = static_cast<double>(q32->ops) / q32->seconds;
        // As the resident pass loads a cold shard: 8 MiB reads, 4 in flight.
        std::vector<uint64_t> big;
        for (uint64_t off = 0; off + kLoadBlock <= size; off += kLoadBlock) big.push_back(off);
        auto l = run_reads(fd, big, kLoadBlock, 4, 2 * seconds, path, &uring);
        if (!l.ok()) return l.error();
        d.seq_gbps_load = static_cast<double>(l->ops * kLoadBlock) / l->seconds / 1e9;
      } else {
        notes.push_back("O_DIRECT read failed: " + s.error().to_string());
      }
    }
  }
  // Through the page cache.
  {
    const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) return IOError(path + ": open disk test file", errno);
    Fd guard(fd);
    evict(fd, POSIX_FADV_RANDOM);
    auto q1 = run_reads(fd, part(2), kPage, 1, seconds, path, &uring);
    if (!q1.ok()) return q1.error();
    d.iops_qd1_buffered = static_cast<double>(q1->ops) / q1->seconds;
    auto q32 = run_reads(fd, part(3), kPage, 32, seconds, path, &uring);
    if (!q32.ok()) return q32.error();
    d.iops_qd32_buffered = static_cast<double>(q32->ops) / q32->seconds;
    // Sequential 1 MiB reads at depth 8 (as the tiered store streams experts), then one pread at a
    // time in order (as the resident store loads a shard).
    evict(fd, POSIX_FADV_SEQUENTIAL);
    auto s8 = run_reads(fd, seq, kSeqBlock, 8, 2 * seconds, path, &uring);
    if (!s8.ok()) return s8.error();
    d.seq_gbps_buffered = static_cast<double>(s8->ops * kSeqBlock) / s8->seconds / 1e9;
    evict(fd, POSIX_FADV_SEQUENTIAL);
    auto s1 = run_reads(fd, seq, kSeqBlock, 1, 2 * seconds, path, &uring);
    if (!s1.ok()) return s1.error();
    d.seq_gbps_pread = static_cast<double>(s1->ops * kSeqBlock) / s1->seconds / 1e9;
    if (!d.direct_supported) {  // the resident pass then reads buffered: 8 MiB, 4 in flight
      std::vector<uint64_t> big;
      for (uint64_t off = 0; off + kLoadBlock <= size; off += kLoadBlock) big.push_back(off);
      evict(fd, POSIX_FADV_SEQUENTIAL);
      auto l = run_reads(fd, big, kLoadBlock, 4, 2 * seconds, path, &uring);
      if (!l.ok()) return l.error();
      d.seq_gbps_load = static_cast<double>(l->ops * kLoadBlock) / l->seconds / 1e9;
    }
    ::posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED);
  }
  d.io_uring = uring;
  if (!direct_write) notes.push_back("test file written through the page cache (O_DIRECT write refused)");
  for (size_t i = 0; i < notes.size(); ++i) d.note += (i ? "; " : "") + notes[i];
  d.measured = true;
  log_to(logger, LogLevel::kInfo,
         "probe disk dir=" + dir + " seq_direct_gbps=" + std::to_string(d.seq_gbps_direct) +
             " iops_qd32_direct=" + std::to_string(d.iops_qd32_direct));
  return d;
}

}  // namespace strata::tools
