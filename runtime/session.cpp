#include "runtime/session.h"

#include <algorithm>
#include <optional>
#include <string>

namespace strata::runtime {

std::string_view prefill_mode_name(PrefillMode m) { return m == PrefillMode::kReplay ? "replay" : "exact"; }

Result<PrefillMode> parse_prefill_mode(std::string_view s) {
  if (s == "exact") return PrefillMode::kExact;
  if (s == "replay") return PrefillMode::kReplay;
  return InvalidArgument("prefill mode '" + std::string(s) + "' is not one of: exact, replay");
}

Status AppendOptions::validate() const {
  if (chunk <= 0) return InvalidArgument("append: chunk must be positive, got " + std::to_string(chunk));
  return Status();
}

Session::Session(model::Model& m, std::vector<int32_t> tokens, model::KvCache cache, std::vector<float> last_logits,
                 bool replayed)
    : m_(&m), cache_(std::move(cache)), tokens_(std::move(tokens)), logits_(std::move(last_logits)), replayed_(replayed) {
  STRATA_CHECK(static_cast<int64_t>(tokens_.size()) == cache_.n_past, "Session: token history and cache disagree");
}

Status Session::append(std::span<const int32_t> tokens, float* last_logits, int64_t chunk,
                       const std::atomic<bool>* cancel) {
  AppendOptions o;
  o.chunk = chunk;
  o.cancel = cancel;
  return append(tokens, o, last_logits);
}

Status Session::append(std::span<const int32_t> tokens, const AppendOptions& o, float* last_logits) {
  if (!valid_) return InvalidArgument("session is unusable after an earlier model failure");
  if (tokens.empty()) return InvalidArgument("append: no tokens");
  STRATA_RETURN_IF_ERROR(o.validate());
  const model::ModelConfig& c = m_->config();
  const int64_t start = cache_.n_past, total = static_cast<int64_t>(tokens.size());
  // Checked up front so that a bad token in a later chunk does not leave earlier chunks appended.
  for (int64_t i = 0; i < total; ++i) {
    const int32_t t = tokens[static_cast<size_t>(i)];
    if (t < 0 || t >= c.vocab_size)
      return InvalidArgument("token id " + std::to_string(t) + " at position " + std::to_string(start + i) +
                             " is outside the vocabulary [0, " + std::to_string(c.vocab_size) + ")");
  }
  if (start + total > c.max_position_embeddings)
    return ResourceExhausted("context of " + std::to_string(start + total) + " tokens exceeds max_position_embeddings " +
                             std::to_string(c.max_position_embeddings));

  // Chunk ends (relative to `tokens`), at absolute multiples of o.chunk.
  std::vector<int64_t> ends;
  for (int64_t p = start; p < start + total;) {
    const int64_t e = std::min((p / o.chunk + 1) * o.chunk, start + total);
    ends.push_back(e - start);
    p = e;
  }
  const bool replay = o.mode == PrefillMode::kReplay;
  const int64_t min_last = std::min<int64_t>(total, c.window_size);
  if (replay)  // the decoder tail must lie inside the last chunk
    while (ends.size() >= 2 && ends.back() - ends[ends.size() - 2] < min_last) ends.erase(ends.end() - 2);

  logits_.clear();
  std::optional<model::Activations> own;
  model::Activations* act = o.activations;
  if (act == nullptr) act = &own.emplace(m_->new_activations());
  int64_t off = 0;
  for (size_t i = 0; i < ends.size(); ++i) {
    if (o.cancel && o.cancel->load()) return Cancelled("cancelled after " + std::to_string(off) + " prompt tokens");
    const int64_t len = ends[i] - off;
    const bool last = i + 1 == ends.size();
    // Replay: non-final chunks stop after the first decoder layer's compressor; the last chunk
    // runs the decoder over its last window_size tokens (all of them when it is that short: exact).
    const int64_t tail = replay ? (last ? std::min(len, c.window_size) : 0) : -1;
    model::LogitsRequest req;
    req.kind = last ? model::LogitsRequest::Kind::kLast : model::LogitsRequest::Kind::kNone;
    if (last) logits_.resize(static_cast<size_t>(c.vocab_size));
    const int64_t before = cache_.n_past;
    model::ForwardEntry e;
    e.cache = &cache_;
    e.tokens = tokens.subspan(static_cast<size_t>(off), static_cast<size_t>(len));
    e.kind = o.kind;
    e.logits = req;
    e.logits_out = last ? logits_.data() : nullptr;
    e.decoder_tail = tail;
    Status s = m_->forward(model::ForwardRequest{std::span<model::ForwardEntry>(&e, 1)}, *act);
    if (!s.ok()) {
      logits_.clear();
      // forward() validates before touching the cache; a failure after that leaves it half-written.
      if (cache_.n_past != before || s.code() == StatusCode::kIOError || s.code() == StatusCode::kCorruption) valid_ = false;
      return s;
    }
    if (tail >= 0 && tail < len) replayed_ = true;
    tokens_.insert(tokens_.end(), tokens.begin() + static_cast<std::ptrdiff_t>(off),
                   tokens.begin() + static_cast<std::ptrdiff_t>(ends[i]));
    off = ends[i];
    report_progress(o.progress, ProgressEvent{"prefill", "tokens", static_cast<uint64_t>(off),
                                              static_cast<uint64_t>(total), "", last});
    if (!last && o.on_boundary && cache_.n_past % o.chunk == 0) o.on_boundary(*this);
  }
  if (last_logits) std::copy(logits_.begin(), logits_.end(), last_logits);
  return Status();
}

}  // namespace strata::runtime
