// Engram n-gram hashing: compressed token ids -> rows of each Engram layer's embedding table.
//
// spec: ARCHITECTURE.md §Engram. For every position t and Engram layer l, the n-grams ending at t
// (orders 2..max_ngram_size) are hashed with a rolling multiply-XOR over the compressed ids
//   h_1 = c_t * m[l][0];   h_n = h_{n-1} XOR (c_{t-n+1} * m[l][n-1])        (c_{t-k}: k tokens back)
// and order n, head j reads table row (h_n mod p[l][n-2][j]) + offset[l][(n-2)*n_heads + j].
// Constants (multipliers, primes, offsets) derive from the config alone and are built once by
// EngramHasher::create. Source: engram.py EngramLayout.from_args, compute_hash_multipliers,
// NgramHashState.forward.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "core/status.h"

namespace strata::model {

// Config fields the Engram hash depends on; names follow config.json (text_config.engram_*).
struct EngramHashParams {
  std::vector<int> layer_ids;           // engram_layer_ids: model layers with an Engram, e.g. {1, 14}
  std::vector<int64_t> num_embeddings;  // engram_num_embeddings: table rows per Engram layer (= its prime sum)
  int max_ngram_size = 0;               // engram_max_ngram_size: largest n-gram order (orders 2..max)
  int n_heads = 0;                      // engram_n_heads: hash heads per order
  int64_t engram_vocab_size = 0;        // engram_vocab_size: every prime is > engram_vocab_size - 1
  int64_t compressed_vocab_size = 0;    // engram_compressed_vocab_size: V_c, bounds the multipliers
  uint32_t pad_class = 0;               // compressed id of engram_pad_token_id (from the tokenizer's map)
};

// The compressed ids of the last (max_ngram_size - 1) tokens of a sequence, oldest first: what the next
// chunk's n-grams look back into. A fresh history is all pad_class (positions before 0). Keep one per
// session and append() every chunk after hashing it, so decode continues prefill's n-grams.
// Plain value type; not thread-safe to mutate concurrently.
class EngramHistory {
 public:
  // `size` = max_ngram_size - 1 (>= 0), every slot pad_class.
  EngramHistory(int size, uint32_t pad_class) : ids_(size > 0 ? size : 0, pad_class) {}

  // Shifts `tokens` (compressed ids, oldest first; EngramHasher::kDeadClass allowed) in; keeps the newest
  // size() of history + tokens.
  void append(std::span<const uint32_t> tokens);

  // [size()] u32, oldest first: ids()[size()-1] is the token right before the next chunk.
  std::span<const uint32_t> ids() const { return ids_; }
  int size() const { return static_cast<int>(ids_.size()); }

 private:
  std::vector<uint32_t> ids_;
};

// Hash constants for one model config plus the row-id computation.
// Invariants (established by create): primes are distinct, each > engram_vocab_size - 1, and each layer's
// primes sum to its num_embeddings; every multiplier is odd and c * m < 2^63 for every c < V_c, so the
// int64 products of the reference never overflow and equal strata's u64 ones.
// Immutable after create(): const methods are safe to call from many threads.
class EngramHasher {
 public:
  // A token that takes no part in any n-gram (an image-span position; NgramHashState's DEAD). Its own
  // window and every lookback through it read pad_class, exactly as the reference blocks look-back.
  static constexpr uint32_t kDeadClass = 0xffffffffu;

  // Builds primes, offsets and multipliers for `params`.
  // Errors (InvalidArgument, naming the config key): empty engram_layer_ids or a negative layer id;
  // engram_num_embeddings length != engram_layer_ids length; engram_max_ngram_size < 2 or > 16;
  // engram_n_heads < 1 or > 1024; engram_vocab_size < 1 or > 2^62; engram_compressed_vocab_size < 1;
  // pad_class >= engram_compressed_vocab_size; a layer's prime sum != its engram_num_embeddings
  // (message gives got and expected).
  // Source: engram.py EngramLayout.from_args (primes), NgramHashState.__init__ (offsets),
  // compute_hash_multipliers (multipliers, via model/numpy_rng.h).
  [[nodiscard]] static Result<EngramHasher> create(const EngramHashParams& params);

