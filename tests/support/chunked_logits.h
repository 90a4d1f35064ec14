// The logits of one sequence run the way the engine loop runs it: a prompt in two prefill chunks,
// then greedy decode steps (tests comparing a split model with one process: expert peers, pipeline).
#pragma once

#include <gtest/gtest.h>

#include <span>
#include <vector>

#include "model/model.h"
#include "runtime/sampler.h"

namespace strata::testing {

// The last row's logits of each of the two chunks of `ids` and of `n_decode` greedy decode steps,
// concatenated ([2 + n_decode, vocab] f32). A failed forward fails the calling test.
inline std::vector<float> chunked_then_decode_logits(const model::Model& m, std::span<const int32_t> ids,
                                                     int n_decode = 4) {
  model::Activations act = m.new_activations();
  model::KvCache cache = m.new_cache();
  std::vector<float> out, row(static_cast<size_t>(m.config().vocab_size));
  auto step = [&](std::span<const int32_t> toks, model::RowKind kind) {
    model::ForwardEntry e;
    e.cache = &cache;
    e.tokens = toks;
    e.kind = kind;
    e.logits_out = row.data();
    Status s = m.forward(model::ForwardRequest{std::span<model::ForwardEntry>(&e, 1), nullptr}, act);
    EXPECT_TRUE(s.ok()) << s.to_string();
    out.insert(out.end(), row.begin(), row.end());
  };
  const size_t half = ids.size() / 2;
  step(ids.subspan(0, half), model::RowKind::kPrompt);
  step(ids.subspan(half), model::RowKind::kPrompt);
  for (int i = 0; i < n_decode; ++i) {
    const int32_t t[1] = {runtime::argmax(row)};
    step(t, model::RowKind::kDecode);
  }
  return out;
}

}  // namespace strata::testing
