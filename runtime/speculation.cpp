#include "runtime/speculation.h"

#include <algorithm>
#include <cmath>

namespace strata::runtime {

std::string_view spec_mode_name(SpecMode m) {
  return m == SpecMode::kDSpark ? "dspark" : m == SpecMode::kDraft ? "draft" : "none";
}

Result<SpecMode> parse_spec_mode(std::string_view s) {
  if (s == "none") return SpecMode::kNone;
  if (s == "dspark") return SpecMode::kDSpark;
  if (s == "draft") return SpecMode::kDraft;
  return InvalidArgument("--spec '" + std::string(s) + "' is not one of: dspark, draft, none");
}

Status SpecOptions::validate() const {
  if (max_drafts < 1 || max_drafts > 64)
    return InvalidArgument("--spec-max must be in [1, 64], got " + std::to_string(max_drafts));
  if (!(min_conf >= 0.0f && min_conf <= 1.0f))
    return InvalidArgument("--spec-min-conf must be in [0, 1], got " + std::to_string(min_conf));
  return Status();
}

// ---- guard ----------------------------------------------------------------------------------------

void SpecGuard::plain_step(double seconds) {
  if (!enabled_) return;
  t_plain_ = t_plain_ > 0 ? 0.75 * t_plain_ + 0.25 * seconds : seconds;
  if (warmup_left_ > 0) {
    --warmup_left_;
    return;
  }
  if (wait_ > 0 && --wait_ == 0) {  // the pause is over: probe
    ++probes_;
    probe_.clear();
    probe_cycles_ = 0;
  }
}

bool SpecGuard::cycle(double seconds, int64_t tokens) {
  if (!enabled_) return false;
  probe_.emplace_back(seconds, tokens);
  if (static_cast<int>(probe_.size()) > kWindow) probe_.erase(probe_.begin());
  ++probe_cycles_;
  double s = 0;
  int64_t n = 0;
  for (const auto& [sec, tok] : probe_) {
    s += sec;
    n += tok;
  }
  // No plain time yet (no warm-up ran, e.g. every step drafted): nothing to compare with.
  if (t_plain_ <= 0 || n <= 0) return false;
  if (s / static_cast<double>(n) > t_plain_) {
    ++pauses_;
    wait_ = backoff_;
    // A probe that paid for a whole window and then stopped paying starts over from the shortest
    // pause; one that never paid waits twice as long next time.
    backoff_ = probe_cycles_ >= kWindow ? kMinBackoff : std::min(kMaxBackoff, backoff_ * 2);
    probe_.clear();
    probe_cycles_ = 0;
    return true;
  }
  if (probe_cycles_ >= kWindow) backoff_ = kMinBackoff;
  return false;
}

// ---- drafter --------------------------------------------------------------------------------------

DSparkDrafter::DSparkDrafter(const model::Model& m)
    : m_(m),
      width_(m.config().dim * static_cast<int64_t>(m.config().dspark_target_layer_ids.size())),
      st_(m.new_dspark_state()) {}

void DSparkDrafter::add(const float* rows, int64_t n, int64_t end) {
  if (n <= 0 || width_ <= 0 || end <= feat_end_) return;
  const int64_t start = end - n;
  const int64_t have = static_cast<int64_t>(feat_.size()) / width_;
  if (start > feat_end_ || have == 0) {
    feat_.clear();  // a gap (or nothing pending): the rings skip the missing positions
  }
  const int64_t first = std::max(start, feat_end_);  // positions already held are not added twice
  feat_.insert(feat_.end(), rows + (first - start) * width_, rows + n * width_);
  feat_end_ = end;
  // The rings keep window_size positions: older pending rows would be overwritten anyway (trimmed
  // once twice that many wait, so a paused sequence does not move the rows at every step).
  const int64_t keep = m_.config().window_size + 1;
  const int64_t now = static_cast<int64_t>(feat_.size()) / width_;
  if (now > 2 * keep) feat_.erase(feat_.begin(), feat_.begin() + (now - keep) * width_);
}

Result<std::vector<int32_t>> DSparkDrafter::propose(int32_t token, int max, float min_conf, model::Activations& act) {
  std::vector<int32_t> out;
  const model::ModelConfig& c = m_.config();
  const int64_t np = static_cast<int64_t>(feat_.size()) / width_;
  const int64_t last = feat_end_ - 1;
  // Nothing to draft from: no features of the last position (a restored session before its first
  // step), position 0 (a draft needs one earlier position), or a block past the context.
  if (np == 0 || last < 1 || last + 1 + c.dspark_block_size > c.max_position_embeddings) return out;
  if (np > 1) STRATA_RETURN_IF_ERROR(m_.dspark_seed(st_, feat_.data(), np - 1, last - (np - 1), act));
  st_.n_seen = std::max(st_.n_seen, last);  // positions skipped by a gap stay missing from the rings
  // The head stops at the first draft below min_conf and after `max`: rows it would drop cost nothing.
  STRATA_ASSIGN_OR_RETURN(model::DSparkDraft d, m_.dspark_draft(st_, token, feat_.data() + (np - 1) * width_, last,
                                                                act, model::DSparkStop{max, min_conf}));
  feat_.clear();
  out.assign(d.ids.begin() + 1, d.ids.end());
  return out;
}

}  // namespace strata::runtime
