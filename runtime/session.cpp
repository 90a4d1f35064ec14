#include "runtime/session.h"

#include <algorithm>

namespace strata::runtime {

Status Session::append(std::span<const int32_t> tokens, float* last_logits, int64_t chunk,
                       const std::atomic<bool>* cancel) {
  if (!valid_) return InvalidArgument("session is unusable after an earlier model failure");
  if (tokens.empty()) return InvalidArgument("append: no tokens");
  if (chunk <= 0) return InvalidArgument("append: chunk must be positive");
  for (size_t off = 0; off < tokens.size(); off += static_cast<size_t>(chunk)) {
    if (cancel && cancel->load()) return Cancelled("cancelled after " + std::to_string(off) + " prompt tokens");
    const size_t len = std::min(tokens.size() - off, static_cast<size_t>(chunk));
    const bool last = off + len == tokens.size();
    model::LogitsRequest req;
    req.kind = (last && last_logits) ? model::LogitsRequest::Kind::kLast : model::LogitsRequest::Kind::kNone;
    const int64_t before = cache_.n_past;
    Status s = m_->forward(cache_, tokens.subspan(off, len), req, req.kind == model::LogitsRequest::Kind::kLast ? last_logits : nullptr);
    if (!s.ok()) {
      // forward() validates before touching the cache; a failure after that leaves it half-written.
      if (cache_.n_past != before || s.code() == StatusCode::kIOError || s.code() == StatusCode::kCorruption) valid_ = false;
      return s;
    }
    tokens_.insert(tokens_.end(), tokens.begin() + static_cast<std::ptrdiff_t>(off),
                   tokens.begin() + static_cast<std::ptrdiff_t>(off + len));
  }
  return Status();
}

}  // namespace strata::runtime
