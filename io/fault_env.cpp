#include "io/fault_env.h"

#include <algorithm>

namespace strata::io {

namespace {

class FaultyWritableFile final : public WritableFile {
 public:
  FaultyWritableFile(std::unique_ptr<WritableFile> base, FaultInjectionEnv* env)
      : WritableFile(base->path()), base_(std::move(base)), env_(env) {}
  int64_t write_some(const void* data, size_t n) override {
    const int64_t plan = env_->plan_write(path(), n);
    if (plan < 0) return plan;
    const int64_t done = plan == 0 ? 0 : base_->write_some(data, static_cast<size_t>(plan));
    env_->record_write(path(), done);
    return done;
  }
  Status sync() override {
    if (int e = env_->sync_fault(path()); e != 0) return os_error(path() + ": fsync (injected)", e);
    return base_->sync();
  }
  Status close() override {
    Status s = base_->close();  // the descriptor is released either way, as close(2) does
    if (int e = env_->close_fault(path()); e != 0) return os_error(path() + ": close (injected)", e);
    return s;
  }
  Result<uint64_t> size_on_disk() const override { return base_->size_on_disk(); }

 private:
  std::unique_ptr<WritableFile> base_;
  FaultInjectionEnv* env_;
};

}  // namespace

FaultInjectionEnv::FaultInjectionEnv(WriteFaults faults, Env* base)
    : base_(env_or_default(base)), faults_(std::move(faults)) {}

void FaultInjectionEnv::set_faults(WriteFaults faults) {
  std::lock_guard<std::mutex> lock(mu_);
  faults_ = std::move(faults);
}

int64_t FaultInjectionEnv::plan_write(const std::string& path, size_t n) {
  std::lock_guard<std::mutex> lock(mu_);
  if (!matches(path)) return static_cast<int64_t>(n);
  const int64_t call = write_calls_++;
  if (call == faults_.fail_write_call) {
    ++faults_injected_;
    return -faults_.error;
  }
  if (faults_.fail_after_bytes != UINT64_MAX) {
    if (bytes_written_ >= faults_.fail_after_bytes) {
      ++faults_injected_;
      return -faults_.error;
    }
    n = static_cast<size_t>(std::min<uint64_t>(n, faults_.fail_after_bytes - bytes_written_));
  }
  if (faults_.max_write_bytes > 0) n = std::min(n, faults_.max_write_bytes);
  return static_cast<int64_t>(n);
}

void FaultInjectionEnv::record_write(const std::string& path, int64_t done) {
  std::lock_guard<std::mutex> lock(mu_);
  if (matches(path) && done > 0) bytes_written_ += static_cast<uint64_t>(done);
}

int FaultInjectionEnv::sync_fault(const std::string& path) {
  std::lock_guard<std::mutex> lock(mu_);
  if (!matches(path) || faults_.fail_sync == 0) return 0;
  ++faults_injected_;
  return faults_.fail_sync;
}

int FaultInjectionEnv::close_fault(const std::string& path) {
  std::lock_guard<std::mutex> lock(mu_);
  if (!matches(path) || faults_.fail_close == 0) return 0;
  ++faults_injected_;
  return faults_.fail_close;
}

Result<std::unique_ptr<WritableFile>> FaultInjectionEnv::new_writable_file(const std::string& path) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (matches(path) && faults_.fail_create != 0) {
      ++faults_injected_;
      return os_error(path + ": create (injected)", faults_.fail_create);
    }
  }
  STRATA_ASSIGN_OR_RETURN(auto f, base_->new_writable_file(path));
  return std::unique_ptr<WritableFile>(new FaultyWritableFile(std::move(f), this));
}

Status FaultInjectionEnv::rename_file(const std::string& from, const std::string& to) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (matches(from) && faults_.fail_rename != 0) {
      ++faults_injected_;
      return os_error(to + ": rename from " + from + " (injected)", faults_.fail_rename);
    }
  }
  return base_->rename_file(from, to);
}

Status FaultInjectionEnv::remove_file(const std::string& path) { return base_->remove_file(path); }

Status FaultInjectionEnv::sync_dir(const std::string& dir) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (matches(dir) && faults_.fail_sync_dir != 0) {
      ++faults_injected_;
      return os_error(dir + ": fsync directory (injected)", faults_.fail_sync_dir);
    }
  }
  return base_->sync_dir(dir);
}

Status FaultInjectionEnv::set_mode(const std::string& path, uint32_t mode) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (matches(path) && faults_.fail_set_mode != 0) {
      ++faults_injected_;
      return os_error(path + ": chmod (injected)", faults_.fail_set_mode);
    }
  }
  return base_->set_mode(path, mode);
}

Result<std::optional<uint32_t>> FaultInjectionEnv::file_mode(const std::string& path) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (matches(path) && faults_.fail_file_mode != 0) {
      ++faults_injected_;
      return os_error(path + ": stat (injected)", faults_.fail_file_mode);
    }
  }
  return base_->file_mode(path);
}

int64_t FaultInjectionEnv::write_calls() const {
  std::lock_guard<std::mutex> lock(mu_);
  return write_calls_;
}
uint64_t FaultInjectionEnv::bytes_written() const {
  std::lock_guard<std::mutex> lock(mu_);
  return bytes_written_;
}
int64_t FaultInjectionEnv::faults_injected() const {
  std::lock_guard<std::mutex> lock(mu_);
  return faults_injected_;
}

}  // namespace strata::io
