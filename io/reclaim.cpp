#include "io/reclaim.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include <cerrno>
#include <csignal>
#include <filesystem>

namespace strata::io {

namespace {

constexpr long kOverlayfsMagic = 0x794c7630;  // OVERLAYFS_SUPER_MAGIC, linux/magic.h

enum class Holder { kNone, kOther, kUnknown };

// Whether a descriptor or mapping other than ours holds the file open: the kernel grants a write
// lease only when no other open file description of the file exists (fs/locks.c,
// check_conflicting_open: EAGAIN). Taken and released at once; nothing is left behind. A process
// opening the file in between breaks the lease, which signals the holder: SIGIO by default, whose
// default action ends the process; SIGURG's default is to ignore it, and nothing here handles it.
Holder holder_of(int fd) {
  if (::fcntl(fd, F_SETSIG, SIGURG) != 0) return Holder::kUnknown;
  if (::fcntl(fd, F_SETLEASE, F_WRLCK) == 0) {
    ::fcntl(fd, F_SETLEASE, F_UNLCK);
    return Holder::kNone;
  }
  return errno == EAGAIN ? Holder::kOther : Holder::kUnknown;  // EACCES: not the owner; EINVAL: no leases
}

// Whether unlink(2) would be allowed: write and search on the directory, and in a sticky directory
// (mode 1777, /tmp) the file's or the directory's owner (or root). Checked before anything goes, so
// a refused removal cannot leave a config removed beside the weights it described.
bool may_remove(const std::string& path, const struct stat& st, std::string* why) {
  const std::filesystem::path parent = std::filesystem::path(path).parent_path();
  const std::string dir = parent.empty() ? std::string(".") : parent.string();
  struct stat ds {};
  if (::stat(dir.c_str(), &ds) != 0 || ::access(dir.c_str(), W_OK | X_OK) != 0) {
    why->assign("no write permission on ").append(dir);
    return false;
  }
  const uid_t me = ::geteuid();
  if ((ds.st_mode & S_ISVTX) != 0 && me != 0 && st.st_uid != me && ds.st_uid != me) {
    why->assign(dir).append(" is sticky and the file belongs to another user");
    return false;
  }
  return true;
}

}  // namespace

Reclaim bytes_freed_by_removing(const std::string& path) {
  Reclaim r;
  struct stat st {};
  if (::lstat(path.c_str(), &st) != 0) return r;
  r.removable = may_remove(path, st, &r.why);
  if (S_ISDIR(st.st_mode)) return r;
  if (S_ISLNK(st.st_mode)) {
    if (r.removable) r.why = "a symbolic link";
    return r;
  }
  if (!S_ISREG(st.st_mode)) return r;
  const uint64_t allocated = static_cast<uint64_t>(st.st_blocks) * 512;
  if (!r.removable) return r;
  if (st.st_nlink != 1) {
    r.why = "has other names (hard links)";
    return r;
  }
  struct statfs fs {};
  if (::statfs(path.c_str(), &fs) == 0 && static_cast<long>(fs.f_type) == kOverlayfsMagic) {
    r.why = "on overlayfs (a lower layer may keep its bytes)";
    return r;
  }
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK);
  const Holder h = fd >= 0 ? holder_of(fd) : Holder::kUnknown;
  if (fd >= 0) ::close(fd);
  if (h == Holder::kOther) {
    r.held_open = true;
    r.why = "held open by another process (a strata serve or run on it?)";
  } else if (h == Holder::kUnknown) {
    r.why = "not known to be unheld (not its owner, or no leases on this file system)";
  } else {
    r.bytes = allocated;
    r.frees = true;
  }
  return r;
}

std::optional<uint64_t> free_inodes(const std::string& dir) {
  struct statvfs vfs {};
  if (::statvfs(dir.c_str(), &vfs) != 0 || vfs.f_files == 0) return std::nullopt;
  return static_cast<uint64_t>(vfs.f_favail);
}

}  // namespace strata::io
