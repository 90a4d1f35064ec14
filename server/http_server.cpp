#include "server/http_server.h"

#include <httplib.h>
#include <signal.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>

#include <cctype>
#include <charconv>
#include <chrono>
#include <limits>
#include <optional>
#include <random>

#include "chat/dsml.h"
#include "chat/render.h"
#include "server/chat_request.h"
#include "server/completion_request.h"
#include "server/generation_job.h"
#include "server/peer_socket.h"
#include "server/responses.h"

namespace strata::server {

namespace {

using clock_type = std::chrono::steady_clock;

int64_t unix_now() {
  return std::chrono::duration_cast<std::chrono::seconds>(std::chrono::system_clock::now().time_since_epoch()).count();
}

void send_error(httplib::Response& res, const ApiError& e) {
  res.status = e.status;
  res.set_content(e.to_json(), "application/json");
}

void send_json(httplib::Response& res, const std::string& body) {
  res.status = 200;
  res.set_content(body, "application/json");
}

// A 499-style status for the metrics of requests whose client left ("client closed request").
constexpr int kClientClosed = 499;

// What a request still running when the server stops gets (503; in a stream, its last event).
ApiError shutting_down() { return unavailable("The server is shutting down; the generation was stopped", "server_shutdown"); }

ApiError too_large(int64_t limit) {
  return ApiError{413, "invalid_request_error",
                  "The request body is larger than the server's limit of " + std::to_string(limit) + " bytes", "",
                  "request_too_large"};
}

// One connection, as the four addresses of its socket.
std::string connection_key(const httplib::Request& req) {
  return req.local_addr + ":" + std::to_string(req.local_port) + "/" + req.remote_addr + ":" +
         std::to_string(req.remote_port);
}

// Methods whose body httplib 0.11 reads (detail::expect_content); any other leaves it unread.
bool body_is_read(const httplib::Request& req) {
  return req.method == "POST" || req.method == "PUT" || req.method == "PATCH" || req.method == "DELETE";
}

// The Content-Length a request declares: nullopt when absent, -1 when not a decimal number
// (httplib would wait for a body it cannot size); a number too large for int64 reads as INT64_MAX.
std::optional<int64_t> declared_body_bytes(const httplib::Request& req) {
  if (!req.has_header("Content-Length")) return std::nullopt;
  const std::string v = req.get_header_value("Content-Length");
  int64_t n = 0;
  auto [end, ec] = std::from_chars(v.data(), v.data() + v.size(), n);
  if (v.empty() || end != v.data() + v.size() || v[0] == '-') return -1;
  if (ec == std::errc::result_out_of_range) return std::numeric_limits<int64_t>::max();
  return ec == std::errc() ? n : -1;
}

// The two endpoints that take a request body (read through the --body-limit cap).
bool takes_body(const httplib::Request& req) {
  return req.method == "POST" && (req.path == "/v1/chat/completions" || req.path == "/v1/completions");
}

// Writes one SSE event; false when the client is gone.
bool sse(httplib::DataSink& sink, const std::string& payload) {
  const std::string ev = "data: " + payload + "\n\n";
  return sink.write(ev.data(), ev.size());
}

}  // namespace

struct HttpServer::Backend {
  std::unique_ptr<tokenizer::Tokenizer> tok;
  std::unique_ptr<model::Model> model;
  std::unique_ptr<Scheduler> scheduler;  // destroyed first (its thread uses the model)
  int32_t eos_id = 1;
  int32_t bos_id = 0;
  ~Backend() { scheduler.reset(); }
};

// The endpoint handlers (a struct of functions so http_server.h needs no httplib include).
struct HttpServer::Handlers {
  HttpServer& s;

  // The backend, or the 503 that says why there is none.
  Backend* backend(httplib::Response& res) const {
    Backend* b = s.live_.load();
    if (s.state_.load() == 2 || (b && b->scheduler->model_failures() > 0)) {
      std::lock_guard<std::mutex> l(s.mu_);
      send_error(res, unavailable("the model backend failed: " + (s.failure_.empty() ? std::string("a forward pass failed") : s.failure_),
                                  "unhealthy"));
      return nullptr;
    }
    if (!b) {
      send_error(res, unavailable("the model is loading; retry when GET /health returns 200", "model_loading"));
      return nullptr;
    }
    return b;
  }

