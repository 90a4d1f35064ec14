// Ctrl-C and SIGTERM for long-running commands (issue #13 item 10): the first SIGINT or SIGTERM asks
// the command to stop cleanly (strata run then ends generation after the current token, prints the
// stats line, saves --save-session; bench removes its cold copy, eval and quantize their temporary
// files) and the command exits 128 + that signal (130 for SIGINT, 143 for SIGTERM, as the shell
// reports a death by it); a second signal of either kind exits at once with that status. SIGTERM is
// what `timeout`, `kill` and service managers send first: without it a bench killed so left its
// cold copy (the checkpoint's size) for the next bench's sweep.
//
// DECISION: STYLE.md §3.9 forbids global mutable state; a signal handler can reach nothing else, so
// this file holds the one exception: std::atomic flags and counts, all lock-free (static_assert) and
// therefore async-signal-safe. The handler only stores to them or calls _exit. Only the handler and
// InterruptGuard write them, and only one guard may exist at a time.
#pragma once

#include <atomic>

namespace strata::cli {

// Installs the SIGINT and SIGTERM handler for its lifetime (restoring the previous actions on
// destruction; a SIGTERM the process inherited as ignored stays ignored) and clears the flag. One
// at a time (STRATA_CHECK).
class InterruptGuard {
 public:
  InterruptGuard();
  ~InterruptGuard();
  InterruptGuard(const InterruptGuard&) = delete;
  InterruptGuard& operator=(const InterruptGuard&) = delete;

  // True once the first SIGINT or SIGTERM arrived. The flag a runtime cancel hook reads
  // (runtime::GenerateOptions::cancel).
  bool interrupted() const { return flag().load(); }
  const std::atomic<bool>* flag_ptr() const { return &flag(); }
  // The exit status of a command the first signal stopped: 128 + its number (kExitInterrupted where
  // none arrived).
  int exit_status() const;

 private:
  static std::atomic<bool>& flag();
};

// The exit status of a command ended by SIGINT (128 + 2, as the shell reports a SIGINT death).
inline constexpr int kExitInterrupted = 130;

}  // namespace strata::cli
