#include "runtime/generator.h"

#include <algorithm>
#include <chrono>

namespace strata::runtime {

Status GenerateOptions::validate() const {
  if (max_new_tokens < 0) return InvalidArgument("max new tokens (-n) must be >= 0");
  if (prefill_chunk <= 0) return InvalidArgument("prefill chunk must be positive");
  return sampler.validate();
}

Generator::Generator(model::Model& m) : m_(m), session_(m), act_(m.new_activations()) {}

Status Generator::generate(std::span<const int32_t> prompt, const GenerateOptions& opt, const TokenCallback& on_token,
                           GenerateStats* stats) {
  STRATA_RETURN_IF_ERROR(opt.validate());
  if (prompt.empty() && session_.last_logits().empty()) return InvalidArgument("empty prompt: nothing to run");
  const model::ModelConfig& c = m_.config();
  const int64_t limit = opt.max_context > 0 ? std::min(opt.max_context, c.max_position_embeddings) : c.max_position_embeddings;
  const int64_t need = session_.n_past() + static_cast<int64_t>(prompt.size());
  if (need > limit)
    return ResourceExhausted("prompt of " + std::to_string(prompt.size()) + " tokens (context " + std::to_string(need) +
                             ") exceeds the context limit of " + std::to_string(limit) + " tokens");
  GenerateStats st;
  st.prompt_tokens = static_cast<int64_t>(prompt.size());
  std::vector<float> logits(static_cast<size_t>(c.vocab_size));
  using clock = std::chrono::steady_clock;

  auto t0 = clock::now();
  if (prompt.empty()) {
    std::copy(session_.last_logits().begin(), session_.last_logits().end(), logits.begin());
  } else {
    AppendOptions ao;
    ao.chunk = opt.prefill_chunk;
    ao.mode = opt.prefill_mode;
    ao.progress = opt.prefill_progress;
    ao.cancel = opt.cancel;
    ao.activations = &act_;
    if (Status s = session_.append(prompt, ao, logits.data()); !s.ok()) {
      if (s.code() == StatusCode::kCancelled && stats) {
        st.prefill_s = std::chrono::duration<double>(clock::now() - t0).count();
        st.cancelled = true;
        *stats = st;
      }
      return s;
    }
  }
  st.prefill_s = std::chrono::duration<double>(clock::now() - t0).count();

  AppendOptions decode;
  decode.chunk = 1;
  decode.activations = &act_;
  decode.kind = model::RowKind::kDecode;
  Sampler sampler(opt.sampler);
  auto t1 = clock::now();
  for (int i = 0; i < opt.max_new_tokens; ++i) {
    const int32_t tok = sampler.sample(logits);
    ++st.generated_tokens;
    const bool is_stop = std::find(opt.stop_ids.begin(), opt.stop_ids.end(), tok) != opt.stop_ids.end();
    // The cancel hook is read between tokens: the token just emitted is the last one.
    const bool cancelled = opt.cancel != nullptr && opt.cancel->load();
    const bool go_on = on_token(tok) && !cancelled;
    const bool at_limit = session_.n_past() + 1 > limit;
    if (!go_on || is_stop || i + 1 == opt.max_new_tokens || at_limit) {
      st.stopped_by_eos = is_stop;
      st.stopped_by_context = go_on && !is_stop && i + 1 < opt.max_new_tokens && at_limit;
      st.cancelled = cancelled;
      if (opt.consume_last && !at_limit) {
        const int32_t one[1] = {tok};
        STRATA_RETURN_IF_ERROR(session_.append(one, decode));
      }
      break;
    }
    const int32_t one[1] = {tok};
    STRATA_RETURN_IF_ERROR(session_.append(one, decode, logits.data()));
  }
  st.decode_s = std::chrono::duration<double>(clock::now() - t1).count();
  if (stats) *stats = st;
  return Status();
}

}  // namespace strata::runtime
