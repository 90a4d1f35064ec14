// The eval base file: one `strata eval --save-base F` run's per-position distributions, read back by
// `strata eval --base F` to compare another model (a quantised variant) on the same text and windows.
//
// Like llama-perplexity's --kl-divergence-base, it stores every scored position's full distribution
// as 16-bit codes (tools/eval_math.h EncodedRow: log-probs on a uniform grid between the row's min
// and max), 2 bytes per vocab entry, plus the exact values a comparison needs without the grid.
// Layout, little-endian, no padding:
//   offset  size  field
//        0     8  magic      "STRTEVAL"
//        8     4  version    u32 = 1
//       12     4  encoding   u32 = 1 (u16 log-prob grid)
//       16     4  vocab_size u32
//       20     4  reserved   u32 = 0
//       24     8  n_tokens   u64  text tokens
//       32     8  ctx        u64  window length, tokens
//       40     8  stride     u64  window step = scored targets per window
//       48     8  n_windows  u64  = (n_tokens - ctx) / stride + 1
//       56     8  n_scored   u64  = n_windows * stride
//       64  4*n_tokens       tokens i32[n_tokens] (the tokenized text)
//   then n_scored records of 20 + 2 * vocab_size bytes, in window order, each:
//        0     8  nll        f64  -log p(target) in nats, exact (from the f32 logits)
//        8     4  argmax     i32  exact top-1 token
//       12     4  scale      f32  grid step, nats
//       16     4  min_logp   f32  grid origin, nats
//       20  2*vocab codes    u16[vocab_size]
// Written atomically (io::AtomicFile: a temp file beside F, renamed over F when complete). Reading
// checks the magic, version, encoding, the header's arithmetic and the file size before
// allocating, naming the file and field.
// Thread safety: a writer or reader is used by one thread.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "core/status.h"
#include "io/atomic_file.h"
#include "io/env.h"
#include "io/file.h"
#include "tools/eval_math.h"

namespace strata::tools {

inline constexpr char kEvalBaseMagic[8] = {'S', 'T', 'R', 'T', 'E', 'V', 'A', 'L'};
inline constexpr uint32_t kEvalBaseVersion = 1;
inline constexpr uint32_t kEvalBaseEncodingU16 = 1;
inline constexpr uint64_t kEvalBaseHeaderBytes = 64;

struct EvalBaseHeader {
  uint32_t vocab_size = 0;
  uint64_t n_tokens = 0;
  uint64_t ctx = 0;
  uint64_t stride = 0;
  uint64_t n_windows = 0;
  uint64_t n_scored = 0;
  uint64_t record_bytes() const { return 20 + 2 * static_cast<uint64_t>(vocab_size); }
};

// One scored position.
struct EvalBaseRecord {
  double nll = 0;      // -log p(target), nats (exact)
  int32_t argmax = 0;  // exact top-1 token id
  EncodedRow row;      // the distribution on the u16 grid
};

// Streams a base file. create() writes the header and tokens; append() one record per scored
// position; finish() checks the count, syncs and renames into place. Destroyed unfinished, it
// removes its temp file and leaves `path` as it was.
class EvalBaseWriter {
 public:
  // Errors: io::AtomicFile's (a missing directory, a full disk), each naming `path`.
  [[nodiscard]] static Result<std::unique_ptr<EvalBaseWriter>> create(const std::string& path, const EvalBaseHeader& h,
                                                                      std::span<const int32_t> tokens,
                                                                      io::Env* env = nullptr);
  ~EvalBaseWriter();
  // rec.row.codes must hold vocab_size codes (kInternal otherwise). Errors: the Env's.
  [[nodiscard]] Status append(const EvalBaseRecord& rec);
  // kInternal when fewer or more than n_scored records were appended; then the Env's.
  [[nodiscard]] Status finish();

 private:
  EvalBaseWriter() = default;
  std::string path_;
  std::unique_ptr<io::AtomicFile> file_;  // removes its temp file unless committed
  EvalBaseHeader h_;
  uint64_t n_appended_ = 0;
  std::vector<uint8_t> buf_;
};

// Reads a base file: header and tokens at open(), records on demand.
class EvalBaseReader {
 public:
  // Errors (kCorruption unless said), each naming the file and the field: shorter than the header,
  // wrong magic, version or encoding (kNotSupported for a newer version), header fields that
  // contradict each other or the limits, a size other than the header's; the open's own
  // (kNotFound, kIOError).
  [[nodiscard]] static Result<std::unique_ptr<EvalBaseReader>> open(const std::string& path);
  const EvalBaseHeader& header() const { return h_; }
  std::span<const int32_t> tokens() const { return tokens_; }
  const std::string& path() const { return path_; }
  // Record i in [0, n_scored). Errors: i out of range (kInvalidArgument), a read error, a code
  // grid that is not finite (kCorruption naming the record).
  [[nodiscard]] Status read(uint64_t i, EvalBaseRecord* rec) const;

 private:
  std::string path_;
  std::unique_ptr<io::File> file_;
  EvalBaseHeader h_;
  std::vector<int32_t> tokens_;
  mutable std::vector<uint8_t> buf_;
};

// OK when `base` was saved on the same text and windows as this run (vocab_size, ctx, stride,
// tokens); otherwise kInvalidArgument naming the file, the field that differs, both values and,
// for tokens, the first position where they differ.
[[nodiscard]] Status check_base_matches(const EvalBaseReader& base, const EvalBaseHeader& run,
                                        std::span<const int32_t> tokens);

}  // namespace strata::tools
