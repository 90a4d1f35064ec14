// Speculative-decoding flags shared by `strata run`, `strata serve` and `strata bench`, mapped onto
// runtime::SpecOptions (runtime/speculation.h; STYLE.md §3.8: flags are parsed only in cli/).
//   --spec MODE          dspark | none (default none); draft (a low-bit self-draft) is not built
//   --spec-max N         drafts per cycle at most (default 4; clipped to the checkpoint's DSpark block)
//   --spec-min-conf F    stop drafting at the first draft whose confidence is below F (default 0.6)
//   --spec-guard on|off  off: draft at every step even when it does not pay (to measure acceptance)
#pragma once

#include <CLI/CLI.hpp>
#include <cstdio>
#include <string>

#include "core/status.h"
#include "runtime/speculation.h"

namespace strata::cli {

struct SpecFlags {
  std::string mode = "none";
  int max_drafts = 4;
  float min_conf = 0.6f;
  std::string guard = "on";
};

void add_spec_flags(CLI::App& app, SpecFlags* f);

// Validates the flags. Errors name the flag (--spec draft: kNotSupported, not built).
[[nodiscard]] Result<runtime::SpecOptions> spec_options(const SpecFlags& f);

// One line for `--stats`: acceptance, tokens per cycle, verify share of the speculation time, the
// guard's decisions. Prints nothing when speculation did not run.
void print_spec_stats(std::FILE* out, const runtime::SpecStats& s);

// `stats_json` (a JSON object, cli/stats_report.h) with a "speculation" object holding every
// counter of `s` added; unchanged when speculation did not run.
std::string with_spec_stats(const std::string& stats_json, const runtime::SpecStats& s);

}  // namespace strata::cli
