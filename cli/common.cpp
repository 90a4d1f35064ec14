#include "cli/common.h"

#include <chrono>
#include <cstdio>
#include <filesystem>

#include "tokenizer/compressed_vocab.h"

namespace strata::cli {

Result<std::unique_ptr<tokenizer::Tokenizer>> load_tokenizer(const std::string& dir) {
  const std::string path = (std::filesystem::path(dir) / "tokenizer.json").string();
  STRATA_ASSIGN_OR_RETURN(tokenizer::Tokenizer t, tokenizer::Tokenizer::load(path));
  return std::make_unique<tokenizer::Tokenizer>(std::move(t));
}

Result<LoadedModel> load_model(const std::string& dir, int n_threads, const Logger* logger) {
  auto t0 = std::chrono::steady_clock::now();
  LoadedModel lm;
  STRATA_ASSIGN_OR_RETURN(lm.tok, load_tokenizer(dir));
  STRATA_ASSIGN_OR_RETURN(tokenizer::CompressedVocab cv, tokenizer::build_compressed_vocab(*lm.tok));
  model::CompressedVocabMap map{std::move(cv.map), cv.n_classes};
  model::ModelOptions opt;
  opt.n_threads = n_threads;
  opt.logger = logger;
  STRATA_ASSIGN_OR_RETURN(lm.model, model::Model::load(dir, map, opt));
  lm.load_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return lm;
}

int fail(const Status& s) {
  std::fprintf(stderr, "strata: error: %s\n", s.to_string().c_str());
  return 1;
}

Logger stderr_logger(LogLevel max) {
  return Logger(max, [](LogLevel level, std::string_view line) {
    std::fprintf(stderr, "strata: %.*s: %.*s\n", static_cast<int>(log_level_name(level).size()),
                 log_level_name(level).data(), static_cast<int>(line.size()), line.data());
  });
}

}  // namespace strata::cli
