// Engine: the one generation loop (issue 14 item 1) — every caller that generates (`strata run`
// through runtime::Generator, `strata serve` through server::Scheduler, `strata bench`, the tests)
// runs its sequences here, so sampling (all samplers and the OpenAI penalties), stop ids and stop
// strings, max tokens, the context limit, timing and the input checks are written once.
//
// The engine owns one model::Activations and a set of sequences. Each sequence borrows a
// runtime::Session (the caller owns it: the server keeps sessions in slots across requests) and
// carries its prompt remainder, sampler state, limits and callbacks. step() runs ONE Model::forward
// over a batch (model/forward_request.h):
//   - every decoding sequence contributes its last sampled token as a RowKind::kDecode entry;
//   - prefilling sequences, oldest first, contribute their next prompt chunk as a RowKind::kPrompt
//     entry while the step's token budget (EngineOptions::batch_tokens) lasts. A chunk is never cut
//     by the budget: it ends at the next absolute multiple of prefill_chunk (where runtime::Session
//     cuts and the prefix cache resumes, runtime/session.h), at a requested snapshot position, or at
//     the prompt's end; the first prompt chunk of a step joins even past the budget, so a prompt
//     always advances. A step therefore holds at most max(batch_tokens, n_decode + prefill_chunk)
//     tokens, and a sequence's chunks are the same whether it runs alone or with others: with the
//     model's batch invariance its tokens are identical alone or batched (tested).
//   - after the forward each entry's session is settled (Session::end_forward) and every sequence
//     with fresh logits samples its next token and reports it through on_token.
// Speculative decoding (SequenceOptions::spec, runtime/speculation.h): a sequence with --spec
// dspark or --spec draft (a draft model, runtime/draft_model.h) that is the only sequence in the
// engine drafts before its decode entry, which then runs the pending token and the drafts as
// decode rows with logits for every row; after the forward the
// sampler picks from the rows in order (each handed out as a plain step's would be: stop ids, stop
// strings, limits) while the picks equal the drafts, and the session is rewound to what was
// accepted (Session::rewind). Greedy output is token for token that of plain decoding (tested); at
// temperature > 0 each row picks by the rejection rule against its draft
// (Sampler::sample_against), so the output is distributed exactly as plain sampling's (tested
// statistically), though a seed gives another text. With other sequences in the engine (a serving
// batch) a sequence decodes plainly — as ds4 and fastllm do — and keeps its DSpark features
// current so it can draft again once alone (a draft model catches up at its next draft). A guard
// per sequence turns drafting off while it does not pay (SpecGuard).
// A bounded-replay prefill (PrefillMode::kReplay) needs a request of one entry, so a step that
// holds one runs it alone. Sequences join (add) and leave (finish, gone) between steps.
// A model failure ends every sequence of that batch with FinishReason::kError (their sessions are
// marked invalid where the forward may have written their caches: Session::end_forward).
// Thread safety: one thread drives an Engine (add, step and the callbacks all run on it).
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <list>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "core/progress.h"
#include "core/status.h"
#include "model/model.h"
#include "runtime/draft_model.h"
#include "runtime/logprobs.h"
#include "runtime/sampler.h"
#include "runtime/session.h"
#include "runtime/speculation.h"
#include "runtime/stop_strings.h"
#include "runtime/token_mask.h"

namespace strata::runtime {

struct EngineOptions {
  // Prompt tokens per prefill forward of one sequence (bounds activation memory). Chunks end at
  // absolute multiples of it. Default 512: the server's historical chunk.
  int64_t prefill_chunk = 512;
  // Tokens one step may run, decode tokens and prompt chunks together (`strata serve
  // --batch-tokens`). Larger: prompts finish in fewer steps but each step (so each stream's
  // inter-token latency) takes longer. Default 512 = one default chunk beside the decode tokens.
  int64_t batch_tokens = 512;
  // Context limit of every sequence in tokens; 0 = the model's max_position_embeddings.
  int64_t max_context = 0;

