#include "cli/interrupt.h"

#include <signal.h>
#include <unistd.h>

#include "core/status.h"

namespace strata::cli {

namespace {

// The signal handler's only state (see the DECISION in interrupt.h).
std::atomic<bool> g_interrupted{false};
std::atomic<int> g_signal_count{0};
std::atomic<int> g_first_signal{0};
std::atomic<bool> g_guard_active{false};
static_assert(std::atomic<bool>::is_always_lock_free && std::atomic<int>::is_always_lock_free,
              "a signal handler may only touch lock-free atomics");

constexpr int kSignals[] = {SIGINT, SIGTERM};
struct sigaction g_previous[2];  // written and read only by the single active guard, outside the handler

extern "C" void on_signal(int sig) {
  // Async-signal-safe: atomic stores and _exit only.
  if (g_signal_count.fetch_add(1) >= 1) _exit(128 + sig);
  g_first_signal.store(sig);
  g_interrupted.store(true);
}

}  // namespace

std::atomic<bool>& InterruptGuard::flag() { return g_interrupted; }

int InterruptGuard::exit_status() const {
  const int sig = g_first_signal.load();
  return sig != 0 ? 128 + sig : kExitInterrupted;
}

InterruptGuard::InterruptGuard() {
  STRATA_CHECK(!g_guard_active.exchange(true), "only one InterruptGuard at a time");
  g_interrupted.store(false);
  g_signal_count.store(0);
  g_first_signal.store(0);
  struct sigaction sa = {};
  sa.sa_handler = on_signal;
  sigemptyset(&sa.sa_mask);
  sa.sa_flags = SA_RESTART;  // blocking reads and writes resume; the flag is polled between tokens
  for (size_t i = 0; i < 2; ++i) {
    // A SIGTERM the parent set to be ignored (`trap "" TERM`) stays ignored. SIGINT is taken either
    // way: a shell without job control starts every background command with SIGINT ignored, and
    // scripts (tests/cli/interrupt_check.sh) stop such commands with it.
    ::sigaction(kSignals[i], nullptr, &g_previous[i]);
    if (kSignals[i] == SIGINT || g_previous[i].sa_handler != SIG_IGN) ::sigaction(kSignals[i], &sa, nullptr);
  }
}

InterruptGuard::~InterruptGuard() {
  for (size_t i = 0; i < 2; ++i) ::sigaction(kSignals[i], &g_previous[i], nullptr);
  g_guard_active.store(false);
}

}  // namespace strata::cli