  runtime::SamplerOptions sampler_options(const SamplingFields& f) const {
    runtime::SamplerOptions o;
    o.temperature = static_cast<float>(f.temperature);
    o.top_p = static_cast<float>(f.top_p);
    o.top_k = static_cast<int>(f.top_k);
    o.min_p = static_cast<float>(f.min_p);
    o.seed = f.has_seed ? static_cast<uint64_t>(f.seed) : (static_cast<uint64_t>(std::random_device{}()) << 32) ^ std::random_device{}();
    return o;
  }

  // §6.6 context checks; fills *max_tokens (explicit or default, clipped to the free context).
  ApiError fit_context(int64_t prompt, int64_t explicit_max, int64_t default_max, int64_t ctx, int64_t* max_tokens) const {
    if (prompt >= ctx)
      return bad_request("the prompt is " + std::to_string(prompt) + " tokens, which does not fit the context of " +
                             std::to_string(ctx) + " tokens",
                         "messages", "context_length_exceeded");
    if (explicit_max > 0 && prompt + explicit_max > ctx)
      return bad_request("the prompt (" + std::to_string(prompt) + " tokens) plus max_tokens (" +
                             std::to_string(explicit_max) + ") exceeds the context of " + std::to_string(ctx) + " tokens",
                         "max_tokens", "context_length_exceeded");
    *max_tokens = explicit_max > 0 ? explicit_max : std::min(default_max, ctx - prompt);
    return {};
  }

  // Connects the job to its client's socket: a closed peer cancels it (checked by the model thread
  // before every step, and by the handler while it waits). `alive` turns false when the handler is
  // done with the connection, after which the descriptor may belong to someone else.
  std::shared_ptr<std::atomic<bool>> watch_client(const httplib::Request& req, Job& job) const {
    auto alive = std::make_shared<std::atomic<bool>>(true);
    const int fd = find_peer_socket(req.local_addr, req.local_port, req.remote_addr, req.remote_port);
    if (fd >= 0) job.client_gone = [fd, alive] { return alive->load() && peer_closed(fd); };
    return alive;
  }

  ApiError submit(Backend& b, const std::shared_ptr<GenerationJob>& job) const {
    const Status st = b.scheduler->submit(job);
    if (st.ok()) return {};
    if (st.code() == StatusCode::kResourceExhausted) return unavailable(st.message(), "overloaded");
    return from_status(st);
  }

  // Blocks until the job ends; cancels it if the client leaves or the server stops.
  GenerationJob::Update wait_done(GenerationJob& job) const {
    for (;;) {
      GenerationJob::Update u = job.wait(std::chrono::milliseconds(100));
      if (u.finished) return u;
      if (s.stopping_.load() || (job.client_gone && job.client_gone())) job.cancel = true;
    }
  }

  void finished_metrics(const GenerationJob& job) const { s.metrics_.reasoning_tokens += static_cast<uint64_t>(job.reasoning_tokens()); }

