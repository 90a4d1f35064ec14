// AtomicFile: an output file that is replaced whole or not at all (LevelDB's CURRENT file: a temp
// file renamed over the target). The one implementation of the steps every atomic writer of a
// single file takes (write_file_atomic, session files, eval base files), so each step's error and
// the temp file's name are defined once:
//   create: check that PATH may be replaced (io::check_replaceable), sweep a killed writer's stale
//           temp file of PATH (io/temp_file.h), create the temp file (io::temp_path_for) beside PATH
//           and give it the mode PATH has, before any byte is written (a 600 session file stays
//           600 and its new contents are never more readable; a new PATH keeps the umask's default);
//   append: bytes go to the temp file (short writes and EINTR looped over, WritableFile::append);
//   commit: fsync, close, rename over PATH, fsync the directory (Env::sync_dir);
//   destroyed without a successful commit: the temp file is closed and removed, PATH untouched.
// Errors name PATH, the file the caller asked for, never the temp file (it is removed when a step
// on it fails, so naming it would send the user after a file they never named and that is gone);
// only a failed rename names both, as both exist then. Codes are the Env's: kResourceExhausted for
// ENOSPC/EDQUOT, kIOError otherwise, kInvalidArgument from check_replaceable.
// Thread safety: one AtomicFile is used by one thread.
#pragma once

#include <memory>
#include <string>

#include "core/status.h"
#include "io/env.h"

namespace strata::io {

class AtomicFile final : public WritableFile {
 public:
  // Starts replacing `path` through `env` (null = default_env()); see the file comment.
  [[nodiscard]] static Result<std::unique_ptr<AtomicFile>> create(const std::string& path, Env* env = nullptr);
  ~AtomicFile() override;
  AtomicFile(const AtomicFile&) = delete;
  AtomicFile& operator=(const AtomicFile&) = delete;

  // Makes the appended bytes PATH's contents: fsync, close, rename over PATH, fsync the directory.
  // After an error before the rename the temp file is removed and PATH keeps its previous contents;
  // an error syncing the directory comes after the rename (PATH holds the new bytes). Call once.
  [[nodiscard]] Status commit();

  // WritableFile, on the temp file; errors name PATH. close() does not commit.
  [[nodiscard]] Status sync() override;
  [[nodiscard]] Status close() override;
  [[nodiscard]] Result<uint64_t> size_on_disk() const override;
  int64_t write_some(const void* data, size_t n) override;

  // Where the bytes are staged until commit (for tests and messages about stale files).
  const std::string& temp_path() const { return tmp_; }

 private:
  AtomicFile(std::string path, std::string tmp, std::unique_ptr<WritableFile> file, Env* env);

  std::string tmp_;
  std::unique_ptr<WritableFile> file_;  // the temp file
  Env* env_;
  bool committed_ = false;
};

}  // namespace strata::io
