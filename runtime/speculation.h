// Speculative decoding pieces of the generation loop (issue 17): the options, the per-sequence
// statistics, the guard that turns speculation off when it does not pay, and the DSpark drafter.
// runtime/engine.cpp runs the cycle; this file holds what it needs per sequence.
//
// A cycle: the drafter proposes up to max_drafts tokens after the pending token (DSpark,
// model/dspark.h, or a draft model, runtime/draft_model.h; drafting stops at the first token whose
// confidence — sigmoid of the confidence head's logit, or the draft model's softmax probability of
// its pick — is below min_conf); ONE Model::forward runs the pending token and the drafts as
// RowKind::kDecode rows with logits for every row (runtime::Session::begin_verify; decode rows in
// one entry compute exactly what one-token decode steps would, bit for bit); the sampler picks a
// token from each row in order and a draft is accepted while it equals the pick; the session is
// rewound to the accepted positions (Session::rewind, with the last row's logits). Greedy output
// is therefore token for token the output of plain decoding; at temperature > 0 a row picks by the
// rejection rule against its (deterministic) draft, Sampler::sample_against, so the output has
// exactly the target's distribution.
//
// The guard (SpecGuard), per sequence: it times plain one-token decode forwards (t_plain, an
// exponential average) and speculation cycles (draft + verify, per token emitted). It starts with
// kWarmupSteps plain steps, then speculates (a probe). After every cycle it compares the probe's
// cost per token so far (its last kWindow cycles) with t_plain: when it is higher, speculation
// pauses for `backoff` decode steps (kMinBackoff, doubled after each probe that failed, up to
// kMaxBackoff; reset after a probe that lasted kWindow cycles) and then probes again. With drafts
// that are never accepted (random weights) a probe costs one cycle, so the overhead is about one
// cycle per backoff period. (colibri pauses when the acceptance over 10 rounds falls below 60%;
// measuring time instead also catches drafts that are accepted but too slow to pay.)
// Thread safety: one engine thread.
#pragma once

#include <cstdint>
#include <functional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "core/status.h"
#include "model/model.h"

namespace strata::runtime {

// kDSpark: the checkpoint's DSpark stages draft; kDraft: a second model (SpecOptions::draft_model,
// runtime/draft_model.h) drafts.
enum class SpecMode { kNone, kDSpark, kDraft };
// "none" / "dspark" / "draft".
std::string_view spec_mode_name(SpecMode m);
// Parses "none", "dspark" or "draft"; anything else kInvalidArgument naming the accepted values.
[[nodiscard]] Result<SpecMode> parse_spec_mode(std::string_view s);

struct SpecOptions {
  SpecMode mode = SpecMode::kNone;  // --spec
  // Drafts per cycle at most (--spec-max); with dspark clipped to the checkpoint's dspark_block_size. >= 1.
  int max_drafts = 4;
  // Drafting stops at the first draft whose confidence (DSpark: sigmoid of the confidence logit; a
  // draft model: the softmax probability of its greedy pick) is below this (--spec-min-conf), in [0, 1].
  float min_conf = 0.6f;
  // The guard (file comment). false keeps speculating whatever it costs (tests, measurements).
  bool guard = true;
  // mode kDraft: the draft model (--draft-model; borrowed, must outlive every sequence that uses it;
  // runtime::check_draft_compatible against the target passed). Engine::add refuses kDraft without it.
  model::Model* draft_model = nullptr;
  // TEST ONLY: replaces the DSpark drafter (then no DSpark stages are needed): called with the
  // tokens generated so far (the pending token last) and the most drafts wanted.
  std::function<std::vector<int32_t>(std::span<const int32_t> generated, int max)> test_drafts;

