// strata quantize -m SRC_DIR --out DST.gguf [--experts T] [--dense T] [--head T] [--engram T]
//                 [--imatrix F] [--split-max-size SIZE] [-t N]:
// re-quantises an official-format checkpoint into one GGUF (tools/quantize.h), or with
// --split-max-size into a gguf-split set DST-0000N-of-0000M.gguf (io/gguf_split_writer.h). T is one of keep
// (the official bits, unchanged), q8_0, q6_k, q4_k, q3_k, q2_k, iq4_nl (any case); --experts also takes
// mxfp4 (kept, written as ggml MXFP4 blocks, io/ggml_mxfp4.h). stdout: first
// what will be done and every note (a matrix kept, or given llama.cpp's fallback, because of its
// shape), then the summary (the Engram row bytes and bytes read per token of the tables as
// written). --imatrix F (llama-imatrix's GGUF or .dat, or strata calibrate --imatrix) weights the
// K-quant and IQ4_NL matrices as llama-quantize does (tools/quantize.h); a matrix without an entry
// gets a note. Progress goes to stderr when it is a terminal. Ctrl-C (or SIGTERM) stops between
// tensors, removes the temporary file and exits 130 (143).
// The GGUF runs with `-m DST.gguf` on run/serve/bench/logits (docs/gguf.md).
#include <CLI/CLI.hpp>
#include <cctype>
#include <cstdio>
#include <filesystem>
#include <memory>
#include <string>

#include "cli/commands.h"
#include "cli/common.h"
#include "cli/interrupt.h"
#include "cli/output_files.h"
#include "cli/progress_bar.h"
#include "io/checkpoint.h"
#include "io/gguf.h"
#include "model/config.h"
#include "tools/quant_choice.h"
#include "tools/quantize.h"

