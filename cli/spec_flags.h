// Speculative-decoding flags shared by `strata run`, `strata serve` and `strata bench`, mapped onto
// runtime::SpecOptions (runtime/speculation.h; STYLE.md §3.8: flags are parsed only in cli/).
//   --spec MODE          dspark | draft | none (default none)
//   --draft-model M      with --spec draft (required there, refused otherwise): the draft checkpoint,
//                        a directory or FILE.gguf (strata quantize) with the target's tokenizer and dims
//   --spec-max N         drafts per cycle at most (default 4; clipped to the checkpoint's DSpark block)
//   --spec-min-conf F    stop drafting at the first draft whose confidence is below F (default 0.6)
//   --spec-guard on|off  off: draft at every step even when it does not pay (to measure acceptance)
#pragma once

#include <CLI/CLI.hpp>
#include <cstdio>
#include <string>

#include <memory>

#include "cli/common.h"
#include "core/log.h"
#include "core/status.h"
#include "model/model.h"
#include "runtime/speculation.h"
#include "store/placement_options.h"

namespace strata::cli {

struct SpecFlags {
  std::string mode = "none";
  int max_drafts = 4;
  float min_conf = 0.6f;
  std::string guard = "on";
  std::string draft_model;  // --draft-model
};

void add_spec_flags(CLI::App& app, SpecFlags* f);

// Validates the flags. Errors name the flag (kInvalidArgument: --spec draft without --draft-model,
// --draft-model without --spec draft). SpecOptions::draft_model stays null: load_draft_model.
[[nodiscard]] Result<runtime::SpecOptions> spec_options(const SpecFlags& f);

// With --spec draft: checks --draft-model against the target checkpoint `target_dir` (the same
// tokenizer.json and config dims, runtime::check_draft_checkpoint: the error names both files and
// the field) and loads it with `placement` (the target's), sharing the tensors it kept identical
// with `target` (runtime::load_draft_model; one stderr line says what was shared or why nothing);
// null without --spec draft. The caller keeps the model alive while sequences use it (and `target`
// alive longer) and sets SpecOptions::draft_model. Errors: the check's, the load's.
[[nodiscard]] Result<std::unique_ptr<model::Model>> load_draft_model(const SpecFlags& f, const std::string& target_dir,
                                                                     const LoadedModel& target, int n_threads,
                                                                     const Logger* logger,
                                                                     const store::PlacementOptions& placement);

// One line for `--stats`: acceptance, tokens per cycle, verify share of the speculation time, the
// guard's decisions. Prints nothing when speculation did not run.
void print_spec_stats(std::FILE* out, const runtime::SpecStats& s);

// `stats_json` (a JSON object, cli/stats_report.h) with a "speculation" object holding every
// counter of `s` added; unchanged when speculation did not run.
std::string with_spec_stats(const std::string& stats_json, const runtime::SpecStats& s);

}  // namespace strata::cli
