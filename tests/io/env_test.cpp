// io::Env, io::FaultInjectionEnv and write_file_atomic under injected faults (issue #13: writes
// through an Env so tests inject ENOSPC, EIO and short writes). For every fault: a clear Status
// naming the file and the step, the previous file intact, no temp file left.
#include "io/env.h"

#include <grp.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <climits>
#include <filesystem>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "io/atomic_file.h"
#include "io/fault_env.h"
#include "io/file.h"
#include "io/temp_file.h"
#include "tests/support/files.h"
#include "tests/support/temp_dir.h"

namespace strata::io {
namespace {

// Names of the entries in `dir`, sorted.
std::vector<std::string> entries(const std::string& dir) {
  std::vector<std::string> out;
  for (const auto& e : std::filesystem::directory_iterator(dir)) out.push_back(e.path().filename().string());
  std::sort(out.begin(), out.end());
  return out;
}

std::string pattern(size_t n, char seed) {
  std::string s(n, '\0');
  for (size_t i = 0; i < n; ++i) s[i] = static_cast<char>(seed + i * 7 % 251);
  return s;
}

TEST(PosixEnv, WritesSyncsRenamesAndRemoves) {
  testing::TempDir d;
  Env* env = default_env();
  auto f = env->new_writable_file(d.file("a"));
  ASSERT_TRUE(f.ok()) << f.error().to_string();
  ASSERT_TRUE((*f)->append("hello ", 6).ok());
  ASSERT_TRUE((*f)->append("world", 5).ok());
  EXPECT_EQ((*f)->bytes_appended(), 11u);
  ASSERT_TRUE((*f)->sync().ok());
  auto size = (*f)->size_on_disk();
  ASSERT_TRUE(size.ok());
  EXPECT_EQ(*size, 11u);
  ASSERT_TRUE((*f)->close().ok());
  ASSERT_TRUE((*f)->close().ok());  // idempotent
  ASSERT_TRUE(env->rename_file(d.file("a"), d.file("b")).ok());
  EXPECT_EQ(testing::read_all(d.file("b")), "hello world");
  ASSERT_TRUE(env->sync_dir(d.path()).ok());
  ASSERT_TRUE(env->remove_file(d.file("b")).ok());
  EXPECT_EQ(env->remove_file(d.file("b")).code(), StatusCode::kNotFound);
  auto missing = env->new_writable_file(d.file("no/such/dir"));
  ASSERT_FALSE(missing.ok());
  EXPECT_EQ(missing.error().code(), StatusCode::kIOError);
  EXPECT_NE(missing.error().message().find("No such file or directory"), std::string::npos);
  EXPECT_NE(missing.error().message().find("no/such/dir"), std::string::npos);
}

TEST(FaultInjectionEnv, ShortWritesStillDeliverEveryByte) {
  testing::TempDir d;
  FaultInjectionEnv env({.max_write_bytes = 7});
  const std::string data = pattern(100003, 'a');
  ASSERT_TRUE(write_file_atomic(d.file("f"), data.data(), data.size(), &env).ok());
  EXPECT_EQ(testing::read_all(d.file("f")), data);
  EXPECT_GE(env.write_calls(), static_cast<int64_t>(data.size() / 7));
  EXPECT_EQ(entries(d.path()), std::vector<std::string>{"f"});
}

TEST(FaultInjectionEnv, DiskFillsUpMidWrite) {
  testing::TempDir d;
  FaultInjectionEnv env({.fail_after_bytes = 1000});
  auto f = env.new_writable_file(d.file("f"));
  ASSERT_TRUE(f.ok());
  const std::string data = pattern(4096, 'b');
  Status s = (*f)->append(data.data(), data.size());
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.code(), StatusCode::kResourceExhausted) << s.to_string();
  EXPECT_NE(s.message().find("No space left on device"), std::string::npos) << s.to_string();
  EXPECT_NE(s.message().find("at offset 1000"), std::string::npos) << s.to_string();  // the short write counted
  EXPECT_EQ((*f)->bytes_appended(), 1000u);
  EXPECT_EQ(env.faults_injected(), 1);
}

// One injected fault per row, each against write_file_atomic over an existing file.
struct AtomicFault {
  const char* name;
  WriteFaults faults;
  StatusCode code;
  const char* says;  // substring of the message: the step and the OS error
};

class WriteFileAtomicFaults : public ::testing::TestWithParam<AtomicFault> {};

TEST_P(WriteFileAtomicFaults, ClearErrorPreviousFileIntactNoTempLeft) {
  const AtomicFault& c = GetParam();
  testing::TempDir d;
  const std::string path = d.file("state.json");
  const std::string old = "{\"version\": 1}\n";
  ASSERT_TRUE(write_file_atomic(path, old.data(), old.size()).ok());
  FaultInjectionEnv env(c.faults);
  const std::string fresh = pattern(300000, 'c');
  Status s = write_file_atomic(path, fresh.data(), fresh.size(), &env);
  ASSERT_FALSE(s.ok()) << c.name;
  EXPECT_EQ(s.code(), c.code) << s.to_string();
  EXPECT_NE(s.message().find("state.json"), std::string::npos) << s.to_string();  // names the file
  EXPECT_NE(s.message().find(c.says), std::string::npos) << s.to_string();
  EXPECT_GE(env.faults_injected(), 1);
  EXPECT_EQ(testing::read_all(path), old);                               // previous file intact
  EXPECT_EQ(entries(d.path()), std::vector<std::string>{"state.json"});  // no temp file left
  // The same env without faults then succeeds (nothing stuck half-done).
  env.set_faults({});
  ASSERT_TRUE(write_file_atomic(path, fresh.data(), fresh.size(), &env).ok());
  EXPECT_EQ(testing::read_all(path), fresh);
}

// The temp file is staged beside the target and removed on failure: an error naming it sends the
// user looking for a file they never named and that is gone. Each step on it reports the target.
TEST(WriteFileAtomic, ErrorsNameTheTargetNotTheTempFile) {
  testing::TempDir d;
  const std::string missing_dir = d.file("no/such/dir/stats.json");
  Status s = write_file_atomic(missing_dir, "{}", 2);
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.message().rfind(missing_dir + ": create", 0), 0u) << s.to_string();
  EXPECT_EQ(s.message().find(".tmp."), std::string::npos) << s.to_string();
  const std::string path = d.file("stats.json");
  for (const WriteFaults& f : {WriteFaults{.fail_write_call = 0}, WriteFaults{.fail_create = ENOSPC},
                               WriteFaults{.fail_sync = EIO}, WriteFaults{.fail_close = EIO}}) {
    FaultInjectionEnv env(f);
    s = write_file_atomic(path, "{}", 2, &env);
    ASSERT_FALSE(s.ok());
    EXPECT_EQ(s.message().rfind(path + ": ", 0), 0u) << s.to_string();
    EXPECT_EQ(s.message().find(".tmp."), std::string::npos) << s.to_string();
  }
}

