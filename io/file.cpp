#include "io/file.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <climits>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <string>
#include <vector>

#include "io/atomic_file.h"
#include "io/env.h"

namespace strata::io {

namespace {

std::string where(const std::string& path, uint64_t offset, size_t n) {
  return path + ": read of " + std::to_string(n) + " bytes at offset " + std::to_string(offset);
}

class PosixFile final : public File {
 public:
  PosixFile(std::string path, int fd, uint64_t size) : path_(std::move(path)), fd_(fd), size_(size) {}
  ~PosixFile() override { ::close(fd_); }

  Status read_at(uint64_t offset, size_t n, void* dst) const override {
    auto* p = static_cast<unsigned char*>(dst);
    size_t done = 0;
    while (done < n) {
      ssize_t r = ::pread(fd_, p + done, n - done, static_cast<off_t>(offset + done));
      if (r < 0) {
        if (errno == EINTR) continue;
        return IOError(where(path_, offset, n), errno);
      }
      if (r == 0) {
        return Corruption(where(path_, offset, n) + ": short read (" + std::to_string(done) +
                          " bytes before end of file; file truncated?)");
      }
      done += static_cast<size_t>(r);
    }
    return Status();
  }
  uint64_t size() const override { return size_; }
  const std::string& path() const override { return path_; }
  Result<uint64_t> current_size() const override {
    struct stat st;
    if (::fstat(fd_, &st) != 0) return IOError(path_ + ": fstat", errno);
    return static_cast<uint64_t>(st.st_size);
  }
  int native_fd() const override { return fd_; }

 private:
  std::string path_;
  int fd_;
  uint64_t size_;
};

class FaultyFile final : public File {
 public:
  FaultyFile(std::unique_ptr<File> base, FaultSpec spec) : base_(std::move(base)), spec_(spec) {}
  Status read_at(uint64_t offset, size_t n, void* dst) const override {
    if (spec_.fail_offset >= offset && spec_.fail_offset < offset + n) {
      if (spec_.error != 0) return IOError(where(base_->path(), offset, n) + " (injected)", spec_.error);
      return Corruption(where(base_->path(), offset, n) + ": short read (injected)");
    }
    return base_->read_at(offset, n, dst);
  }
  uint64_t size() const override { return base_->size(); }
  const std::string& path() const override { return base_->path(); }
  Result<uint64_t> current_size() const override { return base_->current_size(); }

 private:
  std::unique_ptr<File> base_;
  FaultSpec spec_;
};

}  // namespace

namespace {

// Opens `path` read-only, refuses anything but a regular file unless `from` allows streams, and
// hands back a blocking descriptor. *st gets its fstat. Where only regular files are wanted the
// open does not block (O_NONBLOCK: opening a FIFO with no writer would wait forever, issue 13 item
// 8); a stream the caller accepts (`-f <(cmd)`) is opened blocking, waiting for its writer, since a
// non-blocking reader that came first would read end of file.
Result<int> open_checked(const std::string& path, ReadFrom from, struct stat* st) {
  const int nonblock = from == ReadFrom::kRegularFile ? O_NONBLOCK : 0;
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | nonblock);
  if (fd < 0) {
    if (errno == ENOENT) return NotFound(path + ": no such file");
    return IOError(path + ": open", errno);
  }
  if (::fstat(fd, st) != 0) {
    int e = errno;
    ::close(fd);
    return IOError(path + ": fstat", e);
  }
  if (S_ISDIR(st->st_mode)) {
    ::close(fd);
    return InvalidArgument(path + ": is a directory, expected a file");
  }
  if (!S_ISREG(st->st_mode) && from != ReadFrom::kFileOrStream) {
    ::close(fd);
    const char* kind = S_ISFIFO(st->st_mode) ? "a FIFO" : S_ISCHR(st->st_mode) ? "a character device"
                       : S_ISSOCK(st->st_mode) ? "a socket" : S_ISBLK(st->st_mode) ? "a block device" : "not a regular file";
    return InvalidArgument(path + ": is " + std::string(kind) + ", expected a regular file");
  }
  const int flags = nonblock ? ::fcntl(fd, F_GETFL) : 0;
  if (nonblock && (flags < 0 || ::fcntl(fd, F_SETFL, flags & ~O_NONBLOCK) != 0)) {
    int e = errno;
    ::close(fd);
    return IOError(path + ": fcntl", e);
  }
  return fd;
}

}  // namespace

