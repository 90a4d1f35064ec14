// Processes for temp-file sweep tests (issue #13): the pid of a process that is certainly gone, and
// a child that stays alive until the test ends.
#pragma once

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

namespace strata::testing {

// Forks a child that exits at once and reaps it: its pid names no process until the kernel reuses
// it (pids are handed out in increasing order, so not within a test).
inline int dead_pid() {
  const pid_t pid = ::fork();
  if (pid == 0) ::_exit(0);
  if (pid < 0) return -1;
  int st = 0;
  ::waitpid(pid, &st, 0);
  return static_cast<int>(pid);
}

// A child process that sleeps until destroyed (SIGKILL + reap).
class LiveChild {
 public:
  LiveChild() {
    pid_ = ::fork();
    if (pid_ == 0) {
      for (;;) ::pause();
    }
  }
  ~LiveChild() {
    if (pid_ > 0) {
      ::kill(pid_, SIGKILL);
      int st = 0;
      ::waitpid(pid_, &st, 0);
    }
  }
  LiveChild(const LiveChild&) = delete;
  LiveChild& operator=(const LiveChild&) = delete;
  int pid() const { return static_cast<int>(pid_); }

 private:
  pid_t pid_ = -1;
};

}  // namespace strata::testing