  // Streams a job as SSE (§6.3). `first` is sent at once (may be empty); `delta` formats one parser
  // delta; `final` formats the closing chunk for a finish reason; `usage` the include_usage chunk
  // (empty = none).
  struct StreamFormat {
    std::string first;
    std::function<std::string(const chat::Delta&)> delta;
    std::function<std::string(std::string_view finish)> final;
    std::function<std::string(const JobStats&, int64_t reasoning)> usage;
  };
  void stream(httplib::Response& res, std::shared_ptr<GenerationJob> job, std::shared_ptr<std::atomic<bool>> alive,
              StreamFormat fmt) const {
    res.status = 200;
    res.set_header("Cache-Control", "no-cache");
    res.set_header("X-Accel-Buffering", "no");
    HttpServer* srv = &s;
    auto done = std::make_shared<std::atomic<bool>>(false);
    res.set_chunked_content_provider(
        "text/event-stream",
        [srv, job, fmt, done](size_t, httplib::DataSink& sink) {
          auto gone = [&] {
            job->cancel = true;
            return false;
          };
          if (!fmt.first.empty() && !sse(sink, fmt.first)) return gone();
          const auto keep_alive = std::chrono::duration<double>(srv->opt_.keep_alive_s);
          auto last_write = clock_type::now();
          for (;;) {
            const auto wait = std::min<clock_type::duration>(
                std::chrono::milliseconds(100), std::chrono::duration_cast<clock_type::duration>(keep_alive));
            GenerationJob::Update u = job->wait(std::chrono::duration_cast<std::chrono::milliseconds>(wait) +
                                                std::chrono::milliseconds(1));
            for (const chat::Delta& d : u.deltas) {
              const std::string chunk = fmt.delta(d);
              if (chunk.empty()) continue;
              if (!sse(sink, chunk)) return gone();
              last_write = clock_type::now();
            }
            if (u.finished) {
              srv->metrics_.reasoning_tokens += static_cast<uint64_t>(job->reasoning_tokens());
              done->store(true);
              if (u.end == JobEnd::kCancelled) return false;
              if (u.end == JobEnd::kError) {
                // After the first byte an error is an event, and the stream ends without [DONE].
                sse(sink, from_status(u.status.ok() ? Internal("generation failed") : u.status).to_json());
                sink.done();
                return true;
              }
              const std::string_view finish = chat::finish_reason_name(job->parser().finish_reason());
              if (!sse(sink, fmt.final(finish))) return false;
              if (fmt.usage && !sse(sink, fmt.usage(u.stats, job->reasoning_tokens()))) return false;
              const std::string end = "data: [DONE]\n\n";
              if (!sink.write(end.data(), end.size())) return false;
              sink.done();
              return true;
            }
            // While queued or prefilling, a comment every keep_alive_s keeps proxies and clients waiting.
            if (!u.first_token && clock_type::now() - last_write >= keep_alive) {
              static constexpr char kKeepAlive[] = ": keep-alive\n\n";
              if (!sink.write(kKeepAlive, sizeof kKeepAlive - 1)) return gone();
              last_write = clock_type::now();
            }
            if (job->client_gone && job->client_gone()) return gone();
            if (srv->stopping_.load()) {
              // The server stops (SIGINT/SIGTERM): end the stream as an error event with a closed
              // body, so clients see why instead of a cut connection (§6.3 errors after the first byte).
              job->cancel = true;
              done->store(true);
              sse(sink, shutting_down().to_json());
              sink.done();
              return true;
            }
          }
        },
        [job, alive, done](bool) {
          alive->store(false);
          if (!done->load()) job->cancel = true;
        });
  }

  void chat_completions(const httplib::Request& req, httplib::Response& res) const {
    Backend* b = backend(res);
    if (!b) return;
    ChatRequest cr;
    if (ApiError e = parse_chat_request(req.body, s.opt_, &cr); !e.ok()) return send_error(res, e);
    auto rendered = chat::render_conversation(*b->tok, cr.messages, cr.render);
    if (!rendered.ok()) return send_error(res, from_status(rendered.error()));
    int64_t max_tokens = 0;
    const int64_t P = static_cast<int64_t>(rendered->ids.size());
    if (ApiError e = fit_context(P, cr.max_tokens, cr.render.thinking ? 65536 : 8192, b->scheduler->context_limit(),
                                 &max_tokens);
        !e.ok())
      return send_error(res, e);

    chat::ParserOptions po;
    po.start = rendered->start;
    po.tools = rendered->tools_rendered;
    po.forced_tool = rendered->forced_tool;
    po.stop = cr.stop;
    po.parallel_tool_calls = cr.parallel_tool_calls;
    auto job = std::make_shared<GenerationJob>(*b->tok, std::move(po));
    job->prompt = std::move(rendered->ids);
    job->max_tokens = max_tokens;
    job->sampler = sampler_options(cr.sampling);
    job->presence_penalty = static_cast<float>(cr.sampling.presence_penalty);
    job->frequency_penalty = static_cast<float>(cr.sampling.frequency_penalty);
    job->eos_id = b->eos_id;
    if (s.opt_.test_scripted_output && cr.has_test_output) {  // TEST ONLY
      job->use_script = true;
      job->scripted = b->tok->encode(cr.test_output, /*allow_special=*/true);
    }
    auto alive = watch_client(req, *job);
    if (ApiError e = submit(*b, job); !e.ok()) return send_error(res, e);

    ResponseHeader h;
    h.id = random_id("chatcmpl-");
    h.created = unix_now();
    h.model = s.opt_.model_id;
    h.reasoning_field = s.opt_.reasoning_field;
    h.thinking = cr.render.thinking;

    if (!cr.stream) {
      const GenerationJob::Update u = wait_done(*job);
      alive->store(false);
      finished_metrics(*job);
      if (u.end == JobEnd::kCancelled) {
        if (s.stopping_.load()) return send_error(res, shutting_down());
        res.status = kClientClosed;
        return;
      }
      if (u.end == JobEnd::kError) return send_error(res, internal_error("generation failed: " + u.status.to_string()));
      const std::string_view finish = chat::finish_reason_name(job->parser().finish_reason());
      return send_json(res, chat_completion_json(h, job->parser(), u.stats, job->reasoning_tokens(), finish));
    }
    StreamFormat fmt;
    fmt.first = chat_chunk_json(h, Json{{"role", "assistant"}, {"content", ""}}, "");
    fmt.delta = [h](const chat::Delta& d) { return chat_chunk_json(h, chunk_delta(h, d), ""); };
    fmt.final = [h](std::string_view finish) { return chat_chunk_json(h, Json::object(), finish); };
    if (cr.include_usage)
      fmt.usage = [h](const JobStats& st, int64_t r) { return usage_chunk_json(h, "chat.completion.chunk", st, r); };
    stream(res, job, alive, std::move(fmt));
  }

