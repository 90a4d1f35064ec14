// Session files under injected write faults and killed saves (issue #13): ENOSPC, EIO, short
// writes, failed fsync / close / rename give an error naming the file and the step, the previous
// session file still loads and no temp file is left; a save SIGKILLed at random points leaves the
// old or the new complete session (it loads); a stale `F.tmp.<pid>` of a dead process is swept by
// the next save while a live process's is left alone.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <filesystem>
#include <random>

#include "io/fault_env.h"
#include "io/temp_file.h"
#include "runtime/session_file.h"
#include "tests/support/files.h"
#include "tests/support/processes.h"
#include "tests/support/temp_dir.h"
#include "tests/support/tiny_suite.h"

namespace strata::runtime {
namespace {

std::vector<std::string> entries(const std::string& dir) {
  std::vector<std::string> out;
  for (const auto& e : std::filesystem::directory_iterator(dir)) out.push_back(e.path().filename().string());
  std::sort(out.begin(), out.end());
  return out;
}

class SessionFileFaults : public testing::TinyModelSuite<SessionFileFaults> {
 protected:
  static void SetUpTestSuite() {
    TinyModelSuite::SetUpTestSuite();
    if (model_ == nullptr) return;
    auto id = model_identity(testing::tiny_dir() + "/checkpoint");
    ASSERT_TRUE(id.ok()) << id.error().to_string();
    id_ = *id;
  }
  // The fixture prompt, then `extra` greedy tokens (different lengths give different files).
  static Session make_session(int extra) {
    Session s(*model_);
    EXPECT_TRUE(s.append(ids_, nullptr, 64).ok());
    for (int i = 0; i < extra; ++i) {
      auto l = s.last_logits();
      const int32_t next[1] = {static_cast<int32_t>(std::max_element(l.begin(), l.end()) - l.begin())};
      EXPECT_TRUE(s.append(next, nullptr).ok());
    }
    return s;
  }
  // The token count of the session saved at `path`, or -1 when it does not load.
  static int64_t loads_with(const std::string& path) {
    auto l = load_session(*model_, id_, path);
    if (!l.ok()) {
      ADD_FAILURE() << l.error().to_string();
      return -1;
    }
    return l->n_past();
  }
  inline static ModelIdentity id_;
  testing::TempDir dir_;
};

struct SaveFault {
  const char* name;
  io::WriteFaults faults;
  StatusCode code;
  const char* says;
};

const SaveFault kSaveFaults[] = {
    {"EnospcFirstWrite",
     {.fail_write_call = 0, .error = ENOSPC},
     StatusCode::kResourceExhausted,
     "write of 64 bytes at offset 0: No space left on device"},
    {"EioMidPayload",
     {.fail_write_call = 3, .error = EIO, .max_write_bytes = 4096},
     StatusCode::kIOError,
     "at offset 8256: Input/output error"},
    {"DiskFullMidPayload",
     {.fail_after_bytes = 10000, .error = ENOSPC},
     StatusCode::kResourceExhausted,
     "at offset 10000: No space left on device"},
    {"CreateEio", {.fail_create = EIO}, StatusCode::kIOError, "create (injected)"},
    {"FsyncEio", {.fail_sync = EIO}, StatusCode::kIOError, "fsync (injected)"},
    {"CloseEio", {.fail_close = EIO}, StatusCode::kIOError, "close (injected)"},
    {"RenameEio", {.fail_rename = EIO}, StatusCode::kIOError, "rename from"},
};

TEST_F(SessionFileFaults, EachFaultGivesAClearErrorAndKeepsThePreviousFile) {
  const std::string p = dir_.file("s.strata");
  Session old_s = make_session(0), new_s = make_session(3);
  ASSERT_TRUE(save_session(old_s, id_, p).ok());
  const std::string old_bytes = testing::read_all(p);
  for (const SaveFault& c : kSaveFaults) {
    SCOPED_TRACE(c.name);
    io::FaultInjectionEnv env(c.faults);
    Status s = save_session(new_s, id_, p, &env);
    ASSERT_FALSE(s.ok());
    EXPECT_EQ(s.code(), c.code) << s.to_string();
    EXPECT_NE(s.message().find("save session " + p), std::string::npos) << s.to_string();
    EXPECT_NE(s.message().find(c.says), std::string::npos) << s.to_string();
    // The temp file is gone after the failure: only a failed rename, where both exist, names it.
    if (c.faults.fail_rename == 0) EXPECT_EQ(s.message().find(".tmp."), std::string::npos) << s.to_string();
    EXPECT_EQ(testing::read_all(p), old_bytes);
    EXPECT_EQ(entries(dir_.path()), std::vector<std::string>{"s.strata"});
    EXPECT_EQ(loads_with(p), old_s.n_past());
  }
}

// `strata run --save-session /missing/dir/s.bin` named the temp file s.bin.tmp.<pid>, a file the
// user never named; the error names the path given, as write_file_atomic's do.
TEST_F(SessionFileFaults, SaveIntoAMissingDirectoryNamesThePathGiven) {
  const std::string p = dir_.file("no/such/dir/s.strata");
  Status s = save_session(make_session(0), id_, p);
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find("save session " + p + ": " + p + ": create: No such file or directory"), std::string::npos)
      << s.to_string();
  EXPECT_EQ(s.message().find(".tmp."), std::string::npos) << s.to_string();
}

TEST_F(SessionFileFaults, ShortWritesGiveAnIdenticalFile) {
  Session s = make_session(2);
  ASSERT_TRUE(save_session(s, id_, dir_.file("a.strata")).ok());
  io::FaultInjectionEnv env({.max_write_bytes = 1000});
  ASSERT_TRUE(save_session(s, id_, dir_.file("b.strata"), &env).ok());
  EXPECT_EQ(testing::read_all(dir_.file("a.strata")), testing::read_all(dir_.file("b.strata")));
  EXPECT_GT(env.write_calls(), 10);
}

TEST_F(SessionFileFaults, NextSaveSweepsADeadSaversTempOnly) {
  const std::string p = dir_.file("s.strata");
  testing::LiveChild live;
  const std::string stale = p + ".tmp." + std::to_string(testing::dead_pid());
  const std::string of_live = p + ".tmp." + std::to_string(live.pid());
  testing::write_all(stale, "STRATASS half a session");
  testing::write_all(of_live, "STRATASS being written");
  Session s = make_session(1);
  ASSERT_TRUE(save_session(s, id_, p).ok());
  EXPECT_FALSE(std::filesystem::exists(stale));
  EXPECT_TRUE(std::filesystem::exists(of_live));
  EXPECT_EQ(loads_with(p), s.n_past());
}

// A child saves two sessions in turn over one file until SIGKILLed after a random delay; ~20
// rounds. The file must always load as one of the two, and the killed child's temp is swept.
TEST_F(SessionFileFaults, SaveKilledAtRandomPointsLeavesALoadableSession) {
  const std::string p = dir_.file("s.strata");
  Session a = make_session(0), b = make_session(5);
  ASSERT_TRUE(save_session(a, id_, p).ok());
  const unsigned seed = static_cast<unsigned>(std::random_device{}());
  SCOPED_TRACE("seed " + std::to_string(seed));
  std::mt19937 rng(seed);
  int saw_b = 0;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(40);
  for (int it = 0; it < 20 && std::chrono::steady_clock::now() < deadline; ++it) {
    const pid_t pid = ::fork();
    ASSERT_GE(pid, 0);
    if (pid == 0) {
      for (int k = 0;; ++k)
        if (!save_session(k % 2 == 0 ? b : a, id_, p).ok()) ::_exit(3);
    }
    ::usleep(static_cast<useconds_t>(rng() % 150000));
    ::kill(pid, SIGKILL);
    int st = 0;
    ASSERT_EQ(::waitpid(pid, &st, 0), pid);
    ASSERT_TRUE(WIFSIGNALED(st)) << "the saver failed on its own (exit " << WEXITSTATUS(st) << ")";
    const int64_t n = loads_with(p);
    ASSERT_TRUE(n == a.n_past() || n == b.n_past()) << "round " << it << ": loaded " << n << " tokens";
    saw_b += n == b.n_past() ? 1 : 0;
    auto swept = io::sweep_stale_temps_of(p);
    ASSERT_TRUE(swept.ok()) << swept.error().to_string();
    EXPECT_EQ(entries(dir_.path()), std::vector<std::string>{"s.strata"});
  }
  EXPECT_GT(saw_b, 0) << "no save completed before a kill; nothing was replaced";
}

}  // namespace
}  // namespace strata::runtime