Result<std::unique_ptr<File>> open_file(const std::string& path) {
  struct stat st;
  STRATA_ASSIGN_OR_RETURN(int fd, open_checked(path, ReadFrom::kRegularFile, &st));
  return std::unique_ptr<File>(new PosixFile(path, fd, static_cast<uint64_t>(st.st_size)));
}

Result<std::string> read_file_to_string(const std::string& path, size_t max_bytes, ReadFrom from) {
  struct stat st;
  STRATA_ASSIGN_OR_RETURN(int fd, open_checked(path, from, &st));
  FdHandle owned(fd);
  const uint64_t size = static_cast<uint64_t>(st.st_size);
  if (S_ISREG(st.st_mode) && size > max_bytes)
    return ResourceExhausted(path + ": " + std::to_string(size) + " bytes, more than the limit of " +
                             std::to_string(max_bytes));
  // Read to EOF in every case: size 0 may be a pipe, a FIFO or a /proc file (fstat does not know
  // its length), and a regular file may grow while it is read; the limit holds either way.
  std::string s;
  if (S_ISREG(st.st_mode)) s.reserve(static_cast<size_t>(size));
  char buf[1 << 16];
  for (;;) {
    ssize_t r = ::read(fd, buf, sizeof buf);
    if (r < 0) {
      if (errno == EINTR) continue;
      return IOError(path + ": read", errno);
    }
    if (r == 0) break;
    if (s.size() + static_cast<size_t>(r) > max_bytes)
      return ResourceExhausted(path + ": more than the limit of " + std::to_string(max_bytes) + " bytes");
    s.append(buf, static_cast<size_t>(r));
  }
  return s;
}

size_t max_name_bytes(const std::string& dir) {
  errno = 0;
  const long n = ::pathconf(dir.empty() ? "." : dir.c_str(), _PC_NAME_MAX);
  if (n > 0) return static_cast<size_t>(n);
  if (n < 0 && errno == 0) return SIZE_MAX;  // the file system sets no limit
  return NAME_MAX;  // pathconf failed (a missing directory): the Linux limit
}

Status check_replaceable(const std::string& path) {
  // A name the file system cannot hold would fail only at the create, after the caller's work; lstat
  // alone does not say so on every file system (a shorter limit may read as "absent").
  const std::string name = std::filesystem::path(path).filename().string();
  if (const size_t limit = max_name_bytes(dir_of(path)); name.size() > limit)
    return InvalidArgument(path + ": file name is " + std::to_string(name.size()) +
                           " bytes, longer than the file system's limit of " + std::to_string(limit) +
                           " (give a shorter name)");
  struct stat st;
  if (::lstat(path.c_str(), &st) != 0) {
    if (errno == ENOENT) return Status();  // absent: nothing to replace
    // Anything else (ENAMETOOLONG for a whole path beyond PATH_MAX, EACCES, ENOTDIR, ELOOP) is not
    // "absent": say what the OS said instead of letting the write fail later with less context.
    return IOError(path + ": stat", errno);
  }
  if (S_ISREG(st.st_mode)) return Status();
  const char* kind = S_ISCHR(st.st_mode) || S_ISBLK(st.st_mode) ? "a device"
                     : S_ISFIFO(st.st_mode)                     ? "a FIFO"
                     : S_ISDIR(st.st_mode)                      ? "a directory"
                     : S_ISLNK(st.st_mode)                      ? "a symbolic link"
                                                                : "not a regular file";
  return InvalidArgument(path + ": exists and is " + kind + "; strata replaces only regular files (give another path)");
}

Status write_file_atomic(const std::string& path, const void* data, size_t n, Env* env) {
  STRATA_ASSIGN_OR_RETURN(std::unique_ptr<AtomicFile> f, AtomicFile::create(path, env));
  STRATA_RETURN_IF_ERROR(f->append(data, n));
  return f->commit();
}

