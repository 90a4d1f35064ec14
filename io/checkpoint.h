// Checkpoint: a directory in the official V4.1 release layout, opened and indexed.
//
//   config.json                      model shape (read by model::ModelConfig)
//   model.safetensors.index.json     {"weight_map": {tensor: shard file}}   (or one model.safetensors,
//   *.safetensors                    or every *.safetensors in the directory when there is no index)
//   tokenizer.json                   read by tokenizer::Tokenizer
// Or a GGUF written by `strata quantize` (io/gguf_checkpoint.cpp, docs/gguf.md "Running a GGUF"),
// ik_llama.cpp or ds4 ("GGUFs from ik_llama.cpp and ds4"): its tensors appear under their strata
// names (io/gguf_names.h), stacked experts as per-expert slices, config.json and tokenizer.json come
// from its metadata (read_checkpoint_text).
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
  // A path naming a regular file that ends in ".gguf" opens that GGUF (open_gguf).
  [[nodiscard]] static Result<std::unique_ptr<Checkpoint>> open(const std::string& dir);
  // Opens a GGUF (or a gguf-split set) as a checkpoint. Each GGUF tensor becomes a TensorInfo under
  // its strata name: ggml F32/F16/BF16 as such, the block formats as DType::kQ8_0..kIQ4_NL, ggml I8
  // as the dtype listed for it in `strata.raw_dtypes` (F8_E4M3, F8_E8M0, I8 = packed E2M1, U8); a
  // stacked expert tensor [n, out, in] as n slices; a block-quantised routed expert, which has no
  // scales, gets an empty U8 [0] ".scale" so every expert keeps the six parts the stores expect.
  // A GGUF from ds4 / ik_llama.cpp (io/gguf_config.h) works the same; its interleaved Engram
  // tables (I8 "blk.L.engram_embd.weight", ne = [264, rows]) appear as U8 [rows, 264]
  // (store/engram_layout.h); a row width that is not head_dim + head_dim / 32 is kInvalidArgument.
  // A routed expert stored as ggml MXFP4 (type 39, what the llama.cpp forks write) becomes per
  // expert the official I8 codes [out, in/2] and F8_E8M0 scales [out, in/32], which tile its
  // slice and are marked TensorInfo::Packing (read_range unpacks; io/ggml_mxfp4.h).
  // Errors: those of GgufModel::open; kNotSupported for a tensor type strata cannot bind (MXFP4
  // outside the routed experts, an I8 tensor without a raw dtype) naming the tensor;
  // kInvalidArgument for an MXFP4 expert tensor whose shape is not [n, out, in] with in a
  // multiple of 32 or whose bytes are not n * out * in / 32 * 17; kCorruption for a stacked tensor whose
  // bytes do not divide by its expert count.
  [[nodiscard]] static Result<std::unique_ptr<Checkpoint>> open_gguf(const std::string& path);

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
  // Reads `n` bytes at byte `offset` inside tensor t (for row or expert slices). Half of a ggml
  // MXFP4 expert slice (TensorInfo::Packing) comes back in the official layout: the whole slice is
  // read and unpacked (io/ggml_mxfp4.h), so a store that reads both halves should read them with
  // read_stored_range and unpack once.
  [[nodiscard]] Status read_range(const TensorInfo& t, uint64_t offset, uint64_t n, void* dst) const;
  // The file bytes of [offset, offset + n) inside t's range, as stored (no unpacking).
  [[nodiscard]] Status read_stored_range(const TensorInfo& t, uint64_t offset, uint64_t n, void* dst) const;

  // Replaces shard i's file (tests inject faults this way).
  void replace_shard_file(int i, std::unique_ptr<File> f) { shards_[static_cast<size_t>(i)] = std::move(f); }

 private:
  std::string dir_;
  std::vector<std::unique_ptr<File>> shards_;
  std::map<std::string, TensorInfo> tensors_;
};

// A fingerprint of the checkpoint, cheap to take (65 small reads per shard): FNV-1a 64 over every
// tensor's name, dtype, shape and byte count in name order, and per shard the first 64 KiB and 64
// blocks of 4 KiB spread evenly to the end (so two random-weight checkpoints of one config differ,
// and so does one with a region replaced; a change between the samples goes unseen: a sample, not
// a hash of every byte). `strata
// quantize` records its source's as "strata.source_fingerprint" (hex), so a quantised copy drafting
// for that source can use the source's bytes for the tensors it kept (runtime/draft_model.h).
// Errors: a failed read, naming the shard.
[[nodiscard]] Result<uint64_t> checkpoint_fingerprint(const Checkpoint& ck);

// Whether `path` is a regular file named *.gguf (a model given as one file rather than a directory).
bool is_gguf_path(const std::string& path);

// Reads a checkpoint's text file `name` ("config.json", "tokenizer.json"): DIR/name for a
// directory; for a GGUF, the metadata string "strata.<name with '.' as '_'>" (strata.config_json,
// strata.tokenizer_json), or for a GGUF made by ik_llama.cpp / ds4 (io::is_foreign_gguf) the text
// rebuilt from its deepseek41.* / tokenizer.ggml.* keys (io/gguf_config.h, io/gguf_vocab.h, with
// their errors). Errors: those of reading the file; kNotFound naming the key for a GGUF without it;
// kResourceExhausted above max_bytes.
[[nodiscard]] Result<std::string> read_checkpoint_text(const std::string& model, const std::string& name,
                                                      size_t max_bytes);
// The GGUF metadata key that carries checkpoint file `name`.
std::string gguf_text_key(const std::string& name);

}  // namespace strata::io
