#include "cli/interrupt.h"

#include <signal.h>
#include <unistd.h>

#include "core/status.h"

namespace strata::cli {

namespace {

// The signal handler's only state (see the DECISION in interrupt.h).
std::atomic<bool> g_interrupted{false};
std::atomic<int> g_sigint_count{0};
std::atomic<bool> g_guard_active{false};
static_assert(std::atomic<bool>::is_always_lock_free && std::atomic<int>::is_always_lock_free,
              "a signal handler may only touch lock-free atomics");

struct sigaction g_previous;  // written and read only by the single active guard, outside the handler

extern "C" void on_sigint(int) {
  // Async-signal-safe: atomic stores and _exit only.
  if (g_sigint_count.fetch_add(1) >= 1) _exit(kExitInterrupted);
  g_interrupted.store(true);
}

}  // namespace

std::atomic<bool>& InterruptGuard::flag() { return g_interrupted; }

InterruptGuard::InterruptGuard() {
  STRATA_CHECK(!g_guard_active.exchange(true), "only one InterruptGuard at a time");
  g_interrupted.store(false);
  g_sigint_count.store(0);
  struct sigaction sa = {};
  sa.sa_handler = on_sigint;
  sigemptyset(&sa.sa_mask);
  sa.sa_flags = SA_RESTART;  // blocking reads and writes resume; the flag is polled between tokens
  ::sigaction(SIGINT, &sa, &g_previous);
}

InterruptGuard::~InterruptGuard() {
  ::sigaction(SIGINT, &g_previous, nullptr);
  g_guard_active.store(false);
}

}  // namespace strata::cli
