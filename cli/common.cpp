#include "cli/common.h"

#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <sstream>

#include "cli/commands.h"
#include "io/checkpoint.h"
#include "io/file.h"
#include "model/kv_cache.h"
#include "tokenizer/compressed_vocab.h"

namespace strata::cli {

CLI::Validator non_negative() {
  return CLI::Validator(
      [](std::string& v) -> std::string {
        char* end = nullptr;
        const double x = std::strtod(v.c_str(), &end);
        if (end == v.c_str() || *end != '\0' || !(x >= 0)) return "must be a number >= 0, got '" + v + "'";
        return "";
      },
      "NUMBER>=0");
}

CLI::Validator in_range(double lo, double hi) {
  return CLI::Validator(
      [lo, hi](std::string& v) -> std::string {
        char* end = nullptr;
        const double x = std::strtod(v.c_str(), &end);
        if (end == v.c_str() || *end != '\0' || !(x >= lo && x <= hi)) {
          std::ostringstream m;
          m << "must be in [" << lo << ", " << hi << "], got '" << v << "'";
          return m.str();
        }
        return "";
      },
      "NUMBER");
}

CLI::Option* add_threads_flag(CLI::App& app, int* threads, const std::string& help) {
  return app.add_option("-t,--threads", *threads, help)->check(in_range(0, ThreadPool::kMaxThreads));
}

Status flush_stdout() {
  if (std::fflush(stdout) != 0 || std::ferror(stdout)) return IOError("stdout: write failed", errno);
  return Status();
}

Status check_checkpoint_dir(const std::string& dir) {
  if (io::is_gguf_path(dir)) return Status();  // a GGUF from `strata quantize` (docs/gguf.md)
  std::error_code ec;
  if (std::filesystem::is_regular_file(dir, ec)) {
    // A GGUF is opened by its name (io::is_gguf_path: splits are found by "-0000N-of-0000M.gguf");
    // one saved under another name gets a clear way out instead of "not a directory".
    char magic[4] = {};
    if (std::FILE* f = std::fopen(dir.c_str(), "rb")) {
      const size_t got = std::fread(magic, 1, sizeof magic, f);
      std::fclose(f);
      if (got == sizeof magic && std::memcmp(magic, "GGUF", 4) == 0)
        return InvalidArgument(dir + ": a GGUF file (by its first bytes), but strata opens a GGUF by a name ending in "
                                     "\".gguf\": rename or link it (e.g. ln -s " + dir + " model.gguf)");
    }
    return NotFound(dir + ": a file, not a checkpoint directory or a .gguf (expected a directory with config.json, "
                          "*.safetensors and tokenizer.json, or a GGUF file)");
  }
  if (std::filesystem::symlink_status(dir, ec).type() == std::filesystem::file_type::not_found)
    return NotFound(dir + ": no such file or directory (expected a checkpoint directory with config.json, "
                          "*.safetensors and tokenizer.json, or a .gguf file)");
  if (!std::filesystem::is_directory(dir, ec))
    return NotFound(dir + ": not a directory (expected a checkpoint directory with config.json, *.safetensors and "
                          "tokenizer.json)");
  // A directory without config.json is not a checkpoint (often its parent, or a download still
  // under way): say so rather than naming whichever file happens to be read first.
  if (!std::filesystem::exists(std::filesystem::path(dir) / "config.json", ec))
    return NotFound(dir + ": not a checkpoint directory (no config.json; expected config.json, *.safetensors and "
                          "tokenizer.json)");
  return Status();
}

Result<std::unique_ptr<tokenizer::Tokenizer>> load_tokenizer(const std::string& dir) {
  STRATA_RETURN_IF_ERROR(check_checkpoint_dir(dir));
  if (io::is_gguf_path(dir)) {
    STRATA_ASSIGN_OR_RETURN(std::string json, io::read_checkpoint_text(dir, "tokenizer.json", 1ull << 30));
    STRATA_ASSIGN_OR_RETURN(tokenizer::Tokenizer t,
                            tokenizer::Tokenizer::from_json(json, dir + ":" + io::gguf_text_key("tokenizer.json")));
    return std::make_unique<tokenizer::Tokenizer>(std::move(t));
  }
  const std::string path = (std::filesystem::path(dir) / "tokenizer.json").string();
  STRATA_ASSIGN_OR_RETURN(tokenizer::Tokenizer t, tokenizer::Tokenizer::load(path));
  return std::make_unique<tokenizer::Tokenizer>(std::move(t));
}

Result<model::CompressedVocabMap> engram_vocab(const tokenizer::Tokenizer& tok) {
  STRATA_ASSIGN_OR_RETURN(tokenizer::CompressedVocab cv, tokenizer::build_compressed_vocab(tok));
  return model::CompressedVocabMap{std::move(cv.map), cv.n_classes};
}

model::ModelOptions model_options(int n_threads, const Logger* logger, const store::PlacementOptions& placement) {
  model::ModelOptions opt;
  opt.n_threads = n_threads;
  opt.logger = logger;
  opt.placement = placement;
  return opt;
}

Result<LoadedModel> load_model(const std::string& dir, int n_threads, const Logger* logger,
                               const store::PlacementOptions& placement, const ProgressFn& progress,
                               model::ExpertPeers* peers, const model::PipelinePart* pipeline) {
  auto t0 = std::chrono::steady_clock::now();
  LoadedModel lm;
  STRATA_ASSIGN_OR_RETURN(lm.tok, load_tokenizer(dir));
  STRATA_ASSIGN_OR_RETURN(model::CompressedVocabMap map, engram_vocab(*lm.tok));
  model::ModelOptions opt = model_options(n_threads, logger, placement);
  opt.progress = progress;
  opt.expert_peers = peers;
  opt.pipeline = pipeline;
  STRATA_ASSIGN_OR_RETURN(lm.model, model::Model::load(dir, map, opt));
  lm.load_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return lm;
}

int fail(const Status& s) {
  std::fprintf(stderr, "strata: error: %s\n", s.to_string().c_str());
  return 1;
}

std::string storage_dir_of(const std::string& model) {
  std::error_code ec;
  if (!std::filesystem::is_regular_file(model, ec)) return model;
  const std::string parent = std::filesystem::path(model).parent_path().string();
  return parent.empty() ? "." : parent;
}

int fail_usage(const Status& s) {
  fail(s);
  return kExitUsage;
}

int fail_flag_value(const Status& s) { return s.code() == StatusCode::kInvalidArgument ? fail_usage(s) : fail(s); }

Logger stderr_logger(LogLevel max) {
  return Logger(max, [](LogLevel level, std::string_view line) {
    std::fprintf(stderr, "strata: %.*s: %.*s\n", static_cast<int>(log_level_name(level).size()),
                 log_level_name(level).data(), static_cast<int>(line.size()), line.data());
  });
}

std::string kv_note_for_args(int argc, char** argv) {
  std::string dir;
  for (int i = 1; i + 1 < argc; ++i)
    if (std::string_view(argv[i]) == "-m" || std::string_view(argv[i]) == "--model") dir = argv[i + 1];
  for (int i = 1; i < argc; ++i)
    if (std::string_view(argv[i]).rfind("--model=", 0) == 0) dir = argv[i] + 8;
  if (dir.empty()) return "";
  const std::string path = (std::filesystem::path(dir) / "config.json").string();
  auto text = io::read_checkpoint_text(dir, "config.json", 16u << 20);
  if (!text.ok()) return "";
  auto cfg = model::ModelConfig::parse(*text, path);
  if (!cfg.ok()) return "";
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.0f B/token", model::kv_footprint(*cfg).global_bytes_per_token);
  return std::string(buf) + " of global KV for " + dir;
}

void warn_if_ctx_above_model(int64_t ctx, int64_t max_position_embeddings, Logger* log) {
  if (ctx <= max_position_embeddings) return;
  log_to(log, LogLevel::kWarn,
         "context limit " + std::to_string(ctx) + " (--ctx) is above the model's max_position_embeddings " +
             std::to_string(max_position_embeddings) + "; using " + std::to_string(max_position_embeddings));
}

}  // namespace strata::cli
