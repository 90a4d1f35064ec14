// Progress of a long operation (load, synth, long prefill, calibrate, probe), reported through a
// callback the application installs; library floors never draw anything themselves (STYLE.md §3.7:
// "long operations report progress through a callback", as ds4's ds4_session_progress_fn).
//
// A floor calls the callback from the thread doing the work, at most a few times per second of work
// (at natural boundaries: a layer bound, a chunk prefilled, a tensor written), with monotonically
// growing `done`, and once more with `finished` set when the operation ends (success or not). The
// cli/ floor renders it as a bar on stderr when stderr is a terminal (cli/progress_bar.h).
// Thread safety: a ProgressFn is called from one thread at a time per operation.
#pragma once

#include <cstdint>
#include <functional>
#include <string_view>

namespace strata {

struct ProgressEvent {
  std::string_view task;   // what runs: "load", "synth", "prefill", "calibrate", "probe"
  std::string_view unit;   // what `done` / `total` count: "bytes", "tokens", "layers", "tensors", "steps"
  uint64_t done = 0;       // units finished so far (0 <= done <= total when total > 0)
  uint64_t total = 0;      // units in the whole operation; 0 = unknown
  std::string_view detail; // optional short note ("layer 12", "weights"); may be empty
  bool finished = false;   // the last event of this operation
};

// Receives progress events; an empty function means nobody listens.
using ProgressFn = std::function<void(const ProgressEvent&)>;

// Calls `fn` when it is set.
inline void report_progress(const ProgressFn& fn, const ProgressEvent& e) {
  if (fn) fn(e);
}

}  // namespace strata
