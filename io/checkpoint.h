// Checkpoint: a directory in the official V4.1 release layout, opened and indexed.
//
//   config.json                      model shape (read by model::ModelConfig)
//   model.safetensors.index.json     {"weight_map": {tensor: shard file}}   (or one model.safetensors,
//   *.safetensors                    or every *.safetensors in the directory when there is no index)
//   tokenizer.json                   read by tokenizer::Tokenizer
// Opening reads only headers; tensor bytes are read later by a store. Every shard stays open.
// Thread safety: const methods are safe to call concurrently.
#pragma once

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "core/status.h"
#include "io/file.h"
#include "io/safetensors.h"

namespace strata::io {

class Checkpoint {
 public:
  // Opens `dir`: the index (if any), every shard header, and checks that the index and the headers
  // agree (each indexed tensor is in the named shard, no tensor is in two shards).
  [[nodiscard]] static Result<std::unique_ptr<Checkpoint>> open(const std::string& dir);

  const std::string& dir() const { return dir_; }
  // nullptr when the checkpoint has no tensor of that name.
  const TensorInfo* find(const std::string& name) const;
  const std::map<std::string, TensorInfo>& tensors() const { return tensors_; }
  const File& shard(int i) const { return *shards_[static_cast<size_t>(i)]; }
  int n_shards() const { return static_cast<int>(shards_.size()); }
  // Total bytes of tensor data.
  uint64_t total_bytes() const;

  // Reads a tensor's bytes into dst (exactly t.nbytes), checking first that the shard still has the
  // size it had when opened (a shard rewritten under us must not feed garbage).
  [[nodiscard]] Status read(const TensorInfo& t, void* dst) const;
  // Reads `n` bytes at byte `offset` inside tensor t (for row or expert slices).
  [[nodiscard]] Status read_range(const TensorInfo& t, uint64_t offset, uint64_t n, void* dst) const;

  // Replaces shard i's file (tests inject faults this way).
  void replace_shard_file(int i, std::unique_ptr<File> f) { shards_[static_cast<size_t>(i)] = std::move(f); }

 private:
  std::string dir_;
  std::vector<std::unique_ptr<File>> shards_;
  std::map<std::string, TensorInfo> tensors_;
};

}  // namespace strata::io
