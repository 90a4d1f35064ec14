// Loads the v41-tiny fixture checkpoint (or another checkpoint directory) for tests.
#pragma once

#include <map>
#include <memory>
#include <mutex>
#include <string>

#include "io/file.h"
#include "model/model.h"
#include "tokenizer/compressed_vocab.h"
#include "tokenizer/tokenizer.h"

namespace strata::testing {

inline std::string tiny_dir() { return std::string(STRATA_FIXTURES_DIR) + "/v41-tiny"; }

// The Engram compressed vocabulary of DIR/tokenizer.json, built once per distinct file content in a
// test process: a tokenizer load costs ~0.7 s in Release and ~7 s under TSan (128K-entry maps), and
// the server, tiered-store and crafted-checkpoint suites load a model per case, most of them from a
// fresh temp dir holding a copy of the fixture's tokenizer. The file is read as Tokenizer::load
// reads it (io::read_file_to_string: a FIFO or directory is refused, not read, with the same 1 GiB
// cap) and the cache is keyed by its bytes, so a copy hits and a rewritten tokenizer.json is parsed
// again; errors are not cached.
inline Result<model::CompressedVocabMap> vocab_of(const std::string& dir) {
  const std::string path = dir + "/tokenizer.json";
  STRATA_ASSIGN_OR_RETURN(std::string bytes, io::read_file_to_string(path, size_t{1} << 30));
  static std::mutex mu;
  static std::map<std::string, model::CompressedVocabMap> cache;
  {
    std::lock_guard<std::mutex> lock(mu);
    if (auto it = cache.find(bytes); it != cache.end()) return it->second;
  }
  STRATA_ASSIGN_OR_RETURN(tokenizer::Tokenizer tok, tokenizer::Tokenizer::from_json(bytes, path));
  STRATA_ASSIGN_OR_RETURN(tokenizer::CompressedVocab cv, tokenizer::build_compressed_vocab(tok));
  model::CompressedVocabMap v{std::move(cv.map), cv.n_classes};
  std::lock_guard<std::mutex> lock(mu);
  cache.emplace(std::move(bytes), v);
  return v;
}

inline Result<std::unique_ptr<model::Model>> load_model(const std::string& dir, int threads = 2) {
  STRATA_ASSIGN_OR_RETURN(model::CompressedVocabMap v, vocab_of(dir));
  model::ModelOptions opt;
  opt.n_threads = threads;
  return model::Model::load(dir, v, opt);
}

}  // namespace strata::testing
