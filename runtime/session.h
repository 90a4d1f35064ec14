// Session: one sequence's state over time — the token history and the model caches that go with it.
//
// A session grows by append() (prefill a chunk, or decode one token); it never shrinks (the
// sliding-window ring and the compressor state cannot be rolled back). Reuse of a shared prefix and
// saving to disk are built on top of this (prefix cache, session files: the sessions issue).
// Thread safety: one thread at a time per session; sessions share one Model, which runs one forward
// at a time.
#pragma once

#include <atomic>
#include <cstdint>
#include <span>
#include <vector>

#include "core/status.h"
#include "model/model.h"

namespace strata::runtime {

class Session {
 public:
  explicit Session(model::Model& m) : m_(&m), cache_(m.new_cache()) {}

  // Runs `tokens` through the model after the current history in chunks of `chunk` tokens and, if
  // `last_logits` is non-null, writes the logits of the last token (vocab_size floats). `cancel` may
  // be null; when it becomes true between chunks the call returns kCancelled with the session left
  // valid at a chunk boundary. Errors: token ids out of range (nothing changed), a model failure
  // (the session must then be discarded: valid() turns false).
  [[nodiscard]] Status append(std::span<const int32_t> tokens, float* last_logits, int64_t chunk = 2048,
                              const std::atomic<bool>* cancel = nullptr);

  const std::vector<int32_t>& tokens() const { return tokens_; }
  int64_t n_past() const { return cache_.n_past; }
  bool valid() const { return valid_; }
  model::Model& model() { return *m_; }
  model::KvCache& cache() { return cache_; }
  const model::KvCache& cache() const { return cache_; }

 private:
  model::Model* m_;
  model::KvCache cache_;
  std::vector<int32_t> tokens_;
  bool valid_ = true;
};

}  // namespace strata::runtime
