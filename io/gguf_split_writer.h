// GgufSplitWriter: writes a GGUF as one file, or as a gguf-split set of files
// "PREFIX-0000N-of-0000M.gguf" (llama.cpp's llama_split_path; `llama-gguf-split --split-max-size`),
// with GgufWriter's streaming (tensor bytes in declaration order, in chunks of any size).
//
// Split rule (as gguf-split's): tensors in declaration order; a new file starts when the next
// tensor's bytes (padded to 32) would take the current file's tensor bytes past max_bytes, and the
// current file has at least one tensor. A tensor larger than max_bytes gets a file of its own.
// Split 1 carries every metadata key; the others only general.alignment (when set). Every split
// starts with split.no (u16, from 0), split.count (u16) and split.tensors.count (i32, all files),
// the keys llama.cpp's loader and io::GgufModel::open read.
// Files are opened one at a time, when their first tensor's bytes arrive, and closed (synced,
// sizes checked) when their last tensor is done, so a set of any size holds one open file and one
// buffer. Atomicity over the set: every file is written to its own temp file, and finish() renames
// them only once all are complete. A failure before the renames
// leaves no file; one during them removes the files already renamed (best effort). No name of the
// set may exist when it is created (refused, naming the file). The free space is checked once for
// the whole set.
// Thread safety: none; one thread drives a writer. Source: llama.cpp tools/gguf-split/gguf-split.cpp.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "core/status.h"
#include "io/gguf_writer.h"

namespace strata::io {

struct GgufSplitOptions {
  // Most tensor bytes per file (gguf-split's --split-max-size, whose M and G are decimal: 10^6,
  // 10^9); 0 = one file at the path given, with no split keys.
  uint64_t max_bytes = 0;
};

class GgufSplitWriter {
 public:
  // Plans the files and opens their temp files. With max_bytes > 0, `path` must end in ".gguf";
  // the files are PREFIX-0000N-of-0000M.gguf with PREFIX = path without ".gguf" (a set of one file
  // too, as gguf-split names it). Errors: GgufWriter::create's (per file), kInvalidArgument for a
  // path without ".gguf" or a name of the set that exists, more than 65535 files, kResourceExhausted
  // for too little free space.
  [[nodiscard]] static Result<std::unique_ptr<GgufSplitWriter>> create(
      const std::string& path, std::vector<std::pair<std::string, GgufValue>> metadata,
      std::vector<GgufTensorDecl> tensors, GgufSplitOptions split = {}, GgufWriterOptions options = {});

  ~GgufSplitWriter();  // removes every file it wrote unless finish() succeeded
  GgufSplitWriter(const GgufSplitWriter&) = delete;
  GgufSplitWriter& operator=(const GgufSplitWriter&) = delete;

  // As GgufWriter::write / write_tensor, over the whole set: bytes go to the file holding the
  // current tensor. Errors as GgufWriter's (naming that file); after any error the writer is dead.
  [[nodiscard]] Status write(const void* data, size_t n);
  [[nodiscard]] Status write_tensor(const std::string& name, const void* data, size_t n);
  // Completes every file, then renames each to its name (file comment).
  [[nodiscard]] Status finish();

  // The files' final names, in split order (one: the path given when max_bytes is 0).
  const std::vector<std::string>& paths() const { return paths_; }
  // Bytes of all files together (headers, padding and data).
  uint64_t file_bytes() const;

 private:
  GgufSplitWriter() = default;
  Status fail(Status s);

  Status open_file(size_t k);   // creates file k's writer (its temp file) if not yet open
  Status close_before(size_t k);  // completes every open file before k

  Env* env_ = nullptr;
  GgufWriterOptions options_;
  std::vector<std::string> paths_;
  std::vector<std::unique_ptr<GgufWriter>> files_;  // null until opened
  std::vector<std::vector<std::pair<std::string, GgufValue>>> metas_;  // per file, until opened
  std::vector<std::vector<GgufTensorDecl>> decls_;                     // per file, until opened
  std::vector<uint64_t> file_bytes_;                                   // per file, planned
  std::vector<uint64_t> nbytes_;       // per tensor, declaration order
  std::vector<size_t> file_of_;        // per tensor: its file
  std::vector<std::string> names_;     // per tensor
  size_t cur_ = 0;                     // the current tensor (the first not complete)
  uint64_t cur_written_ = 0;
  bool finished_ = false;
  bool dead_ = false;
};

}  // namespace strata::io
