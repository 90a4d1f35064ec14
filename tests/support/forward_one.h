// forward_one: one sequence through Model::forward, the shape most model tests need (a request of
// one entry). Decode-sized calls (one token) take RowKind::kDecode, longer ones kPrompt, as the
// engine loop does; `act` null runs with a temporary Activations.
#pragma once

#include <span>
#include <vector>

#include "model/model.h"

namespace strata::test {

inline Status forward_one(const model::Model& m, model::KvCache& cache, std::span<const int32_t> tokens,
                          const model::LogitsRequest& req, float* logits, model::Observer* obs = nullptr,
                          int64_t decoder_tail = -1, std::vector<float>* features = nullptr,
                          model::Activations* act = nullptr) {
  model::ForwardEntry e;
  e.cache = &cache;
  e.tokens = tokens;
  e.kind = tokens.size() == 1 ? model::RowKind::kDecode : model::RowKind::kPrompt;
  e.logits = req;
  e.logits_out = logits;
  e.decoder_tail = decoder_tail;
  e.dspark_features = features;
  model::ForwardRequest r{std::span<model::ForwardEntry>(&e, 1), obs};
  if (act) return m.forward(r, *act);
  model::Activations own = m.new_activations();
  return m.forward(r, own);
}

}  // namespace strata::test
