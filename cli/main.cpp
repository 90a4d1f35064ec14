// strata: DeepSeek V4.1 Flash on machines that cannot hold it.
#include <CLI/CLI.hpp>

#include <cstdio>
#include <exception>
#include <new>
#include <string>
#include <vector>

#include "cli/commands.h"
#include "cli/common.h"
#include "cli/flag_suggest.h"
#include "cli/llama_flags.h"

int main(int argc, char** argv) {
  CLI::App app{"strata: a local inference engine for DeepSeek V4.1 Flash"};
  app.require_subcommand(1);
  app.footer(
      "Exit status: 0 success, 1 error (a file, checkpoint or run failed), 2 usage error (an unknown flag, a\n"
      "bad or missing value), 130 interrupted (Ctrl-C), 143 stopped by SIGTERM.");
  app.set_version_flag("--version", std::string("strata 0.1.0"));
  // A flag given twice takes its last value (llama.cpp's behaviour), so wrappers can pass defaults.
  app.option_defaults()->multi_option_policy(CLI::MultiOptionPolicy::TakeLast);
  std::vector<std::pair<CLI::App*, strata::cli::Command>> cmds;
  auto add = [&](const char* name, const char* help, strata::cli::Command (*reg)(CLI::App&)) {
    CLI::App* sub = app.add_subcommand(name, help);
    cmds.emplace_back(sub, reg(*sub));
  };
  add("run", "generate an answer for a prompt (and optional document)", strata::cli::register_run);
  add("tokenize", "print the token ids of a text as a JSON array", strata::cli::register_tokenize);
  add("logits", "prefill token ids and write float32 logits (fixture checks)", strata::cli::register_logits);
  add("synth", "write a random-weight V4.1-architecture checkpoint", strata::cli::register_synth);
  add("quantize", "re-quantise a checkpoint into a GGUF (q8_0 .. q2_k experts/dense/head)", strata::cli::register_quantize);
  add("calibrate", "rank routed experts by routing frequency on a text (hot file for run --hot)",
      strata::cli::register_calibrate);
  add("eval", "perplexity over a text, and KLD / top-1 / delta ppl against a saved base run", strata::cli::register_eval);
  add("probe", "measure this machine (cores, memory and disk bandwidth, kernel rates, GPU)", strata::cli::register_probe);
  add("plan", "component sizes, KV per token, placement and predicted speed for a config", strata::cli::register_plan);
  add("bench", "measure prefill, time to first token and decode speed (cold and warm, JSON + SVG)", strata::cli::register_bench);
  add("serve", "OpenAI-compatible HTTP server (chat completions, streaming, tools)", strata::cli::register_serve);
  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForAllHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForVersion& e) {
    return app.exit(e);
  } catch (const CLI::ParseError& e) {
    // `strata frobnicate`: CLI11 would say "A subcommand is required"; name the word and the commands.
    bool known = false;
    std::string names;
    for (auto& [sub, run] : cmds) {
      names += (names.empty() ? "" : ", ") + sub->get_name();
      known = known || (argc > 1 && sub->get_name() == argv[1]);
    }
    if (argc > 1 && argv[1][0] != '-' && !known) {
      std::fprintf(stderr, "strata: error: unknown command '%s' (commands: %s; see --help)\n", argv[1], names.c_str());
      return strata::cli::kExitUsage;
    }
    // A llama.cpp habit gets an answer in strata's terms, not CLI11's reading of it.
    const std::string kv_note = strata::cli::kv_note_for_args(argc, argv);
    if (const std::string hint = strata::cli::llama_cpp_flag_hint(argc, argv, e.what(), kv_note); !hint.empty()) {
      std::fprintf(stderr, "strata: error: %s (see --help)\n", hint.c_str());
      return strata::cli::kExitUsage;
    }
    if (const std::string typo = strata::cli::unknown_flag_message(app, argc, argv, e.what()); !typo.empty()) {
      std::fprintf(stderr, "strata: error: %s\n", typo.c_str());
      return strata::cli::kExitUsage;
    }
    std::string what = e.what();
    if (what.empty()) what = e.get_name();
    std::fprintf(stderr, "strata: error: %s (see --help)\n", what.c_str());
    // One status for every usage error, whatever CLI11's own code for it (105, 106, 109, ...).
    return strata::cli::kExitUsage;
  }
  // strata code reports errors as Status; what can still throw here is the allocator (a request or
  // checkpoint too large for this machine) or a library call: report it on one line, exit non-zero.
  try {
    for (auto& [sub, run] : cmds)
      if (sub->parsed()) return run();
  } catch (const std::bad_alloc&) {
    std::fprintf(stderr, "strata: error: ResourceExhausted: out of memory\n");
    return 1;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "strata: error: Internal: %s\n", e.what());
    return 1;
  }
  return strata::cli::kExitUsage;
}
