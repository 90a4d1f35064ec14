// ScopedDir: temporary directories of the engine probe and bench's cold copy, removed at scope exit,
// and those a killed process left behind removed by the next one.
#include "tools/scoped_dir.h"

#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>

#include <gtest/gtest.h>

#include "tests/support/temp_dir.h"

namespace strata::tools {
namespace {

namespace fs = std::filesystem;

// The id of a process that has exited (a child reaped at once).
pid_t dead_pid() {
  const pid_t pid = ::fork();
  if (pid == 0) ::_exit(0);
  ::waitpid(pid, nullptr, 0);
  return pid;
}

// A directory with one file, both last modified `age` ago (the file `file_age` ago if given).
void make_dir(const fs::path& p, std::chrono::seconds age, std::chrono::seconds file_age = std::chrono::seconds(-1)) {
  fs::create_directories(p);
  std::ofstream(p / "model.safetensors") << "x";
  const auto now = fs::file_time_type::clock::now();
  fs::last_write_time(p / "model.safetensors", now - (file_age.count() >= 0 ? file_age : age));
  fs::last_write_time(p, now - age);
}

TEST(ScopedDir, MakeTempIsRemovedAtScopeExit) {
  testing::TempDir parent;
  std::string path;
  {
    auto d = ScopedDir::make_temp(parent.path(), "strata-x");
    ASSERT_TRUE(d.ok()) << d.error().to_string();
    path = d->path();
    EXPECT_EQ(fs::path(path).parent_path(), fs::path(parent.path()));
    EXPECT_EQ(fs::path(path).filename().string().rfind("strata-x-" + std::to_string(::getpid()) + "-", 0), 0u) << path;
    std::ofstream(path + "/f") << "data";
    ScopedDir moved = std::move(*d);
    EXPECT_TRUE(d->path().empty());
    EXPECT_TRUE(fs::exists(path + "/f"));
  }
  EXPECT_FALSE(fs::exists(path));
  EXPECT_TRUE(fs::is_empty(parent.path()));
}

TEST(ScopedDir, OnlyOldDirectoriesOfGoneProcessesAreSwept) {
  testing::TempDir parent;
  const fs::path p = parent.path();
  const std::string dead = std::to_string(dead_pid());
  const auto old = std::chrono::hours(1);
  make_dir(p / ("strata-x-" + dead + "-aaaaaa"), old);                             // swept
  make_dir(p / ("strata-x-" + dead + "-bbbbbb"), std::chrono::seconds(0));         // too recent
  make_dir(p / ("strata-x-" + std::to_string(::getppid()) + "-cccccc"), old);      // its process runs
  make_dir(p / ("strata-x-" + std::to_string(::getpid()) + "-dddddd"), old);       // this process
  make_dir(p / ("strata-y-" + dead + "-eeeeee"), old);                             // another prefix
  make_dir(p / "strata-x-notapid-ffffff", old);                                    // another shape
  make_dir(p / ("strata-x-" + dead), old);                                         // no suffix
  make_dir(p / ("strata-x-" + dead + "-gggggg"), old, std::chrono::seconds(0));    // a file just written
  make_dir(p / ("strata-x-0" + dead + "-hhhhhh"), old);                            // leading zero
  make_dir(p / "strata-x-4294967297-iiiiii", old);                                 // past a pid_t
  // A link named like a stale directory: neither it nor what it points to is touched.
  make_dir(p / "target", old);
  fs::create_directory_symlink(p / "target", p / ("strata-x-" + dead + "-jjjjjj"));
  // Another user's directory (checked where this test may change owners, i.e. as root).
  const bool as_root = ::geteuid() == 0;
  if (as_root) {
    make_dir(p / ("strata-x-" + dead + "-kkkkkk"), old);
    ASSERT_EQ(::chown((p / ("strata-x-" + dead + "-kkkkkk")).c_str(), 65534, 65534), 0);
  }
  {
    auto d = ScopedDir::make_temp(parent.path(), "strata-x");
    ASSERT_TRUE(d.ok()) << d.error().to_string();
  }
  EXPECT_FALSE(fs::exists(p / ("strata-x-" + dead + "-aaaaaa")));
  for (const std::string& kept :
       {"strata-x-" + dead + "-bbbbbb", "strata-x-" + std::to_string(::getppid()) + "-cccccc",
        "strata-x-" + std::to_string(::getpid()) + "-dddddd", "strata-y-" + dead + "-eeeeee",
        std::string("strata-x-notapid-ffffff"), "strata-x-" + dead, "strata-x-" + dead + "-gggggg",
        "strata-x-0" + dead + "-hhhhhh", std::string("strata-x-4294967297-iiiiii"), std::string("target")})
    EXPECT_TRUE(fs::exists(p / kept / "model.safetensors")) << kept;
  EXPECT_TRUE(fs::is_symlink(p / ("strata-x-" + dead + "-jjjjjj")));
  if (as_root) EXPECT_TRUE(fs::exists(p / ("strata-x-" + dead + "-kkkkkk") / "model.safetensors"));
}

TEST(ScopedDir, MoveAssignmentRemovesWhatItReplacesAndEmptyRemovesNothing) {
  testing::TempDir parent;
  { const ScopedDir none; }
  auto a = ScopedDir::make_temp(parent.path(), "strata-x");
  auto b = ScopedDir::make_temp(parent.path(), "strata-x");
  ASSERT_TRUE(a.ok() && b.ok());
  const std::string first = a->path(), second = b->path();
  ScopedDir d = std::move(*a);
  d = std::move(*b);
  EXPECT_FALSE(fs::exists(first));
  EXPECT_TRUE(fs::exists(second));
}

TEST(ScopedDir, MissingParentIsAnIOErrorNamingIt) {
  testing::TempDir parent;
  auto d = ScopedDir::make_temp(parent.path() + "/missing", "strata-x");
  ASSERT_FALSE(d.ok());
  EXPECT_EQ(d.error().code(), StatusCode::kIOError);
  EXPECT_NE(d.error().message().find(parent.path() + "/missing"), std::string::npos) << d.error().to_string();
}

}  // namespace
}  // namespace strata::tools
