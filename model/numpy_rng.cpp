// NumPy SeedSequence + PCG64 + Generator.integers(int64), bit for bit (see numpy_rng.h).
#include "model/numpy_rng.h"

#include <string>

namespace strata::model {
namespace {

// SeedSequence hash constants (bit_generator.pyx; from Melissa O'Neill's seed_seq_fe).
constexpr uint32_t kInitA = 0x43b0d7e5u;
constexpr uint32_t kMultA = 0x931e8875u;
constexpr uint32_t kInitB = 0x8b51f9ddu;
constexpr uint32_t kMultB = 0x58f38dedu;
constexpr uint32_t kMixMultL = 0xca01f9ddu;
constexpr uint32_t kMixMultR = 0x4973f715u;
constexpr int kXShift = 16;  // half the word size
constexpr int kPoolSize = 4;

// PCG_DEFAULT_MULTIPLIER_128 (pcg64.h).
constexpr unsigned __int128 kPcgMultiplier =
    (static_cast<unsigned __int128>(2549297995355413924ull) << 64) | 4865540595714422341ull;

// Hashes one word; `hash_const` advances on every call (the mixer's running multiplier).
uint32_t hashmix(uint32_t value, uint32_t& hash_const) {
  value ^= hash_const;
  hash_const *= kMultA;
  value *= hash_const;
  value ^= value >> kXShift;
  return value;
}

uint32_t mix(uint32_t x, uint32_t y) {
  uint32_t result = kMixMultL * x - kMixMultR * y;
  result ^= result >> kXShift;
  return result;
}

// A non-negative integer as NumPy's _int_to_uint32_array sees it: little-endian u32 words, 0 -> {0}.
std::vector<uint32_t> entropy_words(uint64_t entropy) {
  std::vector<uint32_t> words;
  if (entropy == 0) words.push_back(0);
  while (entropy > 0) {
    words.push_back(static_cast<uint32_t>(entropy & 0xffffffffu));
    entropy >>= 32;
  }
  return words;
}

uint64_t rotr64(uint64_t value, unsigned rot) { return (value >> rot) | (value << ((64 - rot) & 63)); }

// bounded_lemire_uint64 (distributions.c): a value in [0, rng], 2^64-1 > rng > 0.
uint64_t bounded_lemire_uint64(Pcg64& gen, uint64_t rng) {
  const uint64_t rng_excl = rng + 1;
  unsigned __int128 m = static_cast<unsigned __int128>(gen.next_uint64()) * rng_excl;
  uint64_t leftover = static_cast<uint64_t>(m);
  if (leftover < rng_excl) {
    const uint64_t threshold = (UINT64_MAX - rng) % rng_excl;
    while (leftover < threshold) {
      m = static_cast<unsigned __int128>(gen.next_uint64()) * rng_excl;
      leftover = static_cast<uint64_t>(m);
    }
  }
  return static_cast<uint64_t>(m >> 64);
}

// buffered_bounded_lemire_uint32 (distributions.c): a value in [0, rng], 2^32-1 > rng > 0.
uint32_t bounded_lemire_uint32(Pcg64& gen, uint32_t rng) {
  const uint32_t rng_excl = rng + 1;
  uint64_t m = static_cast<uint64_t>(gen.next_uint32()) * rng_excl;
  uint32_t leftover = static_cast<uint32_t>(m);
  if (leftover < rng_excl) {
    const uint32_t threshold = (UINT32_MAX - rng) % rng_excl;
    while (leftover < threshold) {
      m = static_cast<uint64_t>(gen.next_uint32()) * rng_excl;
      leftover = static_cast<uint32_t>(m);
    }
  }
  return static_cast<uint32_t>(m >> 32);
}

}  // namespace

std::array<uint32_t, 4> seed_sequence_pool(uint64_t entropy) {
  const std::vector<uint32_t> words = entropy_words(entropy);
  std::array<uint32_t, kPoolSize> pool{};
  uint32_t hash_const = kInitA;
  // Fill the pool with the hashed entropy, continuing the hash over zeros when entropy is short.
  for (int i = 0; i < kPoolSize; ++i) {
    pool[i] = hashmix(i < static_cast<int>(words.size()) ? words[i] : 0u, hash_const);
  }
  // Let every pool word influence every other one.
  for (int src = 0; src < kPoolSize; ++src) {
    for (int dst = 0; dst < kPoolSize; ++dst) {
      if (src != dst) pool[dst] = mix(pool[dst], hashmix(pool[src], hash_const));
    }
  }
  // Entropy beyond the pool size (at most 2 words for a u64, so never taken; kept for the general rule).
  for (size_t src = kPoolSize; src < words.size(); ++src) {
    for (int dst = 0; dst < kPoolSize; ++dst) pool[dst] = mix(pool[dst], hashmix(words[src], hash_const));
  }
  return pool;
}

std::vector<uint32_t> seed_sequence_generate_state(uint64_t entropy, int n_words) {
  const std::array<uint32_t, kPoolSize> pool = seed_sequence_pool(entropy);
  std::vector<uint32_t> state(n_words > 0 ? n_words : 0);
  uint32_t hash_const = kInitB;
  for (size_t i = 0; i < state.size(); ++i) {
    uint32_t value = pool[i % kPoolSize];  // cycles through the pool
    value ^= hash_const;
    hash_const *= kMultB;
    value *= hash_const;
    value ^= value >> kXShift;
    state[i] = value;
  }
  return state;
}

Pcg64 Pcg64::from_seed(uint64_t seed) {
  // generate_state(4, np.uint64) is 8 u32 words viewed as 4 little-endian u64s.
  const std::vector<uint32_t> w = seed_sequence_generate_state(seed, 8);
  uint64_t v[4];
  for (int i = 0; i < 4; ++i) v[i] = static_cast<uint64_t>(w[2 * i]) | (static_cast<uint64_t>(w[2 * i + 1]) << 32);
  // pcg64_set_seed: the first u64 of each pair is the high half.
  const unsigned __int128 init_state = (static_cast<unsigned __int128>(v[0]) << 64) | v[1];
  const unsigned __int128 init_seq = (static_cast<unsigned __int128>(v[2]) << 64) | v[3];
  Pcg64 gen(0, (init_seq << 1) | 1u);
  gen.state_ = gen.state_ * kPcgMultiplier + gen.inc_;
  gen.state_ += init_state;
  gen.state_ = gen.state_ * kPcgMultiplier + gen.inc_;
  return gen;
}

uint64_t Pcg64::next_uint64() {
  state_ = state_ * kPcgMultiplier + inc_;
  // XSL-RR: xor the halves, rotate right by the top 6 bits.
  const uint64_t hi = static_cast<uint64_t>(state_ >> 64);
  const uint64_t lo = static_cast<uint64_t>(state_);
  return rotr64(hi ^ lo, static_cast<unsigned>(state_ >> 122));
}

uint32_t Pcg64::next_uint32() {
  if (has_uint32_) {
    has_uint32_ = false;
    return uinteger_;
  }
  const uint64_t next = next_uint64();
  has_uint32_ = true;
  uinteger_ = static_cast<uint32_t>(next >> 32);
  return static_cast<uint32_t>(next);
}

void bounded_uint64_fill(Pcg64& gen, uint64_t off, uint64_t rng, uint64_t* out, int64_t n) {
  if (rng == 0) {
    for (int64_t i = 0; i < n; ++i) out[i] = off;
  } else if (rng == 0xffffffffull) {
    for (int64_t i = 0; i < n; ++i) out[i] = off + gen.next_uint32();
  } else if (rng < 0xffffffffull) {
    for (int64_t i = 0; i < n; ++i) out[i] = off + bounded_lemire_uint32(gen, static_cast<uint32_t>(rng));
  } else if (rng == UINT64_MAX) {
    // Lemire's method cannot express a range of 2^64.
    for (int64_t i = 0; i < n; ++i) out[i] = off + gen.next_uint64();
  } else {
    for (int64_t i = 0; i < n; ++i) out[i] = off + bounded_lemire_uint64(gen, rng);
  }
}

Result<std::vector<int64_t>> numpy_default_rng_integers(uint64_t seed, int64_t low, int64_t high, int64_t n) {
  if (high <= low) {
    return InvalidArgument("numpy_default_rng_integers: low >= high (low=" + std::to_string(low) +
                           ", high=" + std::to_string(high) + ")");
  }
  if (n < 0) return InvalidArgument("numpy_default_rng_integers: negative size " + std::to_string(n));
  Pcg64 gen = Pcg64::from_seed(seed);
  // _rand_int64: inclusive range high-1-low and offset low, both taken modulo 2^64.
  const uint64_t rng = static_cast<uint64_t>(high) - 1u - static_cast<uint64_t>(low);
  std::vector<uint64_t> raw(static_cast<size_t>(n));
  bounded_uint64_fill(gen, static_cast<uint64_t>(low), rng, raw.data(), n);
  std::vector<int64_t> values(raw.size());
  for (size_t i = 0; i < raw.size(); ++i) values[i] = static_cast<int64_t>(raw[i]);
  return values;
}

}  // namespace strata::model
