#include "server/generation_job.h"

#include <optional>

namespace strata::server {

GenerationJob::Update GenerationJob::wait(std::chrono::milliseconds timeout) {
  std::unique_lock<std::mutex> l(mu_);
  cv_.wait_for(l, timeout, [&] { return news_; });
  news_ = false;
  Update u;
  u.deltas.swap(pending_);
  u.logprobs.swap(pending_logprobs_);
  u.reasoning_logprobs.swap(pending_reasoning_logprobs_);
  u.admitted = admitted_;
  u.cached_tokens = cached_tokens_;
  u.first_token = first_token_;
  u.finished = finished_;
  u.end = end_;
  u.status = status_;
  u.stats = stats_;
  return u;
}

void GenerationJob::on_admitted(int64_t cached_tokens) {
  {
    std::lock_guard<std::mutex> l(mu_);
    admitted_ = true;
    cached_tokens_ = cached_tokens;
    news_ = true;
  }
  cv_.notify_all();
}

void GenerationJob::on_logprob(const runtime::TokenLogprob& report) {
  report_ = report;
  has_report_ = true;
}

bool GenerationJob::on_token(int32_t id) {
  const bool reasoning = parser_.in_reasoning();
  const bool content = parser_.in_content();
  std::vector<chat::Delta> ds;
  const bool end = parser_.push_token(id, &ds);
  if (reasoning) ++reasoning_tokens_;
  // The token's report is listed when it is content or reasoning and not a special token (EOS).
  std::optional<ApiTokenLogprob> listed;
  if (has_report_ && report_.id == id && (reasoning || content) && !tok_->is_special(id)) {
    listed = api_token_logprob(*tok_, report_);
    (reasoning ? reasoning_logprobs_ : content_logprobs_).push_back(*listed);
  }
  has_report_ = false;
  {
    std::lock_guard<std::mutex> l(mu_);
    first_token_ = true;
    for (chat::Delta& d : ds) pending_.push_back(std::move(d));
    if (listed) (reasoning ? pending_reasoning_logprobs_ : pending_logprobs_).push_back(std::move(*listed));
    news_ = true;
  }
  cv_.notify_all();
  return !end;
}

void GenerationJob::on_finish(JobEnd end, const Status& status, const JobStats& stats) {
  std::vector<chat::Delta> ds;
  if (end == JobEnd::kLength || end == JobEnd::kStopped) parser_.finish(end == JobEnd::kLength, &ds);
  {
    std::lock_guard<std::mutex> l(mu_);
    for (chat::Delta& d : ds) pending_.push_back(std::move(d));
    finished_ = true;
    end_ = end;
    status_ = status;
    stats_ = stats;
    news_ = true;
  }
  cv_.notify_all();
}

}  // namespace strata::server
