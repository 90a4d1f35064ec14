// SafetensorsWriter: streams a checkpoint's tensors to one or more safetensors shards.
//
// Every tensor is declared up front (name, dtype, shape), so each shard's header is complete before
// the first data byte is written; the bytes then arrive in declaration order, in chunks of any size,
// and never have to be in memory all at once (a 48 GB checkpoint streams through a few MiB).
// Shard layout: u64 little-endian header length N, N bytes of compact JSON
// {"__metadata__": {"format": "pt"}, name: {dtype, shape, data_offsets}, ...} in declaration order,
// padded with spaces so the data region starts at a multiple of 8, then the tensors back to back.
// With a shard size limit the tensors are split, in order, into model-00001-of-0000N.safetensors ...
// plus model.safetensors.index.json ({"metadata": {"total_size"}, "weight_map": {tensor: file}}), the
// release's layout; without one (or when everything fits) a single model.safetensors is written.
//
// Atomicity: shards are written under temporary names (`<file>.tmp.<pid>`, io/temp_file.h), fsynced,
// and renamed only by finish(); the index is written last. A writer that fails, or is destroyed
// before finish() succeeds, removes its temporary files, so a failed run never leaves a shard that
// looks complete; stale temp files of this stem that a killed process left in the directory are
// swept by create(). Every write goes through an io::Env (options.env; tests inject ENOSPC, EIO and
// short writes with io::FaultInjectionEnv, issue #13).
// Byte counts are verified: a chunk that runs past the current tensor, a finish() with a tensor short
// of bytes, and a shard whose size on disk differs from its plan are all errors naming the tensor/file.
// Thread safety: none; one thread drives a writer. Source: https://github.com/huggingface/safetensors
// (format), ARCHITECTURE.md §Checkpoint format (directory layout).
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "core/status.h"
#include "core/tensor.h"
#include "io/env.h"

namespace strata::io {

// One tensor to be written: its safetensors name, stored dtype and shape (outer first).
struct TensorDecl {
  std::string name;
  DType dtype = DType::kF32;
  Shape shape;

  // Bytes of data: numel * dtype_size (an I8 tensor of packed E2M1 counts one byte per element).
  uint64_t nbytes() const { return static_cast<uint64_t>(shape.numel()) * dtype_size(dtype); }
};

struct SafetensorsWriterOptions {
  // Most tensor-data bytes per shard; 0 (default) = no limit, one file. A tensor larger than the limit
  // gets a shard of its own. The release uses ~4 GiB shards (4ull << 30).
  uint64_t max_shard_bytes = 0;
  // File name stem: "model" gives model.safetensors / model-00001-of-00003.safetensors and
  // model.safetensors.index.json.
  std::string stem = "model";
  // fsync each shard before renaming it (default true: a finished checkpoint survives a crash).
  // Tests may turn it off for speed.
  bool fsync = true;
  // Fail early with kResourceExhausted when the directory's file system has less free space than
  // the checkpoint needs (default true).
  bool check_free_space = true;
  // Where files are written (null = io::default_env(), the POSIX one). Not owned; must outlive
  // the writer. Tests pass an io::FaultInjectionEnv.
  Env* env = nullptr;
};

// Where a shard's tensors go: tensors [first_tensor, end_tensor) of the declaration list.
struct ShardPlan {
  std::string file_name;  // e.g. "model-00002-of-00012.safetensors"
  size_t first_tensor = 0;
  size_t end_tensor = 0;
  uint64_t header_bytes = 0;  // 8-byte length + padded JSON
  uint64_t data_bytes = 0;    // sum of its tensors' bytes
  uint64_t file_bytes() const { return header_bytes + data_bytes; }
};

class SafetensorsWriter {
 public:
  // Plans the shards for `tensors` (declaration order = data order) under directory `dir` (which
  // must exist) and opens the first shard. Errors: kInvalidArgument (empty or duplicate name, the
  // reserved name "__metadata__", a dtype with no safetensors size), kNotFound (no such directory),
  // kResourceExhausted (not enough free space, or ENOSPC creating the file), kIOError (cannot
  // create the file, or a stale temp file cannot be swept).
  [[nodiscard]] static Result<std::unique_ptr<SafetensorsWriter>> create(const std::string& dir,
                                                                         std::vector<TensorDecl> tensors,
                                                                         SafetensorsWriterOptions options = {});

