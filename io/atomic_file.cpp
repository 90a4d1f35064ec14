#include "io/atomic_file.h"

#include <cerrno>
#include <cstdio>

#include "io/file.h"
#include "io/temp_file.h"

namespace strata::io {

namespace {

// `s` with every mention of `tmp` replaced by `path` (see the file comment: the temp file is gone
// when a step on it fails; the step failed writing `path`).
Status naming_target(const Status& s, const std::string& tmp, const std::string& path) {
  if (s.ok()) return s;
  std::string m = s.message();
  for (size_t at = m.find(tmp); at != std::string::npos; at = m.find(tmp, at + path.size()))
    m.replace(at, tmp.size(), path);
  return Status(s.code(), std::move(m));
}

}  // namespace

AtomicFile::AtomicFile(std::string path, std::string tmp, std::unique_ptr<WritableFile> file, Env* env)
    : WritableFile(std::move(path)), tmp_(std::move(tmp)), file_(std::move(file)), env_(env) {}

Result<std::unique_ptr<AtomicFile>> AtomicFile::create(const std::string& path, Env* env) {
  STRATA_RETURN_IF_ERROR(check_replaceable(path));
  env = env_or_default(env);
  // A temp file a killed earlier writer left beside PATH is swept first (issue #13). Best effort:
  // a directory that cannot be listed (mode 333) fails at the create below if it fails at all.
  (void)sweep_stale_temps_of(path, env);
  // Replacing a file keeps its permissions: the temp file is created with the default mode, and a
  // rename would otherwise turn a private (600) file world-readable (644). The mode goes on the
  // temp file before any byte does, so the new contents are never readable by more users than the
  // old ones were (the open descriptor still writes to a 0400 file).
  // A stat that fails for any reason but a missing file is an error: taking it for "new file" would
  // give the replacement the default mode.
  STRATA_ASSIGN_OR_RETURN(const std::optional<uint32_t> mode, env->file_mode(path));
  std::string tmp = temp_path_for(path);
  auto created = env->new_writable_file(tmp);
  if (!created.ok()) return naming_target(created.error(), tmp, path);
  std::unique_ptr<AtomicFile> file(new AtomicFile(path, std::move(tmp), std::move(*created), env));
  if (mode) {
    // On failure the destructor removes the temp file; PATH is untouched.
    if (Status s = env->set_mode(file->tmp_, *mode); !s.ok()) return naming_target(s, file->tmp_, path);
  }
  return file;
}

AtomicFile::~AtomicFile() {
  if (committed_) return;
  (void)file_->close();
  (void)env_->remove_file(tmp_);
}

int64_t AtomicFile::write_some(const void* data, size_t n) { return file_->write_some(data, n); }

Status AtomicFile::sync() { return naming_target(file_->sync(), tmp_, path()); }

Status AtomicFile::close() { return naming_target(file_->close(), tmp_, path()); }

Result<uint64_t> AtomicFile::size_on_disk() const {
  auto size = file_->size_on_disk();
  if (!size.ok()) return naming_target(size.error(), tmp_, path());
  return *size;
}

Status AtomicFile::commit() {
  STRATA_RETURN_IF_ERROR(sync());
  STRATA_RETURN_IF_ERROR(close());
  // The rename's error names both files ("PATH: rename from TMP"): both exist at that point.
  STRATA_RETURN_IF_ERROR(env_->rename_file(tmp_, path()));
  committed_ = true;
  return env_->sync_dir(dir_of(path()));
}

}  // namespace strata::io
