// ScopedDir: a directory the tools create for a while (the engine probe's synthetic checkpoint,
// bench's cold copy of a checkpoint) and remove with its contents when it goes out of scope.
//
// A process killed before that (Ctrl-C during `strata probe` or `strata bench`) cannot clean up, so
// temporary directories carry the creating process id: the next make_temp() with the same prefix in
// the same parent removes those of processes that are gone. Only real directories (not symbolic
// links) that this user owns, in which nothing changed for a while (so a live process this one
// cannot see, in another PID namespace sharing /tmp, keeps its directory while it works in it).
#pragma once

#include <string>

#include "core/status.h"

namespace strata::tools {

class ScopedDir {
 public:
  // Creates `<parent>/<prefix>-<pid>-XXXXXX` (mkdtemp) after removing stale siblings
  // `<prefix>-<pid>-*`: directories of this user whose process no longer runs and in which no
  // entry was modified for `stale_after_s` seconds. Errors: IOError naming `parent` when the
  // directory cannot be created there.
  [[nodiscard]] static Result<ScopedDir> make_temp(const std::string& parent, const std::string& prefix,
                                                   double stale_after_s = 600);
  ScopedDir() = default;
  ScopedDir(ScopedDir&& o) noexcept : path_(std::move(o.path_)) { o.path_.clear(); }
  ScopedDir& operator=(ScopedDir&& o) noexcept;
  ScopedDir(const ScopedDir&) = delete;
  ScopedDir& operator=(const ScopedDir&) = delete;
  ~ScopedDir() { remove(); }

  const std::string& path() const { return path_; }

 private:
  explicit ScopedDir(std::string p) : path_(std::move(p)) {}
  void remove();
  std::string path_;
};

}  // namespace strata::tools