  [[nodiscard]] Status validate() const;
};

// Why a sequence ended.
enum class FinishReason {
  kStopId,     // it emitted one of its stop ids (EOS)
  kStopped,    // on_token returned false, or a stop string appeared
  kLength,     // max_new_tokens
  kContext,    // the context limit ended it before max_new_tokens
  kCancelled,  // the cancel flag or the gone() probe
  kError,      // a model failure (the Status says which)
};

struct SequenceOptions {
  int64_t max_new_tokens = 256;   // >= 0; 0 = prefill only (the session ends with the prompt's logits)
  std::vector<int32_t> stop_ids;  // generation ends after emitting one of these (EOS)
  // Stop strings, matched on the text `token_text` gives each generated id (runtime/stop_strings.h).
  std::vector<std::string> stop_strings;
  TokenTextFn token_text;
  int64_t max_context = 0;  // 0 = the engine's limit; otherwise the smaller of both
  SamplerOptions sampler;
  float presence_penalty = 0, frequency_penalty = 0;  // OpenAI penalties over this sequence's generated tokens
  // OpenAI logit_bias: (id, bias in [-100, 100]) added to the id's logit after the penalties and
  // before the constraint's mask, on every step (ids outside the vocabulary are refused at validate).
  std::vector<std::pair<int32_t, float>> logit_bias;
  // Log-probability reports (the API's logprobs): -1 = off (nothing computed: the default path
  // costs one branch per token); N in 0..kMaxTopLogprobs = each token's logprob and its N most
  // likely alternatives, through SequenceCallbacks::on_logprob (runtime/logprobs.h: the sampled
  // distribution at the sampler's temperature, penalties included; T = 1 for greedy). O(vocab) per token.
  int logprobs = -1;
  // Constrained decoding (runtime/token_mask.h: structured output, forced tool calls); null = none.
  // Ids it refuses get logit -inf after the penalties and before temperature, top-k, top-p and
  // min-p, so the sampler, greedy argmax, speculative verification and the logprob reports all see
  // the constrained distribution. DECISION: logprobs are those of the constrained distribution, as
  // OpenAI reports them for structured outputs. Each emitted id is passed to accept(). Ignored with
  // use_script (scripted ids are not sampled).
  std::shared_ptr<TokenConstraint> constraint;
  // TEST ONLY: emit these ids (then script_end_id, forever) instead of sampling.
  bool use_script = false;
  std::vector<int32_t> scripted;
  int32_t script_end_id = 0;
  PrefillMode prefill_mode = PrefillMode::kExact;  // kReplay: the prompt's steps run alone
  // Feed the last generated token into the session before finishing, so that it ends with the
  // logits for the next one (what a saved session continues from). Costs one decode entry.
  bool consume_last = false;
  // Absolute session positions inside the prompt where a prompt chunk also ends and on_snapshot is
  // called (the server's "start of the generation suffix", issue 14 item 6). Ignored in replay mode.
  std::vector<int64_t> snapshot_at;
  // May be null (not owned). Read between prompt chunks (then the sequence ends kCancelled with a
  // kCancelled status, its session at a chunk boundary) and just before each token is handed out
  // (that token is the last one: consume_last still applies, the status is OK). `strata run`'s SIGINT.
  const std::atomic<bool>* cancel = nullptr;
  ProgressFn prefill_progress;  // "prefill" tokens of this prompt, after each of its chunks; may be empty
  // Speculative decoding (file comment; runtime/speculation.h). mode kDSpark on a checkpoint
  // without DSpark stages is refused by add() (kNotSupported); mode kDraft without a draft model, or
  // with one that does not match the target (check_draft_compatible), too (kInvalidArgument).
  SpecOptions spec;

