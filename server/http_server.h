// HttpServer: strata's OpenAI-compatible HTTP API (chat-and-api.md §6) on Boost.Beast.
//
//   POST /v1/chat/completions   chat, streaming (SSE) or not; reasoning, tool calls, usage
//   POST /v1/completions        raw prompt, no template
//   POST /v1/responses          OpenAI Responses API on the same chat path (responses_request.h,
//                               responses_output.h), previous_response_id kept in memory
//   POST /v1/messages           Anthropic Messages API on the same chat path (messages_request.h,
//                               anthropic_response.h): thinking / text / tool_use blocks, SSE events
//   POST /v1/messages/count_tokens  the prompt's token count
//   GET  /v1/models, /v1/models/{id}
//   GET  /health                503 model_loading -> 200 ok (-> 503 unhealthy after a model failure)
//   GET  /metrics               Prometheus text
// The server starts listening before the model is loaded (so /health can say "loading"), and
// serves generations once attach() hands it the tokenizer and model. Connections are read by one
// I/O thread with every resource bounded (server/http_transport.h: connection cap, header bytes,
// fields and deadline, body limit, idle keep-alive); complete generation requests are parsed,
// rendered and streamed on a worker pool (server/worker_pool.h); generation runs on the
// Scheduler's single model thread. /health, /metrics and /v1/models are answered on the I/O thread,
// so they stay answerable while every worker waits on the model.
// Every failure a client can cause is an OpenAI error envelope (400/401/404/405/408/413/415/431/
// 501/503; Anthropic's envelope on the /v1/messages routes); a client that disconnects cancels its
// generation (server/peer_socket.h).
// Ownership: owns the backend (tokenizer, model, scheduler) once attached. Thread safety: start,
// attach, set_failed and stop may be called from any thread; handlers run concurrently.
#pragma once

#include <atomic>
#include <functional>
#include <memory>
#include <mutex>
#include <string>

#include "core/log.h"
#include "core/status.h"
#include "model/model.h"
#include "server/metrics.h"
#include "server/options.h"
#include "server/scheduler.h"
#include "tokenizer/tokenizer.h"

namespace strata::server {

class HttpTransport;
class WorkerPool;
class Exchange;
struct Request;

class HttpServer {
 public:
  // `logger` (may be null) gets one line per request and the lifecycle events.
  HttpServer(ServerOptions options, const Logger* logger);
  ~HttpServer();
  HttpServer(const HttpServer&) = delete;
  HttpServer& operator=(const HttpServer&) = delete;

  // Validates the options, binds host:port and starts accepting on a background thread. Errors:
  // invalid options (naming the flag), the address cannot be bound (kIOError naming host:port).
  [[nodiscard]] Status start();
  // The bound port (after start(); useful with port 0).
  int port() const { return port_; }

  // The model is loaded: from now on generations are served and /health says ok. `tick` (may be
  // empty) runs on the model thread between steps (SchedulerOptions::tick). kInvalidArgument if
  // the tokenizer lacks the V4.1 tokens or the options do not fit the model. `draft`: with
  // ServerOptions::spec mode kDraft the draft model (runtime/draft_model.h; checked against the
  // model by the caller), owned from now on; required there (kInvalidArgument), ignored otherwise.
  [[nodiscard]] Status attach(std::unique_ptr<tokenizer::Tokenizer> tokenizer, std::unique_ptr<model::Model> model,
                              std::function<void()> tick = {}, std::unique_ptr<model::Model> draft = nullptr);
  // Loading failed or the backend broke: /health and generations answer 503 unhealthy.
  void set_failed(std::string message);

  // Stops accepting, ends running generations (cancelled) and joins every thread. Idempotent.
  void stop();

  Metrics& metrics() { return metrics_; }

 private:
  struct Backend;
  struct Handlers;
  friend struct Handlers;

  ServerOptions opt_;
  const Logger* logger_;
  Metrics metrics_;
  std::unique_ptr<HttpTransport> http_;
  std::unique_ptr<WorkerPool> workers_;
  std::shared_ptr<Handlers> handlers_;
  int port_ = 0;
  int64_t created_ = 0;  // unix seconds: server start, then model load time
  std::atomic<int> state_{0};  // 0 loading, 1 ready, 2 failed
  std::atomic<bool> stopping_{false};
  std::mutex mu_;
  std::string failure_;
  std::unique_ptr<Backend> backend_;
  std::atomic<Backend*> live_{nullptr};
  // Routes a complete request (I/O thread): cheap routes answered at once, generations to a worker.
  void dispatch(Request req, std::shared_ptr<Exchange> ex);
};

}  // namespace strata::server