  void completions(const httplib::Request& req, httplib::Response& res) const {
    Backend* b = backend(res);
    if (!b) return;
    CompletionRequest cr;
    if (ApiError e = parse_completion_request(req.body, s.opt_, &cr); !e.ok()) return send_error(res, e);
    std::vector<int32_t> ids;
    if (cr.has_ids) {
      for (size_t i = 0; i < cr.prompt_ids.size(); ++i)
        if (cr.prompt_ids[i] >= b->tok->vocab_size())
          return send_error(res, bad_request("prompt[" + std::to_string(i) + "]: token id " +
                                                 std::to_string(cr.prompt_ids[i]) + " is outside the vocabulary of " +
                                                 std::to_string(b->tok->vocab_size()),
                                             "prompt[" + std::to_string(i) + "]"));
      ids = cr.prompt_ids;
    } else {
      ids = b->tok->encode(cr.prompt_text, /*allow_special=*/true);
      if (ids.empty() || ids.front() != b->bos_id) ids.insert(ids.begin(), b->bos_id);
    }
    int64_t max_tokens = 0;
    if (ApiError e = fit_context(static_cast<int64_t>(ids.size()), cr.max_tokens_explicit ? cr.max_tokens : 0, 16,
                                 b->scheduler->context_limit(), &max_tokens);
        !e.ok()) {
      if (e.param == "messages") e.param = "prompt";
      return send_error(res, e);
    }
    chat::ParserOptions po;
    po.start = chat::ParseStart::kContent;
    po.raw = true;
    po.stop = cr.stop;
    auto job = std::make_shared<GenerationJob>(*b->tok, std::move(po));
    job->prompt = std::move(ids);
    job->max_tokens = max_tokens;
    job->sampler = sampler_options(cr.sampling);
    job->presence_penalty = static_cast<float>(cr.sampling.presence_penalty);
    job->frequency_penalty = static_cast<float>(cr.sampling.frequency_penalty);
    job->eos_id = b->eos_id;
    if (s.opt_.test_scripted_output && cr.has_test_output) {  // TEST ONLY
      job->use_script = true;
      job->scripted = b->tok->encode(cr.test_output, true);
    }
    auto alive = watch_client(req, *job);
    if (ApiError e = submit(*b, job); !e.ok()) return send_error(res, e);
    ResponseHeader h;
    h.id = random_id("cmpl-");
    h.created = unix_now();
    h.model = s.opt_.model_id;
    if (!cr.stream) {
      const GenerationJob::Update u = wait_done(*job);
      alive->store(false);
      if (u.end == JobEnd::kCancelled) {
        if (s.stopping_.load()) return send_error(res, shutting_down());
        res.status = kClientClosed;
        return;
      }
      if (u.end == JobEnd::kError) return send_error(res, internal_error("generation failed: " + u.status.to_string()));
      return send_json(res, completion_json(h, job->parser().content(), u.stats,
                                            chat::finish_reason_name(job->parser().finish_reason())));
    }
    StreamFormat fmt;
    fmt.delta = [h](const chat::Delta& d) {
      return d.kind == chat::Delta::Kind::kContent ? completion_chunk_json(h, d.text, "") : std::string();
    };
    fmt.final = [h](std::string_view finish) { return completion_chunk_json(h, "", finish); };
    if (cr.include_usage)
      fmt.usage = [h](const JobStats& st, int64_t r) { return usage_chunk_json(h, "text_completion", st, r); };
    stream(res, job, alive, std::move(fmt));
  }

