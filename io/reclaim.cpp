#include "io/reclaim.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <csignal>

namespace strata::io {

namespace {

// Whether a descriptor or mapping other than ours holds the file open: the kernel grants a write
// lease only when no other open file description of the file exists (fs/locks.c,
// check_conflicting_open: EAGAIN). Taken and released at once; nothing is left behind. A process
// opening the file in between breaks the lease, which signals the holder: SIGIO by default, whose
// default action ends the process; SIGURG's default is to ignore it, and nothing here handles it.
bool held_open_elsewhere(int fd) {
  if (::fcntl(fd, F_SETSIG, SIGURG) != 0) return false;
  if (::fcntl(fd, F_SETLEASE, F_WRLCK) == 0) {
    ::fcntl(fd, F_SETLEASE, F_UNLCK);
    return false;
  }
  return errno == EAGAIN;
}

}  // namespace

Reclaim bytes_freed_by_removing(const std::string& path) {
  struct stat st {};
  if (::lstat(path.c_str(), &st) != 0 || !S_ISREG(st.st_mode) || st.st_nlink != 1) return {};
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK);
  if (fd < 0) return {static_cast<uint64_t>(st.st_blocks) * 512, false};
  const bool held = held_open_elsewhere(fd);
  ::close(fd);
  if (held) return {0, true};
  return {static_cast<uint64_t>(st.st_blocks) * 512, false};
}

}  // namespace strata::io
