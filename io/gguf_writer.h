// GgufWriter: streams a GGUF v3 file (metadata + tensors) to disk, atomically.
//
// Every key and tensor is declared up front, so the header (key/values, tensor infos with their
// offsets) is complete before the first data byte; tensor bytes then arrive in declaration order,
// in chunks of any size, through a 4 MiB buffer: a 200 GB file never sits in RAM. Each tensor
// starts at a multiple of the alignment (`general.alignment` when the metadata sets it, a u32 power
// of two; else 32) and is followed by zero padding to the next multiple, as ggml's gguf_write does.
// Layout: io/gguf.h (source: ggml docs/gguf.md).
// Shapes are given in strata order (row-major, outer first) and written as ggml's ne, reversed: a
// [out, in] weight is written with ne = [in, out]; `in` must be a multiple of the type's block.
// Atomicity: the file is written as `PATH.tmp.<pid>` (io/temp_file.h), fsynced, checked against its
// planned size and renamed to PATH only by finish(). Nothing may be at PATH, not even a dangling
// symbolic link (create() refuses it and
// finish() checks again before the rename; a file created in between by another process would be
// replaced: rename(2) has no portable no-replace form through io::Env). A writer that fails or is
// destroyed before finish() removes its temp file. Writes go through an io::Env (tests inject ENOSPC,
// EIO and short writes).
// Thread safety: none; one thread drives a writer.
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
#include "io/gguf.h"

namespace strata::io {

// One tensor to be written: its GGUF name (at most 63 bytes, ggml's GGML_MAX_NAME - 1), ggml type and
// strata shape (outer first, rank 1..4).
struct GgufTensorDecl {
  std::string name;
  GgmlType type = GgmlType::kF32;
  Shape shape;
};

struct GgufWriterOptions {
  // fsync the file before renaming it (default true). Tests may turn it off for speed.
  bool fsync = true;
  // Where the file is written (null = io::default_env()). Not owned; must outlive the writer.
  Env* env = nullptr;
  // Refuse (kResourceExhausted naming the bytes needed and free) when the file system holding
  // the output has less free space than the whole file (default true).
  bool check_free_space = true;
};

// Whether anything is at `path`, a dangling symbolic link included (the writers refuse to replace it).
bool path_taken(const std::string& path);

// ggml's limit on tensor name length, terminating NUL included (ggml.h GGML_MAX_NAME).
inline constexpr size_t kGgmlMaxName = 64;

class GgufWriter {
 public:
  // Plans the file and opens its temp file. `metadata` is written in the order given.
  // Errors: kInvalidArgument (PATH exists; an empty or repeated key; a bool array byte other than 0/1;
  // general.alignment not a u32 power of two <= kMaxGgufAlignment; an empty, repeated or too long tensor name; a shape of rank
  // 0 or > 4, a negative dim, or ne[0] not a multiple of the type's block), kIOError /
  // kResourceExhausted creating the temp file (a missing directory is kIOError ENOENT).
  [[nodiscard]] static Result<std::unique_ptr<GgufWriter>> create(
      const std::string& path, std::vector<std::pair<std::string, GgufValue>> metadata,
      std::vector<GgufTensorDecl> tensors, GgufWriterOptions options = {});

  // Bytes of the file create() would write for these keys and tensors (header, padding, data), or
  // create()'s declaration errors; opens nothing.
  [[nodiscard]] static Result<uint64_t> planned_bytes(const std::vector<std::pair<std::string, GgufValue>>& metadata,
                                                      const std::vector<GgufTensorDecl>& tensors);

  // Removes the temp file unless finish() succeeded.
  ~GgufWriter();
  GgufWriter(const GgufWriter&) = delete;
  GgufWriter& operator=(const GgufWriter&) = delete;

  // Appends `n` bytes to the current tensor (the first incomplete one in declaration order). A chunk
  // larger than what the tensor still needs, or a write after all are complete or after an error, is
  // kInvalidArgument naming the tensor. OS errors name the temp file and offset (kResourceExhausted
  // for ENOSPC, kIOError otherwise); after any error the writer is dead and its temp file removed.
  [[nodiscard]] Status write(const void* data, size_t n);
  // Writes one whole tensor: `name` must be the current tensor and `n` its full size.
  [[nodiscard]] Status write_tensor(const std::string& name, const void* data, size_t n);
  // Checks every tensor is complete, flushes, fsyncs, checks the size on disk against the plan and
  // renames the temp file to PATH (refusing a PATH that appeared meanwhile: kInvalidArgument):
  // complete(), then commit().
  [[nodiscard]] Status finish();
  // The two halves of finish(), for a set of files that appear together (io/gguf_split_writer.h):
  // complete() does everything but the rename (the temp file is whole, synced and closed); commit()
  // renames it to PATH. commit() before complete() is kInvalidArgument.
  [[nodiscard]] Status complete();
  [[nodiscard]] Status commit();

  // Bytes of the whole file (header, padding and data), and tensor bytes (unpadded) per tensor.
  uint64_t file_bytes() const { return file_bytes_; }
  uint64_t tensor_bytes(size_t i) const { return nbytes_[i]; }
  uint32_t alignment() const { return alignment_; }
  const std::vector<GgufTensorDecl>& tensors() const { return tensors_; }
  size_t current_tensor() const { return cur_; }

 private:
  GgufWriter() = default;
  // Checks the declarations and builds the header; sets nbytes_, alignment_ and file_bytes_.
  Status plan(const std::string& who, const std::vector<std::pair<std::string, GgufValue>>& metadata,
              const std::vector<GgufTensorDecl>& tensors, std::string* header);
  Status raw_write(const void* data, size_t n);
  Status buffered_write(const void* data, size_t n);
  Status flush();
  Status fail(Status s);
  Status pad_current();  // zero padding after a completed tensor

  std::string path_, temp_;
  GgufWriterOptions opt_;
  Env* env_ = nullptr;
  std::vector<GgufTensorDecl> tensors_;
  std::vector<uint64_t> nbytes_;
  uint32_t alignment_ = kGgufDefaultAlignment;
  uint64_t file_bytes_ = 0;
  std::unique_ptr<WritableFile> file_;
  std::vector<unsigned char> buf_;
  size_t buf_used_ = 0;
  uint64_t written_ = 0;  // bytes handed to the file (buffer included)
  size_t cur_ = 0;
  uint64_t cur_written_ = 0;
  bool temp_exists_ = false;
  bool completed_ = false;
  bool finished_ = false;
  bool dead_ = false;
};

}  // namespace strata::io
