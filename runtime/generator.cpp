#include "runtime/generator.h"

namespace strata::runtime {

Status GenerateOptions::validate() const {
  if (max_new_tokens < 0) return InvalidArgument("max new tokens (-n) must be >= 0");
  if (prefill_chunk <= 0) return InvalidArgument("prefill chunk must be positive");
  STRATA_RETURN_IF_ERROR(spec.validate());
  return sampler.validate();
}

namespace {

EngineOptions engine_options(int64_t chunk) {
  EngineOptions o;
  o.prefill_chunk = chunk;
  o.batch_tokens = chunk;  // one sequence: one chunk per step
  return o;
}

}  // namespace

Generator::Generator(model::Model& m) : session_(m), engine_(m, engine_options(2048)) {}

Status Generator::generate(std::span<const int32_t> prompt, const GenerateOptions& opt, const TokenCallback& on_token,
                           GenerateStats* stats) {
  STRATA_RETURN_IF_ERROR(opt.validate());
  // The engine's chunk follows the options (the engine holds no sequence between calls).
  STRATA_RETURN_IF_ERROR(engine_.set_options(engine_options(opt.prefill_chunk)));
  SequenceOptions so;
  so.max_new_tokens = opt.max_new_tokens;
  so.stop_ids = opt.stop_ids;
  so.max_context = opt.max_context;
  so.sampler = opt.sampler;
  so.prefill_mode = opt.prefill_mode;
  so.consume_last = opt.consume_last;
  so.cancel = opt.cancel;
  so.prefill_progress = opt.prefill_progress;
  so.spec = opt.spec;
  so.constraint = opt.constraint;
  bool done = false;
  FinishReason reason = FinishReason::kLength;
  Status result;
  SequenceStats ss;
  SequenceCallbacks cb;
  cb.on_token = on_token;
  cb.on_finish = [&](FinishReason r, const Status& s, const SequenceStats& st) {
    done = true;
    reason = r;
    result = s;
    ss = st;
  };
  STRATA_RETURN_IF_ERROR(
      engine_.add(&session_, std::vector<int32_t>(prompt.begin(), prompt.end()), std::move(so), std::move(cb)).status());
  while (!done) engine_.step();
  if (stats) {
    GenerateStats st;
    st.prompt_tokens = ss.prompt_tokens;
    st.prefilled_tokens = ss.prefilled_tokens;
    st.prefill_s = ss.prefill_s;
    st.generated_tokens = ss.generated_tokens;
    st.decode_s = ss.decode_s;
    st.stopped_by_eos = reason == FinishReason::kStopId;
    st.stopped_by_context = reason == FinishReason::kContext;
    st.cancelled = reason == FinishReason::kCancelled;
    st.spec = ss.spec;
    // A prompt cancelled between chunks fills the stats too (its status is kCancelled).
    if (result.ok() || result.code() == StatusCode::kCancelled) *stats = st;
  }
  return result;
}

}  // namespace strata::runtime
