// Temp files of atomic writes, and sweeping the ones a killed process left behind (issue #13 item
// 10: a killed `strata synth` left a 275 MB `.tmp` and the directory was then refused; a killed save
// left `F.tmp.<pid>`).
//
// Every atomic writer in strata (io::AtomicFile, safetensors shards, GGUF files) stages its bytes in
// a temp file beside PATH (temp_path_for) and renames it over PATH when complete, so PATH is always
// a whole old or whole new file and a temp file is never trusted by a reader. The temp file is
// `PATH.tmp.<pid>` (its target readable in a listing), or, where that name would not fit the file
// system (max_name_bytes: a name of 246-255 bytes plus ".tmp.<pid>"), the short
// `.strata-tmp.<pid>.<16 hex digits>` in the same directory, the digits a 64-bit FNV-1a hash of
// PATH's file name: whenever PATH's name fits, its temp file's does too, and the name stays the same
// for every call with PATH, which writers that name a temp file twice rely on.
// SIGKILL gives no chance to clean up, so the next writer of PATH sweeps what is provably stale. A
// temp file is swept only when all of these hold (anything else is left alone):
//   - its name is exactly TARGET ".tmp." PID, or (by sweep_stale_temps_of, which knows TARGET)
//     ".strata-tmp." PID "." the hash of TARGET, PID a canonical decimal in [1, INT32_MAX] (no sign,
//     no leading zero, nothing after it), and TARGET is a file the caller writes;
//   - it is a regular file (lstat: not a symlink, directory or FIFO) owned by this user (euid);
//   - PID is not this process and kill(PID, 0) fails with ESRCH (no such process).
// A live PID (even a reused one) keeps its file: a false "alive" only delays the sweep. Processes in
// another PID namespace writing into the same directory would look dead; strata does not share
// output directories across containers.
// Thread safety: the functions are reentrant; concurrent sweeps of one directory are harmless
// (removing an already removed file is not an error).
#pragma once

#include <functional>
#include <optional>
#include <string>
#include <string_view>

#include "core/status.h"
#include "io/env.h"

namespace strata::io {

// Where an atomic write of `path` stages its bytes: `path` + ".tmp." + this process's pid, or the
// short name of the file comment in `path`'s directory where that would not fit the file system.
std::string temp_path_for(const std::string& path);

// The pid of a temp file name `file_name` (no directory) of target `target_name`, or nullopt when
// the name is not exactly `target_name` ".tmp." PID (see the file comment for PID's syntax).
std::optional<int> parse_temp_pid(std::string_view file_name, std::string_view target_name);

// Splits a temp file name into (target name, pid) at its last ".tmp."; nullopt when it is not one.
struct TempName {
  std::string_view target;
  int pid = 0;
};
std::optional<TempName> split_temp_name(std::string_view file_name);

// True unless kill(pid, 0) says there is no such process (ESRCH). EPERM (another user's process)
// counts as alive.
bool process_alive(int pid);

struct SweepReport {
  int removed = 0;     // stale temp files removed
  int kept_live = 0;   // temp files of a live process (or of this one), left alone
  int kept_other = 0;  // matching names that are not regular files of this user, left alone
};

// Sweeps stale temp files (see the file comment) in directory `dir` whose target name satisfies
// `is_target` (long names only: a short name's target is known only as a hash). Removal goes
// through `env` (null = default_env()). Errors: kIOError naming the directory when it cannot be
// listed, or the file when a stale one cannot be removed; a missing
// directory is not an error (nothing to sweep).
[[nodiscard]] Result<SweepReport> sweep_stale_temps(const std::string& dir,
                                                    const std::function<bool(std::string_view)>& is_target,
                                                    Env* env = nullptr);

// Sweeps the stale temp files of the one file `path` beside it (PATH.tmp.<dead pid>, and the short
// names of PATH's hash with a dead pid).
[[nodiscard]] Result<SweepReport> sweep_stale_temps_of(const std::string& path, Env* env = nullptr);

// Sweeps every short-named temp file (`.strata-tmp.` PID `.` 16 hex digits) of a dead process in
// `dir`, whatever its target: only strata's writers make such names, and a dead writer's temp file
// is never read. For a writer that renames files aside under their temp names before removing them
// (`synth --force`): after a kill, the next run knows neither the long names nor their hashes.
[[nodiscard]] Result<SweepReport> sweep_stale_short_temps(const std::string& dir, Env* env = nullptr);

}  // namespace strata::io
