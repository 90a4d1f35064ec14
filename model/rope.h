// Rotary position embedding tables and application (interleaved pairs on the last rope_head_dim dims).
//
// Two tables exist per model: window-only layers rotate at rope_theta without YaRN; compressed layers
// (and their indexers) rotate at compress_rope_theta with YaRN (factor, original_seq_len, beta_fast,
// beta_slow). Frequencies and angles are computed in f32 in the reference's order (pos * freq rounded
// to f32, then cos/sin), so positions agree with the official table to the last ulp or so.
// Source: model.py `precompute_freqs_cis`, `apply_rotary_emb`; ARCHITECTURE.md §Attention.
// Thread safety: a table grows on ensure(); apply() on a table that covers the position is read-only.
#pragma once

#include <cstdint>
#include <vector>

namespace strata::model {

struct RopeParams {
  int64_t rope_dim = 0;          // rotated dims (even)
  double theta = 10000.0;
  int64_t original_seq_len = 0;  // 0: no YaRN
  double factor = 1.0;
  double beta_fast = 32, beta_slow = 1;
};

class RopeTable {
 public:
  RopeTable() = default;
  explicit RopeTable(const RopeParams& p);

  // Makes cos/sin available for positions [0, n_positions).
  void ensure(int64_t n_positions);
  int64_t n_positions() const { return n_pos_; }
  int64_t rope_dim() const { return p_.rope_dim; }

  // Rotates x[0..rope_dim) (pairs (x[2i], x[2i+1]) as complex numbers) by the angle of `pos`;
  // inverse rotates by the conjugate. REQUIRES: pos < n_positions().
  void apply(float* x, int64_t pos, bool inverse = false) const;

  // The f32 inverse frequencies (tests).
  const std::vector<float>& freqs() const { return freqs_; }

 private:
  RopeParams p_;
  std::vector<float> freqs_;  // [rope_dim / 2]
  std::vector<float> cos_, sin_;  // [n_pos, rope_dim / 2]
  int64_t n_pos_ = 0;
};

}  // namespace strata::model
