// What the model benchmarks (batch_bench, session_bench, structured_output_bench) share: the
// command line they print above their tables, and loading a checkpoint's tokenizer and model
// (resident, the options' defaults) the way `strata run` does.
#pragma once

#include <cstdio>
#include <memory>
#include <optional>
#include <string>
#include <utility>

#include "model/model.h"
#include "tokenizer/compressed_vocab.h"
#include "tokenizer/tokenizer.h"

namespace strata::bench {

// argv joined by spaces, for the "# command" line of a benchmark's output.
inline std::string command_line(int argc, char** argv) {
  std::string s;
  for (int i = 0; i < argc; ++i) s += (i ? " " : "") + std::string(argv[i]);
  return s;
}

struct LoadedModel {
  std::optional<tokenizer::Tokenizer> tok;
  std::unique_ptr<model::Model> model;
};

// Loads DIR/tokenizer.json and the checkpoint in DIR with `threads` threads (0 = physical cores).
// Errors: printed to stderr (naming the file); returns std::nullopt.
inline std::optional<LoadedModel> load_model(const std::string& dir, int threads) {
  auto tok = tokenizer::Tokenizer::load(dir + "/tokenizer.json");
  if (!tok.ok()) return std::fprintf(stderr, "%s\n", tok.error().to_string().c_str()), std::nullopt;
  auto cv = tokenizer::build_compressed_vocab(*tok);
  if (!cv.ok()) return std::fprintf(stderr, "%s\n", cv.error().to_string().c_str()), std::nullopt;
  model::ModelOptions mo;
  mo.n_threads = threads;
  auto lm = model::Model::load(dir, model::CompressedVocabMap{std::move(cv->map), cv->n_classes}, mo);
  if (!lm.ok()) return std::fprintf(stderr, "%s\n", lm.error().to_string().c_str()), std::nullopt;
  LoadedModel out;
  out.tok.emplace(std::move(tok).value());
  out.model = std::move(lm).value();
  return out;
}

}  // namespace strata::bench
