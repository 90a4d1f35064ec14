// io::UringReader when io_uring_enter fails (issue 13 item 6): before the fix the reaper spun at
// 100% CPU forever and the batch never finished. Now every read ends with an error naming
// io_uring_enter, the process uses little CPU meanwhile, later submits fail at once, and reads the
// kernel already took are still collected when only the waiting call fails.
#include <gtest/gtest.h>
#include <liburing.h>
#include <sys/resource.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <string>
#include <thread>
#include <vector>

#include "io/uring_reader.h"
#include "tests/support/files.h"
#include "tests/support/temp_dir.h"

namespace strata::io {
namespace {

// Fails the kernel calls chosen by the test with `err` (the strace -e inject=io_uring_enter case).
class FailingSyscalls final : public UringSyscalls {
 public:
  FailingSyscalls(bool fail_submit, bool fail_wait, int err) : fail_submit_(fail_submit), fail_wait_(fail_wait), err_(err) {}
  int submit(io_uring* ring) const override {
    ++submits;
    return fail_submit_ ? -err_ : UringSyscalls::submit(ring);
  }
  int wait_cqe_timeout(io_uring* ring, io_uring_cqe** cqe, __kernel_timespec* ts) const override {
    ++waits;
    return fail_wait_ ? -err_ : UringSyscalls::wait_cqe_timeout(ring, cqe, ts);
  }
  mutable std::atomic<int> submits{0}, waits{0};

 private:
  bool fail_submit_, fail_wait_;
  int err_;
};

double cpu_seconds() {
  rusage u{};
  ::getrusage(RUSAGE_SELF, &u);
  return static_cast<double>(u.ru_utime.tv_sec + u.ru_stime.tv_sec) + (u.ru_utime.tv_usec + u.ru_stime.tv_usec) * 1e-6;
}

std::unique_ptr<UringReader> make_reader(const UringSyscalls* sys) {
  UringReaderOptions o;
  o.queue_depth = 4;
  o.syscalls = sys;
  auto r = UringReader::create(o);
  EXPECT_TRUE(r.ok()) << r.error().to_string();
  return r.ok() ? std::move(*r) : nullptr;
}

TEST(UringEnterFault, FailingEnterEndsEveryReadWithAnErrorAndNoSpin) {
  for (int err : {EIO, ENOMEM, EAGAIN}) {
    SCOPED_TRACE("errno " + std::to_string(err));
    testing::TempDir d;
    testing::write_all(d.file("f"), std::string(1 << 16, 'x'));
    auto f = open_file(d.file("f"));
    ASSERT_TRUE(f.ok());
    FailingSyscalls sys(/*fail_submit=*/true, /*fail_wait=*/true, err);
    auto reader = make_reader(&sys);
    ASSERT_NE(reader, nullptr);
    std::vector<uint8_t> buf(10 * 4096);
    ReadBatch b;
    for (int i = 0; i < 10; ++i) b.add(**f, static_cast<uint64_t>(i) * 4096, 4096, buf.data() + i * 4096);
    const auto t0 = std::chrono::steady_clock::now();
    reader->submit(&b);
    Status s = b.wait();
    const double waited = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    ASSERT_FALSE(s.ok());
    EXPECT_EQ(s.code(), StatusCode::kIOError);
    EXPECT_NE(s.message().find("io_uring_enter failed"), std::string::npos) << s.to_string();
    EXPECT_NE(s.message().find(d.file("f")), std::string::npos) << s.to_string();
    EXPECT_LT(waited, 10.0);  // EAGAIN is retried for about 2 s, then given up
    EXPECT_FALSE(reader->broken().ok());
    // The reaper, whose every wait fails, must not spin: CPU over half a second of wall time.
    const double c0 = cpu_seconds();
    std::this_thread::sleep_for(std::chrono::milliseconds(500));
    EXPECT_LT(cpu_seconds() - c0, 0.25) << "the reaper spins";
    // A later batch fails at once, without entering the kernel.
    const int submits = sys.submits.load();
    ReadBatch b2;
    b2.add(**f, 0, 4096, buf.data());
    reader->submit(&b2);
    EXPECT_FALSE(b2.wait().ok());
    EXPECT_EQ(sys.submits.load(), submits);
    reader.reset();  // the destructor returns (the stop marker cannot be submitted)
  }
}

TEST(UringEnterFault, FailingWaitsStillCollectReadsTheKernelTook) {
  testing::TempDir d;
  std::string data(1 << 16, '\0');
  for (size_t i = 0; i < data.size(); ++i) data[i] = static_cast<char>(i * 7);
  testing::write_all(d.file("f"), data);
  auto f = open_file(d.file("f"));
  ASSERT_TRUE(f.ok());
  FailingSyscalls sys(/*fail_submit=*/false, /*fail_wait=*/true, EINTR);
  auto reader = make_reader(&sys);
  ASSERT_NE(reader, nullptr);
  std::vector<uint8_t> buf(data.size());
  ReadBatch b;
  for (size_t off = 0; off < data.size(); off += 4096) b.add(**f, off, 4096, buf.data() + off);
  reader->submit(&b);
  ASSERT_TRUE(b.wait().ok());
  EXPECT_EQ(std::string(buf.begin(), buf.end()), data);
  EXPECT_TRUE(reader->broken().ok());
}

}  // namespace
}  // namespace strata::io
