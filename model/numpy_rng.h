// NumPy's default random generator, re-implemented bit for bit for the one draw the model needs.
//
// The Engram hash multipliers are defined as `numpy.random.default_rng(seed).integers(low, high, size=n,
// dtype=np.int64)` (engram.py compute_hash_multipliers), so strata reproduces that call exactly:
// SeedSequence (entropy -> 4-word pool -> generate_state), PCG64 (128-bit LCG, XSL-RR output, NumPy's
// seeding) and Generator.integers' bounded draw (Lemire's multiply-and-reject, NumPy >= 1.17, not the
// masked method). Only non-negative integer seeds up to 2^64-1 are supported.
// Thread safety: Pcg64 is a plain value (no shared state); the free functions are pure.
// Source: numpy/random/bit_generator.pyx (SeedSequence), numpy/random/src/pcg64/pcg64.{h,c},
// numpy/random/src/distributions/distributions.c (random_bounded_uint64_fill), checked against numpy 1.24.
#pragma once

#include <array>
#include <cstdint>
#include <vector>

#include "core/status.h"

namespace strata::model {

// numpy.random.SeedSequence(entropy).pool: the 4-word u32 entropy pool after mixing.
// `entropy` is split into little-endian 32-bit words (0 -> one word 0) as NumPy does for a Python int;
// no spawn key. Cannot fail. Source: bit_generator.pyx SeedSequence.mix_entropy.
std::array<uint32_t, 4> seed_sequence_pool(uint64_t entropy);

// numpy.random.SeedSequence(entropy).generate_state(n_words, dtype=np.uint32).
//   returns [n_words] u32. Cannot fail. Source: bit_generator.pyx SeedSequence.generate_state.
std::vector<uint32_t> seed_sequence_generate_state(uint64_t entropy, int n_words);

// NumPy's PCG64 bit generator (pcg_setseq_128 with XSL-RR 128->64 output).
// A small value type: copy it to fork a stream. Not thread-safe to share one instance.
class Pcg64 {
 public:
  // The generator numpy.random.default_rng(seed) / PCG64(seed) holds: state and increment come from
  // SeedSequence(seed).generate_state(4, np.uint64) = {s_hi, s_lo, i_hi, i_lo}, then NumPy's
  // srandom (state 0, inc = (initseq << 1) | 1, step, state += initstate, step). Source: _pcg64.pyx, pcg64.h.
  static Pcg64 from_seed(uint64_t seed);

  // The next 64 output bits (advance the LCG, then XSL-RR of the new state). Source: pcg64.h pcg64_next64.
  uint64_t next_uint64();

  // The next 32 bits: the low half of a fresh next_uint64(), then on the following call its high half
  // (NumPy keeps that half in the bit generator: has_uint32 / uinteger). Source: pcg64.h pcg64_next32.
  uint32_t next_uint32();

  // The 128-bit state and increment, as `bit_generator.state["state"]` reports them (for tests).
  unsigned __int128 state() const { return state_; }
  unsigned __int128 inc() const { return inc_; }

 private:
  Pcg64(unsigned __int128 state, unsigned __int128 inc) : state_(state), inc_(inc) {}
  unsigned __int128 state_;
  unsigned __int128 inc_;
  bool has_uint32_ = false;  // a buffered high half is pending
  uint32_t uinteger_ = 0;    // that high half
};

// numpy.random.default_rng(seed).integers(low, high, size=n, dtype=np.int64) (endpoint=False).
//   returns [n] i64 in [low, high).
// Errors: InvalidArgument when high <= low (NumPy raises "low >= high") or n < 0.
// Source: _generator.pyx Generator.integers -> _bounded_integers.pyx _rand_int64 ->
// distributions.c random_bounded_uint64_fill (use_masked=False).
[[nodiscard]] Result<std::vector<int64_t>> numpy_default_rng_integers(uint64_t seed, int64_t low, int64_t high,
                                                                      int64_t n);

// The bounded fill on an existing generator: n values off + [0, rng] (rng is the inclusive range
// high-1-low). Consumes generator output exactly as NumPy's random_bounded_uint64_fill does: 0 draws for
// rng == 0; 32-bit Lemire on next_uint32() for rng < 2^32-1; one
// u32 per value for rng == 2^32-1 (both through next_uint32); raw u64 for rng == 2^64-1; 64-bit Lemire otherwise.
//   out [n] u64 (callers reinterpret as i64). Cannot fail.
void bounded_uint64_fill(Pcg64& gen, uint64_t off, uint64_t rng, uint64_t* out, int64_t n);

}  // namespace strata::model