INSTANTIATE_TEST_SUITE_P(
    Io, WriteFileAtomicFaults,
    ::testing::Values(
        AtomicFault{"EnospcFirstWrite",
                    {.fail_write_call = 0, .error = ENOSPC},
                    StatusCode::kResourceExhausted,
                    "write of 300000 bytes at offset 0: No space left on device"},
        AtomicFault{"EioAfterShortWrites",
                    {.fail_write_call = 5, .error = EIO, .max_write_bytes = 4096},
                    StatusCode::kIOError,
                    "at offset 20480: Input/output error"},
        AtomicFault{"DiskFullAfter64K",
                    {.fail_after_bytes = 65536, .error = ENOSPC},
                    StatusCode::kResourceExhausted,
                    "at offset 65536: No space left on device"},
        AtomicFault{"CreateEnospc", {.fail_create = ENOSPC}, StatusCode::kResourceExhausted, "create"},
        AtomicFault{"FsyncEio", {.fail_sync = EIO}, StatusCode::kIOError, "fsync (injected): Input/output error"},
        AtomicFault{"CloseEio", {.fail_close = EIO}, StatusCode::kIOError, "close (injected): Input/output error"},
        AtomicFault{"RenameEio", {.fail_rename = EIO}, StatusCode::kIOError, "rename from"}),
    [](const ::testing::TestParamInfo<AtomicFault>& i) { return std::string(i.param.name); });

