#include "server/http_server.h"

#include <chrono>
#include <iterator>
#include <random>
#include <utility>

#include "chat/dsml.h"
#include "chat/render.h"
#include "server/anthropic_response.h"
#include "server/chat_request.h"
#include "server/completion_request.h"
#include "server/generation_job.h"
#include "server/http_transport.h"
#include "server/logprobs_json.h"
#include "server/messages_request.h"
#include "server/peer_socket.h"
#include "server/response_store.h"
#include "server/responses.h"
#include "server/responses_output.h"
#include "server/responses_request.h"
#include "server/structured_output.h"
#include "server/web_assets.h"
#include "server/worker_pool.h"

namespace strata::server {

namespace {

using clock_type = std::chrono::steady_clock;

int64_t unix_now() {
  return std::chrono::duration_cast<std::chrono::seconds>(std::chrono::system_clock::now().time_since_epoch()).count();
}

Response json_response(std::string body) {
  Response r;
  r.body = std::move(body);
  return r;
}

// A 499-style status for the metrics of requests whose client left ("client closed request").
constexpr int kClientClosed = 499;

// What a request still running when the server stops gets (503; in a stream, its last event).
ApiError shutting_down() { return unavailable("The server is shutting down; the generation was stopped", "server_shutdown"); }

// Replaces the first `from` in an error's param and message by `to`: a field path of the chat
// request respelled in the API the client used (/v1/messages, /v1/responses).
void respell_path(ApiError* e, std::string_view from, std::string_view to) {
  for (std::string* t : {&e->param, &e->message})
    if (const size_t at = t->find(from); at != std::string::npos) t->replace(at, from.size(), to);
}

// One OpenAI SSE event: "data: <payload>\n\n".
std::string sse_data(const std::string& payload) { return "data: " + payload + "\n\n"; }

// Where the generation suffix begins: the last <｜Assistant｜> of the rendered prompt (the last
// message's assistant prefix, with <think> or </think> after it). An agent's next request
// re-renders this turn differently (reasoning_content dropped, the answer appended) but shares the
// prompt up to here, so a snapshot taken at this position is reused (issue 14 item 6). Empty when
// the prompt holds no such token.
std::vector<int64_t> generation_suffix_start(const std::vector<int32_t>& ids, int32_t assistant_id) {
  for (size_t i = ids.size(); i-- > 0;)
    if (ids[i] == assistant_id) return i > 0 ? std::vector<int64_t>{static_cast<int64_t>(i)} : std::vector<int64_t>{};
  return {};
}

// Logprob reports of a stream waiting for a chunk to carry them: each report goes out once, on the
// first chunk of its kind (content / reasoning) written after its token, or on the last chunk.
// Used by the writer thread alone.
struct PendingLogprobs {
  std::vector<ApiTokenLogprob> content, reasoning;
  int64_t offset = 0;  // completions: characters of the tokens already sent (text_offset)

  void add(GenerationJob::Update& u) {
    std::move(u.logprobs.begin(), u.logprobs.end(), std::back_inserter(content));
    std::move(u.reasoning_logprobs.begin(), u.reasoning_logprobs.end(), std::back_inserter(reasoning));
  }
  // Chat: the logprobs of a chunk carrying `kind` text (null when nothing waits).
  Json chat_for(chat::Delta::Kind kind) {
    if (kind == chat::Delta::Kind::kContent && !content.empty())
      return chat_logprobs_json(std::exchange(content, {}), {});
    if (kind == chat::Delta::Kind::kReasoning && !reasoning.empty())
      return chat_logprobs_json({}, std::exchange(reasoning, {}));
    return Json();
  }
  // Chat: whatever still waits, for the last chunk (null when nothing does).
  Json chat_rest() {
    if (content.empty() && reasoning.empty()) return Json();
    return chat_logprobs_json(std::exchange(content, {}), std::exchange(reasoning, {}));
  }
  // Completions: the waiting tokens' legacy object (null when none), advancing text_offset.
  Json completion_next() {
    if (content.empty()) return Json();
    Json j = completion_logprobs_json(content, offset);
    for (const ApiTokenLogprob& t : content) offset += text_offset_chars(t.token);
    content.clear();
    return j;
  }
};

}  // namespace

struct HttpServer::Backend {
  std::unique_ptr<tokenizer::Tokenizer> tok;
  std::unique_ptr<model::Model> model;
  std::unique_ptr<model::Model> draft;   // --spec draft: the draft model (null otherwise)
  std::unique_ptr<Scheduler> scheduler;  // destroyed first (its thread uses the models)
  int32_t eos_id = 1;
  int32_t bos_id = 0;
  int32_t assistant_id = -1;  // <｜Assistant｜>: where a rendered assistant turn begins
  int32_t think_close_id = -1;  // </think>: a grammar after reasoning starts here
  std::vector<int32_t> end_ids;  // every id the output parser ends a generation on (EOS first)
  std::shared_ptr<const runtime::VocabTrie> vocab;  // every token's bytes, for structured output
  ~Backend() { scheduler.reset(); }
};

// The endpoint handlers: each turns a complete request into its response (a struct of functions
// so http_server.h needs none of the HTTP types).
struct HttpServer::Handlers {
  HttpServer& s;
  // /v1/responses conversations for previous_response_id: in memory, the least recently used
  // dropped first past 4096 responses or 256 MiB of text.
  std::unique_ptr<ResponseStore> stored = std::make_unique<ResponseStore>(4096, uint64_t{256} << 20);

