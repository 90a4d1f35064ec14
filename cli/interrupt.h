// Ctrl-C for long-running commands (issue #13 item 10): the first SIGINT asks the command to stop
// cleanly (strata run then ends generation after the current token, prints the stats line, saves
// --save-session and exits 130); a second SIGINT exits at once with status 130.
//
// DECISION: STYLE.md §3.9 forbids global mutable state; a signal handler can reach nothing else, so
// this file holds the one exception: an std::atomic<bool> flag and an atomic count, both lock-free
// (static_assert) and therefore async-signal-safe. The handler only stores to them or calls _exit.
// Only the handler and InterruptGuard write them, and only one guard may exist at a time.
#pragma once

#include <atomic>

namespace strata::cli {

// Installs the SIGINT handler for its lifetime (restoring the previous action on destruction) and
// clears the flag. One at a time (STRATA_CHECK).
class InterruptGuard {
 public:
  InterruptGuard();
  ~InterruptGuard();
  InterruptGuard(const InterruptGuard&) = delete;
  InterruptGuard& operator=(const InterruptGuard&) = delete;

  // True once the first SIGINT arrived. The flag a runtime cancel hook reads
  // (runtime::GenerateOptions::cancel).
  bool interrupted() const { return flag().load(); }
  const std::atomic<bool>* flag_ptr() const { return &flag(); }

 private:
  static std::atomic<bool>& flag();
};

// The exit status of a command ended by SIGINT (128 + 2, as the shell reports a SIGINT death).
inline constexpr int kExitInterrupted = 130;

}  // namespace strata::cli