// An output never replaces a device, FIFO, directory or link (as root, `--json /dev/null` used to
// rename a regular file over /dev/null); a regular file or a new path is fine.
TEST(WriteFileAtomic, ReplacesOnlyRegularFiles) {
  testing::TempDir d;
  const std::string fifo = d.file("fifo"), link = d.file("link"), reg = d.file("reg");
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  ASSERT_TRUE(write_file_atomic(reg, "a", 1).ok());
  ASSERT_EQ(::symlink(reg.c_str(), link.c_str()), 0);
  // (Devices take the same branch; the test does not touch /dev/null itself.)
  for (const std::string& p : {fifo, link, d.path()}) {
    const Status s = write_file_atomic(p, "b", 1);
    ASSERT_FALSE(s.ok()) << p;
    EXPECT_EQ(s.code(), StatusCode::kInvalidArgument) << p;
    EXPECT_NE(s.message().find(p + ": exists and is "), std::string::npos) << s.message();
  }
  struct stat st;
  ASSERT_EQ(::lstat(fifo.c_str(), &st), 0);
  EXPECT_TRUE(S_ISFIFO(st.st_mode));
  ASSERT_EQ(::lstat(link.c_str(), &st), 0);
  EXPECT_TRUE(S_ISLNK(st.st_mode));
  EXPECT_TRUE(write_file_atomic(reg, "c", 1).ok()) << "a regular file is replaced";
  EXPECT_TRUE(write_file_atomic(d.file("new"), "c", 1).ok());
}

