// Loads the v41-tiny fixture checkpoint (or another checkpoint directory) for tests.
#pragma once

#include <sys/stat.h>

#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <tuple>

#include "model/model.h"
#include "tokenizer/compressed_vocab.h"
#include "tokenizer/tokenizer.h"

namespace strata::testing {

inline std::string tiny_dir() { return std::string(STRATA_FIXTURES_DIR) + "/v41-tiny"; }

// The Engram compressed vocabulary of DIR/tokenizer.json, built once per file in a test process:
// a tokenizer load costs ~0.7 s in Release and ~7 s under TSan (128K-entry maps), and the server and
// tiered-store suites load a model per case. The cache is keyed by the file's path, size and mtime,
// so a test that rewrites tokenizer.json (or points at a fresh temp dir) is read again; errors are
// not cached.
inline Result<model::CompressedVocabMap> vocab_of(const std::string& dir) {
  const std::string path = dir + "/tokenizer.json";
  struct stat st{};
  using Key = std::tuple<std::string, off_t, int64_t, int64_t>;
  const bool keyed = ::stat(path.c_str(), &st) == 0;
  const Key key{path, st.st_size, st.st_mtim.tv_sec, st.st_mtim.tv_nsec};
  static std::mutex mu;
  static std::map<Key, model::CompressedVocabMap> cache;
  if (keyed) {
    std::lock_guard<std::mutex> lock(mu);
    if (auto it = cache.find(key); it != cache.end()) return it->second;
  }
  STRATA_ASSIGN_OR_RETURN(tokenizer::Tokenizer tok, tokenizer::Tokenizer::load(path));
  STRATA_ASSIGN_OR_RETURN(tokenizer::CompressedVocab cv, tokenizer::build_compressed_vocab(tok));
  model::CompressedVocabMap v{std::move(cv.map), cv.n_classes};
  if (keyed) {
    std::lock_guard<std::mutex> lock(mu);
    cache.emplace(key, v);
  }
  return v;
}

inline Result<std::unique_ptr<model::Model>> load_model(const std::string& dir, int threads = 2) {
  STRATA_ASSIGN_OR_RETURN(model::CompressedVocabMap v, vocab_of(dir));
  model::ModelOptions opt;
  opt.n_threads = threads;
  return model::Model::load(dir, v, opt);
}

}  // namespace strata::testing