bool file_exists(const std::string& path) {
  struct stat st;
  return ::stat(path.c_str(), &st) == 0;
}

Status check_free_space(const std::string& path, uint64_t bytes, const std::string& what) {
  std::string dir = std::filesystem::path(path).parent_path().string();
  if (dir.empty()) dir = ".";
  struct statvfs vfs {};
  if (::statvfs(dir.c_str(), &vfs) != 0) return Status();
  // A file system that reports no size at all (ramfs, some FUSE and network file systems: zero
  // blocks, zero free) cannot be checked: its zero free bytes are not a measurement.
  if (vfs.f_blocks == 0) return Status();
  const uint64_t free_bytes = static_cast<uint64_t>(vfs.f_bavail) * static_cast<uint64_t>(vfs.f_frsize);
  if (bytes <= free_bytes) return Status();
  auto gib = [](uint64_t b) {
    char buf[32];
    std::snprintf(buf, sizeof buf, "%.2f GiB", static_cast<double>(b) / (1ull << 30));
    return std::string(buf);
  };
  return ResourceExhausted(path + ": " + what + " needs " + std::to_string(bytes) + " bytes (" + gib(bytes) + ") but " +
                           dir + " has " + std::to_string(free_bytes) + " bytes free (" + gib(free_bytes) + ")");
}

FdHandle::~FdHandle() {
  if (fd_ >= 0) ::close(fd_);
}

FdHandle& FdHandle::operator=(FdHandle&& o) noexcept {
  if (this != &o) {
    if (fd_ >= 0) ::close(fd_);
    fd_ = o.fd_;
    o.fd_ = -1;
  }
  return *this;
}

Result<FdHandle> open_direct(const std::string& path) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_DIRECT);
  if (fd < 0) {
    if (errno == EINVAL) return NotSupported(path + ": the file system does not support O_DIRECT (use --buffered-io)");
    if (errno == ENOENT) return NotFound(path + ": no such file");
    return IOError(path + ": open with O_DIRECT", errno);
  }
  return FdHandle(fd);
}

Result<bool> direct_read_works(const std::string& path) {
  auto fd = open_direct(path);
  if (!fd.ok()) {
    if (fd.error().code() == StatusCode::kNotSupported) return false;
    return fd.error();
  }
  alignas(kDirectIoAlign) unsigned char buf[kDirectIoAlign];
  const ssize_t n = ::pread(fd->get(), buf, sizeof buf, 0);
  const int err = errno;
  if (n >= 0) return true;
  if (err == EINVAL || err == EOPNOTSUPP) return false;
  return IOError(path + ": O_DIRECT test read", err);
}

Result<uint64_t> page_cache_bytes(const std::string& path) {
  FdHandle fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
  if (!fd.valid()) return IOError(path + ": open", errno);
  struct stat st {};
  if (::fstat(fd.get(), &st) != 0) return IOError(path + ": stat", errno);
  if (st.st_size <= 0) return uint64_t{0};
  const size_t size = static_cast<size_t>(st.st_size);
  const size_t page = static_cast<size_t>(::sysconf(_SC_PAGESIZE));
  void* m = ::mmap(nullptr, size, PROT_READ, MAP_SHARED, fd.get(), 0);
  if (m == MAP_FAILED) return IOError(path + ": mmap for mincore", errno);
  std::vector<unsigned char> vec((size + page - 1) / page, 0);
  const int rc = ::mincore(m, size, vec.data());
  const int err = errno;
  ::munmap(m, size);
  if (rc != 0) return IOError(path + ": mincore", err);
  uint64_t resident = 0;
  for (size_t i = 0; i < vec.size(); ++i)
    if (vec[i] & 1) resident += std::min<uint64_t>(page, size - i * page);
  return resident;
}

std::unique_ptr<File> make_faulty_file(std::unique_ptr<File> base, FaultSpec spec) {
  return std::make_unique<FaultyFile>(std::move(base), spec);
}

}  // namespace strata::io
