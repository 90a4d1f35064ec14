// A process saving over an existing file is SIGKILLed at random points (issue #13: "a test kills a
// saving process at random points: the previous file is intact and no partial file is left or
// trusted"). After each kill the target holds a complete version, old or new, that passes its own
// checksum, and the killed writer's temp file is swept as stale. The runtime twin of this test
// kills session-file saves (tests/runtime/session_kill_test.cpp).
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <filesystem>
#include <optional>
#include <random>
#include <string>

#include "io/file.h"
#include "io/temp_file.h"
#include "tests/support/files.h"
#include "tests/support/temp_dir.h"

namespace strata::io {
namespace {

uint64_t fnv1a(const char* p, size_t n) {
  uint64_t h = 1469598103934665603ull;
  for (size_t i = 0; i < n; ++i) h = (h ^ static_cast<uint8_t>(p[i])) * 1099511628211ull;
  return h;
}

// A self-checking file: "KILLTEST", u64 version, u64 n, n payload bytes, u64 FNV-1a of the rest.
// Sizes vary by version (4 KiB .. 260 KiB) so kills land in every phase of a write.
std::string make_version(uint64_t v) {
  const uint64_t n = 4096 + (v * 2654435761ull) % (256u << 10);
  std::string s = "KILLTEST";
  s.append(reinterpret_cast<const char*>(&v), 8);
  s.append(reinterpret_cast<const char*>(&n), 8);
  for (uint64_t i = 0; i < n; ++i) s.push_back(static_cast<char>((i * 131 + v) & 0xFF));
  const uint64_t h = fnv1a(s.data(), s.size());
  s.append(reinterpret_cast<const char*>(&h), 8);
  return s;
}

// The version of a complete, intact file; nullopt for anything partial or damaged.
std::optional<uint64_t> check_version(const std::string& s) {
  if (s.size() < 32 || s.compare(0, 8, "KILLTEST") != 0) return std::nullopt;
  uint64_t v, n, h;
  std::memcpy(&v, s.data() + 8, 8);
  std::memcpy(&n, s.data() + 16, 8);
  if (s.size() != 32 + n) return std::nullopt;
  std::memcpy(&h, s.data() + 24 + n, 8);
  if (h != fnv1a(s.data(), 24 + n)) return std::nullopt;
  return v;
}

TEST(KillSave, WriteFileAtomicKilledAtRandomPointsLeavesOldOrNewFile) {
  testing::TempDir d;
  const std::string path = d.file("state.bin");
  const std::string first = make_version(1);
  ASSERT_TRUE(write_file_atomic(path, first.data(), first.size()).ok());
  const unsigned seed = static_cast<unsigned>(std::random_device{}());
  std::mt19937 rng(seed);
  SCOPED_TRACE("seed " + std::to_string(seed));
  uint64_t last = 1;
  int advanced = 0;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
  for (int it = 0; it < 20 && std::chrono::steady_clock::now() < deadline; ++it) {
    const pid_t pid = ::fork();
    ASSERT_GE(pid, 0);
    if (pid == 0) {  // the saver: newer versions, forever, until killed
      for (uint64_t v = last + 1;; ++v) {
        const std::string s = make_version(v);
        if (!write_file_atomic(path, s.data(), s.size()).ok()) ::_exit(3);
      }
    }
    ::usleep(static_cast<useconds_t>(rng() % 150000));  // 0-150 ms: none to many saves in, mid-write
    ::kill(pid, SIGKILL);
    int st = 0;
    ASSERT_EQ(::waitpid(pid, &st, 0), pid);
    ASSERT_TRUE(WIFSIGNALED(st)) << "the saver failed on its own (exit " << WEXITSTATUS(st) << ")";

    const std::optional<uint64_t> v = check_version(testing::read_all(path));
    ASSERT_TRUE(v.has_value()) << "iteration " << it << ": the target is not a complete version";
    ASSERT_GE(*v, last) << "iteration " << it << ": an older version came back";
    advanced += *v > last ? 1 : 0;
    last = *v;
    // At most the killed saver's one temp file is left, and it is swept as stale.
    auto swept = sweep_stale_temps_of(path);
    ASSERT_TRUE(swept.ok()) << swept.error().to_string();
    EXPECT_LE(swept->removed, 1);
    int files = 0;
    for (const auto& e : std::filesystem::directory_iterator(d.path())) {
      EXPECT_EQ(e.path().filename().string(), "state.bin") << "left behind after the sweep";
      ++files;
    }
    EXPECT_EQ(files, 1);
  }
  EXPECT_GT(advanced, 0) << "no save ever completed; the kills did not exercise a replacement";
}

}  // namespace
}  // namespace strata::io
