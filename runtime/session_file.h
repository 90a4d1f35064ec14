// Session files: one Session saved to disk and restored exactly.
//
// Layout (little-endian):
//   header, 64 bytes:
//     [0, 8)   magic "STRATASS"
//     [8, 12)  u32 format version (kSessionFormatVersion)
//     [12, 16) u32 header bytes (64)
//     [16, 24) u64 model identity: config hash      (ModelIdentity, below)
//     [24, 32) u64 model identity: tensors hash
//     [32, 40) u64 payload bytes
//     [40, 48) u64 payload checksum (XXH64, seed 0)
//     [48, 56) u64 flags (bit 0: the session ran a bounded replay)
//     [56, 64) u64 header checksum (XXH64 of bytes [0, 56))
//   payload: records of (u32 tag, u64 length, bytes) — shape (the config fields the caches depend
//   on), tokens (i32), last logits (f32), Engram history (u32), then per layer: window ring bytes +
//   slot positions, compressor state (f32) + frontier, compressed KV rows, index-key rows.
// Everything the next token depends on is stored exactly (packed bytes as held in memory), so a
// loaded session decodes bit-identically to one that was never saved.
//
// Saving streams to `PATH.tmp.<pid>` in the same directory through an io::Env, fsyncs, renames over
// PATH and fsyncs the directory: an existing PATH is either the old file or the new one, never a mix,
// and a failed save removes its temp file. A temp file of PATH left by a killed save (its pid no
// longer running) is swept by the next save (io/temp_file.h; issue #13). Loading reads
// through io::File (fault-injectable) and builds a new Session; the caller's state is untouched on
// any error. Errors (each names the file): kNotFound; kCorruption for a wrong magic, a checksum
// mismatch, a truncated or oversized file, or records that do not parse; kInvalidArgument for a
// session of another model (identity mismatch, saying which part differs) or an unsupported format
// version; kIOError from the OS.
// Thread safety: save reads the session (no concurrent writer); load is independent per call.
// Source: issue #4 "Session files"; LevelDB's CURRENT file (temp file + rename).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "core/status.h"
#include "io/env.h"
#include "io/file.h"
#include "runtime/session.h"

namespace strata::runtime {

inline constexpr uint32_t kSessionFormatVersion = 1;

// XXH64 of `n` bytes (the xxHash specification's 64-bit variant). Streaming form below.
uint64_t xxh64(const void* data, size_t n, uint64_t seed = 0);
class Xxh64 {
 public:
  explicit Xxh64(uint64_t seed = 0);
  void update(const void* data, size_t n);
  uint64_t digest() const;

 private:
  uint64_t v_[4];
  uint64_t total_ = 0;
  uint8_t buf_[32];
  size_t buf_n_ = 0;
  uint64_t seed_;
};

// Which checkpoint a session belongs to.
struct ModelIdentity {
  uint64_t config_hash = 0;   // XXH64 of config.json's bytes
  uint64_t tensors_hash = 0;  // XXH64 of the tensor table (name, dtype, shape, bytes, sorted by
                              // name) and of the first and last 4 KiB of every shard's tensor data
  bool operator==(const ModelIdentity&) const = default;
  std::string to_string() const;  // "config 0123456789abcdef, tensors fedcba9876543210"
};

// Identity of the checkpoint in `dir` (reads config.json and the shard headers, and samples 8 KiB
// of each shard). Errors: those of io::Checkpoint::open and reading config.json.
[[nodiscard]] Result<ModelIdentity> model_identity(const std::string& dir);

// Writes `s` to `path` (see the file comment) through `env` (null = io::default_env(); tests inject
// faults with io::FaultInjectionEnv). `s` must be valid(). Errors, each prefixed "save session PATH"
// and naming the temp file and the step: kInvalidArgument for an invalid session; kResourceExhausted
// (ENOSPC) or kIOError (EIO, fsync, close, rename; errno text) — PATH is then unchanged and no temp
// file is left; kIOError from syncing the directory after the rename (PATH then holds the new file).
[[nodiscard]] Status save_session(const Session& s, const ModelIdentity& id, const std::string& path,
                                  io::Env* env = nullptr);

// Reads `path` into a new Session over `m`, which must be the model `id` was computed for.
[[nodiscard]] Result<Session> load_session(model::Model& m, const ModelIdentity& id, const std::string& path);
// Same, reading from an open file (tests inject faults through io::make_faulty_file).
[[nodiscard]] Result<Session> load_session(model::Model& m, const ModelIdentity& id, const io::File& file);

}  // namespace strata::runtime