  Json model_object() const {
    Backend* b = s.live_.load();
    const int64_t ctx = b ? b->scheduler->context_limit() : s.opt_.ctx;
    Json m;
    m["id"] = s.opt_.model_id;
    m["object"] = "model";
    m["created"] = s.created_;
    m["owned_by"] = "strata";
    m["max_model_len"] = ctx;
    m["context_length"] = ctx;
    return m;
  }

  void models(const httplib::Request&, httplib::Response& res) const {
    Json j;
    j["object"] = "list";
    j["data"] = Json::array({model_object()});
    send_json(res, dump_json(j));
  }

  void model(const httplib::Request& req, httplib::Response& res) const {
    const std::string id = req.matches.size() > 1 ? std::string(req.matches[1]) : "";
    if (id != s.opt_.model_id) return send_error(res, model_not_found(id));
    send_json(res, dump_json(model_object()));
  }

  void health(const httplib::Request&, httplib::Response& res) const {
    Backend* b = s.live_.load();
    if (s.state_.load() == 2 || (b && b->scheduler->model_failures() > 0)) {
      std::lock_guard<std::mutex> l(s.mu_);
      return send_error(res, unavailable("the model backend failed" + (s.failure_.empty() ? "" : ": " + s.failure_),
                                         "unhealthy"));
    }
    if (!b) return send_error(res, unavailable("the model is loading", "model_loading"));
    send_json(res, R"({"status":"ok"})");
  }

