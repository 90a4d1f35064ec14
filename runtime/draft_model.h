// The self-draft of speculative decoding (`--spec draft --draft-model DIR|FILE.gguf`, issue 17
// item 1): a second model::Model — typically a quantized variant of the target checkpoint (`strata
// quantize --experts q2_k`) — drafts greedily, and the target verifies (runtime/engine.h,
// runtime/speculation.h: verification, acceptance, the guard and the statistics are the DSpark
// ones).
//
// ModelDrafter is per sequence: its own runtime::Session on the draft model and its own
// model::Activations. Before each draft it syncs with the target's history: it keeps the longest
// common prefix (rewinding the drafts the target rejected: Session::rewind, undo depth max + 1),
// and appends what the target accepted since (the accepted drafts it did not run yet, the target's
// own token of the last cycle, and every token of plain steps while the guard paused drafting).
// Then it runs the pending token and its own drafts one decode step each, taking the argmax of each
// step's logits, and stops after `max` drafts or at the first whose softmax probability (T = 1) is
// below min_conf. A draft of k tokens therefore costs k draft-model decode steps; after the
// verification the session holds the pending token and the first k - 1 drafts, and the next sync
// cuts it back to what the target accepted.
//
// Weight sharing (issue 17 item 1, load_draft_model): a draft that `strata quantize` made from the
// target keeps some tensors bit-identical (`--dense keep`, the Engram tables at `--engram keep`,
// norms, mHC, router, embedding); the draft binds those from the target's store (store/shared_store.h)
// instead of loading them again, so a Q2_K-expert draft costs its re-quantised tensors alone.
// Thread safety: one thread (the engine's).
#pragma once

#include <cstdint>
#include <set>
#include <span>
#include <string>
#include <vector>

#include "core/status.h"
#include "io/checkpoint.h"
#include "model/config.h"
#include "model/model.h"
#include "runtime/session.h"

namespace strata::runtime {

// Checks that a draft model can draft for a target: the same tokenizer vocabulary and the same
// config dims (vocab_size, dim, moe_inter_dim, n_layers, n_heads, head_dim, n_routed_experts,
// n_activated_experts, window_size, max_position_embeddings, bos/eos ids). `target_name` and
// `draft_name` (paths) name both in the error. `target_tokenizer` / `draft_tokenizer`: the
// tokenizer.json texts (compared byte for byte); both empty skips that check (tests).
// Errors: kInvalidArgument "--draft-model DRAFT does not match the target TARGET: FIELD A vs B".
[[nodiscard]] Status check_draft_compatible(const model::ModelConfig& target, const std::string& target_name,
                                            const model::ModelConfig& draft, const std::string& draft_name,
                                            std::string_view target_tokenizer = {},
                                            std::string_view draft_tokenizer = {});

// check_draft_compatible on two checkpoints (directories or GGUF files, io/checkpoint.h): reads
// both config.json and tokenizer.json texts. Errors: a missing or unreadable file (naming it), and
// check_draft_compatible's.
[[nodiscard]] Status check_draft_checkpoint(const std::string& target, const std::string& draft);

// What a draft can take from its target instead of loading it: when the draft is a GGUF that
// `strata quantize` wrote from the target (its "strata.source_fingerprint" equals
// io::checkpoint_fingerprint of the target's checkpoint), every tensor that has the same name, dtype
// and shape in both, except routed experts (never shared: the stores stream them per expert);
// an Engram table's layer is listed in engram_layers. `why_not` says why nothing is shared (a
// directory draft, an older GGUF without the fingerprint, another source); empty otherwise.
struct DraftSharing {
  std::set<std::string> tensors;  // resident tensors and Engram table tensors, strata names
  std::set<int> engram_layers;    // model layer ids whose Engram table is shared
  uint64_t bytes = 0;             // their bytes in the draft's file
  std::string why_not;
};
// Errors: reading the draft's metadata or the target's fingerprint reads (naming the file).
[[nodiscard]] Result<DraftSharing> draft_sharing(const io::Checkpoint& target, const std::string& draft_path,
                                                 const io::Checkpoint& draft, int n_layers);

// Loads the draft at `draft_path` (DIR or FILE.gguf) for `target`: the tensors draft_sharing finds
// are bound from the target's store, the rest from the draft's own store placed as opt.placement
// (store::SharedStore). `vocab`: the target's Engram compressed vocabulary (the draft has the same
// tokenizer: check_draft_checkpoint). `*sharing` (optional) receives what was shared.
// Errors: those of model::open_checkpoint, draft_sharing and Model::create for the draft.
[[nodiscard]] Result<std::unique_ptr<model::Model>> load_draft_model(const std::string& draft_path,
                                                                     const model::Model& target,
                                                                     const model::CompressedVocabMap& vocab,
                                                                     const model::ModelOptions& opt,
                                                                     DraftSharing* sharing = nullptr);

class ModelDrafter {
 public:
  // `draft` (borrowed, outlives this) must pass check_draft_compatible against the target;
  // `max_drafts` >= 1 sets the session's undo depth; `chunk`: prompt tokens per draft forward when
  // catching up.
  ModelDrafter(model::Model& draft, int max_drafts, int64_t chunk);

  // Brings the draft session to `history` (the target session's tokens): keeps the common prefix
  // (rewound, or re-prefilled from scratch when the rewind log does not reach it) and appends the
  // rest (kPrompt rows; kDecode for one token). Costs nothing when already in sync.
  // Errors: the draft model's (a store read failure).
  [[nodiscard]] Status sync(std::span<const int32_t> history);

  // Drafts after `history` + `pending` (sync first, then the drafting steps; file comment):
  // writes up to `max` draft ids to `*out` (cleared first; empty when the first draft's
  // probability is below min_conf or the context has no room). Errors: the draft model's.
  [[nodiscard]] Status propose(std::span<const int32_t> history, int32_t pending, int max, float min_conf,
                               std::vector<int32_t>* out);

  // Seconds the last propose() spent catching up with the target (sync); the rest drafted.
  double last_sync_s() const { return sync_s_; }
  int64_t n_past() const { return s_.n_past(); }

 private:
  [[nodiscard]] Status step(int32_t tok);

  model::Model& m_;
  int64_t depth_;
  int64_t chunk_;
  Session s_;
  model::Activations act_;
  int64_t synced_ = 0;  // s_.tokens()[0, synced_) equal the target's history (checked last sync)
  double sync_s_ = 0;
};

}  // namespace strata::runtime