  [[nodiscard]] Status validate() const;
};

struct SequenceStats {
  int64_t prompt_tokens = 0;     // tokens of the prompt given to add() (a reused prefix is the caller's)
  int64_t prefilled_tokens = 0;  // of those, the ones prefilled: fewer where the sequence ended inside
                                 // its prompt (cancelled between chunks, an error); prefill_s is theirs
  int64_t generated_tokens = 0;  // sampled tokens, a final stop id included
  double prefill_s = 0;          // wall time of the steps that ran this prompt's chunks
  double ttft_s = 0;             // add() -> first token handed out
  double decode_s = 0;           // first token -> end
  FinishReason reason = FinishReason::kLength;
  SpecStats spec;  // speculation (runtime/speculation.h); spec.active false when it did not run
  double decode_tok_per_s() const {
    return decode_s > 0 ? static_cast<double>(generated_tokens > 1 ? generated_tokens - 1 : 0) / decode_s : 0;
  }
};

// The caller's hooks for one sequence; all run on the engine's thread, inside step() (or
// cancel_all()), and must not call back into the engine (add, step, cancel_all).
struct SequenceCallbacks {
  // Each generated token; return false to end the sequence (FinishReason::kStopped). May be empty.
  std::function<bool(int32_t)> on_token;
  // With SequenceOptions::logprobs >= 0: each generated token's report, just before its on_token.
  // May be empty.
  std::function<void(const TokenLogprob&)> on_logprob;
  // The session at a point worth a prefix-cache snapshot: chunk boundaries inside the prompt,
  // SequenceOptions::snapshot_at positions, and the end of the prompt. May be empty.
  std::function<void(const Session&)> on_snapshot;
  // Polled before each step; true ends the sequence at once (kCancelled, no more tokens): the
  // server's client-gone probe. May be empty.
  std::function<bool()> gone;
  // Exactly once, when the sequence ends; afterwards the engine no longer touches the session.
  std::function<void(FinishReason, const Status&, const SequenceStats&)> on_finish;
};

// What one step ran (for metrics).
struct StepStats {
  int entries = 0;     // sequences in the forward (the batch size)
  int64_t tokens = 0;  // rows of the forward: decode tokens + prompt chunk tokens
  int decode_entries = 0;
  int64_t prompt_tokens = 0;
  double forward_s = 0;  // wall time of the one Model::forward
  Status status;         // the forward's result
};

class Engine {
 public:
  Engine(model::Model& m, const EngineOptions& o);
  Engine(const Engine&) = delete;
  Engine& operator=(const Engine&) = delete;

  using SequenceId = int64_t;

  // Adds a sequence that runs `prompt` after `*session`'s history, then generates. `session` is
  // borrowed until on_finish. An empty prompt continues a session that holds last-token logits
  // (a restored one). The input checks of every caller live here: options (kInvalidArgument), an
  // empty prompt on a session without logits (kInvalidArgument "empty prompt"), token ids outside
  // the vocabulary (kInvalidArgument naming the id and position), a prompt that alone exceeds the
  // context limit (kResourceExhausted "exceeds the context limit of N tokens"), an invalid session
  // or one already in the engine. Nothing runs until step().
  [[nodiscard]] Result<SequenceId> add(Session* session, std::vector<int32_t> prompt, SequenceOptions o,
                                       SequenceCallbacks cb);

  // One forward over every active sequence (see the file comment). Returns what it ran; entries 0
  // when nothing needed a forward (sequences may still have ended: gone, cancelled, finished).
  StepStats step();

  // Replaces the options (the context limit too). Errors: bad options, or sequences still active
  // (kInvalidArgument: chunk cuts must not change under a running prompt).
  [[nodiscard]] Status set_options(const EngineOptions& o);

  // Ends every sequence now (on_finish kCancelled with `why`).
  void cancel_all(const Status& why);

  bool idle() const { return seqs_.empty(); }
  size_t active() const { return seqs_.size(); }
  int64_t context_limit() const { return ctx_; }
  const EngineOptions& options() const { return o_; }
  model::Model& model() const { return m_; }
  // The forward scratch (its profile counts every step's time).
  model::Activations& activations() { return act_; }

