// Fuzz target: config.json (model/config.h, ModelConfig::parse = parse + validate).
//
// The input is config.json text, in either layout (HF text_config or flat ModelArgs). A config that
// is accepted must be one the model code can index without checks of its own: a ratio for every
// backbone layer and DSpark stage, layer lists inside the backbone, 0 < top-k <= experts in every
// layer, and validate() must agree with parse().
#include <cstdint>
#include <string>

#include "fuzz/fuzz_support.h"
#include "model/config.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  auto r = strata::model::ModelConfig::parse(text, "config.json");
  if (!r.ok()) {
    STRATA_FUZZ_CHECK(!r.error().message().empty(), "an error without a message");
    return 0;
  }
  const strata::model::ModelConfig& c = *r;
  STRATA_FUZZ_CHECK(c.validate().ok(), "parse accepted what validate refuses");
  STRATA_FUZZ_CHECK(c.n_layers > 0 && c.n_mtp_layers >= 0, "layer counts");
  const int total = c.n_layers + c.n_mtp_layers;
  STRATA_FUZZ_CHECK(static_cast<int64_t>(c.compress_ratios.size()) == total, "a ratio per layer and stage");
  int64_t sum = 0;  // touch every accessor over every layer (ASan / _GLIBCXX_ASSERTIONS catch bad indices)
  for (int l = 0; l < total; ++l) {
    sum += c.compress_ratio(l) + c.is_kv_source(l) + c.is_index_source(l) + c.owns_index_keys(l) +
           c.is_candidate_source(l) + c.uses_candidates(l) + c.engram_index(l);
    STRATA_FUZZ_CHECK(c.compress_ratio(l) >= 0, "negative ratio");
    STRATA_FUZZ_CHECK(c.n_active(l) > 0 && c.n_active(l) <= c.n_experts(l),
                      "layer " + std::to_string(l) + ": top-k " + std::to_string(c.n_active(l)) + " of " +
                          std::to_string(c.n_experts(l)) + " experts");
  }
  for (int l : c.kv_source_layers) STRATA_FUZZ_CHECK(l >= 0 && l < c.n_layers, "kv source outside the backbone");
  for (int l : c.index_source_layers) STRATA_FUZZ_CHECK(l >= 0 && l < c.n_layers, "index source outside the backbone");
  for (int l : c.engram_layer_ids) STRATA_FUZZ_CHECK(l >= 0 && l < c.n_layers, "Engram layer outside the backbone");
  STRATA_FUZZ_CHECK(c.engram_num_embeddings.size() == c.engram_layer_ids.size(), "Engram tables per layer");
  STRATA_FUZZ_CHECK(c.window_size > 0 && c.head_dim > 0 && c.dim > 0 && c.vocab_size > 0, "positive shape");
  if (!c.engram_layer_ids.empty()) STRATA_FUZZ_CHECK(c.engram_n_cols() > 0, "Engram columns");
  (void)sum;  // the accessors' bounds checks (_GLIBCXX_ASSERTIONS) are what matters
  return 0;
}
