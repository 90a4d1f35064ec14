// Temp file names and the sweep of temp files left by killed writers (issue #13 item 10: "a killed
// save leaves F.tmp.<pid>"): strict name parsing, only regular files of this user whose process is
// gone are removed; a live process's temp file, symlinks, directories and look-alike names stay.
#include "io/temp_file.h"

#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>

#include "io/file.h"
#include "tests/support/files.h"
#include "tests/support/processes.h"
#include "tests/support/temp_dir.h"

namespace strata::io {
namespace {

bool exists(const std::string& p) {
  struct stat st;
  return ::lstat(p.c_str(), &st) == 0;
}

TEST(TempFile, NameIsPathDotTmpDotPid) {
  EXPECT_EQ(temp_path_for("/a/b.strata"), "/a/b.strata.tmp." + std::to_string(::getpid()));
}

TEST(TempFile, ParsesOnlyCanonicalPids) {
  EXPECT_EQ(parse_temp_pid("s.strata.tmp.123", "s.strata"), 123);
  EXPECT_EQ(parse_temp_pid("s.strata.tmp.2147483647", "s.strata"), 2147483647);
  for (const char* bad : {"s.strata.tmp.", "s.strata.tmp.0", "s.strata.tmp.012", "s.strata.tmp.+12", "s.strata.tmp.-12",
                          "s.strata.tmp.12a", "s.strata.tmp.12 ", "s.strata.tmp. 12", "s.strata.tmp.2147483648",
                          "s.strata.tmp.99999999999", "s.strata.tmp.12.tmp", "s.strata.tmp", "s.strata"})
    EXPECT_FALSE(parse_temp_pid(bad, "s.strata").has_value()) << bad;
  EXPECT_FALSE(parse_temp_pid("t.strata.tmp.123", "s.strata").has_value());   // another target
  EXPECT_FALSE(parse_temp_pid("xs.strata.tmp.123", "s.strata").has_value());  // a longer target
  auto t = split_temp_name("model-00001-of-00002.safetensors.tmp.77");
  ASSERT_TRUE(t.has_value());
  EXPECT_EQ(t->target, "model-00001-of-00002.safetensors");
  EXPECT_EQ(t->pid, 77);
  EXPECT_FALSE(split_temp_name(".tmp.77").has_value());
}

TEST(TempFile, LivenessOfProcesses) {
  EXPECT_TRUE(process_alive(::getpid()));
  testing::LiveChild child;
  EXPECT_TRUE(process_alive(child.pid()));
  const int dead = testing::dead_pid();
  ASSERT_GT(dead, 0);
  EXPECT_FALSE(process_alive(dead));
}

TEST(TempFile, SweepsOnlyStaleRegularFilesOfTheTarget) {
  testing::TempDir d;
  const std::string target = d.file("s.strata");
  testing::write_all(target, "current");
  const int dead = testing::dead_pid();
  testing::LiveChild live;
  const std::string stale = target + ".tmp." + std::to_string(dead);
  const std::string of_live = target + ".tmp." + std::to_string(live.pid());
  const std::string of_self = temp_path_for(target);
  const std::string other_target = d.file("t.strata.tmp." + std::to_string(dead));
  const std::string leading_zero = target + ".tmp.0" + std::to_string(dead);
  const std::string dir_named = target + ".tmp." + std::to_string(dead + 100000);  // a directory, not a file
  const std::string link_named = target + ".tmp." + std::to_string(dead + 200000);
  for (const std::string& p : {stale, of_live, of_self, other_target, leading_zero}) testing::write_all(p, "partial");
  ASSERT_EQ(::mkdir(dir_named.c_str(), 0700), 0);
  ASSERT_EQ(::symlink(target.c_str(), link_named.c_str()), 0);

  auto r = sweep_stale_temps_of(target);
  ASSERT_TRUE(r.ok()) << r.error().to_string();
  EXPECT_EQ(r->removed, 1);
  EXPECT_EQ(r->kept_live, 2);   // the live child's and this process's
  EXPECT_EQ(r->kept_other, 2);  // the directory and the symlink
  EXPECT_FALSE(exists(stale));
  for (const std::string& p : {of_live, of_self, other_target, leading_zero, dir_named, link_named, target})
    EXPECT_TRUE(exists(p)) << p;
  EXPECT_EQ(testing::read_all(target), "current");  // the symlink's target untouched
}

TEST(TempFile, SweepOfMissingDirectoryIsEmpty) {
  auto r = sweep_stale_temps_of("/nonexistent-strata-dir/x.strata");
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->removed, 0);
}

TEST(TempFile, WriteFileAtomicSweepsAStaleTempBesideIt) {
  testing::TempDir d;
  const std::string target = d.file("stats.json");
  const std::string stale = target + ".tmp." + std::to_string(testing::dead_pid());
  testing::LiveChild live;
  const std::string of_live = target + ".tmp." + std::to_string(live.pid());
  testing::write_all(stale, "half a fi");
  testing::write_all(of_live, "in progress");
  ASSERT_TRUE(write_file_atomic(target, "{}", 2).ok());
  EXPECT_FALSE(exists(stale));
  EXPECT_TRUE(exists(of_live));
  EXPECT_EQ(testing::read_all(target), "{}");
}

// The longest file name directory `dir` takes (pathconf, as the test's own reading: NAME_MAX where
// the call fails).
size_t name_limit(const std::string& dir) {
  const long n = ::pathconf(dir.c_str(), _PC_NAME_MAX);
  return n > 0 ? static_cast<size_t>(n) : 255;
}

std::string base(const std::string& p) { return std::filesystem::path(p).filename().string(); }

// A target name of 246-255 bytes used to get the temp name NAME.tmp.<pid>, past NAME_MAX: the write
// failed with "File name too long". Whenever the target's name fits, its temp file's name fits, in
// the same directory, and stays the same for every call (writers name their temp file twice).
TEST(TempFile, TempNameFitsWheneverTheTargetNameFits) {
  testing::TempDir d;
  const size_t limit = name_limit(d.path());
  if (limit > 4096) GTEST_SKIP() << "this file system sets no name limit";
  const std::string pid = std::to_string(::getpid());
  for (size_t len : {size_t{1}, size_t{100}, limit - 10 - pid.size(), limit - 5 - pid.size(), limit - 4 - pid.size(),
                     limit - 1, limit}) {
    SCOPED_TRACE(len);
    const std::string target = d.file(std::string(len, 't'));
    const std::string tmp = temp_path_for(target);
    EXPECT_EQ(std::filesystem::path(tmp).parent_path(), std::filesystem::path(target).parent_path());
    EXPECT_LE(base(tmp).size(), limit);
    EXPECT_EQ(temp_path_for(target), tmp);
    if (len + 5 + pid.size() <= limit)
      EXPECT_EQ(tmp, target + ".tmp." + pid);
    else
      EXPECT_EQ(base(tmp).rfind(".strata-tmp." + pid + ".", 0), 0u) << tmp;
  }
  // Two long targets in one directory get two temp files.
  EXPECT_NE(temp_path_for(d.file(std::string(limit, 'a'))), temp_path_for(d.file(std::string(limit, 'b'))));
  EXPECT_EQ(temp_path_for(std::string(limit, 'a')).find('/'), std::string::npos) << "a bare name stays bare";
}

// A killed writer of a long name leaves a short temp name; the next write of that name sweeps it
// (the hash in the name says whose it is), and no other target's or live process's.
TEST(TempFile, SweepRemovesTheStaleShortTempOfALongName) {
  testing::TempDir d;
  const size_t limit = name_limit(d.path());
  if (limit > 4096) GTEST_SKIP() << "this file system sets no name limit";
  const std::string target = d.file(std::string(limit - 2, 's'));
  const std::string other = d.file(std::string(limit - 2, 'o'));
  const std::string self = std::to_string(::getpid());
  // temp_path_for(path) with another pid in place of this process's.
  auto temp_of = [&](const std::string& path, int pid) {
    std::string t = temp_path_for(path);
    const size_t at = t.rfind(".strata-tmp." + self + ".");
    EXPECT_NE(at, std::string::npos) << t;
    return at == std::string::npos ? t : t.replace(at + 12, self.size(), std::to_string(pid));
  };
  const int dead = testing::dead_pid();
  testing::LiveChild live;
  const std::string stale = temp_of(target, dead), of_live = temp_of(target, live.pid());
  const std::string other_stale = temp_of(other, dead);
  for (const std::string& p : {stale, of_live, other_stale}) testing::write_all(p, "partial");
  auto r = sweep_stale_temps_of(target);
  ASSERT_TRUE(r.ok()) << r.error().to_string();
  EXPECT_EQ(r->removed, 1);
  EXPECT_FALSE(exists(stale));
  EXPECT_TRUE(exists(of_live));
  EXPECT_TRUE(exists(other_stale));
  // write_file_atomic sweeps it too, and leaves only the target.
  testing::write_all(stale, "partial");
  ASSERT_TRUE(write_file_atomic(target, "{}", 2).ok());
  EXPECT_FALSE(exists(stale));
  EXPECT_EQ(testing::read_all(target), "{}");
}

// A file renamed aside under its short temp name (synth --force) by a process killed before it
// removed it: the directory sweep takes every short name of a dead process, whatever its target;
// a live process's, a malformed one and another user's look-alike stay.
TEST(TempFile, ShortTempSweepTakesADeadProcesssShortNamesOnly) {
  testing::TempDir d;
  const int dead = testing::dead_pid();
  testing::LiveChild live;
  const std::string hash = "0123456789abcdef";
  const std::string stale = d.file(".strata-tmp." + std::to_string(dead) + "." + hash);
  const std::string of_live = d.file(".strata-tmp." + std::to_string(live.pid()) + "." + hash);
  const std::string short_hash = d.file(".strata-tmp." + std::to_string(dead) + ".0123");
  const std::string upper = d.file(".strata-tmp." + std::to_string(dead) + ".0123456789ABCDEF");
  const std::string long_form = d.file("model.safetensors.tmp." + std::to_string(dead));
  for (const std::string& p : {stale, of_live, short_hash, upper, long_form}) testing::write_all(p, "partial");
  auto r = sweep_stale_short_temps(d.path());
  ASSERT_TRUE(r.ok()) << r.error().to_string();
  EXPECT_EQ(r->removed, 1);
  EXPECT_EQ(r->kept_live, 1);
  EXPECT_FALSE(exists(stale));
  EXPECT_TRUE(exists(of_live));
  EXPECT_TRUE(exists(short_hash)) << "not 16 hex digits: not a strata temp name";
  EXPECT_TRUE(exists(upper)) << "strata writes lower-case hex";
  EXPECT_TRUE(exists(long_form)) << "long names are sweep_stale_temps', which knows their targets";
  EXPECT_TRUE(sweep_stale_short_temps(d.file("missing")).ok()) << "a missing directory has nothing to sweep";
}

}  // namespace
}  // namespace strata::io