  void metrics(const httplib::Request&, httplib::Response& res) const {
    Gauges g;
    if (Backend* b = s.live_.load()) {
      g.running = b->scheduler->running();
      g.waiting = b->scheduler->waiting();
      g.sessions = b->scheduler->sessions();
      const runtime::PrefixCacheStats pc = b->scheduler->prefix_cache_stats();
      g.prefix_cache_entries = pc.entries;
      g.prefix_cache_bytes = pc.bytes;
      g.prefix_cache_lookups = pc.lookups;
      g.prefix_cache_hits = pc.hits;
    }
    res.status = 200;
    res.set_content(s.metrics_.render(g), "text/plain; version=0.0.4");
  }
};

HttpServer::HttpServer(ServerOptions options, const Logger* logger) : opt_(std::move(options)), logger_(logger) {}

HttpServer::~HttpServer() { stop(); }

Status HttpServer::start() {
  STRATA_RETURN_IF_ERROR(opt_.validate());
  if (http_) return InvalidArgument("server already started");
  // DECISION: a write to a client that already left must fail with EPIPE, not kill the process with
  // SIGPIPE (httplib 0.11 sends without MSG_NOSIGNAL). The disposition is process-wide.
  ::signal(SIGPIPE, SIG_IGN);
  created_ = unix_now();
  closer_ = std::make_unique<LingeringCloser>();
  http_ = std::make_unique<httplib::Server>();
  httplib::Server& svr = *http_;
  const size_t threads = opt_.http_threads > 0 ? static_cast<size_t>(opt_.http_threads)
                                               : static_cast<size_t>(std::min(opt_.parallel + opt_.max_queue + 8, 1024));
  svr.new_task_queue = [threads] { return new httplib::ThreadPool(threads); };
  svr.set_payload_max_length(static_cast<size_t>(opt_.body_limit_bytes));
  // DECISION: SO_REUSEADDR only. httplib's default SO_REUSEPORT would let a second `strata serve` on
  // the same port start and silently share its connections; this way it fails with "address in use".
  // TCP_NODELAY (inherited by accepted sockets): httplib writes headers and body separately, and
  // with Nagle + delayed ACK every response after the first on a keep-alive connection waited ~40 ms.
  svr.set_socket_options([](int sock) {
    int yes = 1;
    ::setsockopt(sock, SOL_SOCKET, SO_REUSEADDR, &yes, sizeof yes);
    ::setsockopt(sock, IPPROTO_TCP, TCP_NODELAY, &yes, sizeof yes);
  });
  svr.set_keep_alive_timeout(5);
  svr.set_keep_alive_max_count(1000);  // httplib's 5 closed every fifth keep-alive response
  svr.set_read_timeout(30);
  svr.set_write_timeout(30);

  auto h = std::make_shared<Handlers>(Handlers{*this});
  // Wrap every handler: nothing may escape into httplib (STYLE.md §3.1).
  auto guard = [this, h](void (Handlers::*fn)(const httplib::Request&, httplib::Response&) const) {
    return [this, h, fn](const httplib::Request& req, httplib::Response& res) {
      try {
        ((*h).*fn)(req, res);
      } catch (const std::exception& e) {
        send_error(res, internal_error(std::string("internal error: ") + e.what()));
      }
    };
  };
  // Requests answered before their body is read: a Content-Length that is not a number, a body
  // declared over the limit, a chunked body where none is taken (httplib would buffer it whole),
  // a missing or wrong API key. httplib alone would read and drop the body first, wait for it, or
  // read it all into memory. A body left unread ends the connection (ends_connection, closed by
  // the logger below), so none of it is parsed as a next request.
  auto refuse_early = [this](const httplib::Request& req, httplib::Response& res) {
    const std::optional<int64_t> declared = declared_body_bytes(req);
    const bool has_te = req.has_header("Transfer-Encoding");
    std::string te = req.get_header_value("Transfer-Encoding");
    for (char& ch : te) ch = static_cast<char>(std::tolower(static_cast<unsigned char>(ch)));
    const bool chunked = has_te && te == "chunked";
    const bool body = has_te || declared.value_or(0) != 0;
    // Framing a proxy and httplib could read differently is refused (request smuggling).
    if (has_te && !chunked) {
      send_error(res, ApiError{501, "invalid_request_error",
                               "Transfer-Encoding '" + req.get_header_value("Transfer-Encoding") +
                                   "' is not supported (only chunked)",
                               "", "unsupported_transfer_encoding"});
    } else if (has_te && declared) {
      send_error(res, bad_request("a request may not have both Transfer-Encoding and Content-Length", ""));
    } else if (req.get_header_value_count("Content-Length") > 1) {
      send_error(res, bad_request("a request may not have more than one Content-Length", ""));
    } else if (body && !body_is_read(req)) {
      send_error(res, bad_request(req.method + " requests take no body", ""));
    } else if (declared && *declared < 0) {
      send_error(res, bad_request("Content-Length '" + req.get_header_value("Content-Length") + "' is not a byte count", ""));
    } else if (declared && *declared > opt_.body_limit_bytes) {
      send_error(res, too_large(opt_.body_limit_bytes));
    } else if (chunked && !takes_body(req)) {
      send_error(res, bad_request(req.method + " " + req.path +
                                      " takes no chunked request body (only POST /v1/chat/completions and /v1/completions do)",
                                  ""));
    } else if (!opt_.api_key.empty() && req.path.rfind("/v1/", 0) == 0 &&
               req.get_header_value("Authorization") != "Bearer " + opt_.api_key) {
      send_error(res, ApiError{401, "authentication_error",
                               req.has_header("Authorization") ? "Incorrect API key provided"
                                                               : "Missing API key: send Authorization: Bearer <key>",
                               "", "invalid_api_key"});
      if (!body) return true;  // nothing unread: the connection may go on
    } else {
      return false;
    }
    mark_unread_body(req, res);
    return true;
  };
  // "Expect: 100-continue": the same answers instead of inviting the upload.
  svr.set_expect_100_continue_handler([refuse_early](const httplib::Request& req, httplib::Response& res) {
    return refuse_early(req, res) ? res.status : 100;
  });
  svr.set_pre_routing_handler([refuse_early](const httplib::Request& req, httplib::Response& res) {
    return refuse_early(req, res) ? httplib::Server::HandlerResponse::Handled : httplib::Server::HandlerResponse::Unhandled;
  });
  // POST bodies are read through a cap: httplib 0.11 applies its payload limit to bodies with a
  // Content-Length but reads a chunked body whole, however large.
  auto guard_body = [this, guard](void (Handlers::*fn)(const httplib::Request&, httplib::Response&) const) {
    return [this, handler = guard(fn)](const httplib::Request& req, httplib::Response& res,
                                       const httplib::ContentReader& read) {
      httplib::Request full = req;
      if (req.get_header_value("Content-Type").rfind("multipart/", 0) == 0) {
        send_error(res, ApiError{415, "invalid_request_error", "The request body must be JSON (Content-Type: application/json)",
                                 "", "unsupported_media_type"});
        return mark_unread_body(req, res);
      }
      // HTTP/1.1: a request with neither Content-Length nor Transfer-Encoding has no body (reading
      // would wait for the read timeout).
      if (!req.has_header("Content-Length") && !req.has_header("Transfer-Encoding")) return handler(full, res);
      bool over = false, ok = false;
      try {
        ok = read([&](const char* data, size_t n) {
          if (full.body.size() + n > static_cast<size_t>(opt_.body_limit_bytes)) {
            over = true;
            return false;
          }
          full.body.append(data, n);
          return true;
        });
      } catch (const std::exception& e) {  // nothing may escape into httplib (STYLE.md §3.1)
        send_error(res, internal_error(std::string("reading the request body: ") + e.what()));
        return mark_unread_body(req, res);
      }
      if (over || !ok) {
        send_error(res, over ? too_large(opt_.body_limit_bytes)
                             : bad_request("The request body could not be read (connection closed, read timed out, or "
                                           "malformed chunks)",
                                           ""));
        return mark_unread_body(req, res);
      }
      handler(full, res);
    };
  };
  svr.Post("/v1/chat/completions", guard_body(&Handlers::chat_completions));
  svr.Post("/v1/completions", guard_body(&Handlers::completions));
  svr.Get("/v1/models", guard(&Handlers::models));
  svr.Get(R"(/v1/models/([^/]+))", guard(&Handlers::model));
  svr.Get("/health", guard(&Handlers::health));
  svr.Get("/metrics", guard(&Handlers::metrics));
  // A known path with the wrong method: 405 (§6.6).
  auto not_allowed = [](const httplib::Request& req, httplib::Response& res) {
    send_error(res, ApiError{405, "invalid_request_error", "Method " + req.method + " is not allowed on " + req.path, "",
                             "method_not_allowed"});
  };
  for (const char* p : {"/v1/chat/completions", "/v1/completions"}) {
    svr.Get(p, not_allowed);
    svr.Put(p, not_allowed);
    svr.Delete(p, not_allowed);
    svr.Patch(p, not_allowed);
  }
  for (const char* p : {"/v1/models", R"(/v1/models/([^/]+))", "/health", "/metrics"}) {
    svr.Post(p, not_allowed);
    svr.Put(p, not_allowed);
    svr.Delete(p, not_allowed);
    svr.Patch(p, not_allowed);
  }
  // httplib's own errors (no route, body too large, bad request line) get the OpenAI envelope.
  svr.set_error_handler([](const httplib::Request& req, httplib::Response& res) {
    if (!res.body.empty()) return;
    if (res.status == 404) {
      send_error(res, ApiError{404, "invalid_request_error", "Invalid URL (" + req.method + " " + req.path + ")", "", ""});
    } else if (res.status == 413) {
      send_error(res, ApiError{413, "invalid_request_error", "The request body is larger than the server's limit", "",
                               "request_too_large"});
    } else if (res.status >= 500) {
      send_error(res, internal_error("internal error"));
    } else {
      const int st = res.status;
      send_error(res, ApiError{st, "invalid_request_error",
                               "The HTTP request could not be read (malformed request line or headers, headers too large, or "
                               "a body that does not match its Content-Length)",
                               "", ""});
    }
  });
  // Just before the response is written: it is counted (a client that reads /metrics right after
  // its response finds it there), and a closing response loses the Keep-Alive header httplib
  // added (0.11's set_header appends, so "Connection: close" sits beside it).
  svr.set_post_routing_handler([this](const httplib::Request&, httplib::Response& res) {
    metrics_.count_request(res.status);
    if (res.get_header_value_count("Connection") > 1 || res.get_header_value("Connection") == "close") {
      res.headers.erase("Keep-Alive");
      res.headers.erase("Connection");
      res.headers.emplace("Connection", "close");
    }
  });
  // httplib calls the logger once the response is written: the moment to end a connection whose
  // body was left unread.
  svr.set_logger([this](const httplib::Request& req, const httplib::Response& res) {
    if (take_unread_body(req))
      closer_->hand_over(find_peer_socket(req.local_addr, req.local_port, req.remote_addr, req.remote_port));
    if (logger_ && logger_->enabled(LogLevel::kInfo))
      logger_->info("http method=" + req.method + " path=" + req.path + " status=" + std::to_string(res.status) +
                    " remote=" + req.remote_addr);
  });

  if (opt_.port == 0) {
    port_ = svr.bind_to_any_port(opt_.host);
    if (port_ < 0) port_ = 0;
  } else {
    port_ = svr.bind_to_port(opt_.host, opt_.port) ? opt_.port : 0;
  }
  if (port_ == 0) {
    http_.reset();
    return IOError("cannot listen on " + opt_.host + ":" + std::to_string(opt_.port) +
                   " (address in use, or not an address of this machine)");
  }
  listener_ = std::thread([this] { http_->listen_after_bind(); });
  // httplib's stop() does nothing until the listener has marked itself running; wait for that so a
  // stop() right after start() cannot leave the listener blocked in accept().
  for (int i = 0; i < 5000 && !http_->is_running(); ++i) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  log_to(logger_, LogLevel::kInfo, "listening host=" + opt_.host + " port=" + std::to_string(port_));
  return Status();
}

Status HttpServer::attach(std::unique_ptr<tokenizer::Tokenizer> tokenizer, std::unique_ptr<model::Model> model,
                          std::function<void()> tick) {
  if (live_.load()) return InvalidArgument("a model is already attached");
  for (const std::string_view t : {chat::dsml::kBos, chat::dsml::kEos, chat::dsml::kSystem, chat::dsml::kUser,
                                   chat::dsml::kAssistant, chat::dsml::kThinkOpen, chat::dsml::kThinkClose})
    if (!tokenizer->token_to_id(t))
      return InvalidArgument("tokenizer.json: no token '" + std::string(t) +
                             "'; strata serve needs the DeepSeek V4.1 tokenizer (strata synth writes one)");
  auto b = std::make_unique<Backend>();
  b->eos_id = *tokenizer->token_to_id(chat::dsml::kEos);
  b->bos_id = *tokenizer->token_to_id(chat::dsml::kBos);
  b->tok = std::move(tokenizer);
  b->model = std::move(model);
  SchedulerOptions so;
  so.n_slots = opt_.parallel;
  so.max_queue = opt_.max_queue;
  so.ctx = opt_.ctx;
  so.prefill_chunk = opt_.prefill_chunk;
  so.prefix_cache_bytes = static_cast<uint64_t>(opt_.prefix_cache_mib) << 20;
  so.tick = std::move(tick);
  STRATA_RETURN_IF_ERROR(so.validate());
  b->scheduler = std::make_unique<Scheduler>(*b->model, so, &metrics_);
  {
    std::lock_guard<std::mutex> l(mu_);
    backend_ = std::move(b);
    created_ = unix_now();
    live_.store(backend_.get());
  }
  state_.store(1);
  log_to(logger_, LogLevel::kInfo,
         "ready model=" + opt_.model_id + " ctx=" + std::to_string(live_.load()->scheduler->context_limit()) +
             " parallel=" + std::to_string(opt_.parallel));
  return Status();
}

void HttpServer::set_failed(std::string message) {
  {
    std::lock_guard<std::mutex> l(mu_);
    failure_ = std::move(message);
  }
  state_.store(2);
}

void HttpServer::mark_unread_body(const httplib::Request& req, httplib::Response& res) {
  res.set_header("Connection", "close");
  std::lock_guard<std::mutex> l(unread_mu_);
  unread_body_.insert(connection_key(req));
}

bool HttpServer::take_unread_body(const httplib::Request& req) {
  std::lock_guard<std::mutex> l(unread_mu_);
  return unread_body_.erase(connection_key(req)) > 0;
}

void HttpServer::stop() {
  if (stopping_.exchange(true)) return;
  if (http_) {
    http_->stop();
    if (listener_.joinable()) listener_.join();
  }
  live_.store(nullptr);
  std::unique_ptr<Backend> b;
  {
    std::lock_guard<std::mutex> l(mu_);
    b = std::move(backend_);
  }
  b.reset();
  http_.reset();
  closer_.reset();
}

}  // namespace strata::server
