#include "tools/eval.h"

#include <algorithm>
#include <cmath>
#include <memory>
#include <nlohmann/json.hpp>
#include <vector>

#include "tools/eval_base.h"
#include "tools/eval_math.h"

namespace strata::tools {

Status EvalOptions::validate() const {
  if (ctx < 2) return InvalidArgument("eval: ctx must be >= 2, got " + std::to_string(ctx));
  if (stride < 0 || stride >= ctx)
    return InvalidArgument("eval: stride must be in [1, ctx-1] (or 0 for ctx/2), got " + std::to_string(stride) +
                           " with ctx " + std::to_string(ctx));
  if (!save_base.empty() && !base.empty())
    return InvalidArgument(
        "eval: --save-base and --base do not go together (save a base with one run, compare with "
        "another)");
  return Status();
}

Result<WindowPlan> plan_windows(int64_t n_tokens, const EvalOptions& o, int64_t max_ctx) {
  STRATA_RETURN_IF_ERROR(o.validate());
  if (n_tokens < 2)
    return InvalidArgument("eval: the text has " + std::to_string(n_tokens) + " token(s); perplexity needs at least 2");
  WindowPlan p;
  p.ctx = std::min({o.ctx, n_tokens, std::max<int64_t>(max_ctx, 2)});
  p.stride = o.stride > 0 ? o.stride : std::max<int64_t>(p.ctx / 2, 1);
  if (p.stride >= p.ctx)
    return InvalidArgument("eval: stride " + std::to_string(p.stride) + " must be below the window length " +
                           std::to_string(p.ctx) + " (ctx clamped to the text's " + std::to_string(n_tokens) +
                           " tokens)");
  p.n_windows = (n_tokens - p.ctx) / p.stride + 1;
  p.n_scored = p.n_windows * p.stride;
  return p;
}

Result<EvalReport> evaluate(model::Model& m, model::Activations& act, std::span<const int32_t> ids,
                            const EvalOptions& o, const EvalProgress& progress) {
  const model::ModelConfig& c = m.config();
  EvalReport r;
  r.text_tokens = static_cast<int64_t>(ids.size());
  STRATA_ASSIGN_OR_RETURN(r.plan, plan_windows(r.text_tokens, o, c.max_position_embeddings));
  const WindowPlan& p = r.plan;
  const int64_t V = c.vocab_size;
  EvalBaseHeader h;
  h.vocab_size = static_cast<uint32_t>(V);
  h.n_tokens = ids.size();
  h.ctx = static_cast<uint64_t>(p.ctx);
  h.stride = static_cast<uint64_t>(p.stride);
  h.n_windows = static_cast<uint64_t>(p.n_windows);
  h.n_scored = static_cast<uint64_t>(p.n_scored);

  std::unique_ptr<EvalBaseReader> base;
  if (!o.base.empty()) {
    STRATA_ASSIGN_OR_RETURN(base, EvalBaseReader::open(o.base));
    STRATA_RETURN_IF_ERROR(check_base_matches(*base, h, ids));
  }
  std::unique_ptr<EvalBaseWriter> writer;
  if (!o.save_base.empty()) {
    STRATA_ASSIGN_OR_RETURN(writer, EvalBaseWriter::create(o.save_base, h, ids, o.env));
  }

  model::LogitsRequest req;
  req.kind = model::LogitsRequest::Kind::kRows;
  for (int64_t k = p.ctx - p.stride - 1; k <= p.ctx - 2; ++k) req.rows.push_back(k);
  std::vector<float> logits(static_cast<size_t>(p.stride * V));
  std::vector<double> logp(static_cast<size_t>(V)), base_logp(static_cast<size_t>(V)), cur_q(static_cast<size_t>(V));
  EvalBaseRecord rec, base_rec;
  PplAccumulator acc, base_acc;
  std::vector<double> klds;
  int64_t same_top1 = 0;
  uint64_t pos_index = 0;
  // Read before each window and after the last (EvalOptions::cancel).
  auto interrupted = [&](int64_t done) {
    return o.cancel != nullptr && o.cancel->load()
               ? Cancelled("eval: interrupted after " + std::to_string(done) + " of " + std::to_string(p.n_windows) +
                           " windows")
               : Status();
  };
  for (int64_t w = 0; w < p.n_windows; ++w) {
    STRATA_RETURN_IF_ERROR(interrupted(w));
    const int64_t start = w * p.stride;
    model::KvCache cache = m.new_cache();
    model::ForwardEntry e;
    e.cache = &cache;
    e.tokens = ids.subspan(static_cast<size_t>(start), static_cast<size_t>(p.ctx));
    e.kind = model::RowKind::kPrompt;
    e.logits = req;
    e.logits_out = logits.data();
    STRATA_RETURN_IF_ERROR(m.forward(model::ForwardRequest{std::span<model::ForwardEntry>(&e, 1), nullptr}, act));
    for (int64_t k = 0; k < p.stride; ++k, ++pos_index) {
      const int32_t target = ids[static_cast<size_t>(start + p.ctx - p.stride + k)];
      log_softmax(std::span<const float>(logits.data() + k * V, static_cast<size_t>(V)), logp);
      rec.nll = -logp[static_cast<size_t>(target)];
      rec.argmax = argmax(logp);
      acc.add(rec.nll);
      if (!writer && !base) continue;
      encode_row(logp, &rec.row);
      if (writer) STRATA_RETURN_IF_ERROR(writer->append(rec));
      if (base) {
        STRATA_RETURN_IF_ERROR(base->read(pos_index, &base_rec));
        base_acc.add(base_rec.nll);
        // ROUNDING: both sides go through the same u16 grid (tools/eval_math.h EncodedRow), so the
        // grid's error cancels for an identical model (KLD exactly 0) and adds ~1e-8 nats otherwise.
        decode_row(base_rec.row, base_logp);
        decode_row(rec.row, cur_q);
        klds.push_back(kl_divergence(base_logp, cur_q));
        same_top1 += base_rec.argmax == rec.argmax ? 1 : 0;
      }
    }
    if (progress) progress(w + 1, p.n_windows, acc.ppl());
  }
  // A cancel during the last window: still nothing written (the writer's temp file goes with it).
  STRATA_RETURN_IF_ERROR(interrupted(p.n_windows));
  if (writer) STRATA_RETURN_IF_ERROR(writer->finish());
  r.ppl = acc.ppl();
  r.ppl_stderr = acc.ppl_stderr();
  if (base) {
    r.has_base = true;
    r.base_ppl = base_acc.ppl();
    r.delta_ppl = r.ppl - r.base_ppl;
    double sum = 0;
    for (double k : klds) sum += k;
    r.kld_mean = klds.empty() ? 0 : sum / static_cast<double>(klds.size());
    r.kld_max = klds.empty() ? 0 : *std::max_element(klds.begin(), klds.end());
    r.kld_p99 = percentile(klds, 0.99);
    r.top1 = klds.empty() ? 0 : 100.0 * static_cast<double>(same_top1) / static_cast<double>(klds.size());
  }
  return r;
}

std::string eval_json(const EvalReport& r) {
  nlohmann::json j;
  j["ppl"] = r.ppl;
  j["ppl_stderr"] = r.ppl_stderr;
  j["tokens"] = r.plan.n_scored;
  j["windows"] = r.plan.n_windows;
  j["ctx"] = r.plan.ctx;
  j["stride"] = r.plan.stride;
  j["text_tokens"] = r.text_tokens;
  if (r.has_base) {
    j["kld_mean"] = r.kld_mean;
    j["kld_p99"] = r.kld_p99;
    j["kld_max"] = r.kld_max;
    j["top1"] = r.top1;
    j["delta_ppl"] = r.delta_ppl;
    j["base_ppl"] = r.base_ppl;
  }
  return j.dump(2, ' ', false, nlohmann::json::error_handler_t::replace) + "\n";
}

}  // namespace strata::tools
