// Engram n-gram hashing (see engram_hash.h). spec: ARCHITECTURE.md §Engram.
#include "model/engram_hash.h"

#include <algorithm>
#include <cstdint>
#include <string>
#include <unordered_set>

#include "model/numpy_rng.h"

namespace strata::model {
namespace {

constexpr int kMaxNgramSize = 16;                // bounds the per-position window kept on the stack
constexpr int kMaxHeads = 1024;                  // sanity bound on engram_n_heads
constexpr int64_t kMaxTotalCols = 65536;         // n_layers * n_cols: bounds the prime search (real config: 48)
constexpr int64_t kMaxVocab = int64_t{1} << 62;  // primes above it still fit int64 with room to spare

// The multiplier seed of one Engram layer. Source: engram.py compute_hash_multipliers.
constexpr uint64_t kLayerSeedStride = 10007;

uint64_t mulmod(uint64_t a, uint64_t b, uint64_t m) {
  return static_cast<uint64_t>(static_cast<unsigned __int128>(a) * b % m);
}

uint64_t powmod(uint64_t base, uint64_t exp, uint64_t m) {
  uint64_t result = 1 % m;
  base %= m;
  while (exp > 0) {
    if (exp & 1) result = mulmod(result, base, m);
    base = mulmod(base, base, m);
    exp >>= 1;
  }
  return result;
}

// Primes above `base` in increasing order, classified lazily and remembered, so that the reference's
// restart-from-engram_vocab_size-1 searches cost a walk over known primes instead of new primality tests.
class PrimeScanner {
 public:
  explicit PrimeScanner(int64_t base) : frontier_(base) {}

  // engram.py find_next_prime: the smallest prime > `after` that is not in `seen`. REQUIRES after >= base.
  int64_t next_unseen(int64_t after, const std::unordered_set<int64_t>& seen) {
    for (auto it = std::upper_bound(primes_.begin(), primes_.end(), after); it != primes_.end(); ++it) {
      if (!seen.contains(*it)) return *it;
    }
    for (int64_t c = frontier_ + 1;; ++c) {
      frontier_ = c;
      if (!is_prime_u64(static_cast<uint64_t>(c))) continue;
      primes_.push_back(c);
      if (c > after && !seen.contains(c)) return c;
    }
  }

