// A progress bar on stderr for long operations (load, synth, long prefill, calibrate, probe): the
// terminal renderer of core/progress.h events. Draws only when the stream is a terminal, so logs,
// pipes and CI output stay clean; redraws at most ten times a second; when the operation finishes it
// leaves one line with the bar at 100% and the time taken (a bar destroyed unfinished is cleared).
//   [load] [##########..........]  52%  6.1 / 11.7 GB  3.2 s  ETA 2.9 s  layer 21
// Thread safety: one operation at a time; events come from the thread doing the work.
#pragma once

#include <chrono>
#include <cstdio>
#include <string>

#include "core/progress.h"

namespace strata::cli {

class ProgressBar {
 public:
  // `out` must outlive the bar. Drawing is on only when `out` is a terminal (isatty).
  explicit ProgressBar(std::FILE* out = stderr);
  ~ProgressBar();
  ProgressBar(const ProgressBar&) = delete;
  ProgressBar& operator=(const ProgressBar&) = delete;

  bool enabled() const { return tty_; }
  // A callback drawing into this bar; empty when drawing is off (callers then skip reporting).
  ProgressFn fn();
  void on_event(const ProgressEvent& e);
  // Erases the bar's line if one is drawn.
  void clear();

 private:
  int terminal_width() const;  // columns of `out_` (80 when unknown)

  std::FILE* out_;
  bool tty_ = false;
  bool drawn_ = false;
  std::string task_;
  std::chrono::steady_clock::time_point start_, last_draw_;
};

// The text of one bar (exposed for tests): `elapsed_s` since the operation began, `width` columns.
std::string render_progress(const ProgressEvent& e, double elapsed_s, int width);

}  // namespace strata::cli
