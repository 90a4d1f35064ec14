#include "io/env.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>

namespace strata::io {

Status os_error(const std::string& what, int err) {
  if (err == ENOSPC || err == EDQUOT) return ResourceExhausted(what + ": " + std::strerror(err));
  return IOError(what, err);
}

std::string dir_of(const std::string& path) {
  const size_t slash = path.rfind('/');
  if (slash == std::string::npos) return ".";
  if (slash == 0) return "/";
  return path.substr(0, slash);
}

Status WritableFile::append(const void* data, size_t n) {
  const auto* p = static_cast<const unsigned char*>(data);
  size_t done = 0;
  while (done < n) {
    const int64_t w = write_some(p + done, n - done);
    if (w < 0) {
      if (w == -EINTR) continue;
      return os_error(
          path_ + ": write of " + std::to_string(n - done) + " bytes at offset " + std::to_string(appended_),
          static_cast<int>(-w));
    }
    if (w == 0)  // write(2) never returns 0 for n > 0 on a regular file; do not spin if it does
      return IOError(path_ + ": write of " + std::to_string(n - done) + " bytes at offset " +
                     std::to_string(appended_) + " made no progress");
    done += static_cast<size_t>(w);
    appended_ += static_cast<uint64_t>(w);
  }
  return Status();
}

namespace {

std::string octal(uint32_t mode) {
  char b[16];
  std::snprintf(b, sizeof b, "%o", static_cast<unsigned>(mode));
  return b;
}

class PosixWritableFile final : public WritableFile {
 public:
  PosixWritableFile(std::string path, int fd) : WritableFile(std::move(path)), fd_(fd) {}
  ~PosixWritableFile() override {
    if (fd_ >= 0) ::close(fd_);
  }
  int64_t write_some(const void* data, size_t n) override {
    const ssize_t w = ::write(fd_, data, n);
    return w < 0 ? -static_cast<int64_t>(errno) : static_cast<int64_t>(w);
  }
  Status sync() override {
    if (::fsync(fd_) != 0) return os_error(path() + ": fsync", errno);
    return Status();
  }
  Status close() override {
    if (fd_ < 0) return Status();
    const int r = ::close(fd_);
    fd_ = -1;  // closed even on error (POSIX leaves the state unspecified; Linux always closes)
    if (r != 0) return os_error(path() + ": close", errno);
    return Status();
  }
  Result<uint64_t> size_on_disk() const override {
    struct stat st;
    if (::fstat(fd_, &st) != 0) return IOError(path() + ": fstat", errno);
    return static_cast<uint64_t>(st.st_size);
  }

 private:
  int fd_;
};

class PosixEnv final : public Env {
 public:
  Result<std::unique_ptr<WritableFile>> new_writable_file(const std::string& path) override {
    int fd;
    do {
      fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    } while (fd < 0 && errno == EINTR);
    if (fd < 0) return os_error(path + ": create", errno);
    return std::unique_ptr<WritableFile>(new PosixWritableFile(path, fd));
  }
  Status rename_file(const std::string& from, const std::string& to) override {
    if (::rename(from.c_str(), to.c_str()) != 0) return os_error(to + ": rename from " + from, errno);
    return Status();
  }
  Status remove_file(const std::string& path) override {
    if (::unlink(path.c_str()) != 0) {
      if (errno == ENOENT) return NotFound(path + ": remove: no such file");
      return IOError(path + ": remove", errno);
    }
    return Status();
  }
  Status set_mode(const std::string& path, uint32_t mode) override {
    if (::chmod(path.c_str(), static_cast<mode_t>(mode)) != 0) return os_error(path + ": chmod " + octal(mode), errno);
    return Status();
  }
  Result<std::optional<uint32_t>> file_mode(const std::string& path) override {
    struct stat st;
    if (::stat(path.c_str(), &st) != 0) {
      if (errno == ENOENT) return std::optional<uint32_t>();
      return os_error(path + ": stat", errno);
    }
    return std::optional<uint32_t>(static_cast<uint32_t>(st.st_mode & 07777));
  }
  Status sync_dir(const std::string& dir) override {
    const std::string d = dir.empty() ? "." : dir;
    const int fd = ::open(d.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    // DECISION: a directory this process may write but not read (mode 333, a drop box) cannot be
    // opened to fsync. The caller's rename in it has already happened, atomically: PATH holds the
    // whole new file and only the entry's durability across a crash is lost, which no retry can
    // give back. Failing here turned a completed write into an error (exit 1 after the whole run),
    // and refusing such directories up front would refuse writes that work; so this counts as a
    // directory that cannot be synced, as EINVAL does below, and the CLI warns once on stderr
    // before the work (cli/output_files.h: library floors never write to stderr).
    if (fd < 0 && errno == EACCES) return Status();
    if (fd < 0) return IOError(d + ": open directory to fsync", errno);
    const int r = ::fsync(fd);
    const int e = errno;
    ::close(fd);
    if (r != 0 && e != EINVAL) return IOError(d + ": fsync directory", e);
    return Status();
  }
};

}  // namespace

Env* default_env() {
  // Stateless, so sharing one instance is not global mutable state.
  static PosixEnv env;
  return &env;
}

}  // namespace strata::io