// Replacing a file keeps its permission bits (a 600 session file saved in place used to become
// 644: the temp file renamed over it had the default mode); a new file gets the umask's default.
TEST(WriteFileAtomic, ReplacingKeepsTheFilesMode) {
  testing::TempDir d;
  const std::string priv = d.file("priv.bin"), fresh = d.file("new.bin");
  ASSERT_TRUE(write_file_atomic(priv, "a", 1).ok());
  ASSERT_EQ(::chmod(priv.c_str(), 0600), 0);
  ASSERT_TRUE(write_file_atomic(priv, "bb", 2).ok());
  struct stat st;
  ASSERT_EQ(::stat(priv.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 07777, 0600u);
  EXPECT_EQ(st.st_size, 2);
  {
    // The temp file has the mode before any byte is written: the new contents of a 600 file are
    // never readable by more users than the old ones.
    auto f = AtomicFile::create(priv);
    ASSERT_TRUE(f.ok()) << f.error().to_string();
    ASSERT_EQ(::stat((*f)->temp_path().c_str(), &st), 0);
    EXPECT_EQ(st.st_mode & 07777, 0600u) << "the temp file while it is written";
  }
  ASSERT_EQ(::chmod(priv.c_str(), 0640), 0);
  ASSERT_TRUE(write_file_atomic(priv, "c", 1).ok());
  ASSERT_EQ(::stat(priv.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 07777, 0640u);
  const mode_t mask = ::umask(022);
  ::umask(mask);
  ASSERT_TRUE(write_file_atomic(fresh, "d", 1).ok());
  ASSERT_EQ(::stat(fresh.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 07777, 0644u & ~mask) << "a new file keeps the default mode";
}

// Replacing a private (600) one-byte file PRIV in `d` through `faults` fails at the step they
// name: the error names PRIV, one fault was injected, and PRIV stays whole, 600, with no temp file.
void expect_private_file_kept(const testing::TempDir& d, const WriteFaults& faults, StatusCode code) {
  const std::string priv = d.file("priv.bin");
  ASSERT_TRUE(write_file_atomic(priv, "a", 1).ok());
  ASSERT_EQ(::chmod(priv.c_str(), 0600), 0);
  FaultInjectionEnv env(faults);
  const Status s = write_file_atomic(priv, "bb", 2, &env);
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.code(), code) << s.to_string();
  EXPECT_NE(s.message().find(priv), std::string::npos) << s.message();
  EXPECT_EQ(env.faults_injected(), 1);
  EXPECT_EQ(entries(d.path()), std::vector<std::string>{"priv.bin"});
  struct stat st;
  ASSERT_EQ(::stat(priv.c_str(), &st), 0);
  EXPECT_EQ(st.st_size, 1);
  EXPECT_EQ(st.st_mode & 07777, 0600u);
}

TEST(WriteFileAtomic, FailedModeLeavesTheFileAndNoTemp) {
  // Keeping a replaced file's mode goes through the Env, so it can fail like any other step: the
  // old file stays whole and the temp file is removed.
  testing::TempDir d;
  expect_private_file_kept(d, {.fail_set_mode = EPERM}, StatusCode::kIOError);
  // A new file has no mode to keep: no set_mode call, so the fault is never met.
  FaultInjectionEnv env({.fail_set_mode = EPERM});
  EXPECT_TRUE(write_file_atomic(d.file("fresh.bin"), "c", 1, &env).ok());
}

TEST(WriteFileAtomic, FailedStatIsAnErrorNotANewFile) {
  // The replaced file's mode is read through the Env too: a stat that fails (EIO, EACCES) used to
  // count as "no file there", so the replacement got the default mode and a 600 file became 644.
  testing::TempDir d;
  expect_private_file_kept(d, {.fail_file_mode = EIO}, StatusCode::kIOError);
  // The default Env: a missing file has no mode (nullopt), an existing one its bits.
  auto none = default_env()->file_mode(d.file("none.bin"));
  ASSERT_TRUE(none.ok());
  EXPECT_FALSE(none->has_value());
  auto bits = default_env()->file_mode(d.file("priv.bin"));
  ASSERT_TRUE(bits.ok());
  EXPECT_EQ(bits->value_or(0), 0600u);
}

TEST(WriteFileAtomic, FaultOnlyOnFilteredPath) {
  testing::TempDir d;
  FaultInjectionEnv env({.fail_write_call = 0, .error = EIO, .path_filter = "b.txt"});
  ASSERT_TRUE(write_file_atomic(d.file("a.txt"), "x", 1, &env).ok());
  EXPECT_FALSE(write_file_atomic(d.file("b.txt"), "y", 1, &env).ok());
  EXPECT_EQ(entries(d.path()), std::vector<std::string>{"a.txt"});
}

// The longest file name directory `dir` takes (pathconf, as the test's own reading: NAME_MAX where
// the call fails).
size_t name_limit(const std::string& dir) {
  const long n = ::pathconf(dir.c_str(), _PC_NAME_MAX);
  return n > 0 ? static_cast<size_t>(n) : 255;
}

// Names of 246-255 bytes used to fail at the create ("File name too long": the temp file's name is
// longer than the target's); every name the file system takes is written, and nothing else is left.
TEST(WriteFileAtomic, WritesEveryNameUpToTheFileSystemsLimit) {
  testing::TempDir d;
  const size_t limit = name_limit(d.path());
  if (limit > 4096) GTEST_SKIP() << "this file system sets no name limit";
  for (size_t len = limit - 12; len <= limit; ++len) {
    SCOPED_TRACE(len);
    const std::string name(len, 'n');
    const Status s = write_file_atomic(d.file(name), "{}", 2);
    ASSERT_TRUE(s.ok()) << s.to_string();
    EXPECT_EQ(testing::read_all(d.file(name)), "{}");
    EXPECT_EQ(entries(d.path()), std::vector<std::string>{name});
    std::filesystem::remove(d.file(name));
  }
}

// A name above the limit is refused up front, by its length; lstat's ENAMETOOLONG, ENOTDIR or any
// error but ENOENT used to read as "absent", so the refusal came only at the create (or never).
TEST(CheckReplaceable, RefusesANameAboveTheLimitAndEveryStatErrorButAbsent) {
  testing::TempDir d;
  const size_t limit = name_limit(d.path());
  if (limit > 4096) GTEST_SKIP() << "this file system sets no name limit";
  const std::string too_long = d.file(std::string(limit + 1, 'n'));
  Status s = check_replaceable(too_long);
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument) << s.to_string();
  EXPECT_NE(s.message().find("file name is " + std::to_string(limit + 1) + " bytes, longer than the file system's "
                             "limit of " + std::to_string(limit)),
            std::string::npos)
      << s.to_string();
  s = write_file_atomic(too_long, "{}", 2);
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument) << s.to_string();
  EXPECT_EQ(entries(d.path()), std::vector<std::string>{});
  // A whole path beyond PATH_MAX (ENAMETOOLONG), and a path under a regular file (ENOTDIR).
  std::string deep = d.path();
  while (deep.size() <= PATH_MAX) deep += "/" + std::string(100, 'd');
  EXPECT_FALSE(check_replaceable(deep).ok());
  testing::write_all(d.file("reg"), "x");
  s = check_replaceable(d.file("reg/x"));
  EXPECT_FALSE(s.ok());
  EXPECT_NE(s.message().find("Not a directory"), std::string::npos) << s.to_string();
  EXPECT_TRUE(check_replaceable(d.file("absent")).ok());
  EXPECT_TRUE(check_replaceable(d.file("reg")).ok());
  EXPECT_TRUE(check_replaceable(d.file(std::string(limit, 'n'))).ok());
}

