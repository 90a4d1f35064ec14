// strata serve -m DIR [--host 127.0.0.1] [--port 8000] [--api-key K] [--parallel N] [-c|--ctx N] ...
// The OpenAI-compatible server (server/http_server.h; chat-and-api.md §6). It listens at once
// (/health answers 503 model_loading), loads the checkpoint on a second thread, then serves until
// SIGINT or SIGTERM, which stop it cleanly (running generations are cancelled).
#include <CLI/CLI.hpp>
#include <signal.h>
#include <pthread.h>

#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <mutex>
#include <string>
#include <thread>

#include "cli/commands.h"
#include "cli/common.h"
#include "cli/mpi_flags.h"
#include "cli/placement_flags.h"
#include "cli/spec_flags.h"
#include "server/http_server.h"
#include "store/placement_stats.h"

namespace strata::cli {

namespace {

struct ServeFlags {
  std::string model_dir;
  server::ServerOptions opt;
  std::string effort_table = "official";
  std::string reasoning_field = "reasoning_content";
  double body_limit_mib = 64;
  int threads = 0;
  bool verbose = false;
  PlacementFlags placement;
  MpiFlags mpi;
  SpecFlags spec;
};

// Storage counters for /metrics, snapshotted on the model thread (the store is not read elsewhere).
struct StoreMetrics {
  std::mutex mu;
  store::PlacementStats last;
  std::string render() {
    store::PlacementStats s;
    {
      std::lock_guard<std::mutex> l(mu);
      s = last;
    }
    std::string out;
    auto put = [&](const char* name, const char* type, const char* help, double v) {
      char b[64];
      std::snprintf(b, sizeof b, "%.9g", v);
      out += std::string("# HELP ") + name + " " + help + "\n# TYPE " + name + " " + type + "\n" + name + " " + b + "\n";
    };
    put("strata_store_bytes_read_total", "counter", "Bytes read from storage for experts and Engram rows.",
        double(s.bytes_read()));
    put("strata_store_os_read_bytes_total", "counter", "Bytes the kernel read from storage for this process.",
        double(s.os_read_bytes));
    put("strata_expert_cache_hit_rate", "gauge", "Routed-expert acquires served from RAM.", s.expert_hit_rate());
    put("strata_engram_row_cache_hit_rate", "gauge", "Unique Engram rows served by the row cache.",
        s.engram_cache_hit_rate());
    put("strata_store_io_wait_seconds_total", "counter", "Time the forward pass waited on reads.",
        double(s.io_wait_ns()) * 1e-9);
    put("strata_engram_fetch_seconds_total", "counter",
        "Engram row fetches, from start until their rows were in RAM, summed over fetches.",
        double(s.engram_fetch_ns) * 1e-9);
    put("strata_engram_wait_seconds_total", "counter", "Time the forward pass waited on Engram reads.",
        double(s.engram_wait_ns) * 1e-9);
    return out;
  }
};

int run_serve(ServeFlags& f) {
  if (f.effort_table == "official") {
    f.opt.effort_table = server::EffortTable::kOfficial;
  } else if (f.effort_table == "vllm") {
    f.opt.effort_table = server::EffortTable::kVllm;
  } else {
    return fail_usage(InvalidArgument("--effort-table: expected official or vllm, got '" + f.effort_table + "'"));
  }
  if (f.reasoning_field == "reasoning_content") {
    f.opt.reasoning_field = server::ReasoningField::kReasoningContent;
  } else if (f.reasoning_field == "reasoning") {
    f.opt.reasoning_field = server::ReasoningField::kReasoning;
  } else if (f.reasoning_field == "both") {
    f.opt.reasoning_field = server::ReasoningField::kBoth;
  } else {
    return fail_usage(InvalidArgument("--reasoning-field: expected reasoning_content, reasoning or both, got '" +
                                      f.reasoning_field + "'"));
  }
  f.opt.body_limit_bytes = static_cast<int64_t>(f.body_limit_mib * 1024 * 1024);
  auto spec = spec_options(f.spec);
  if (!spec.ok()) return fail_usage(spec.error());
  f.opt.spec = *spec;
  if (Status s = f.opt.validate(); !s.ok()) return fail(s);
  auto placement = placement_options(f.placement);
  if (!placement.ok()) return fail_flag_value(placement.error());
  // A server batches sessions and keeps a prefix cache: every cache operation would have to be
  // forwarded to the stages (docs/distributed.md).
  if (Status s = check_mpi_flags(f.mpi, "serve (several sessions, prefix cache; use logits, run or bench)"); !s.ok())
    return fail_usage(s);
  // With --mpi, ranks 1.. serve experts here until rank 0 ends; rank 0's job outlives the server.
  auto role = start_mpi(f.mpi, f.model_dir, f.threads, *placement);
  if (!role.ok()) return fail_flag_value(role.error());
  if (role->served) return 0;

  // SIGINT/SIGTERM are blocked in every thread and taken by sigwait below.
  sigset_t sigs;
  sigemptyset(&sigs);
  sigaddset(&sigs, SIGINT);
  sigaddset(&sigs, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &sigs, nullptr);

  Logger log = stderr_logger(f.verbose ? LogLevel::kInfo : LogLevel::kWarn);
  server::HttpServer srv(f.opt, &log);
  if (Status s = srv.start(); !s.ok()) return fail(s);
  std::fprintf(stderr, "strata serve: listening on http://%s:%d (loading %s)\n", f.opt.host.c_str(), srv.port(),
               f.model_dir.c_str());

  auto store_metrics = std::make_shared<StoreMetrics>();
  std::atomic<bool> loaded{false}, load_failed{false};
  std::thread loader([&] {
    auto lm = load_model(f.model_dir, f.threads, &log, *placement, {}, role->peers);
    if (!lm.ok()) {
      std::fprintf(stderr, "strata: error: %s\n", lm.error().to_string().c_str());
      srv.set_failed(lm.error().to_string());
      load_failed = true;
      loaded = true;
      kill(getpid(), SIGTERM);  // nothing to serve: end the process like a signal would
      return;
    }
    auto draft = load_draft_model(f.spec, f.model_dir, *lm, f.threads, &log, *placement);
    if (!draft.ok()) {
      std::fprintf(stderr, "strata: error: %s\n", draft.error().to_string().c_str());
      srv.set_failed(draft.error().to_string());
      load_failed = true;
      loaded = true;
      kill(getpid(), SIGTERM);
      return;
    }
    model::Model* m = lm->model.get();
    warn_if_ctx_above_model(f.opt.ctx, m->config().max_position_embeddings, &log);
    warn_unused_placement_flags(f.placement, m->store(), &log);
    auto tick = [m, store_metrics] {
      const store::PlacementStats s = m->store().stats();
      std::lock_guard<std::mutex> l(store_metrics->mu);
      store_metrics->last = s;
    };
    srv.metrics().add_collector([store_metrics] { return store_metrics->render(); });
    const double load_s = lm->load_s;
    if (Status s = srv.attach(std::move(lm->tok), std::move(lm->model), tick, std::move(*draft)); !s.ok()) {
      std::fprintf(stderr, "strata: error: %s\n", s.to_string().c_str());
      srv.set_failed(s.to_string());
      load_failed = true;
      loaded = true;
      kill(getpid(), SIGTERM);
      return;
    }
    loaded = true;
    std::fprintf(stderr, "strata serve: ready in %.2f s: model %s, %d slot(s), POST http://%s:%d/v1/chat/completions\n",
                 load_s, f.opt.model_id.c_str(), f.opt.parallel, f.opt.host.c_str(), srv.port());
  });

  int sig = 0;
  sigwait(&sigs, &sig);
  if (!loaded.load()) {
    // A load cannot be interrupted; nothing is saved by the server, so leave at once, with the
    // status every command gives for that signal (130 SIGINT, 143 SIGTERM).
    std::fprintf(stderr, "strata serve: interrupted while loading\n");
    std::fflush(stderr);
    std::_Exit(128 + sig);
  }
  loader.join();
  std::fprintf(stderr, "strata serve: stopping\n");
  srv.stop();
  return load_failed.load() ? 1 : 0;
}

}  // namespace

Command register_serve(CLI::App& app) {
  auto f = std::make_shared<ServeFlags>();
  server::ServerOptions& o = f->opt;
  app.add_option("-m,--model", f->model_dir, "checkpoint directory (config.json, *.safetensors, V4.1 tokenizer.json)")
      ->required();
  app.add_option("--host", o.host, "address to listen on (default 127.0.0.1; 0.0.0.0 for every interface)");
  app.add_option("--port", o.port, "TCP port (default 8000; 0 = any free port)")->check(in_range(0, 65535));
  app.add_option("--api-key", o.api_key, "require 'Authorization: Bearer KEY' on /v1/* (default: no key)");
  app.add_option("--parallel", o.parallel, "sequences generated at once, each with its own KV cache (default 1)")
      ->check(in_range(1, 1024));
  app.add_option("-c,--ctx,--ctx-size", o.ctx, "context limit per sequence in tokens (default: the model's)")->check(in_range(0, 1 << 30));
  app.add_option("--max-queue", o.max_queue, "requests waiting for a slot before 503 overloaded (default 64)")
      ->check(in_range(0, 100000));
  app.add_option("--body-limit", f->body_limit_mib, "largest request body in MiB (default 64; larger gets 413)")
      ->check(in_range(0.001, 4096));
  app.add_option("--max-connections", o.max_connections, "open HTTP connections; more get 503 at once (default 512)")
      ->check(in_range(1, 100000));
  app.add_option("--header-limit-kib", o.header_limit_kib, "largest request line + headers in KiB (default 64; "
                 "larger gets 431)")->check(in_range(1, 16384));
  app.add_option("--max-header-fields", o.max_header_fields, "most header fields per request (default 100; more "
                 "gets 431)")->check(in_range(1, 100000));
  app.add_option("--header-timeout-s", o.header_timeout_s, "seconds for a whole request head, however slowly it is "
                 "sent (default 10; then 408 and close)")->check(in_range(0.01, 86400));
  app.add_option("--keepalive-timeout-s", o.keepalive_timeout_s, "seconds an idle keep-alive connection stays open "
                 "(default 5)")->check(in_range(0.01, 86400));
  app.add_option("--body-timeout-s", o.body_timeout_s, "seconds for a whole request body once its head is read "
                 "(default 60; then 408 and close)")->check(in_range(0.01, 86400));
  app.add_option("--write-timeout-s", o.write_timeout_s, "seconds a response (or one stream write) may wait for a "
                 "client that does not read (default 30)")->check(in_range(0.01, 86400));
  app.add_option("--body-memory-mib", o.body_memory_mib, "MiB all request bodies being received may hold together "
                 "(default 1024, at least --body-limit; a body past it gets 503 before it is read)")
      ->check(in_range(1, 1 << 20));
  app.add_option("--model-id", o.model_id, "the served model id (default deepseek-v4.1-flash)");
  app.add_flag("--any-model", o.any_model, "accept every `model` value in requests");
  // Two flags rather than CLI11's "--think,!--no-think", whose help reads "--think,--no-think{false}".
  app.add_flag_callback(
      "--think", [f] { f->opt.default_thinking = true; },
      "requests that do not say reason first (the default, as DeepSeek's API)");
  app.add_flag_callback(
      "--no-think", [f] { f->opt.default_thinking = false; },
      "requests that do not say answer at once (a request still sets its own with "
      "\"thinking\": {\"type\": \"enabled\"|\"disabled\"})");
  app.add_option("--default-effort", o.default_effort, "reasoning effort 1..100 when a request does not say "
                 "(default: 75, or 50 with --effort-table vllm)")->check(in_range(0, 100));
  app.add_option("--effort-table", f->effort_table, "effort names: official (low 50, high 75, max 100) or vllm "
                 "(low 25, high 50, xhigh 75, max 100)");
  app.add_option("--reasoning-field", f->reasoning_field, "response field for reasoning: reasoning_content (DeepSeek), "
                 "reasoning (current vLLM) or both");
  app.add_option("--sse-keepalive", o.keep_alive_s, "seconds between SSE keep-alive comments while a stream waits "
                 "(default 10)")->check(in_range(0.01, 3600));
  app.add_option("--prefill-chunk", o.prefill_chunk, "prompt tokens per prefill chunk; chunks join the other "
                 "streams' decode steps (default 512)")->check(in_range(1, 1 << 20));
  app.add_option("--batch-tokens", o.batch_tokens, "tokens per engine step, every stream's decode token and prompt "
                 "chunks together (default 512; larger finishes prompts sooner, slows each step)")
      ->check(in_range(1, 1 << 20));
  app.add_option("--prefix-cache-mib", o.prefix_cache_mib, "memory for snapshots of earlier prompts and turns, "
                 "reused by later requests that start the same way (default 1024; 0 = off)")->check(in_range(0, 1 << 24));
  app.add_option("--slot-undo", o.slot_undo, "tokens a slot's session can be cut back so a request that changes "
                 "the tail of its history reuses the rest (default -1 = the model's window_size; 0 = off)")
      ->check(in_range(-1, 1 << 20));
  add_threads_flag(app, &f->threads);
  app.add_flag("-v,--verbose", f->verbose, "log every request and the load to stderr");
  add_placement_flags(app, &f->placement);
  add_mpi_flags(app, &f->mpi);
  add_spec_flags(app, &f->spec);
  app.add_flag("--test-scripted-output", o.test_scripted_output,
               "TEST ONLY: honour a request field \"strata_test_output\" whose text replaces sampling (protocol tests "
               "with random weights); never use in production");
  return [f]() { return run_serve(*f); };
}

}  // namespace strata::cli
