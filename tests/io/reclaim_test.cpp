// io::bytes_freed_by_removing: what `synth --force` may count as freed before it removes the
// earlier checkpoint (io/reclaim.h). Each case is one that let synth delete the checkpoint and then
// fail for space (reliability.md): hard and symbolic links, a sparse shard, a shard a server holds.
#include "io/reclaim.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <optional>
#include <string>

#include "tests/support/files.h"
#include "tests/support/temp_dir.h"

namespace strata::io {
namespace {

constexpr size_t kBytes = 256 * 1024;

uint64_t allocated(const std::string& path) {
  struct stat st {};
  EXPECT_EQ(::lstat(path.c_str(), &st), 0) << path;
  return static_cast<uint64_t>(st.st_blocks) * 512;
}

// Whether this file system grants leases at all (overlay and network file systems may not); the
// held-open cases need them.
bool leases_work(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return false;
  const bool ok = ::fcntl(fd, F_SETLEASE, F_WRLCK) == 0;
  if (ok) ::fcntl(fd, F_SETLEASE, F_UNLCK);
  ::close(fd);
  return ok;
}

TEST(Reclaim, ASingleNamedFileFreesItsAllocatedBytes) {
  testing::TempDir d;
  testing::write_all(d.file("shard"), std::string(kBytes, 'x'));
  const Reclaim r = bytes_freed_by_removing(d.file("shard"));
  EXPECT_FALSE(r.held_open);
  EXPECT_TRUE(r.frees);
  EXPECT_TRUE(r.removable);
  EXPECT_TRUE(r.why.empty()) << r.why;
  EXPECT_GE(r.bytes, kBytes);
  EXPECT_EQ(r.bytes, allocated(d.file("shard")));
}

TEST(Reclaim, LinksFreeNothing) {
  testing::TempDir d;
  testing::write_all(d.file("shard"), std::string(kBytes, 'x'));
  std::filesystem::create_hard_link(d.file("shard"), d.file("hard"));
  std::filesystem::create_symlink(d.file("shard"), d.file("soft"));
  const Reclaim linked = bytes_freed_by_removing(d.file("shard"));
  EXPECT_EQ(linked.bytes, 0u) << "a hard link keeps the bytes";
  EXPECT_FALSE(linked.frees);
  EXPECT_NE(linked.why.find("hard links"), std::string::npos) << linked.why;
  EXPECT_EQ(bytes_freed_by_removing(d.file("hard")).bytes, 0u);
  EXPECT_EQ(bytes_freed_by_removing(d.file("soft")).bytes, 0u) << "a symbolic link's target stays";
  EXPECT_NE(bytes_freed_by_removing(d.file("soft")).why.find("symbolic link"), std::string::npos);
  EXPECT_EQ(bytes_freed_by_removing(d.file("missing")).bytes, 0u);
  EXPECT_EQ(bytes_freed_by_removing(d.path()).bytes, 0u) << "a directory";
}

TEST(Reclaim, ASparseFileFreesItsBlocksNotItsSize) {
  testing::TempDir d;
  const std::string p = d.file("sparse");
  const int fd = ::open(p.c_str(), O_WRONLY | O_CREAT | O_CLOEXEC, 0644);
  ASSERT_GE(fd, 0);
  ASSERT_EQ(::ftruncate(fd, 64 << 20), 0);
  ASSERT_EQ(::pwrite(fd, "x", 1, 32 << 20), 1);
  ::close(fd);
  const Reclaim r = bytes_freed_by_removing(p);
  EXPECT_EQ(r.bytes, allocated(p));
  if (allocated(p) >= (64u << 20)) GTEST_SKIP() << "this file system allocates sparse files in full";
  EXPECT_LT(r.bytes, 1u << 20) << "64 MiB in size, one block written";
}

TEST(Reclaim, AFileHeldOpenOrMappedFreesNothingUntilReleased) {
  testing::TempDir d;
  const std::string p = d.file("shard");
  testing::write_all(p, std::string(kBytes, 'x'));
  if (!leases_work(p))
    GTEST_SKIP() << "this file system grants no leases (errno " << errno << "): held files cannot be seen";
  // Another descriptor (a server reading the shard) ...
  const int fd = ::open(p.c_str(), O_RDONLY | O_CLOEXEC);
  ASSERT_GE(fd, 0);
  Reclaim r = bytes_freed_by_removing(p);
  EXPECT_TRUE(r.held_open);
  EXPECT_FALSE(r.frees);
  EXPECT_EQ(r.bytes, 0u);
  EXPECT_NE(r.why.find("held open"), std::string::npos) << r.why;
  // ... then only its mapping (strata maps shards and closes the descriptor) ...
  void* map = ::mmap(nullptr, kBytes, PROT_READ, MAP_SHARED, fd, 0);
  ASSERT_NE(map, MAP_FAILED) << std::strerror(errno);
  ::close(fd);
  r = bytes_freed_by_removing(p);
  EXPECT_TRUE(r.held_open) << "a mapping keeps the blocks allocated";
  EXPECT_EQ(r.bytes, 0u);
  // ... then nothing: the bytes count again, and the probe left no lease behind.
  ::munmap(map, kBytes);
  r = bytes_freed_by_removing(p);
  EXPECT_FALSE(r.held_open);
  EXPECT_GE(r.bytes, kBytes);
  const int again = ::open(p.c_str(), O_RDWR | O_CLOEXEC | O_NONBLOCK);
  EXPECT_GE(again, 0) << "a lease left on the file would refuse this open: " << std::strerror(errno);
  if (again >= 0) ::close(again);
}

TEST(Reclaim, FreeInodesIsReportedWhereTheFileSystemHasATable) {
  testing::TempDir d;
  const std::optional<uint64_t> inodes = free_inodes(d.path());
  if (!inodes) GTEST_SKIP() << "this file system reports no inode table (f_files 0)";
  EXPECT_GT(*inodes, 0u) << "the test directory was just created there";
  EXPECT_FALSE(free_inodes(d.file("missing/dir")).has_value()) << "statvfs fails: not known";
}

}  // namespace
}  // namespace strata::io