// Runs `body` as a user who is not root (uid/gid 65534 in a child when this process is root, where
// permission bits bind nobody; in this process otherwise) and returns its Status (the child reports
// OK or the message). nullopt when root cannot switch (no CAP_SETUID): the caller skips, loudly.
std::optional<Status> as_non_root(const std::function<Status()>& body) {
  if (::geteuid() != 0) return body();
  int fds[2];
  if (::pipe(fds) != 0) return std::nullopt;
  const pid_t pid = ::fork();
  if (pid < 0) return std::nullopt;
  if (pid == 0) {
    ::close(fds[0]);
    if (::setgroups(0, nullptr) != 0 || ::setgid(65534) != 0 || ::setuid(65534) != 0) ::_exit(3);
    const Status s = body();
    const std::string m = s.ok() ? "" : s.message();
    (void)!::write(fds[1], m.data(), m.size());
    ::_exit(s.ok() ? 0 : 1);
  }
  ::close(fds[1]);
  std::string m;
  char buf[512];
  for (ssize_t n; (n = ::read(fds[0], buf, sizeof buf)) > 0;) m.append(buf, static_cast<size_t>(n));
  ::close(fds[0]);
  int st = 0;
  ::waitpid(pid, &st, 0);
  if (!WIFEXITED(st) || WEXITSTATUS(st) == 3) return std::nullopt;
  return WEXITSTATUS(st) == 0 ? Status() : IOError(m);
}

// A directory that can be written but not read (mode 333): the rename in it succeeds, then opening
// it to fsync fails with EACCES. That used to turn the complete write into an error (exit 1 after
// the whole run); the write now succeeds (io::Env::sync_dir says why).
TEST(WriteFileAtomic, SucceedsInAWritableButUnreadableDirectory) {
  testing::TempDir d;
  ASSERT_EQ(::chmod(d.path().c_str(), 0755), 0);  // searchable by the non-root user
  const std::string drop = d.file("drop");
  ASSERT_EQ(::mkdir(drop.c_str(), 0333), 0);
  ASSERT_EQ(::chmod(drop.c_str(), 0333), 0);  // past the umask
  const std::string path = drop + "/stats.json";
  auto s = as_non_root([&] { return write_file_atomic(path, "{}", 2); });
  if (!s) GTEST_SKIP() << "SKIPPED LOUDLY: running as root and cannot switch to uid 65534 to test a mode 333 directory";
  EXPECT_TRUE(s->ok()) << s->to_string();
  ASSERT_EQ(::chmod(drop.c_str(), 0755), 0);
  EXPECT_EQ(testing::read_all(path), "{}");
  EXPECT_EQ(entries(drop), std::vector<std::string>{"stats.json"});
}

}  // namespace
}  // namespace strata::io