namespace strata::cli {

namespace {

// --split-max-size: a whole number of bytes, optionally with K, M, G or T (powers of 1000: llama's
// gguf-split reads M and G as 10^6 and 10^9), white space around allowed; at least 1, below 2^64.
Result<uint64_t> parse_split_size(const std::string& text) {
  const std::string what = "--split-max-size '" + text + "'";
  size_t b = text.find_first_not_of(" \t"), e = text.find_last_not_of(" \t");
  if (b == std::string::npos) return InvalidArgument(what + ": give a size such as 50G");
  std::string t = text.substr(b, e - b + 1);
  uint64_t mult = 1;
  const char last = t.back();
  const std::string units = "KMGT";
  if (const size_t u = units.find(static_cast<char>(std::toupper(static_cast<unsigned char>(last)))); u != std::string::npos) {
    for (size_t i = 0; i <= u; ++i) mult *= 1000;
    t.pop_back();
  }
  if (t.empty() || t.find_first_not_of("0123456789") != std::string::npos)
    return InvalidArgument(what + ": expected a whole number of bytes, optionally with K, M, G or T (powers of 1000)");
  uint64_t n = 0;
  for (char c : t)
    if (__builtin_mul_overflow(n, uint64_t{10}, &n) || __builtin_add_overflow(n, static_cast<uint64_t>(c - '0'), &n))
      return InvalidArgument(what + ": too large");
  if (__builtin_mul_overflow(n, mult, &n)) return InvalidArgument(what + ": too large");
  if (n == 0) return InvalidArgument(what + ": must be at least 1 byte");
  return n;
}

// With --split-max-size the writer names its files PREFIX-0000N-of-0000M.gguf (io::gguf_split_path,
// PREFIX = --out without ".gguf") and refuses to replace any of them, but only once the checkpoint is
// read and the tensors planned (exit 1, naming the shard, not --out). M is known only then, so every
// existing file in --out's directory that is a name of the form for this PREFIX, whatever its M, is
// refused here, before any work; an unreadable directory is left to the writer's check.
Status check_split_names(const std::string& out) {
  const std::string prefix = out.substr(0, out.size() - 5);  // --out ends in ".gguf" (checked before)
  const std::filesystem::path pp(prefix);
  const std::string stem = pp.filename().string();
  std::string first;  // the first taken name by name, not by the listing's order: one message every time
  std::error_code ec;
  std::filesystem::directory_iterator it(pp.has_parent_path() ? pp.parent_path() : ".", ec), end;
  for (; !ec && it != end; it.increment(ec)) {
    const std::string name = it->path().filename().string();
    if (name.compare(0, stem.size(), stem) != 0) continue;
    const std::string path = prefix + name.substr(stem.size());
    const auto split = io::parse_gguf_split_path(path);
    if (split && split->prefix == prefix && io::gguf_split_path(prefix, split->n, split->count) == path &&
        (first.empty() || path < first))
      first = path;
  }
  if (first.empty()) return Status();
  return InvalidArgument("--out " + out + ": " + first +
                         " exists (a split set's files are never replaced; give a new name)");
}

struct QuantizeCliOptions {
  std::string src, out;
  std::string experts = "q4_k", dense = "keep", head = "keep", engram = "keep";
  std::string imatrix;
  std::string split_max_size;
  int threads = 0;
};
}  // namespace

Command register_quantize(CLI::App& app) {
  auto o = std::make_shared<QuantizeCliOptions>();
  // Case-insensitive, as `plan --quant` (tools/quant_choice.h); the value becomes the lower-case name.
  const auto types = CLI::IsMember({"keep", "q8_0", "q6_k", "q4_k", "q3_k", "q2_k", "iq4_nl"}, CLI::ignore_case);
  app.add_option("-m,--model", o->src, "official-format checkpoint directory (config.json, *.safetensors, tokenizer.json)")
      ->required();
  add_output_option(app, "--out", &o->out, "GGUF file to write, named *.gguf (must not exist; written atomically)")
      ->required();
  app.add_option("--experts", o->experts,
                 "routed experts (MXFP4 in the release): keep, mxfp4 (kept, written as ggml MXFP4 blocks as the "
                 "llama.cpp forks' GGUFs hold them) or a block format")
      ->check(CLI::IsMember({"keep", "mxfp4", "q8_0", "q6_k", "q4_k", "q3_k", "q2_k", "iq4_nl"}, CLI::ignore_case))
      ->capture_default_str();
  app.add_option("--dense", o->dense, "the other FP8 linears (attention, shared experts, Engram wkv): keep or a block format")
      ->check(types)
      ->capture_default_str();
  app.add_option("--head", o->head, "the LM head (BF16): keep or a block format")->check(types)->capture_default_str();
  app.add_option("--engram", o->engram,
                 "the Engram tables (FP8 + scales in the release): keep or a block format whose block divides head_dim")
      ->check(types)
      ->capture_default_str();
  app.add_option("--imatrix", o->imatrix,
                 "importance matrix (llama-imatrix GGUF or .dat, or strata calibrate --imatrix) weighting the "
                 "Q2_K/Q3_K/Q4_K/Q6_K/IQ4_NL matrices as llama-quantize does");
  auto* split = app.add_option("--split-max-size", o->split_max_size,
                                "write a gguf-split set OUT-0000N-of-0000M.gguf with at most this many tensor bytes "
                                "per file: N, or N with K, M, G or T in powers of 1000 (50G = 50 x 10^9, as "
                                "llama-gguf-split --split-max-size); -m takes any file of the set");
  add_threads_flag(app, &o->threads, "quantiser threads (default: one per core)");
  return [o, split]() -> int {
    const bool split_given = split->count() > 0;
    // -m X.gguf and run/serve find a GGUF by its name (io::is_gguf_path): refuse any other name
    // before the work, not after it.
    if (o->out.size() <= 5 || o->out.compare(o->out.size() - 5, 5, ".gguf") != 0)
      return fail_usage(InvalidArgument("--out '" + o->out + "': expected a file name ending in .gguf (lower case), " +
                                        "which is how run/serve/bench -m recognise a GGUF"));
    if (io::is_gguf_path(o->src))
      return fail_usage(InvalidArgument("-m '" + o->src + "': strata quantize reads an official-format checkpoint " +
                                        "directory (config.json + safetensors); re-quantising a GGUF is not supported"));
    // Before any tensor is read: a bad --out path would otherwise fail at the writer. (With
    // --split-max-size the set's files are named from --out, in its directory.)
    // The writer never replaces --out, nor any file of a split set (check_split_names).
    if (Status s = check_output_files({{.flag = "--out", .path = o->out, .fresh = !split_given}},
                                      {{"--imatrix", o->imatrix}, {.flag = "--model", .path = o->src, .model = true}});
        !s.ok())
      return fail_usage(s);
    if (split_given)
      if (Status s = check_split_names(o->out); !s.ok()) return fail_usage(s);
    if (Status s = check_checkpoint_dir(o->src); !s.ok()) return fail(s);
    tools::QuantizeOptions q;
    q.src_dir = o->src;
    q.out_path = o->out;
    q.n_threads = o->threads;
    q.imatrix = o->imatrix;
    if (split_given) {
      auto v = parse_split_size(o->split_max_size);
      if (!v.ok()) return fail_usage(v.error());
      q.split_max_bytes = *v;
    }
    // mxfp4: the experts kept, in ggml's block layout (tools/quantize.h experts_ggml_mxfp4).
    std::string experts_lower = o->experts;
    for (char& ch : experts_lower) ch = static_cast<char>(std::tolower(static_cast<unsigned char>(ch)));
    q.experts_ggml_mxfp4 = experts_lower == "mxfp4";
    auto e = tools::parse_quant_choice(q.experts_ggml_mxfp4 ? std::string("keep") : o->experts);
    auto d = tools::parse_quant_choice(o->dense);
    auto h = tools::parse_quant_choice(o->head);
    if (!e.ok()) return fail_usage(e.error());
    if (!d.ok()) return fail_usage(d.error());
    if (!h.ok()) return fail_usage(h.error());
    auto g = tools::parse_quant_choice(o->engram);
    if (!g.ok()) return fail_usage(g.error());
    q.engram = *g;
    if (q.engram) {  // a bad value for this checkpoint: a usage error (exit 2), as plan --quant says
      auto text = io::read_checkpoint_text(o->src, "config.json", 16u << 20);
      if (!text.ok()) return fail(text.error());
      auto cfg = model::ModelConfig::parse(*text, o->src + "/config.json");
      if (!cfg.ok()) return fail(cfg.error());
      if (Status s = tools::check_engram_quant(*q.engram, cfg->engram_head_dim, "--engram " + o->engram); !s.ok())
        return fail_usage(s);
    }
    q.experts = *e;
    q.dense = *d;
    q.head = *h;
    // What will be done, and every note (shape-kept matrices, llama.cpp's fallback), before the work.
    std::printf("strata quantize: %s -> %s (experts %s, dense %s, head %s, engram %s%s%s)\n", o->src.c_str(),
                o->out.c_str(), q.experts_ggml_mxfp4 ? "mxfp4" : tools::quant_choice_name(q.experts).c_str(), tools::quant_choice_name(q.dense).c_str(),
                tools::quant_choice_name(q.head).c_str(), tools::quant_choice_name(q.engram).c_str(),
                q.imatrix.empty() ? "" : ", imatrix ", q.imatrix.c_str());
    std::fflush(stdout);
    q.on_note = [](const std::string& n) {
      std::printf("note: %s\n", n.c_str());
      std::fflush(stdout);
    };
    InterruptGuard interrupt;  // Ctrl-C / SIGTERM: stop between tensors, remove the temporary file, exit 130 / 143
    q.cancel = interrupt.flag_ptr();
    ProgressBar bar;
    auto rep = tools::quantize_checkpoint(q, bar.fn());
    if (!rep.ok() && rep.error().code() == StatusCode::kCancelled && interrupt.interrupted()) {
      std::fprintf(stderr, "strata quantize: %s\n", rep.error().message().c_str());
      return interrupt.exit_status();
    }
    if (!rep.ok()) return fail(rep.error());
    if (rep->engram_row_bytes > 0)
      std::printf("Engram (%s): %d rows x %llu B = %llu B read per token; tables %llu bytes\n",
                  tools::quant_choice_name(q.engram).c_str(),
                  rep->engram_rows_per_token, static_cast<unsigned long long>(rep->engram_row_bytes),
                  static_cast<unsigned long long>(rep->engram_bytes_per_token()),
                  static_cast<unsigned long long>(rep->engram_table_bytes));
    if (!q.imatrix.empty())
      std::printf("imatrix: %llu tensors quantised with importance weights\n",
                  static_cast<unsigned long long>(rep->n_weighted));
    std::printf("wrote %llu tensors (%llu re-quantised), %llu bytes from %llu source bytes, %.1f s\n",
                static_cast<unsigned long long>(rep->n_tensors), static_cast<unsigned long long>(rep->n_quantized),
                static_cast<unsigned long long>(rep->file_bytes), static_cast<unsigned long long>(rep->src_bytes),
                rep->seconds);
    if (q.split_max_bytes > 0) {
      std::printf("split into %zu file%s:\n", rep->files.size(), rep->files.size() == 1 ? "" : "s");
      for (const std::string& p : rep->files) std::printf("  %s\n", p.c_str());
    }
    return 0;
  };
}

}  // namespace strata::cli
