// Loads the v41-tiny fixture checkpoint (or another checkpoint directory) for tests.
#pragma once

#include <memory>
#include <string>

#include "model/model.h"
#include "tokenizer/compressed_vocab.h"
#include "tokenizer/tokenizer.h"

namespace strata::testing {

inline std::string tiny_dir() { return std::string(STRATA_FIXTURES_DIR) + "/v41-tiny"; }

// The Engram compressed vocabulary of DIR/tokenizer.json.
inline Result<model::CompressedVocabMap> vocab_of(const std::string& dir) {
  STRATA_ASSIGN_OR_RETURN(tokenizer::Tokenizer tok, tokenizer::Tokenizer::load(dir + "/tokenizer.json"));
  STRATA_ASSIGN_OR_RETURN(tokenizer::CompressedVocab cv, tokenizer::build_compressed_vocab(tok));
  return model::CompressedVocabMap{std::move(cv.map), cv.n_classes};
}

inline Result<std::unique_ptr<model::Model>> load_model(const std::string& dir, int threads = 2) {
  STRATA_ASSIGN_OR_RETURN(model::CompressedVocabMap v, vocab_of(dir));
  model::ModelOptions opt;
  opt.n_threads = threads;
  return model::Model::load(dir, v, opt);
}

}  // namespace strata::testing
