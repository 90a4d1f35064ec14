// ForwardRequest: what one Model::forward call runs — a batch of entries, each a span of tokens of
// one sequence (a decode token, a prompt chunk, or several drafted positions) with its own KvCache
// and its own logits rows.
//
// Per-row work (linears, router, routed and shared experts, Engram, mHC, norms, head) runs over all
// rows of the batch at once, reading each weight once per call; attention, compressor and indexer
// run per entry against that entry's cache (ARCHITECTURE.md §Block order; issue "One engine loop and
// a batched forward pass").
//
// Batch invariance: an entry's logits and cache are bit-identical whether it runs alone or with any
// other entries, in any position of the batch. The one thing that picks a row's arithmetic is its
// entry's RowKind: FP8/MXFP4 linears sum products in a free order (fixtures README), and the decode
// matvec and the prefill GEMM use different orders, so decode rows always take the matvec and prompt
// rows always the GEMM, whatever the batch holds (kernels::RowPath). The same token sequence run as
// decode steps and run as a prompt chunk can therefore differ in the last bits (within the fixtures'
// tolerances), never two runs of the same steps.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "model/kv_cache.h"
#include "model/kv_undo.h"
#include "model/observer.h"

namespace strata::model {

// Which prompt positions get logits.
struct LogitsRequest {
  enum class Kind { kNone, kLast, kAll, kRows } kind = Kind::kLast;
  std::vector<int64_t> rows;  // chunk-relative positions for kRows, ascending
  int64_t count(int64_t n_tokens) const;
};

// How an entry's rows are computed (see the file comment): kPrompt rows through the prefill GEMM,
// kDecode rows through the decode matvec, at every batch size.
enum class RowKind { kPrompt, kDecode };

struct ForwardEntry {
  KvCache* cache = nullptr;          // the sequence; runs at positions cache->n_past ..
  std::span<const int32_t> tokens;   // >= 1 token ids in [0, vocab_size)
  RowKind kind = RowKind::kPrompt;
  LogitsRequest logits;              // rows of this entry that get logits (default: the last)
  float* logits_out = nullptr;       // [logits.count(n), vocab_size] f32; null only when none requested
  // DSpark features of the rows the decoder ran ([rows, dim * n_targets], model/dspark.h); may be
  // null. Needs a checkpoint with DSpark stages.
  std::vector<float>* dspark_features = nullptr;
  // CED bounded replay (ARCHITECTURE.md "CED prefill"): in [0, n) the encoder layers run every
  // token and the decoder only the last `decoder_tail` (0: none); logits exist only for those rows.
  // -1 (or >= n): exact. Only in a request of one entry.
  int64_t decoder_tail = -1;
  // Rewind records (model/kv_undo.h): when set, the forward saves what it overwrites in `cache` (the
  // ring slots, the compressor's partial groups) so the cache can be cut back into this entry's
  // positions (runtime::Session::rewind). Not owned; may be null.
  KvUndoLog* undo = nullptr;
};

struct ForwardRequest {
  std::span<ForwardEntry> entries;  // >= 1; no KvCache twice
  Observer* obs = nullptr;          // named intermediates; only in a request of one entry
  // A pipeline stage whose layers start after 0 (model/pipeline_part.h): the residual streams
  // entering its first layer, x_in [N, hc_mult, dim] and pre_mix_in [N, hc_mult] f32, N the
  // entries' tokens in batch order (decode entries first). Empty otherwise.
  std::span<const float> x_in = {}, pre_mix_in = {};
};

}  // namespace strata::model
