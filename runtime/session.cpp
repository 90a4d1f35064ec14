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

Status Session::check_append(std::span<const int32_t> tokens, int64_t context_limit) const {
  if (!valid_) return InvalidArgument("session is unusable after an earlier model failure");
  if (tokens.empty()) return InvalidArgument("append: no tokens");
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
  if (context_limit > 0 && start + total > context_limit)
    return ResourceExhausted("context of " + std::to_string(start + total) + " tokens exceeds the context limit of " +
                             std::to_string(context_limit) + " tokens");
  return Status();
}

model::ForwardEntry Session::begin_forward(std::span<const int32_t> tokens, model::RowKind kind, bool want_logits,
                                           int64_t decoder_tail) {
  STRATA_CHECK(pending_before_ < 0, "Session::begin_forward: an entry is already pending");
  pending_ = tokens;
  pending_before_ = cache_.n_past;
  const auto n = static_cast<int64_t>(tokens.size());
  pending_replays_ = decoder_tail >= 0 && decoder_tail < n;
  if (want_logits) {
    logits_.resize(static_cast<size_t>(m_->config().vocab_size));
  } else {
    logits_.clear();
  }
  model::ForwardEntry e;
  e.cache = &cache_;
  e.tokens = tokens;
  e.kind = kind;
  e.logits.kind = want_logits ? model::LogitsRequest::Kind::kLast : model::LogitsRequest::Kind::kNone;
  e.logits_out = want_logits ? logits_.data() : nullptr;
  e.decoder_tail = decoder_tail;
  e.undo = undo_.depth() > 0 ? &undo_ : nullptr;
  return e;
}

model::ForwardEntry Session::begin_verify(std::span<const int32_t> tokens, float* row_logits,
                                          std::vector<float>* features) {
  model::ForwardEntry e = begin_forward(tokens, model::RowKind::kDecode, false);
  e.logits.kind = model::LogitsRequest::Kind::kAll;
  e.logits_out = row_logits;
  e.dspark_features = features;
  return e;
}

Status Session::rewind(int64_t n, std::span<const float> logits) {
  if (pending_before_ >= 0) return InvalidArgument("rewind: a forward entry of this session is pending");
  if (!valid_) return InvalidArgument("session is unusable after an earlier model failure");
  const auto V = static_cast<size_t>(m_->config().vocab_size);
  if (!logits.empty() && logits.size() != V)
    return InvalidArgument("rewind: " + std::to_string(logits.size()) + " logits given, the vocabulary has " +
                           std::to_string(V));
  if (n == cache_.n_past && logits.empty()) return Status();
  STRATA_RETURN_IF_ERROR(undo_.rewind(m_->config(), cache_, n));
  tokens_.resize(static_cast<size_t>(n));
  cache_.engram_history = m_->engram_history_of(tokens_);
  logits_.assign(logits.begin(), logits.end());
  return Status();
}

void Session::end_forward(const Status& s) {
  STRATA_CHECK(pending_before_ >= 0, "Session::end_forward: nothing pending");
  const int64_t before = pending_before_;
  const std::span<const int32_t> ran = pending_;
  pending_before_ = -1;
  pending_ = {};
  if (!s.ok()) {
    logits_.clear();
    // forward() validates before touching any cache; a failure after that leaves them half-written.
    if (cache_.n_past != before || s.code() == StatusCode::kIOError || s.code() == StatusCode::kCorruption) {
      valid_ = false;
      undo_.clear();
    }
    return;
  }
  if (pending_replays_) replayed_ = true;
  tokens_.insert(tokens_.end(), ran.begin(), ran.end());
}

int64_t prefill_chunk_end(int64_t pos, int64_t start, int64_t end, int64_t chunk, PrefillMode mode, int64_t window_size) {
  const int64_t e = std::min((pos / chunk + 1) * chunk, end);
  if (mode != PrefillMode::kReplay || e == end) return e;
  // Replay: the last chunk starts at the last boundary leaving >= min_last tokens; when the rest
  // after `e` is shorter than that, this chunk is the last one.
  const int64_t min_last = std::min(end - start, window_size);
  return end - e < min_last ? end : e;
}

Status Session::append(std::span<const int32_t> tokens, const AppendOptions& o, float* last_logits) {
  STRATA_RETURN_IF_ERROR(check_append(tokens));
  STRATA_RETURN_IF_ERROR(o.validate());
  const model::ModelConfig& c = m_->config();
  const int64_t start = cache_.n_past, total = static_cast<int64_t>(tokens.size());
  const bool replay = o.mode == PrefillMode::kReplay;

  logits_.clear();
  std::optional<model::Activations> own;
  model::Activations* act = o.activations;
  if (act == nullptr) act = &own.emplace(m_->new_activations());
  for (int64_t off = 0; off < total;) {
    if (o.cancel && o.cancel->load()) return Cancelled("cancelled after " + std::to_string(off) + " prompt tokens");
    const int64_t end = prefill_chunk_end(start + off, start, start + total, o.chunk, o.mode, c.window_size) - start;
    const int64_t len = end - off;
    const bool last = end == total;
    // Replay: non-final chunks stop after the first decoder layer's compressor; the last chunk
    // runs the decoder over its last window_size tokens (all of them when it is that short: exact).
    const int64_t tail = replay ? (last ? std::min(len, c.window_size) : 0) : -1;
    model::ForwardEntry e =
        begin_forward(tokens.subspan(static_cast<size_t>(off), static_cast<size_t>(len)), o.kind, last, tail);
    const Status s = m_->forward(model::ForwardRequest{std::span<model::ForwardEntry>(&e, 1)}, *act);
    end_forward(s);
    STRATA_RETURN_IF_ERROR(s);
    off = end;
    report_progress(o.progress, ProgressEvent{"prefill", "tokens", static_cast<uint64_t>(off),
                                              static_cast<uint64_t>(total), "", last});
    if (!last && o.on_boundary && cache_.n_past % o.chunk == 0) o.on_boundary(*this);
  }
  if (last_logits) std::copy(logits_.begin(), logits_.end(), last_logits);
  return Status();
}

}  // namespace strata::runtime