 private:
  using clock = std::chrono::steady_clock;
  // kVerify: a verification forward ran; its rows are picked from (accept()).
  enum class State { kPrefill, kSample, kDecode, kConsume, kVerify };
  struct Seq {
    SequenceId id = 0;
    Session* session = nullptr;
    std::vector<int32_t> prompt;
    int64_t prompt_start = 0;  // session position of prompt[0]
    int64_t done = 0;          // prompt tokens run so far
    SequenceOptions o;
    SequenceCallbacks cb;
    int64_t limit = 0;
    State state = State::kPrefill;
    std::optional<Sampler> sampler;
    std::optional<StopStrings> stops;
    std::vector<int32_t> generated;
    int32_t pending = 0;  // the token the next decode entry runs
    FinishReason end_reason = FinishReason::kLength;
    SequenceStats stats;
    clock::time_point t_add, t_first;
    // Speculation (spec_on: mode dspark on a checkpoint with DSpark, or mode draft).
    bool spec_on = false;
    int64_t undo_before = 0;  // the session's undo depth before speculation raised it
    std::optional<SpecGuard> guard;
    std::optional<DSparkDrafter> drafter;         // mode dspark
    std::unique_ptr<ModelDrafter> model_drafter;  // mode draft (runtime/draft_model.h)
    std::vector<int32_t> drafts;                  // the draft model's proposal (reused)
    std::vector<int32_t> verify;  // this step's verification tokens: pending, then the drafts
    std::vector<float> rows;      // their logits [verify.size(), vocab_size]
    std::vector<float> feats;     // DSpark features of this step's entry (mode dspark)
    bool drafted = false;         // this step called the drafter
    double draft_s = 0;           // ... for this long
    double verify_s = 0;          // this step's verification forward time
  };
  // One handed-out token and what it means for the sequence.
  struct Handout {
    int32_t tok = 0;
    bool go_on = true;     // the sequence continues
    bool at_limit = false;  // the context limit is reached after this token
    FinishReason reason = FinishReason::kLength;
  };
  using SeqIt = std::list<Seq>::iterator;
  // One step's forward request and who is in it.
  struct Batch {
    std::vector<model::ForwardEntry> entries;
    std::vector<Seq*> members;  // entries[i] belongs to members[i]
    std::vector<int64_t> lens;  // tokens of entries[i]
  };

  // Ends the sequences whose gone probe fires, and prompts whose cancel flag is set.
  void drop_left();
  // Builds the step's batch (file comment): decode tokens, then prompt chunks within the budget.
  void gather(Batch* b, StepStats* st);
  // After the forward: settles every member's session and advances (or ends) its sequence.
  void settle(const Batch& b, const StepStats& st);

  // Samples and hands out a token for every sequence in kSample (and picks from every verification
  // in kVerify); some end here.
  void sample_ready();
  void emit(SeqIt it);
  // Samples a token from `logits` (the logits after the session's first n_past tokens) and hands it
  // out (on_token, stop checks); no state change beyond the generated list.
  // `draft` >= 0: the draft this row verifies (Sampler::sample_against).
  Handout hand_out(Seq& s, std::span<const float> logits, int64_t n_past, int32_t draft = -1);
  // Continues or ends the sequence after `h` (consume_last, finish).
  void conclude(SeqIt it, const Handout& h);
  // Picks from the verification rows, rewinds the session to what was accepted (engine file comment).
  void accept(SeqIt it);
  // Drafts for `s` before its decode entry (gather); fills s.verify when there are drafts.
  void draft(Seq& s);
  // Hands the DSpark features of the entry that just ran (s.feats) to s's drafter.
  void add_features(Seq& s);
  // Where `s`'s next prompt chunk ends (absolute position).
  int64_t chunk_end(const Seq& s) const;
  SeqIt finish(SeqIt it, FinishReason r, const Status& st);

  model::Model& m_;
  EngineOptions o_;
  int64_t ctx_;
  model::Activations act_;
  std::list<Seq> seqs_;  // admission order: the oldest prompt gets the budget first
  SequenceId next_id_ = 1;
  std::vector<float> penalized_;  // scratch for penalties
  std::vector<float> masked_;     // scratch for a constraint's mask
  std::vector<float> biased_;     // scratch for logit_bias
  TokenLogprob logprob_;          // scratch for logprob reports
};

}  // namespace strata::runtime
