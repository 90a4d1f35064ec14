// FaultInjectionEnv: an io::Env wrapper that fails on purpose, so tests can check that every writer
// turns a full disk, EIO, short writes and failed syncs / closes / renames into a clear Status and
// leaves the previous file intact with no temp file behind (LevelDB db/fault_injection_test.cc;
// STYLE.md §3.5; issue #13).
//
// Short writes are not failures: a file written through max_write_bytes-sized write(2) results must
// come out byte-identical, which tests the writers' loops. Counters are over every file the env
// created, in call order. Thread safety: all methods are safe to call concurrently (one mutex).
#pragma once

#include <cstdint>
#include <memory>
#include <mutex>
#include <string>

#include "io/env.h"

namespace strata::io {

struct WriteFaults {
  // The Nth write(2) (0-based, counted over all matching files) fails with `error`; -1 = never.
  int64_t fail_write_call = -1;
  // Once this many bytes were written to matching files, the write that crosses the limit is cut
  // short at it and the next one fails with `error` (a disk that fills up). UINT64_MAX = never.
  uint64_t fail_after_bytes = UINT64_MAX;
  int error = 28;  // errno of the two faults above (ENOSPC; EIO is 5)
  // > 0: each write(2) writes at most this many bytes (short writes; the data must still arrive).
  size_t max_write_bytes = 0;
  // errno to return from the call instead of doing it; 0 = do it.
  int fail_create = 0, fail_sync = 0, fail_close = 0, fail_rename = 0, fail_sync_dir = 0, fail_set_mode = 0,
      fail_file_mode = 0;
  // Faults apply only to paths containing this string ("" = every path). Renames match on the
  // source path.
  std::string path_filter = {};
};

class FaultInjectionEnv final : public Env {
 public:
  // Wraps `base` (null = default_env()), which must outlive this env.
  explicit FaultInjectionEnv(WriteFaults faults = {}, Env* base = nullptr);

  // Replaces the faults; counters keep running.
  void set_faults(WriteFaults faults);

  Result<std::unique_ptr<WritableFile>> new_writable_file(const std::string& path) override;
  Status rename_file(const std::string& from, const std::string& to) override;
  Status remove_file(const std::string& path) override;
  Status sync_dir(const std::string& dir) override;
  Status set_mode(const std::string& path, uint32_t mode) override;
  Result<std::optional<uint32_t>> file_mode(const std::string& path) override;

  int64_t write_calls() const;     // write(2) calls on matching files so far
  uint64_t bytes_written() const;  // bytes those calls wrote
  int64_t faults_injected() const;

  // Used by the files this env creates: decides the outcome of one write(2) of `n` bytes to `path`.
  // Returns the byte count to pass on (<= n), or minus an errno to fail with.
  int64_t plan_write(const std::string& path, size_t n);
  // Records that `done` bytes of a planned write reached the base file.
  void record_write(const std::string& path, int64_t done);
  // errno to inject for a sync or close of `path` (0 = none).
  int sync_fault(const std::string& path);
  int close_fault(const std::string& path);

 private:
  bool matches(const std::string& path) const {
    return faults_.path_filter.empty() || path.find(faults_.path_filter) != std::string::npos;
  }

  Env* base_;
  mutable std::mutex mu_;
  WriteFaults faults_;
  int64_t write_calls_ = 0;
  uint64_t bytes_written_ = 0;
  int64_t faults_injected_ = 0;
};

}  // namespace strata::io
