// Helpers shared by the subcommands: loading a checkpoint with its tokenizer, reporting errors.
#pragma once

#include <memory>
#include <string>

#include <CLI/CLI.hpp>

#include "core/log.h"
#include "core/status.h"
#include "model/model.h"
#include "tokenizer/tokenizer.h"

namespace strata::cli {

struct LoadedModel {
  std::unique_ptr<tokenizer::Tokenizer> tok;
  std::unique_ptr<model::Model> model;
  double load_s = 0;
};

// The Engram compressed vocabulary of a tokenizer (tokenizer::build_compressed_vocab) as the model
// takes it. Errors: build_compressed_vocab's.
[[nodiscard]] Result<model::CompressedVocabMap> engram_vocab(const tokenizer::Tokenizer& tok);
// Model options with threads, logger and placement set (the rest default).
model::ModelOptions model_options(int n_threads, const Logger* logger, const store::PlacementOptions& placement);

// Loads DIR/tokenizer.json, builds the Engram compressed vocabulary from it, then the model with
// its weights placed as `placement` says (default: auto — resident if it fits, else stream).
// `progress` (may be empty) receives the load's progress (cli/progress_bar.h draws it). `peers`
// (may be null): expert parallelism; `pipeline` (may be null): this rank's layers with
// --mpi-pipeline (cli/mpi_flags.h).
[[nodiscard]] Result<LoadedModel> load_model(const std::string& dir, int n_threads, const Logger* logger,
                                             const store::PlacementOptions& placement = {},
                                             const ProgressFn& progress = {}, model::ExpertPeers* peers = nullptr,
                                             const model::PipelinePart* pipeline = nullptr);

// OK when DIR is a directory holding config.json; otherwise kNotFound saying "not a directory" or
// "not a checkpoint directory (no config.json)", naming DIR.
[[nodiscard]] Status check_checkpoint_dir(const std::string& dir);

// Loads only DIR/tokenizer.json (after check_checkpoint_dir).
[[nodiscard]] Result<std::unique_ptr<tokenizer::Tokenizer>> load_tokenizer(const std::string& dir);

// CLI11 validators with short messages (CLI11's own ranges print the largest double).
CLI::Validator non_negative();             // a number >= 0
CLI::Validator in_range(double lo, double hi);  // a number in [lo, hi]

// The one declaration of -t/--threads: an int in [0, ThreadPool::kMaxThreads], 0 meaning the
// default that `help` names (physical cores for the engine's commands).
CLI::Option* add_threads_flag(CLI::App& app, int* threads, const std::string& help = "threads (default: physical cores)");

// Flushes stdout; a write error (disk full, closed pipe) becomes an IOError.
[[nodiscard]] Status flush_stdout();

// Prints "strata: error: <status>" on stderr and returns 1.
int fail(const Status& s);

// The same for a usage error found after parsing (flags that do not go together, a value no
// validator could check): prints the line and returns kExitUsage (2), as a parse error does.
int fail_usage(const Status& s);

// The directory whose disk a checkpoint lives on: `model` itself, or a GGUF file's directory (the
// disk probe measures a directory's storage).
std::string storage_dir_of(const std::string& model);

// For errors of a flag's value (a size, a mode, a --hot file): kInvalidArgument is a usage error
// (fail_usage, 2), anything else (a file that cannot be read) fails as usual (fail, 1).
int fail_flag_value(const Status& s);

// A logger that writes "strata: <level>: line" to stderr for levels up to `max`.
Logger stderr_logger(LogLevel max);

// "212 B/token of global KV for DIR" for the checkpoint named by -m/--model in argv, from its
// config.json (model::kv_footprint); "" when argv names none or it cannot be read. For messages only.
std::string kv_note_for_args(int argc, char** argv);

// Warns (as llama.cpp does for n_ctx above n_ctx_train) when --ctx asks for more tokens than the
// model's max_position_embeddings; the generator and the server's scheduler then use the model's.
void warn_if_ctx_above_model(int64_t ctx, int64_t max_position_embeddings, Logger* log);

}  // namespace strata::cli