  // The backend, or the 503 that says why there is none (in `dialect`'s envelope).
  Backend* backend(Response* res, ErrorDialect dialect = ErrorDialect::kOpenAI) const {
    Backend* b = s.live_.load();
    if (s.state_.load() == 2 || (b && b->scheduler->model_failures() > 0)) {
      std::lock_guard<std::mutex> l(s.mu_);
      *res = error_response(unavailable("the model backend failed: " +
                                            (s.failure_.empty() ? std::string("a forward pass failed") : s.failure_),
                                        "unhealthy"),
                            dialect);
      return nullptr;
    }
    if (!b) {
      *res = error_response(unavailable("the model is loading; retry when GET /health returns 200", "model_loading"),
                            dialect);
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
  std::shared_ptr<std::atomic<bool>> watch_client(const Request& req, Job& job) const {
    auto alive = std::make_shared<std::atomic<bool>>(true);
    const int fd = req.fd;
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

  // Streams a job as SSE (§6.3; Anthropic's event lifecycle for /v1/messages). Each function
  // returns whole SSE events, written as they are: `first` at once (may be empty); `admitted` once
  // the job has a slot (optional; given the reused prompt tokens); `delta` for one parser delta
  // ("" = nothing); `end` the closing events of a finished job (OpenAI: final chunk, usage,
  // [DONE]); `error` an error event after the first byte (the body ends after it).
  struct StreamFormat {
    std::string first;
    std::shared_ptr<PendingLogprobs> logprobs;  // set: each update's reports are added before its deltas
    std::function<std::string(int64_t cached_tokens)> admitted;
    std::function<std::string(const chat::Delta&)> delta;
    std::function<std::string(const GenerationJob&, const JobStats&)> end;
    std::function<std::string(const ApiError&)> error;
  };
  Response stream(std::shared_ptr<GenerationJob> job, std::shared_ptr<std::atomic<bool>> alive, StreamFormat fmt) const {
    Response res;
    res.content_type = "text/event-stream";
    res.headers.emplace_back("X-Accel-Buffering", "no");
    HttpServer* srv = &s;
    res.stream = [srv, job, alive, fmt = std::move(fmt)](ChunkSink& sink) {
      bool done = false;  // the job ended (else: the client left, cancel it)
      const bool ended = write_events(*srv, *job, fmt, sink, &done);
      alive->store(false);
      if (!done) job->cancel = true;
      return ended;
    };
    return res;
  }

  // The events of one stream; true when the body was ended with its last chunk.
  static bool write_events(HttpServer& srv, GenerationJob& job, const StreamFormat& fmt, ChunkSink& sink, bool* done) {
    if (!fmt.first.empty() && !sink.write(fmt.first)) return false;
    const auto keep_alive = std::chrono::duration<double>(srv.opt_.keep_alive_s);
    auto last_write = clock_type::now();
    bool announced = !fmt.admitted;  // the admitted events were written (or there are none)
    for (;;) {
      const auto wait = std::min<clock_type::duration>(std::chrono::milliseconds(100),
                                                       std::chrono::duration_cast<clock_type::duration>(keep_alive));
      GenerationJob::Update u =
          job.wait(std::chrono::duration_cast<std::chrono::milliseconds>(wait) + std::chrono::milliseconds(1));
      if (!announced && u.admitted) {
        announced = true;
        if (!sink.write(fmt.admitted(u.cached_tokens))) return false;
        last_write = clock_type::now();
      }
      if (fmt.logprobs) fmt.logprobs->add(u);
      for (const chat::Delta& d : u.deltas) {
        const std::string events = fmt.delta(d);
        if (events.empty()) continue;
        if (!sink.write(events)) return false;
        last_write = clock_type::now();
      }
      if (u.finished) {
        srv.metrics_.reasoning_tokens += static_cast<uint64_t>(job.reasoning_tokens());
        *done = true;
        if (u.end == JobEnd::kCancelled) return false;
        if (u.end == JobEnd::kError) {
          // After the first byte an error is an event, and the stream ends without [DONE].
          sink.write(fmt.error(from_status(u.status.ok() ? Internal("generation failed") : u.status)));
          return sink.done();
        }
        if (!sink.write(fmt.end(job, u.stats))) return false;
        return sink.done();
      }
      // While queued or prefilling, a comment every keep_alive_s keeps proxies and clients waiting.
      if (!u.first_token && clock_type::now() - last_write >= keep_alive) {
        if (!sink.write(": keep-alive\n\n")) return false;
        last_write = clock_type::now();
      }
      if (job.client_gone && job.client_gone()) return false;
      if (srv.stopping_.load()) {
        // The server stops (SIGINT/SIGTERM): end the stream as an error event with a closed body,
        // so clients see why instead of a cut connection (§6.3 errors after the first byte).
        job.cancel = true;
        *done = true;
        sink.write(fmt.error(shutting_down()));
        return sink.done();
      }
    }
  }

  // A chat-path request that was submitted: its job, the flag that ties it to the client's socket,
  // and the prompt's length.
  struct ChatJob {
    std::shared_ptr<GenerationJob> job;
    std::shared_ptr<std::atomic<bool>> alive;
    int64_t prompt_tokens = 0;
  };

  // The one chat path, for /v1/chat/completions and /v1/messages alike: renders the conversation,
  // fits max_tokens to the context, sets up the output parser and submits the job. `make_call_id`
  // (may be empty: the parser's call_ ids) names parsed tool calls.
  ApiError start_chat_job(Backend& b, const Request& req, const ChatRequest& cr,
                          std::function<std::string()> make_call_id, ChatJob* out) const {
    RequestGrammar rg;
    if (ApiError e = request_grammar(cr.render, &rg); !e.ok()) return e;
    if (ApiError e = check_logit_bias(cr.sampling, b.tok->vocab_size()); !e.ok()) return e;
    auto rendered = chat::render_conversation(*b.tok, cr.messages, cr.render);
    if (!rendered.ok()) return from_status(rendered.error());
    int64_t max_tokens = 0;
    const int64_t P = static_cast<int64_t>(rendered->ids.size());
    if (ApiError e = fit_context(P, cr.max_tokens, cr.render.thinking ? 65536 : 8192, b.scheduler->context_limit(),
                                 &max_tokens);
        !e.ok())
      return e;
    chat::ParserOptions po;
    po.start = rendered->start;
    po.tools = rendered->tools_rendered;
    po.forced_tool = rendered->forced_tool;
    // DECISION: with a grammar (response_format json_schema / json_object, a forced tool call) stop
    // strings are not applied: the grammar ends the output, and a stop string could only cut the
    // document short and return invalid JSON with finish_reason "stop" (docs/serving.md#structured-output).
    if (!rg.grammar) po.stop = cr.stop;
    po.parallel_tool_calls = cr.parallel_tool_calls;
    po.make_call_id = std::move(make_call_id);
    auto job = std::make_shared<GenerationJob>(*b.tok, std::move(po));
    job->snapshot_at = generation_suffix_start(rendered->ids, b.assistant_id);
    job->prompt = std::move(rendered->ids);
    job->max_tokens = max_tokens;
    job->sampler = sampler_options(cr.sampling);
    job->presence_penalty = static_cast<float>(cr.sampling.presence_penalty);
    job->logit_bias = cr.sampling.logit_bias;
    job->frequency_penalty = static_cast<float>(cr.sampling.frequency_penalty);
    job->logprobs = cr.logprobs;
    job->eos_id = b.eos_id;
    if (rg.grammar)
      job->constraint = std::make_shared<runtime::GrammarConstraint>(
          rg.grammar, b.vocab, std::vector<int32_t>{b.eos_id}, rg.after_thinking ? b.think_close_id : -1, b.end_ids);
    if (s.opt_.test_scripted_output && cr.has_test_output) {  // TEST ONLY
      job->use_script = true;
      job->scripted = b.tok->encode(cr.test_output, /*allow_special=*/true);
    }
    auto alive = watch_client(req, *job);
    if (ApiError e = submit(b, job); !e.ok()) return e;
    *out = ChatJob{std::move(job), std::move(alive), P};
    return {};
  }

  // Waits for a non-streaming job. False when it did not finish normally: *res is then the answer
  // (a 503 when the server stops, a bare 499 close when the client left, 500 on a model failure).
  bool wait_result(GenerationJob& job, std::atomic<bool>& alive, ErrorDialect dialect, GenerationJob::Update* u,
                   Response* res) const {
    *u = wait_done(job);
    alive.store(false);
    finished_metrics(job);
    if (u->end == JobEnd::kCancelled) {
      if (s.stopping_.load()) {
        *res = error_response(shutting_down(), dialect);
      } else {
        res->status = kClientClosed;
        res->close = true;
      }
      return false;
    }
    if (u->end == JobEnd::kError) {
      *res = error_response(internal_error("generation failed: " + u->status.to_string()), dialect);
      return false;
    }
    return true;
  }

  Response chat_completions(const Request& req) const {
    Response res;
    Backend* b = backend(&res);
    if (!b) return res;
    ChatRequest cr;
    if (ApiError e = parse_chat_request(req.body, s.opt_, &cr); !e.ok()) return error_response(e);
    ChatJob cj;
    if (ApiError e = start_chat_job(*b, req, cr, {}, &cj); !e.ok()) return error_response(e);

    ResponseHeader h;
    h.id = random_id("chatcmpl-");
    h.created = unix_now();
    h.model = s.opt_.model_id;
    h.reasoning_field = s.opt_.reasoning_field;
    h.thinking = cr.render.thinking;

    if (!cr.stream) {
      GenerationJob::Update u;
      if (!wait_result(*cj.job, *cj.alive, ErrorDialect::kOpenAI, &u, &res)) return res;
      const std::string_view finish = chat::finish_reason_name(cj.job->parser().finish_reason());
      const Json logprobs = cr.logprobs >= 0
                                ? chat_logprobs_json(cj.job->content_logprobs(), cj.job->reasoning_logprobs())
                                : Json();
      return json_response(
          chat_completion_json(h, cj.job->parser(), u.stats, cj.job->reasoning_tokens(), finish, logprobs));
    }
    StreamFormat fmt;
    if (cr.logprobs >= 0) fmt.logprobs = std::make_shared<PendingLogprobs>();
    fmt.first = sse_data(chat_chunk_json(h, Json{{"role", "assistant"}, {"content", ""}}, ""));
    fmt.delta = [h, lp = fmt.logprobs](const chat::Delta& d) {
      return sse_data(chat_chunk_json(h, chunk_delta(h, d), "", lp ? lp->chat_for(d.kind) : Json()));
    };
    fmt.end = [h, usage = cr.include_usage, lp = fmt.logprobs](const GenerationJob& j, const JobStats& st) {
      const std::string_view finish = chat::finish_reason_name(j.parser().finish_reason());
      std::string out = sse_data(chat_chunk_json(h, Json::object(), finish, lp ? lp->chat_rest() : Json()));
      if (usage) out += sse_data(usage_chunk_json(h, "chat.completion.chunk", st, j.reasoning_tokens()));
      return out + "data: [DONE]\n\n";
    };
    fmt.error = [](const ApiError& e) { return sse_data(e.to_json()); };
    return stream(cj.job, cj.alive, std::move(fmt));
  }

  // POST /v1/messages (Anthropic): translated into a ChatRequest and run on the chat path; only the
  // response shape (server/anthropic_response.h) and the error envelope differ.
  Response messages(const Request& req) const {
    constexpr ErrorDialect kAnthropic = ErrorDialect::kAnthropic;
    Response res;
    Backend* b = backend(&res, kAnthropic);
    if (!b) return res;
    ChatRequest cr;
    if (ApiError e = parse_messages_request(req.body, s.opt_, MessagesRoute::kCreate, &cr); !e.ok())
      return error_response(e, kAnthropic);
    ChatJob cj;
    if (ApiError e = start_chat_job(*b, req, cr, [] { return random_id("toolu_"); }, &cj); !e.ok()) {
      respell_path(&e, ".function.parameters", ".input_schema");  // a schema error: Anthropic's field
      return error_response(e, kAnthropic);
    }
    const AnthropicHeader h{random_id("msg_"), cr.model};  // the request's model name, as Anthropic echoes it
    if (!cr.stream) {
      GenerationJob::Update u;
      if (!wait_result(*cj.job, *cj.alive, kAnthropic, &u, &res)) return res;
      return json_response(anthropic_message_json(h, cj.job->parser(), u.stats));
    }
    auto events = std::make_shared<AnthropicStream>(h);
    StreamFormat fmt;
    fmt.admitted = [events, P = cj.prompt_tokens](int64_t cached) { return events->start(P, cached); };
    fmt.delta = [events](const chat::Delta& d) { return events->delta(d); };
    fmt.end = [events](const GenerationJob& j, const JobStats& st) { return events->finish(j.parser(), st); };
    fmt.error = [](const ApiError& e) { return AnthropicStream::error(e); };
    return stream(cj.job, cj.alive, std::move(fmt));
  }

  // POST /v1/responses (OpenAI Responses API): translated into a ChatRequest (after the stored
  // conversation of previous_response_id) and run on the chat path; the conversation it ends is
  // stored under the new response's id (unless "store": false).
  Response responses(const Request& req) const {
    Response res;
    Backend* b = backend(&res);
    if (!b) return res;
    ResponsesRequest rr;
    if (ApiError e = parse_responses_request(req.body, s.opt_, &rr); !e.ok()) return error_response(e);
    std::vector<chat::Message> history;
    if (!rr.previous_response_id.empty()) {
      auto h = stored->get(rr.previous_response_id);
      if (!h)
        return error_response(ApiError{404, "invalid_request_error",
                                       "previous_response_id: no response '" + rr.previous_response_id +
                                           "' is stored (responses are kept in memory while the server runs, the "
                                           "least recently used dropped first)",
                                       "previous_response_id", "previous_response_not_found"});
      history = std::move(*h);
    }
    if (ApiError e = assemble_responses_conversation(history, &rr); !e.ok()) return error_response(e);
    ChatJob cj;
    if (ApiError e = start_chat_job(*b, req, rr.chat, {}, &cj); !e.ok()) {
      if (e.param == "messages") e.param = "input";
      if (e.param == "max_tokens") e.param = "max_output_tokens";
      respell_path(&e, "response_format.json_schema.schema", "text.format.schema");  // schema errors
      respell_path(&e, ".function.parameters", ".parameters");
      return error_response(e);
    }
    const ResponsesHeader h{random_id("resp_"), unix_now(), s.opt_.model_id, rr.echo};
    // What a later previous_response_id continues: history + input + this output (no instructions).
    auto conversation = std::make_shared<std::vector<chat::Message>>(std::move(history));
    conversation->insert(conversation->end(), rr.input.begin(), rr.input.end());
    auto remember = [store = stored.get(), id = h.id, keep = rr.store, conversation](const chat::OutputParser& p,
                                                                                     std::string response) {
      if (!keep) return;
      conversation->push_back(responses_output_message(p));
      store->put(id, std::move(*conversation), std::move(response));
    };
    if (!rr.chat.stream) {
      GenerationJob::Update u;
      if (!wait_result(*cj.job, *cj.alive, ErrorDialect::kOpenAI, &u, &res)) return res;
      std::string body = responses_json(h, cj.job->parser(), u.stats, cj.job->reasoning_tokens());
      remember(cj.job->parser(), body);
      return json_response(std::move(body));
    }
    auto events = std::make_shared<ResponsesStream>(h);
    StreamFormat fmt;
    fmt.first = events->start();
    fmt.delta = [events](const chat::Delta& d) { return events->delta(d); };
    fmt.end = [events, remember](const GenerationJob& j, const JobStats& st) {
      std::string out = events->finish(j.parser(), st, j.reasoning_tokens());
      remember(j.parser(), events->final_response());
      return out;
    };
    fmt.error = [events](const ApiError& e) { return events->error(e); };
    return stream(cj.job, cj.alive, std::move(fmt));
  }

  // GET /v1/responses/{id}: the stored response object; DELETE: drops it ({"id", "object":
  // "response", "deleted": true}, as OpenAI answers). 404 for an id that is not (or no longer) stored.
  Response stored_response(const Request& req) const {
    const std::string id = req.path.substr(std::string_view("/v1/responses/").size());
    auto not_found = [&] {
      return error_response(ApiError{404, "invalid_request_error",
                                     "No response with id '" + id +
                                         "' is stored (responses are kept in memory while the server runs, the "
                                         "least recently used dropped first; \"store\": false keeps none)",
                                     "", "not_found"});
    };
    if (req.method == "DELETE") {
      if (!stored->erase(id)) return not_found();
      return json_response(dump_json(Json{{"id", id}, {"object", "response"}, {"deleted", true}}));
    }
    auto r = stored->get_response(id);
    if (!r || r->empty()) return not_found();
    return json_response(std::move(*r));
  }

  // POST /v1/messages/count_tokens: the prompt the same body would render, counted.
  Response count_tokens(const Request& req) const {
    constexpr ErrorDialect kAnthropic = ErrorDialect::kAnthropic;
    Response res;
    Backend* b = backend(&res, kAnthropic);
    if (!b) return res;
    ChatRequest cr;
    if (ApiError e = parse_messages_request(req.body, s.opt_, MessagesRoute::kCountTokens, &cr); !e.ok())
      return error_response(e, kAnthropic);
    auto rendered = chat::render_conversation(*b->tok, cr.messages, cr.render);
    if (!rendered.ok()) return error_response(from_status(rendered.error()), kAnthropic);
    return json_response(anthropic_count_tokens_json(static_cast<int64_t>(rendered->ids.size())));
  }

  Response completions(const Request& req) const {
    Response res;
    Backend* b = backend(&res);
    if (!b) return res;
    CompletionRequest cr;
    if (ApiError e = parse_completion_request(req.body, s.opt_, &cr); !e.ok()) return error_response(e);
    std::vector<int32_t> ids;
    if (cr.has_ids) {
      for (size_t i = 0; i < cr.prompt_ids.size(); ++i)
        if (cr.prompt_ids[i] >= b->tok->vocab_size())
          return error_response(bad_request("prompt[" + std::to_string(i) + "]: token id " +
                                                 std::to_string(cr.prompt_ids[i]) + " is outside the vocabulary of " +
                                                 std::to_string(b->tok->vocab_size()),
                                             "prompt[" + std::to_string(i) + "]"));
      ids = cr.prompt_ids;
    } else {
      ids = b->tok->encode(cr.prompt_text, /*allow_special=*/true);
      if (ids.empty() || ids.front() != b->bos_id) ids.insert(ids.begin(), b->bos_id);
    }
    if (ApiError e = check_logit_bias(cr.sampling, b->tok->vocab_size()); !e.ok()) return error_response(e);
    int64_t max_tokens = 0;
    if (ApiError e = fit_context(static_cast<int64_t>(ids.size()), cr.max_tokens_explicit ? cr.max_tokens : 0, 16,
                                 b->scheduler->context_limit(), &max_tokens);
        !e.ok()) {
      if (e.param == "messages") e.param = "prompt";
      return error_response(e);
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
    job->logit_bias = cr.sampling.logit_bias;
    job->frequency_penalty = static_cast<float>(cr.sampling.frequency_penalty);
    job->logprobs = cr.logprobs;
    job->eos_id = b->eos_id;
    if (s.opt_.test_scripted_output && cr.has_test_output) {  // TEST ONLY
      job->use_script = true;
      job->scripted = b->tok->encode(cr.test_output, true);
    }
    auto alive = watch_client(req, *job);
    if (ApiError e = submit(*b, job); !e.ok()) return error_response(e);
    ResponseHeader h;
    h.id = random_id("cmpl-");
    h.created = unix_now();
    h.model = s.opt_.model_id;
    if (!cr.stream) {
      const GenerationJob::Update u = wait_done(*job);
      alive->store(false);
      if (u.end == JobEnd::kCancelled) {
        if (s.stopping_.load()) return error_response(shutting_down());
        res.status = kClientClosed;
        res.close = true;
        return res;
      }
      if (u.end == JobEnd::kError) return error_response(internal_error("generation failed: " + u.status.to_string()));
      return json_response(completion_json(h, job->parser().content(), u.stats,
                                            chat::finish_reason_name(job->parser().finish_reason()),
                                            cr.logprobs >= 0 ? completion_logprobs_json(job->content_logprobs(), 0)
                                                             : Json()));
    }
    StreamFormat fmt;
    if (cr.logprobs >= 0) fmt.logprobs = std::make_shared<PendingLogprobs>();
    fmt.delta = [h, lp = fmt.logprobs](const chat::Delta& d) {
      if (d.kind != chat::Delta::Kind::kContent) return std::string();
      return sse_data(completion_chunk_json(h, d.text, "", lp ? lp->completion_next() : Json()));
    };
    fmt.end = [h, usage = cr.include_usage, lp = fmt.logprobs](const GenerationJob& j, const JobStats& st) {
      std::string out = sse_data(completion_chunk_json(h, "", chat::finish_reason_name(j.parser().finish_reason()),
                                                       lp ? lp->completion_next() : Json()));
      if (usage) out += sse_data(usage_chunk_json(h, "text_completion", st, j.reasoning_tokens()));
      return out + "data: [DONE]\n\n";
    };
    fmt.error = [](const ApiError& e) { return sse_data(e.to_json()); };
    return stream(job, alive, std::move(fmt));
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

  Response models(const Request&) const {
    Json j;
    j["object"] = "list";
    j["data"] = Json::array({model_object()});
    return json_response(dump_json(j));
  }

  Response model(const Request& req) const {
    const std::string id = req.path.substr(std::string_view("/v1/models/").size());
    if (id != s.opt_.model_id) return error_response(model_not_found(id));
    return json_response(dump_json(model_object()));
  }

  Response health(const Request&) const {
    Backend* b = s.live_.load();
    if (s.state_.load() == 2 || (b && b->scheduler->model_failures() > 0)) {
      std::lock_guard<std::mutex> l(s.mu_);
      return error_response(unavailable("the model backend failed" + (s.failure_.empty() ? "" : ": " + s.failure_),
                                         "unhealthy"));
    }
    if (!b) return error_response(unavailable("the model is loading", "model_loading"));
    return json_response(R"({"status":"ok"})");
  }

  // GET / (and /index.html, /chat.js, /chat.css): the chat page, embedded in the binary. The page
  // loads nothing from elsewhere, which its Content-Security-Policy enforces; no-cache makes the
  // browser ask again each time, so an upgraded binary's page is never mixed with an old script.
  Response page(const Request& req) const {
    const WebAsset* a = find_web_asset(req.path);
    Response res;
    res.content_type = a->content_type;
    res.body = std::string(a->body);
    res.headers.emplace_back("Cache-Control", "no-cache");
    res.headers.emplace_back("Content-Security-Policy", std::string(kWebContentSecurityPolicy));
    res.headers.emplace_back("X-Content-Type-Options", "nosniff");
    res.headers.emplace_back("Referrer-Policy", "no-referrer");
    return res;
  }

  Response metrics(const Request&) const {
    Gauges g;
    if (Backend* b = s.live_.load()) {
      g.running = b->scheduler->running();
      g.waiting = b->scheduler->waiting();
      g.sessions = b->scheduler->sessions();
      g.kv_bytes = b->scheduler->kv_bytes();
      const runtime::PrefixCacheStats pc = b->scheduler->prefix_cache_stats();
      g.prefix_cache_entries = pc.entries;
      g.prefix_cache_bytes = pc.bytes;
      g.prefix_cache_lookups = pc.lookups;
      g.prefix_cache_hits = pc.hits;
    }
    Response res;
    res.content_type = "text/plain; version=0.0.4";
    res.body = s.metrics_.render(g);
    return res;
  }
};

HttpServer::HttpServer(ServerOptions options, const Logger* logger) : opt_(std::move(options)), logger_(logger) {}

HttpServer::~HttpServer() { stop(); }

Status HttpServer::start() {
  STRATA_RETURN_IF_ERROR(opt_.validate());
  if (http_) return InvalidArgument("server already started");
  created_ = unix_now();
  handlers_ = std::make_shared<Handlers>(Handlers{*this});
  // Every waiting stream holds a worker (it writes its events), so the default is one per slot and
  // queue place, plus a few for requests being parsed.
  const int threads = opt_.http_threads > 0 ? opt_.http_threads : std::min(opt_.parallel + opt_.max_queue + 8, 1024);
  TransportOptions t;
  t.host = opt_.host;
  t.port = opt_.port;
  t.max_connections = opt_.max_connections;
  t.header_limit_bytes = opt_.header_limit_kib << 10;
  auto ms = [](double s) { return std::chrono::milliseconds(static_cast<int64_t>(s * 1000)); };
  t.header_timeout = ms(opt_.header_timeout_s);
  t.keep_alive_timeout = ms(opt_.keepalive_timeout_s);
  t.body_timeout = ms(opt_.body_timeout_s);
  t.write_timeout = ms(opt_.write_timeout_s);
  t.policy.body_limit_bytes = opt_.body_limit_bytes;
  t.body_memory_limit_bytes = std::max(opt_.body_memory_mib << 20, opt_.body_limit_bytes);  // one body always fits
  t.policy.api_key = opt_.api_key;
  t.policy.max_header_fields = opt_.max_header_fields;
  http_ = std::make_unique<HttpTransport>(
      std::move(t), [this](Request req, std::shared_ptr<Exchange> ex) { dispatch(std::move(req), std::move(ex)); },
      [this](const Request& req, int status) {
        // Counted before the response is written: a client that reads /metrics right after its
        // response finds it there.
        metrics_.count_request(status);
        if (logger_ && logger_->enabled(LogLevel::kInfo))
          logger_->info("http method=" + req.method + " path=" + req.path + " status=" + std::to_string(status) +
                        " remote=" + req.remote);
      });
  if (Status st = http_->start(); !st.ok()) {
    http_.reset();
    return st;
  }
  port_ = http_->port();
  workers_ = std::make_unique<WorkerPool>(threads);
  log_to(logger_, LogLevel::kInfo, "listening host=" + opt_.host + " port=" + std::to_string(port_));
  return Status();
}

void HttpServer::dispatch(Request req, std::shared_ptr<Exchange> ex) {
  using Handler = Response (Handlers::*)(const Request&) const;
  const std::string& p = req.path;
  Handler fn = nullptr;
  const char* method = "GET";
  bool generates = false;  // runs on a worker (parses, renders, waits for the model)
  if (p == "/v1/chat/completions" || p == "/v1/completions") {
    fn = p == "/v1/completions" ? &Handlers::completions : &Handlers::chat_completions;
    method = "POST";
    generates = true;
  } else if (p == "/v1/responses") {
    fn = &Handlers::responses;
    method = "POST";
    generates = true;
  } else if (p.rfind("/v1/responses/", 0) == 0 && p.size() > 14 && p.find('/', 14) == std::string::npos) {
    fn = &Handlers::stored_response;
    method = req.method == "DELETE" ? "DELETE" : "GET";
  } else if (p == "/v1/messages" || p == "/v1/messages/count_tokens") {
    fn = p == "/v1/messages" ? &Handlers::messages : &Handlers::count_tokens;
    method = "POST";
    generates = true;  // count_tokens renders and tokenizes: a worker's job too
  } else if (p == "/v1/models") {
    fn = &Handlers::models;
  } else if (p.rfind("/v1/models/", 0) == 0 && p.size() > 11 && p.find('/', 11) == std::string::npos) {
    fn = &Handlers::model;
  } else if (p == "/health") {
    fn = &Handlers::health;
  } else if (p == "/metrics") {
    fn = &Handlers::metrics;
  } else if (find_web_asset(p)) {
    fn = &Handlers::page;
  }
  const ErrorDialect dialect = error_dialect(p);
  if (p == "/favicon.ico" && (req.method == "GET" || req.method == "HEAD")) {  // browsers ask; no icon: 204
    Response none;
    none.status = 204;
    none.content_type.clear();
    return ex->respond(std::move(none));
  }
  if (!fn)
    return ex->respond(error_response(
        ApiError{404, "invalid_request_error", "Invalid URL (" + req.method + " " + p + ")", "", ""}, dialect));
  // A known path with the wrong method: 405 (§6.6).
  // HEAD is answered as GET; the transport leaves the body out (RFC 9110 §9.3.2).
  if (req.method != method && !(req.method == "HEAD" && std::string_view(method) == "GET")) {
    Response r = error_response(ApiError{405, "invalid_request_error",
                                         "Method " + req.method + " is not allowed on " + p, "", "method_not_allowed"},
                                dialect);
    // RFC 9110 §15.5.6: a 405 lists the methods the path supports.
    const bool stored = fn == &Handlers::stored_response;
    r.headers.emplace_back("Allow", std::string_view(method) == "POST" ? "POST" : stored ? "GET, HEAD, DELETE" : "GET, HEAD");
    return ex->respond(std::move(r));
  }
  // Wrapped: nothing may escape into the transport (STYLE.md §3.1).
  auto run = [h = handlers_, fn, dialect](const Request& r) {
    try {
      return ((*h).*fn)(r);
    } catch (const std::exception& e) {
      return error_response(internal_error(std::string("internal error: ") + e.what()), dialect);
    }
  };
  // /health, /metrics and /v1/models are answered here on the I/O thread: they stay answerable
  // while every worker waits on a generation.
  if (!generates) return ex->respond(run(req));
  if (stopping_.load()) return ex->respond(error_response(shutting_down(), dialect));
  workers_->post([run, req = std::move(req), ex = std::move(ex)] { ex->respond(run(req)); });
}

Status HttpServer::attach(std::unique_ptr<tokenizer::Tokenizer> tokenizer, std::unique_ptr<model::Model> model,
                          std::function<void()> tick, std::unique_ptr<model::Model> draft) {
  if (live_.load()) return InvalidArgument("a model is already attached");
  for (const std::string_view t : {chat::dsml::kBos, chat::dsml::kEos, chat::dsml::kSystem, chat::dsml::kUser,
                                   chat::dsml::kAssistant, chat::dsml::kThinkOpen, chat::dsml::kThinkClose})
    if (!tokenizer->token_to_id(t))
      return InvalidArgument("tokenizer.json: no token '" + std::string(t) +
                             "'; strata serve needs the DeepSeek V4.1 tokenizer (strata synth writes one)");
  auto b = std::make_unique<Backend>();
  b->eos_id = *tokenizer->token_to_id(chat::dsml::kEos);
  b->bos_id = *tokenizer->token_to_id(chat::dsml::kBos);
  b->assistant_id = *tokenizer->token_to_id(chat::dsml::kAssistant);
  b->think_close_id = *tokenizer->token_to_id(chat::dsml::kThinkClose);
  for (const std::string_view t : {chat::dsml::kEos, chat::dsml::kBos, chat::dsml::kSystem, chat::dsml::kUser,
                                   chat::dsml::kAssistant})
    b->end_ids.push_back(*tokenizer->token_to_id(t));
  // Built once (~0.1 s on the 129K vocabulary); every constrained request walks it.
  b->vocab = std::make_shared<const runtime::VocabTrie>(grammar_token_bytes(*tokenizer));
  b->tok = std::move(tokenizer);
  b->model = std::move(model);
  SchedulerOptions so;
  so.n_slots = opt_.parallel;
  so.max_queue = opt_.max_queue;
  so.ctx = opt_.ctx;
  so.prefill_chunk = opt_.prefill_chunk;
  so.batch_tokens = opt_.batch_tokens;
  so.prefix_cache_bytes = static_cast<uint64_t>(opt_.prefix_cache_mib) << 20;
  so.slot_undo = opt_.slot_undo;
  so.spec = opt_.spec;
  if (so.spec.mode == runtime::SpecMode::kDSpark && !b->model->has_dspark())
    return NotSupported("--spec dspark: the checkpoint has no DSpark draft stages");
  if (so.spec.mode == runtime::SpecMode::kDraft && !draft)
    return InvalidArgument("--spec draft: no draft model (--draft-model)");
  b->draft = std::move(draft);
  so.spec.draft_model = b->draft.get();
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
             " parallel=" + std::to_string(opt_.parallel) + " batch_tokens=" + std::to_string(opt_.batch_tokens));
  return Status();
}

void HttpServer::set_failed(std::string message) {
  {
    std::lock_guard<std::mutex> l(mu_);
    failure_ = std::move(message);
  }
  state_.store(2);
}

void HttpServer::stop() {
  if (stopping_.exchange(true)) return;
  // Idle connections close now; requests in progress see stopping_ (generations end with 503
  // server_shutdown) and their connections close after the response.
  if (http_) http_->stop_accepting();
  if (workers_) workers_->join();
  if (http_) http_->stop();
  live_.store(nullptr);
  std::unique_ptr<Backend> b;
  {
    std::lock_guard<std::mutex> l(mu_);
    b = std::move(backend_);
  }
  b.reset();
  http_.reset();
  workers_.reset();
}

}  // namespace strata::server