  int n_layers() const { return static_cast<int>(layer_ids_.size()); }  // Engram layers
  int max_ngram_size() const { return max_ngram_size_; }
  int n_heads() const { return n_heads_; }
  int n_cols() const { return n_cols_; }  // (max_ngram_size - 1) * n_heads row ids per token per layer
  int history_size() const { return max_ngram_size_ - 1; }
  uint32_t pad_class() const { return pad_class_; }
  int64_t compressed_vocab_size() const { return compressed_vocab_size_; }
  const std::vector<int>& layer_ids() const { return layer_ids_; }

  // B = max(1, (INT64_MAX / V_c) / 2): multipliers are 2r+1 with r in [0, B).
  int64_t multiplier_bound() const { return multiplier_bound_; }
  // [max_ngram_size] i64 for Engram layer index `layer` (0..n_layers-1, not the model layer id):
  // m[k] multiplies the compressed id k tokens back.
  std::span<const int64_t> multipliers(int layer) const;
  // [n_cols] i64, column (order-2)*n_heads + head: the bucket modulus of that column.
  std::span<const int64_t> primes(int layer) const;
  // [n_cols] i64: exclusive prefix sum of primes(layer), the column's first table row.
  std::span<const int64_t> offsets(int layer) const;
  // The prime of (layer index, n-gram order 2..max_ngram_size, head).
  int64_t prime(int layer, int order, int head) const;

  // A fresh history (all pad_class) for a new sequence.
  EngramHistory new_history() const { return EngramHistory(history_size(), pad_class_); }

  // Row ids of one position from its n-gram window.
  //   window [max_ngram_size] u32: window[k] = compressed id k tokens back (window[0] = the token itself);
  //                                 pad_class before position 0; kDeadClass blocks that and further lookbacks
  //   out    [n_layers, n_cols] i64 row ids, each in [0, num_embeddings[layer])
  // Cannot fail; REQUIRES: sizes as above and ids < compressed_vocab_size or kDeadClass (DCHECKed).
  void hash_window(std::span<const uint32_t> window, std::span<int64_t> out) const;

  // Row ids for a chunk of consecutive tokens that follows `history`.
  //   history  max_ngram_size-1 ids before tokens[0] (new_history() at position 0)
  //   tokens   [n_tokens] u32 compressed ids (kDeadClass for positions outside every n-gram)
  //   out      [n_tokens, n_layers, n_cols] i64, row-major; out[t][l][(n-2)*n_heads + j] is the row of
  //            Engram layer l for order n, head j (the layout of NgramHashState.forward's result)
  // Does not modify history: call history.append(tokens) once the chunk is committed.
  // Cannot fail; REQUIRES: out.size() == n_tokens * n_layers * n_cols, history.size() == history_size().
  // No allocation; the caller may split a chunk across threads by token.
  void hash_rows(const EngramHistory& history, std::span<const uint32_t> tokens, std::span<int64_t> out) const;

 private:
  EngramHasher() = default;

  std::vector<int> layer_ids_;
  int max_ngram_size_ = 0;
  int n_heads_ = 0;
  int n_cols_ = 0;
  uint32_t pad_class_ = 0;
  int64_t compressed_vocab_size_ = 0;
  int64_t multiplier_bound_ = 0;
  std::vector<int64_t> multipliers_;  // [n_layers, max_ngram_size]
  std::vector<int64_t> primes_;       // [n_layers, n_cols]
  std::vector<int64_t> offsets_;      // [n_layers, n_cols]
};

// Deterministic primality for any 64-bit value (Miller-Rabin with the first 12 primes as bases, which
// is exact below 3.3e24). Source: engram.py uses sympy.isprime; both are exact, so they agree.
bool is_prime_u64(uint64_t n);

}  // namespace strata::model