  // The shards create() plans for `tensors` under `max_shard_bytes` (0: one), as [first, end)
  // tensor ranges in order: for callers that must know the file count before writing (a space
  // check counts each file's last block). Cannot fail.
  static std::vector<std::pair<size_t, size_t>> shard_ranges(const std::vector<TensorDecl>& tensors,
                                                             uint64_t max_shard_bytes);

  // Removes the temporary shard files unless finish() succeeded.
  ~SafetensorsWriter();
  SafetensorsWriter(const SafetensorsWriter&) = delete;
  SafetensorsWriter& operator=(const SafetensorsWriter&) = delete;

  // Appends `n` bytes to the current tensor (the first one not yet complete, in declaration order);
  // a tensor is complete after exactly nbytes() bytes and the next write goes to the next tensor.
  // A chunk larger than what the current tensor still needs is kInvalidArgument naming the tensor;
  // writing after every tensor is complete or after an error is kInvalidArgument too. OS errors
  // name the temp shard and the offset: kResourceExhausted for ENOSPC, kIOError otherwise (EIO);
  // after one the writer is dead and its temporary files are removed.
  [[nodiscard]] Status write(const void* data, size_t n);

  // Writes one whole tensor: checks that `name` is the current tensor and `n` its size, then write().
  [[nodiscard]] Status write_tensor(const std::string& name, const void* data, size_t n);

  // Checks that every tensor is complete, flushes and fsyncs the last shard, checks every shard's
  // size on disk against its plan, renames the shards to their final names and writes the index
  // (multi-shard only). After an error the writer is dead and its temporary files are removed.
  [[nodiscard]] Status finish();

  const std::vector<TensorDecl>& tensors() const { return tensors_; }
  const std::vector<ShardPlan>& shards() const { return shards_; }
  // Index of the tensor the next write() goes to (== tensors().size() when all are complete).
  size_t current_tensor() const { return cur_tensor_; }
  // Sum of tensor-data bytes, and of whole shard files (headers included).
  uint64_t total_data_bytes() const { return total_data_bytes_; }
  uint64_t total_file_bytes() const;
  // Tensor-data bytes accepted so far.
  uint64_t data_bytes_written() const { return data_written_; }
  // Name of the index file ("" for a single shard).
  std::string index_file_name() const;

 private:
  SafetensorsWriter() = default;
  Status open_shard(size_t s);
  Status close_shard();
  Status flush_buffer();
  Status raw_write(const void* data, size_t n);
  Status fail(Status s);
  void remove_temp_files();
  std::string final_path(size_t s) const;
  std::string temp_path(size_t s) const;

  std::string dir_;
  SafetensorsWriterOptions opt_;
  std::vector<TensorDecl> tensors_;
  std::vector<std::string> headers_;  // per shard: the 8-byte length + padded JSON
  std::vector<ShardPlan> shards_;
  uint64_t total_data_bytes_ = 0;

  size_t cur_shard_ = 0;
  size_t cur_tensor_ = 0;
  uint64_t cur_tensor_written_ = 0;
  uint64_t data_written_ = 0;
  Env* env_ = nullptr;
  std::unique_ptr<WritableFile> file_;  // the open temp shard, or null
  uint64_t fd_written_ = 0;         // bytes written to the open shard file (header included)
  std::vector<unsigned char> buf_;  // coalesces small writes
  size_t buf_used_ = 0;
  std::vector<bool> temp_exists_;  // per shard: a temporary file was created and not yet renamed
  bool finished_ = false;
  bool dead_ = false;
};

}  // namespace strata::io
