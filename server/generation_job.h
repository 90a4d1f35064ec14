// GenerationJob: a scheduler Job that parses its tokens with chat::OutputParser on the worker
// thread and hands the resulting deltas to the HTTP handler thread that waits on it.
//
// The worker pushes deltas and the end; the handler drains them with wait() (streaming: into SSE
// chunks; non-streaming: until finished, then reads the parser's final message). After finished()
// the worker no longer touches the parser, so the handler may read it.
// Thread safety: on_* run on the worker thread; wait()/finished state on any one handler thread.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <mutex>
#include <vector>

#include "chat/output_parser.h"
#include "server/logprobs_json.h"
#include "server/scheduler.h"

namespace strata::server {

class GenerationJob : public Job {
 public:
  GenerationJob(const tokenizer::Tokenizer& tok, chat::ParserOptions parser_options)
      : tok_(&tok), parser_(tok, std::move(parser_options)) {}

  // What wait() returns: the deltas since the last call and the job's state.
  struct Update {
    std::vector<chat::Delta> deltas;
    // With logprobs on: the reports of the tokens since the last call, content and reasoning
    // tokens apart (server/logprobs_json.h says which tokens are listed).
    std::vector<ApiTokenLogprob> logprobs, reasoning_logprobs;
    bool admitted = false;  // the job has a slot (prefill has started or is done)
    int64_t cached_tokens = 0;  // once admitted: prompt tokens reused from a session or the prefix cache
    bool first_token = false;  // at least one token was generated
    bool finished = false;
    JobEnd end = JobEnd::kStopped;
    Status status;
    JobStats stats;
  };

  // Blocks until there is news or `timeout` passes; moves the pending deltas out.
  Update wait(std::chrono::milliseconds timeout);

  // Valid after wait() reported finished.
  const chat::OutputParser& parser() const { return parser_; }
  int64_t reasoning_tokens() const { return reasoning_tokens_; }
  // Every listed report, valid after wait() reported finished.
  const std::vector<ApiTokenLogprob>& content_logprobs() const { return content_logprobs_; }
  const std::vector<ApiTokenLogprob>& reasoning_logprobs() const { return reasoning_logprobs_; }

  void on_admitted(int64_t cached_tokens) override;
  void on_logprob(const runtime::TokenLogprob& report) override;
  bool on_token(int32_t id) override;
  void on_finish(JobEnd end, const Status& status, const JobStats& stats) override;

 private:
  const tokenizer::Tokenizer* tok_;
  chat::OutputParser parser_;
  int64_t reasoning_tokens_ = 0;
  runtime::TokenLogprob report_;  // the next token's report (worker thread)
  bool has_report_ = false;
  std::vector<ApiTokenLogprob> content_logprobs_, reasoning_logprobs_;  // all of them (worker, then handler)
  std::vector<ApiTokenLogprob> pending_logprobs_, pending_reasoning_logprobs_;  // under mu_
  std::mutex mu_;
  std::condition_variable cv_;
  std::vector<chat::Delta> pending_;
  bool admitted_ = false, first_token_ = false, finished_ = false, news_ = false;
  int64_t cached_tokens_ = 0;
  JobEnd end_ = JobEnd::kStopped;
  Status status_;
  JobStats stats_;
};

}  // namespace strata::server