  [[nodiscard]] Status validate() const;
};

// What speculation did for one sequence.
struct SpecStats {
  bool active = false;        // speculation ran for this sequence (mode dspark on a DSpark checkpoint, or draft)
  int64_t cycles = 0;         // verification forwards (pending token + >= 1 draft)
  int64_t drafted = 0;        // drafts verified
  int64_t accepted = 0;       // drafts equal to the target's pick
  int64_t cycle_tokens = 0;   // tokens handed out by cycles (accepted drafts + the target's own)
  int64_t empty_drafts = 0;   // draft calls that proposed nothing (confidence below min_conf)
  int64_t plain_steps = 0;    // one-token decode forwards of this sequence
  double draft_s = 0;         // wall time in the drafter (cycles and empty drafts; a draft model's catch-up too)
  double verify_s = 0;        // wall time of the verification forwards
  double plain_s = 0;         // wall time of the plain decode forwards
  int64_t pauses = 0;         // guard: speculation turned off
  int64_t probes = 0;         // guard: speculation turned back on after a pause

  double acceptance() const { return drafted > 0 ? static_cast<double>(accepted) / static_cast<double>(drafted) : 0; }
  double tokens_per_cycle() const { return cycles > 0 ? static_cast<double>(cycle_tokens) / static_cast<double>(cycles) : 0; }
  // Share of the speculation time (draft + verify) spent verifying.
  double verify_share() const { return draft_s + verify_s > 0 ? verify_s / (draft_s + verify_s) : 0; }
};

// The guard's decisions (file comment). Times in seconds.
class SpecGuard {
 public:
  static constexpr int kWarmupSteps = 2;
  static constexpr int kWindow = 8;
  static constexpr int64_t kMinBackoff = 32;
  static constexpr int64_t kMaxBackoff = 1024;

  // enabled = false: always speculate (want_draft() is always true, nothing is recorded).
  explicit SpecGuard(bool enabled) : enabled_(enabled) {}

  // Whether the next decode step should draft.
  bool want_draft() const { return !enabled_ || (warmup_left_ <= 0 && wait_ <= 0); }
  // A one-token decode forward that ran alone (no draft): updates t_plain, counts down a pause.
  void plain_step(double seconds);
  // A decode step that drafted: `seconds` of draft + forward, `tokens` handed out. A draft that
  // proposed nothing counts too (its draft time was spent). Returns true when this decision paused
  // speculation.
  bool cycle(double seconds, int64_t tokens);

  double t_plain() const { return t_plain_; }
  int64_t pauses() const { return pauses_; }
  int64_t probes() const { return probes_; }

 private:
  bool enabled_;
  int warmup_left_ = kWarmupSteps;
  double t_plain_ = 0;                // exponential average (alpha 0.25) of plain step times; 0 = none yet
  int64_t wait_ = 0;                  // plain steps left in the current pause
  int64_t backoff_ = kMinBackoff;     // the next pause's length
  std::vector<std::pair<double, int64_t>> probe_;  // this probe's cycles: (seconds, tokens), last kWindow
  int64_t probe_cycles_ = 0;
  int64_t pauses_ = 0, probes_ = 0;
};

// Per-sequence DSpark drafter: the stages' rings and the main model's features of positions not yet
// written into them (at most window_size + 1 rows are kept; older ones are skipped, as the rings
// would drop them).
class DSparkDrafter {
 public:
  explicit DSparkDrafter(const model::Model& m);

  // Floats per feature row (dim * n_targets).
  int64_t row_floats() const { return width_; }
  // Features [n, row_floats()] of the n positions ending at `end` (exclusive) that a forward just
  // ran (rows of ForwardEntry::dspark_features; after a bounded replay, its tail). Positions must
  // follow those already added (earlier ones are ignored; a gap drops the pending rows).
  void add(const float* rows, int64_t n, int64_t end);
  // The position the next draft follows: the last position with features, -1 when none.
  int64_t last() const { return feat_end_ - 1; }

  // Drafts after position `last()` whose next token is `token` (it goes at last() + 1): seeds the
  // rings with the pending features, runs the draft, and returns up to `max` drafts (for positions
  // last() + 2 ..), stopping at the first whose confidence is below `min_conf`. Errors: the model's
  // (a store read failure in a stage's MoE).
  [[nodiscard]] Result<std::vector<int32_t>> propose(int32_t token, int max, float min_conf, model::Activations& act);

 private:
  const model::Model& m_;
  int64_t width_;                 // floats per feature row
  model::DSparkState st_;
  std::vector<float> feat_;       // rows of positions feat_end_ - n .. feat_end_ - 1
  int64_t feat_end_ = 0;
};

}  // namespace strata::runtime
