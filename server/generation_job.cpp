#include "server/generation_job.h"

namespace strata::server {

GenerationJob::Update GenerationJob::wait(std::chrono::milliseconds timeout) {
  std::unique_lock<std::mutex> l(mu_);
  cv_.wait_for(l, timeout, [&] { return news_; });
  news_ = false;
  Update u;
  u.deltas.swap(pending_);
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

bool GenerationJob::on_token(int32_t id) {
  const bool reasoning = parser_.in_reasoning();
  std::vector<chat::Delta> ds;
  const bool end = parser_.push_token(id, &ds);
  if (reasoning) ++reasoning_tokens_;
  {
    std::lock_guard<std::mutex> l(mu_);
    first_token_ = true;
    for (chat::Delta& d : ds) pending_.push_back(std::move(d));
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