 private:
  int64_t frontier_;             // every integer in (base, frontier_] has been classified
  std::vector<int64_t> primes_;  // the primes in (base, frontier_], increasing
};

// "[a, b, ...]", at most 32 values (then ", ...") so an error message stays one readable line.
std::string join(const std::vector<int64_t>& v) {
  std::string s = "[";
  for (size_t i = 0; i < v.size() && i < 32; ++i) s += (i ? ", " : "") + std::to_string(v[i]);
  return s + (v.size() > 32 ? ", ...]" : "]");
}

}  // namespace

bool is_prime_u64(uint64_t n) {
  static constexpr uint64_t kBases[] = {2, 3, 5, 7, 11, 13, 17, 19, 23, 29, 31, 37};
  if (n < 2) return false;
  for (uint64_t p : kBases) {
    if (n % p == 0) return n == p;
  }
  uint64_t d = n - 1;
  int s = 0;
  while ((d & 1) == 0) {
    d >>= 1;
    ++s;
  }
  for (uint64_t a : kBases) {
    uint64_t x = powmod(a, d, n);
    if (x == 1 || x == n - 1) continue;
    bool composite = true;
    for (int r = 1; r < s; ++r) {
      x = mulmod(x, x, n);
      if (x == n - 1) {
        composite = false;
        break;
      }
    }
    if (composite) return false;
  }
  return true;
}

void EngramHistory::append(std::span<const uint32_t> tokens) {
  const size_t size = ids_.size();
  if (tokens.size() >= size) {
    std::copy(tokens.end() - static_cast<std::ptrdiff_t>(size), tokens.end(), ids_.begin());
    return;
  }
  std::copy(ids_.begin() + static_cast<std::ptrdiff_t>(tokens.size()), ids_.end(), ids_.begin());
  std::copy(tokens.begin(), tokens.end(), ids_.end() - static_cast<std::ptrdiff_t>(tokens.size()));
}

Result<EngramHasher> EngramHasher::create(const EngramHashParams& p) {
  const std::string where = "engram hash config: ";
  if (p.layer_ids.empty()) return InvalidArgument(where + "engram_layer_ids is empty (no Engram layers)");
  for (int id : p.layer_ids) {
    if (id < 0) return InvalidArgument(where + "engram_layer_ids has negative layer id " + std::to_string(id));
  }
  if (p.num_embeddings.size() != p.layer_ids.size()) {
    return InvalidArgument(where + "engram_num_embeddings has " + std::to_string(p.num_embeddings.size()) +
                           " entries, expected " + std::to_string(p.layer_ids.size()) +
                           " (one per engram_layer_ids entry)");
  }
  if (p.max_ngram_size < 2 || p.max_ngram_size > kMaxNgramSize) {
    return InvalidArgument(where + "engram_max_ngram_size=" + std::to_string(p.max_ngram_size) + ", expected 2.." +
                           std::to_string(kMaxNgramSize));
  }
  if (p.n_heads < 1 || p.n_heads > kMaxHeads) {
    return InvalidArgument(where + "engram_n_heads=" + std::to_string(p.n_heads) + ", expected 1.." +
                           std::to_string(kMaxHeads));
  }
  const int n_cols = (p.max_ngram_size - 1) * p.n_heads;
  if (static_cast<int64_t>(p.layer_ids.size()) * n_cols > kMaxTotalCols) {
    return InvalidArgument(where + std::to_string(p.layer_ids.size()) + " Engram layers x " + std::to_string(n_cols) +
                           " hash columns exceeds " + std::to_string(kMaxTotalCols));
  }
  if (p.engram_vocab_size < 1 || p.engram_vocab_size > kMaxVocab) {
    return InvalidArgument(where + "engram_vocab_size=" + std::to_string(p.engram_vocab_size) + ", expected 1..2^62");
  }
  if (p.compressed_vocab_size < 1) {
    return InvalidArgument(where + "engram_compressed_vocab_size=" + std::to_string(p.compressed_vocab_size) +
                           ", expected > 0");
  }
  if (p.pad_class >= static_cast<uint64_t>(p.compressed_vocab_size)) {
    return InvalidArgument(where + "pad class (compressed id of engram_pad_token_id) " + std::to_string(p.pad_class) +
                           " is not below engram_compressed_vocab_size " + std::to_string(p.compressed_vocab_size));
  }

  EngramHasher h;
  h.layer_ids_ = p.layer_ids;
  h.max_ngram_size_ = p.max_ngram_size;
  h.n_heads_ = p.n_heads;
  h.n_cols_ = n_cols;
  h.pad_class_ = p.pad_class;
  h.compressed_vocab_size_ = p.compressed_vocab_size;
  const int n_layers = h.n_layers();

  // Primes: for each (layer, order) the search restarts just below engram_vocab_size and skips every
  // prime handed out before, so all columns of all layers get distinct primes.
  // ref: engram.py EngramLayout.from_args / find_next_prime.
  h.primes_.resize(static_cast<size_t>(n_layers) * n_cols);
  std::unordered_set<int64_t> seen;
  PrimeScanner scanner(p.engram_vocab_size - 1);
  for (int l = 0; l < n_layers; ++l) {
    for (int order = 0; order < p.max_ngram_size - 1; ++order) {
      int64_t current = p.engram_vocab_size - 1;
      for (int head = 0; head < p.n_heads; ++head) {
        current = scanner.next_unseen(current, seen);
        seen.insert(current);
        h.primes_[static_cast<size_t>(l) * n_cols + order * p.n_heads + head] = current;
      }
    }
  }

  // Offsets: each column's rows start after all earlier columns' (order-major, head-minor), and the layer's
  // table must hold exactly all of them. ref: engram.py NgramHashState.__init__ (cumsum over primes).
  h.offsets_.resize(h.primes_.size());
  for (int l = 0; l < n_layers; ++l) {
    unsigned __int128 sum = 0;
    for (int c = 0; c < n_cols; ++c) {
      const size_t i = static_cast<size_t>(l) * n_cols + c;
      h.offsets_[i] = static_cast<int64_t>(sum);  // sum < expected <= INT64_MAX here, checked below
      sum += static_cast<uint64_t>(h.primes_[i]);
      if (sum > static_cast<unsigned __int128>(INT64_MAX)) break;
    }
    const bool match =
        p.num_embeddings[l] >= 0 && sum == static_cast<unsigned __int128>(static_cast<uint64_t>(p.num_embeddings[l]));
    if (!match) {
      const std::vector<int64_t> layer_primes(h.primes_.begin() + static_cast<std::ptrdiff_t>(l) * n_cols,
                                              h.primes_.begin() + static_cast<std::ptrdiff_t>(l + 1) * n_cols);
      const std::string got = sum > static_cast<unsigned __int128>(INT64_MAX)
                                  ? std::string("> INT64_MAX")
                                  : std::to_string(static_cast<int64_t>(sum));
      return InvalidArgument(where + "engram_num_embeddings[" + std::to_string(l) + "] (layer " +
                             std::to_string(p.layer_ids[l]) + ") is " + std::to_string(p.num_embeddings[l]) +
                             ", expected " + got + " = the sum of the layer's " + std::to_string(n_cols) +
                             " hash primes (engram_vocab_size=" + std::to_string(p.engram_vocab_size) +
                             ", engram_n_heads=" + std::to_string(p.n_heads) +
                             ", engram_max_ngram_size=" + std::to_string(p.max_ngram_size) + "; primes " +
                             join(layer_primes) + "; source: engram.py EngramLayout.from_args)");
    }
  }

  // Multipliers: m = 2r+1 (odd), r < B so that c * m cannot overflow int64 for any c < V_c.
  // ref: engram.py compute_hash_multipliers.
  h.multiplier_bound_ = std::max<int64_t>(1, (INT64_MAX / p.compressed_vocab_size) / 2);
  h.multipliers_.reserve(static_cast<size_t>(n_layers) * p.max_ngram_size);
  for (int l = 0; l < n_layers; ++l) {
    const uint64_t seed = kLayerSeedStride * static_cast<uint64_t>(p.layer_ids[l]);
    STRATA_ASSIGN_OR_RETURN(std::vector<int64_t> r,
                            numpy_default_rng_integers(seed, 0, h.multiplier_bound_, p.max_ngram_size));
    for (int64_t v : r) h.multipliers_.push_back(2 * v + 1);
  }
  return h;
}

std::span<const int64_t> EngramHasher::multipliers(int layer) const {
  STRATA_CHECK(layer >= 0 && layer < n_layers(), "Engram layer index out of range");
  return std::span<const int64_t>(multipliers_).subspan(static_cast<size_t>(layer) * max_ngram_size_, max_ngram_size_);
}

std::span<const int64_t> EngramHasher::primes(int layer) const {
  STRATA_CHECK(layer >= 0 && layer < n_layers(), "Engram layer index out of range");
  return std::span<const int64_t>(primes_).subspan(static_cast<size_t>(layer) * n_cols_, n_cols_);
}

std::span<const int64_t> EngramHasher::offsets(int layer) const {
  STRATA_CHECK(layer >= 0 && layer < n_layers(), "Engram layer index out of range");
  return std::span<const int64_t>(offsets_).subspan(static_cast<size_t>(layer) * n_cols_, n_cols_);
}

int64_t EngramHasher::prime(int layer, int order, int head) const {
  STRATA_CHECK(order >= 2 && order <= max_ngram_size_ && head >= 0 && head < n_heads_,
               "Engram order or head out of range");
  return primes(layer)[(order - 2) * n_heads_ + head];
}

void EngramHasher::hash_window(std::span<const uint32_t> window, std::span<int64_t> out) const {
  STRATA_DCHECK(window.size() == static_cast<size_t>(max_ngram_size_), "Engram window size");
  STRATA_DCHECK(out.size() == static_cast<size_t>(n_layers()) * n_cols_, "Engram row-id output size");
  // A dead token blocks itself and every older lookback (ref: NgramHashState.forward, `blocked`).
  uint64_t ids[kMaxNgramSize];
  bool blocked = false;
  for (int k = 0; k < max_ngram_size_; ++k) {
    blocked = blocked || window[k] == kDeadClass;
    ids[k] = blocked ? pad_class_ : window[k];
    STRATA_DCHECK(ids[k] < static_cast<uint64_t>(compressed_vocab_size_), "compressed id >= V_c");
  }
  // Products stay below 2^63 (see create), so u64 arithmetic equals the reference's int64.
  for (int l = 0; l < n_layers(); ++l) {
    const int64_t* m = multipliers_.data() + static_cast<size_t>(l) * max_ngram_size_;
    const int64_t* primes = primes_.data() + static_cast<size_t>(l) * n_cols_;
    const int64_t* offsets = offsets_.data() + static_cast<size_t>(l) * n_cols_;
    int64_t* row = out.data() + static_cast<size_t>(l) * n_cols_;
    uint64_t hash = ids[0] * static_cast<uint64_t>(m[0]);
    for (int k = 1; k < max_ngram_size_; ++k) {
      hash ^= ids[k] * static_cast<uint64_t>(m[k]);  // now the hash of the (k+1)-gram
      for (int head = 0; head < n_heads_; ++head) {
        const int col = (k - 1) * n_heads_ + head;
        row[col] = static_cast<int64_t>(hash % static_cast<uint64_t>(primes[col])) + offsets[col];
      }
    }
  }
}

void EngramHasher::hash_rows(const EngramHistory& history, std::span<const uint32_t> tokens,
                             std::span<int64_t> out) const {
  const int n_hist = history_size();
  STRATA_CHECK(history.size() == n_hist, "EngramHistory size != max_ngram_size - 1");
  STRATA_CHECK(out.size() == tokens.size() * static_cast<size_t>(n_layers()) * n_cols_,
               "Engram row-id output size != n_tokens * n_layers * n_cols");
  const std::span<const uint32_t> hist = history.ids();
  const size_t per_token = static_cast<size_t>(n_layers()) * n_cols_;
  uint32_t window[kMaxNgramSize];
  for (size_t t = 0; t < tokens.size(); ++t) {
    for (int k = 0; k < max_ngram_size_; ++k) {
      // k tokens back from t: inside this chunk, or in the history (oldest first, newest at the end).
      const int64_t src = static_cast<int64_t>(t) - k;
      window[k] = src >= 0 ? tokens[static_cast<size_t>(src)] : hist[static_cast<size_t>(n_hist + src)];
    }
    hash_window(std::span<const uint32_t>(window, max_ngram_size_), out.subspan(t * per_token, per_token));
  }
}

}  // namespace strata::model
