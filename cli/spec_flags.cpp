#include "cli/spec_flags.h"

#include <nlohmann/json.hpp>

#include "cli/common.h"
#include "runtime/draft_model.h"

namespace strata::cli {

void add_spec_flags(CLI::App& app, SpecFlags* f) {
  app.add_option("--spec", f->mode,
                 "speculative decoding: dspark (the checkpoint's DSpark draft head), draft (a draft model, "
                 "--draft-model) or none (default); exact: greedy output is that of none, sampled output has its "
                 "distribution")
      ->capture_default_str();
  app.add_option("--draft-model", f->draft_model,
                 "with --spec draft: the draft checkpoint, a directory or FILE.gguf (e.g. strata quantize --experts "
                 "q2_k) with the same tokenizer and dims; loaded separately (its weights are not shared)");
  app.add_option("--spec-max", f->max_drafts, "drafts per speculation cycle at most (clipped to the DSpark block)")
      ->check(in_range(1, 64))
      ->capture_default_str();
  app.add_option("--spec-min-conf", f->min_conf,
                 "stop drafting at the first draft whose confidence is below this, in [0, 1]")
      ->check(in_range(0, 1))
      ->capture_default_str();
  app.add_option("--spec-guard", f->guard,
                 "on: stop drafting while it does not pay, and probe again later; off: draft at every step (to "
                 "measure acceptance)")
      ->check(CLI::IsMember({"on", "off"}))
      ->capture_default_str();
}

Result<runtime::SpecOptions> spec_options(const SpecFlags& f) {
  runtime::SpecOptions o;
  STRATA_ASSIGN_OR_RETURN(o.mode, runtime::parse_spec_mode(f.mode));
  o.max_drafts = f.max_drafts;
  o.min_conf = f.min_conf;
  o.guard = f.guard != "off";
  if (o.mode == runtime::SpecMode::kDraft && f.draft_model.empty())
    return InvalidArgument("--spec draft needs --draft-model DIR|FILE.gguf (the draft checkpoint)");
  if (o.mode != runtime::SpecMode::kDraft && !f.draft_model.empty())
    return InvalidArgument("--draft-model is only used with --spec draft (got --spec " + f.mode + ")");
  STRATA_RETURN_IF_ERROR(o.validate());
  return o;
}

Result<std::unique_ptr<model::Model>> load_draft_model(const SpecFlags& f, const std::string& target_dir,
                                                       const LoadedModel& target, int n_threads, const Logger* logger,
                                                       const store::PlacementOptions& placement) {
  if (f.mode != "draft") return std::unique_ptr<model::Model>();
  if (Status s = check_checkpoint_dir(f.draft_model); !s.ok()) return s.with_context("--draft-model");
  STRATA_RETURN_IF_ERROR(runtime::check_draft_checkpoint(target_dir, f.draft_model));
  // Same tokenizer as the target (checked above): its Engram compressed vocabulary.
  STRATA_ASSIGN_OR_RETURN(model::CompressedVocabMap map, engram_vocab(*target.tok));
  runtime::DraftSharing sh;
  STRATA_ASSIGN_OR_RETURN(auto m, runtime::load_draft_model(f.draft_model, *target.model, map,
                                                            model_options(n_threads, logger, placement), &sh));
  if (sh.tensors.empty())
    std::fprintf(stderr, "strata: draft %s: no weights shared with the target: %s\n", f.draft_model.c_str(),
                 sh.why_not.empty() ? "no tensor is identical" : sh.why_not.c_str());
  else
    std::fprintf(stderr, "strata: draft %s: %zu tensors (%.1f MB%s) shared with the target, not loaded twice\n",
                 f.draft_model.c_str(), sh.tensors.size(), static_cast<double>(sh.bytes) / 1e6,
                 sh.engram_layers.empty() ? "" : ", Engram tables included");
  return m;
}

void print_spec_stats(std::FILE* out, const runtime::SpecStats& s) {
  if (!s.active) return;
  std::fprintf(out,
               "[strata] speculation: %lld cycles, acceptance %.1f%% (%lld of %lld drafts), %.2f tokens/cycle, "
               "verify %.0f%% of speculation time (draft %.3f s, verify %.3f s); %lld plain steps (%.3f s, %lld "
               "drafts empty below --spec-min-conf); guard: %lld pauses, %lld probes\n",
               static_cast<long long>(s.cycles), 100.0 * s.acceptance(), static_cast<long long>(s.accepted),
               static_cast<long long>(s.drafted), s.tokens_per_cycle(), 100.0 * s.verify_share(), s.draft_s, s.verify_s,
               static_cast<long long>(s.plain_steps), s.plain_s, static_cast<long long>(s.empty_drafts),
               static_cast<long long>(s.pauses), static_cast<long long>(s.probes));
}

std::string with_spec_stats(const std::string& stats_json, const runtime::SpecStats& s) {
  if (!s.active) return stats_json;
  nlohmann::ordered_json j = nlohmann::ordered_json::parse(stats_json);
  j["speculation"] = {{"cycles", s.cycles},
                      {"drafted", s.drafted},
                      {"accepted", s.accepted},
                      {"acceptance", s.acceptance()},
                      {"cycle_tokens", s.cycle_tokens},
                      {"tokens_per_cycle", s.tokens_per_cycle()},
                      {"empty_drafts", s.empty_drafts},
                      {"plain_steps", s.plain_steps},
                      {"draft_s", s.draft_s},
                      {"verify_s", s.verify_s},
                      {"plain_s", s.plain_s},
                      {"verify_share", s.verify_share()},
                      {"guard_pauses", s.pauses},
                      {"guard_probes", s.probes}};
  return j.dump(2, ' ', false, nlohmann::json::error_handler_t::replace) + "\n";
}

}  // namespace strata::cli
