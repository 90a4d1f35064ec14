// Env: every file strata writes goes through this interface, so tests can inject a full disk
// (ENOSPC), EIO, short writes and failed syncs or renames (LevelDB's Env / WritableFile pattern,
// STYLE.md §3.5; issue #13 "Writes through an Env-like interface").
//
// Writers take an `Env*` as an optional parameter or options field; null means default_env(), the
// POSIX one. There is no process-wide setter: a test hands its FaultInjectionEnv (io/fault_env.h) to
// the one writer under test, so other threads and tests keep writing to the real disk.
//
// Atomic replacement (io::AtomicFile behind write_file_atomic, session files and eval base files;
// safetensors shards; GGUF files) is built from these calls: write a temp file beside PATH
// (io/temp_file.h), sync, close, rename over PATH, sync the directory. A failure at any step before
// the rename removes the temp file and leaves PATH as it was.
// Thread safety: Env methods may be called from any thread; one WritableFile is used by one thread.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>

#include "core/status.h"

namespace strata::io {

// A file being written sequentially. The destructor closes the descriptor if close() was not
// called (ignoring errors) but never removes the file: removing a temp file is the writer's job.
class WritableFile {
 public:
  virtual ~WritableFile() = default;

  // Appends all `n` bytes, looping over short writes and EINTR. Errors name the file, the offset
  // and the byte count: kResourceExhausted for ENOSPC/EDQUOT, kIOError for other OS errors (errno
  // text included), kIOError when the OS accepts no bytes at all (a write that returns 0).
  [[nodiscard]] Status append(const void* data, size_t n);

  // Flushes the file's data to stable storage (fsync). kIOError / kResourceExhausted naming the file.
  [[nodiscard]] virtual Status sync() = 0;
  // Closes the descriptor; idempotent. kIOError naming the file (NFS reports write errors here).
  [[nodiscard]] virtual Status close() = 0;
  // The size of the file according to the OS (fstat), to check it against what was appended.
  [[nodiscard]] virtual Result<uint64_t> size_on_disk() const = 0;

  // One write(2): writes up to `n` bytes and returns how many, possibly fewer (a short write) or 0;
  // on failure returns minus the errno (append() retries EINTR). Callers use append(); this is the
  // primitive a fault-injecting wrapper overrides.
  virtual int64_t write_some(const void* data, size_t n) = 0;

  const std::string& path() const { return path_; }
  // Bytes appended so far (successful append() calls only).
  uint64_t bytes_appended() const { return appended_; }

 protected:
  explicit WritableFile(std::string path) : path_(std::move(path)) {}

 private:
  std::string path_;
  uint64_t appended_ = 0;
};

class Env {
 public:
  virtual ~Env() = default;

  // Creates `path` (or truncates it) for writing, mode 0644, O_CLOEXEC.
  // Errors: kResourceExhausted (ENOSPC), kIOError (a missing directory: ENOENT; others); each names
  // the path.
  [[nodiscard]] virtual Result<std::unique_ptr<WritableFile>> new_writable_file(const std::string& path) = 0;
  // rename(2): atomically replaces `to` with `from`. kIOError naming both paths.
  [[nodiscard]] virtual Status rename_file(const std::string& from, const std::string& to) = 0;
  // unlink(2). kNotFound when it does not exist, kIOError otherwise.
  [[nodiscard]] virtual Status remove_file(const std::string& path) = 0;
  // fsync of the directory `dir` ("" = "."), so renames in it survive a crash. File systems that
  // cannot sync a directory (EINVAL), and a directory this process may not open for reading
  // (EACCES: mode 333, writable but not readable), count as success: the rename is complete and
  // only its durability is lost (io/env.cpp says why). kIOError naming the directory.
  [[nodiscard]] virtual Status sync_dir(const std::string& dir) = 0;
  // chmod(2) to `mode` (permission bits, e.g. 0600; the umask does not apply). kIOError naming the
  // path and the mode in octal.
  [[nodiscard]] virtual Status set_mode(const std::string& path, uint32_t mode) = 0;
  // stat(2)'s permission bits of `path` (& 07777), or nullopt when it does not exist (ENOENT).
  // kIOError naming the path otherwise: a caller keeping a file's mode must not take a failed stat
  // for a missing file (io::AtomicFile would then widen a 600 file to 644).
  [[nodiscard]] virtual Result<std::optional<uint32_t>> file_mode(const std::string& path) = 0;
};

// The POSIX Env (stateless; shared by every caller). Never null.
Env* default_env();

// `env` when not null, else default_env(): lets options default their Env field to null.
inline Env* env_or_default(Env* env) { return env != nullptr ? env : default_env(); }

// The directory part of `path` ("." when it has none), for sync_dir after a rename.
std::string dir_of(const std::string& path);

// The Status for a failed OS call: kResourceExhausted for ENOSPC / EDQUOT, kIOError otherwise;
// `what` says where ("model.safetensors.tmp.12: write of 4096 bytes at offset 0").
[[nodiscard]] Status os_error(const std::string& what, int err);

}  // namespace strata::io
