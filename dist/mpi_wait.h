// Waiting helpers shared by the MPI transports (dist/mpi_job.cpp, dist/mpi_pipeline.cpp): a
// poll backoff, the injected-latency hold, MPI error text. Included only where MPI is built.
#pragma once

#include <mpi.h>

#include <chrono>
#include <cstdio>
#include <string>
#include <thread>

namespace strata::dist {

// Polls without giving up the core for the first MpiOptions::spin_us of a wait (a layer's answer, or the next
// layer's request during a decode step, usually comes within that; sched_yield would hand the core
// to any other runnable process for a whole time slice, milliseconds on a busy machine), then
// sleeps 20 us between polls, so an idle rank (between requests, or one more rank than cores)
// leaves the core to others.
class Backoff {
 public:
  explicit Backoff(double spin_us) : spin_(std::chrono::duration<double, std::micro>(spin_us)) {}
  void wait() {
    if (std::chrono::steady_clock::now() - start_ < spin_) return;
    std::this_thread::sleep_for(std::chrono::microseconds(20));
  }

 private:
  std::chrono::duration<double, std::micro> spin_;
  std::chrono::steady_clock::time_point start_ = std::chrono::steady_clock::now();
};

// Waits until `t` (MpiOptions::inject_latency_us): sleeps while more than 100 us remain (a sleep can
// overshoot by the timer slack, ~50 us), then polls the clock.
inline void hold_until(std::chrono::steady_clock::time_point t) {
  const auto slack = std::chrono::microseconds(100);
  if (const auto now = std::chrono::steady_clock::now(); t - now > slack) std::this_thread::sleep_for(t - now - slack);
  while (std::chrono::steady_clock::now() < t) {
  }
}

inline std::string mpi_error(int rc) {
  char text[MPI_MAX_ERROR_STRING];
  int len = 0;
  if (MPI_Error_string(rc, text, &len) != MPI_SUCCESS) return "MPI error " + std::to_string(rc);
  return std::string(text, static_cast<size_t>(len));
}

inline std::string seconds_text(double s) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%g", s);
  return buf;
}

}  // namespace strata::dist
