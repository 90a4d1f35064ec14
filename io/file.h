// Read-only random-access files and the filesystem calls strata makes, behind an interface so
// tests can inject EIO, short reads and truncation (LevelDB's Env pattern, STYLE.md §3.5).
//
// Weights are read with pread (never mmap) so a later tiered store can issue its own reads.
// Thread safety: File::read_at is safe to call concurrently (pread has no shared offset).
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "core/status.h"

namespace strata::io {

class Env;  // io/env.h

class File {
 public:
  virtual ~File() = default;
  // Reads exactly n bytes at `offset` into dst. A short read (EOF) is kCorruption, an OS error
  // kIOError; both name the file, offset and length.
  [[nodiscard]] virtual Status read_at(uint64_t offset, size_t n, void* dst) const = 0;
  // Size in bytes when opened.
  virtual uint64_t size() const = 0;
  virtual const std::string& path() const = 0;
  // Re-reads the size from the OS (a shard that changed size since load must be detected).
  [[nodiscard]] virtual Result<uint64_t> current_size() const = 0;
  // The OS descriptor an asynchronous reader (io::UringReader) may read from directly, or -1 when
  // reads must go through read_at (wrappers such as the fault-injecting file).
  virtual int native_fd() const { return -1; }
};

// An owned OS file descriptor (closed on destruction).
class FdHandle {
 public:
  FdHandle() = default;
  explicit FdHandle(int fd) : fd_(fd) {}
  ~FdHandle();
  FdHandle(FdHandle&& o) noexcept : fd_(o.fd_) { o.fd_ = -1; }
  FdHandle& operator=(FdHandle&& o) noexcept;
  FdHandle(const FdHandle&) = delete;
  FdHandle& operator=(const FdHandle&) = delete;
  int get() const { return fd_; }
  bool valid() const { return fd_ >= 0; }

 private:
  int fd_ = -1;
};

// Alignment of offsets, lengths and buffers for O_DIRECT reads (covers 512 B and 4 KiB sectors).
inline constexpr uint64_t kDirectIoAlign = 4096;

// Opens `path` read-only with O_DIRECT (reads bypass the page cache; offsets, lengths and buffers
// must be multiples of kDirectIoAlign). kNotSupported when the file system refuses O_DIRECT.
[[nodiscard]] Result<FdHandle> open_direct(const std::string& path);

// True when `path` opens with O_DIRECT and an aligned 4 KiB read at offset 0 succeeds (some file
// systems accept the open flag and refuse the read). False for kNotSupported-style refusals
// (EINVAL); other errors (missing file, EIO) are returned.
[[nodiscard]] Result<bool> direct_read_works(const std::string& path);

// Bytes of `path` that the page cache holds (mincore over a mapping that reads nothing), in
// [0, size]; a file of size 0 holds 0. Errors: kIOError naming the file and the call (open, stat,
// mmap, mincore).
[[nodiscard]] Result<uint64_t> page_cache_bytes(const std::string& path);

// What a reader accepts at a path. Checkpoint files, configs, tokenizers and sessions must be
// regular files (a FIFO there would block forever, issue 13 item 8); a user's document may come
// through a pipe (`-f <(cmd)`).
enum class ReadFrom { kRegularFile, kFileOrStream };

// Opens `path` for reading (O_RDONLY|O_CLOEXEC). Errors: kNotFound (missing), kInvalidArgument (a
// directory, FIFO, socket or device: "expected a regular file"), kIOError. Never blocks in open().
[[nodiscard]] Result<std::unique_ptr<File>> open_file(const std::string& path);

// Reads a whole (small) file into a string, at most `max_bytes` (kResourceExhausted beyond).
// `from` says whether a FIFO/pipe/device is acceptable (read to EOF); errors as open_file.
[[nodiscard]] Result<std::string> read_file_to_string(const std::string& path, size_t max_bytes = 1ull << 30,
                                                      ReadFrom from = ReadFrom::kRegularFile);

// Writes `data` to `path` atomically through an io::AtomicFile (io/atomic_file.h: a temp file
// beside `path` (io::temp_path_for), fsync, close, rename over `path`, fsync the directory; a stale
// temp file of `path` left by a killed process is swept first). All writes go through `env` (null =
// default_env(); tests pass an io::FaultInjectionEnv). Errors name `path`, not the temp file (only
// a failed rename names both), and the step: kInvalidArgument (check_replaceable), kResourceExhausted
// (ENOSPC), kIOError (create, write, fsync, close, rename; a missing directory is ENOENT at create).
// On any error before the rename the temp file is removed and `path` keeps its previous contents;
// an error syncing the directory comes after the rename (`path` then holds the new bytes, which a
// crash might still undo).
[[nodiscard]] Status write_file_atomic(const std::string& path, const void* data, size_t n, Env* env = nullptr);

bool file_exists(const std::string& path);
// kResourceExhausted naming `path`, `what`, the bytes needed and free (with GiB) when the file
// system that holds `path` (its directory) has fewer than `bytes` free; OK when it has them, when
// statvfs fails or when the file system reports no size (zero blocks: ramfs): a check that cannot
// run must not stop a write that may fit. The writers (GGUF,
// safetensors) and `strata synth` call it before they write anything.
[[nodiscard]] Status check_free_space(const std::string& path, uint64_t bytes, const std::string& what);
// The longest file name (one path component, in bytes) the file system holding directory `dir`
// accepts: pathconf(_PC_NAME_MAX), NAME_MAX (255) where that fails, SIZE_MAX where it sets no limit.
size_t max_name_bytes(const std::string& dir);

// OK when `path` may be written as a new file or replace the one there: its file name fits the file
// system (max_name_bytes of its directory) and `path` does not exist (lstat: ENOENT) or is a regular
// file (not a link). Otherwise: kInvalidArgument for a name that is too long, naming its length and
// the limit, or for a node that is not a regular file, naming its kind (a device such as /dev/null,
// a FIFO, a directory, a symbolic link: writing by rename would replace that node with a file);
// kIOError for any other lstat error (ENAMETOOLONG, EACCES, ENOTDIR: never read as "absent").
[[nodiscard]] Status check_replaceable(const std::string& path);

// A File wrapper that fails on purpose, for fault-injection tests.
struct FaultSpec {
  uint64_t fail_offset = UINT64_MAX;  // reads touching [fail_offset, fail_offset+1) fail
  int error = 5;                      // errno to report (EIO); 0 = report a short read instead
};
std::unique_ptr<File> make_faulty_file(std::unique_ptr<File> base, FaultSpec spec);

}  // namespace strata::io
