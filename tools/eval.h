// strata eval: perplexity of a model over a text, and its distance from a saved base run (KLD,
// top-1 agreement, delta perplexity), as llama-perplexity's --kl-divergence-base / --kl-divergence.
//
// Windows (a sliding scheme, documented in docs/eval.md): the text's N tokens are cut into windows of
// `ctx` tokens starting at 0, stride, 2*stride, ...; only whole windows run (the last < stride
// targets of the text may go unscored). Each window is a fresh sequence (new KV cache, one
// prefill), and scores its last `stride` targets: the logits at window offsets
// [ctx-stride-1, ctx-2] predict the tokens at offsets [ctx-stride, ctx-1]. Consecutive windows thus
// score consecutive targets, each exactly once, each with at least ctx-stride tokens of context.
// With the default stride ctx/2 every window scores its second half, as llama-perplexity does
// (which steps by ctx instead, and so scores half the text).
// Thread safety: evaluate() runs forward passes on `m` (one at a time per Model).
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <span>
#include <string>

#include "core/status.h"
#include "io/env.h"
#include "model/model.h"

namespace strata::tools {

struct EvalOptions {
  // Window length in tokens. Default 512; clamped to the text's length and the model's
  // max_position_embeddings (more context costs prefill time quadratically in attention).
  int64_t ctx = 512;
  // Window step = targets scored per window, in [1, ctx-1]. 0 = ctx/2 (llama-perplexity's scored half).
  int64_t stride = 0;
  // Write the per-position distributions here (tools/eval_base.h); "" = none.
  std::string save_base;
  // Compare against this base file (same text, ctx and stride); "" = none.
  std::string base;
  // Where save_base is written (null = io::default_env()).
  io::Env* env = nullptr;
  // May be null (not owned). Read before each window and after the last: once set (`strata eval`'s
  // Ctrl-C), evaluate returns kCancelled and save_base's temp file is removed (nothing written).
  const std::atomic<bool>* cancel = nullptr;

  // kInvalidArgument naming the field: ctx < 2, stride outside [0, ctx-1], both save_base and base.
  [[nodiscard]] Status validate() const;
};

// The windows for a text of n_tokens (see the file comment).
struct WindowPlan {
  int64_t ctx = 0;     // window length after clamping
  int64_t stride = 0;  // window step = scored targets per window
  int64_t n_windows = 0;
  int64_t n_scored = 0;  // n_windows * stride
};

// Errors: fewer than 2 tokens, stride >= the clamped ctx (kInvalidArgument naming both).
[[nodiscard]] Result<WindowPlan> plan_windows(int64_t n_tokens, const EvalOptions& o, int64_t max_ctx);

struct EvalReport {
  WindowPlan plan;
  int64_t text_tokens = 0;
  double ppl = 0, ppl_stderr = 0;                 // exp(mean nll) over the scored targets, and its standard error
  bool has_base = false;                          // the fields below are set only with a base
  double base_ppl = 0;                            // the base run's perplexity (from its exact nll)
  double delta_ppl = 0;                           // ppl - base_ppl
  double kld_mean = 0, kld_p99 = 0, kld_max = 0;  // KL(base || this) per scored position, nats
  double top1 = 0;                                // % of scored positions whose top-1 token equals the base's
};

// Progress after each window: windows done, windows total, the running perplexity.
using EvalProgress = std::function<void(int64_t done, int64_t total, double ppl)>;

// Runs the windows of `ids` through `m`; writes / compares the base as `o` says. Errors: o.validate's,
// plan_windows's, the base file's (tools/eval_base.h: malformed, or saved on another text, vocab,
// ctx or stride, naming the field), model errors, write errors.
[[nodiscard]] Result<EvalReport> evaluate(model::Model& m, model::Activations& act, std::span<const int32_t> ids,
                                          const EvalOptions& o, const EvalProgress& progress = {});

// {"ppl":..,"ppl_stderr":..,"tokens":n_scored,"windows":..,"ctx":..,"stride":..,"text_tokens":..}
// plus, with a base, "kld_mean","kld_p99","kld_max","top1" (percent),"delta_ppl","base_ppl".
std::string eval_json(const EvalReport& r);

}  // namespace strata::tools
