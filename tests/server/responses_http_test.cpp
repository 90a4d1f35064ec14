// POST /v1/responses end to end over loopback HTTP (tiny synthesized checkpoint, scripted output):
// the response object, a function-call round trip through previous_response_id, the stream's event
// lifecycle, store: false, and errors (OpenAI's envelope, an unknown previous_response_id).
#include <gtest/gtest.h>

#include <regex>

#include "tests/server/api_serve_fixture.h"

namespace strata::server {
namespace {

using namespace testing_api;

const json kTools = json::parse(R"([{"type":"function","name":"get_weather","description":"Weather",
  "parameters":{"type":"object","properties":{"location":{"type":"string"}},"required":["location"]}}])");
const std::string kToolScript =
    "Need data.</think>\n\n<｜DSML｜ calls>\n<｜DSML｜ invoke name=\"get_weather\">\n<｜DSML｜ parameter "
    "name=\"location\" string=\"true\">Paris</｜DSML｜ parameter>\n</｜DSML｜ invoke>\n</｜DSML｜ calls>";

class Responses : public ApiServe {
 protected:
  static json req(json input, json extra = json::object()) {
    json b = {{"model", kModel}, {"input", std::move(input)}, {"max_output_tokens", 64}};
    for (auto it = extra.begin(); it != extra.end(); ++it) b[it.key()] = it.value();
    return b;
  }
  json respond(const json& body, int want = 200) { return create(body, want, "/v1/responses"); }
};

TEST_F(Responses, ObjectShape) {
  start();
  const json r = respond(req(
      "Hi",
      {{"instructions", "Be brief."}, {"reasoning", {{"effort", "none"}}}, {"strata_test_output", "Hello!" + kEos}}));
  EXPECT_TRUE(std::regex_match(r["id"].get<std::string>(), std::regex("resp_[0-9a-f]{32}"))) << r;
  EXPECT_EQ(r["object"], "response");
  EXPECT_EQ(r["status"], "completed");
  EXPECT_EQ(r["model"], kModel);
  EXPECT_EQ(r["instructions"], "Be brief.");
  ASSERT_EQ(r["output"].size(), 1u) << r;
  const json& msg = r["output"][0];
  EXPECT_EQ(msg["type"], "message");
  EXPECT_EQ(msg["role"], "assistant");
  EXPECT_EQ(msg["content"][0]["type"], "output_text");
  EXPECT_EQ(msg["content"][0]["text"], "Hello!");
  EXPECT_EQ(r["usage"]["output_tokens"], 3);
  EXPECT_EQ(r["usage"]["total_tokens"], r["usage"]["input_tokens"].get<int>() + 3);
  // max_output_tokens inside reasoning (thinking on by default): incomplete.
  const json inc = respond(req("Hi", {{"max_output_tokens", 2}}));
  EXPECT_EQ(inc["status"], "incomplete");
  EXPECT_EQ(inc["incomplete_details"]["reason"], "max_output_tokens");
  EXPECT_EQ(inc["output"][0]["type"], "reasoning");
}

TEST_F(Responses, FunctionCallRoundTripThroughPreviousResponseId) {
  start();
  const json first = respond(req("Weather in Paris?", {{"tools", kTools}, {"strata_test_output", kToolScript}}));
  ASSERT_EQ(first["output"].size(), 2u) << first;
  EXPECT_EQ(first["output"][0]["type"], "reasoning");
  const json& call = first["output"][1];
  EXPECT_EQ(call["type"], "function_call");
  EXPECT_EQ(call["name"], "get_weather");
  EXPECT_EQ(json::parse(call["arguments"].get<std::string>()), json::parse(R"({"location":"Paris"})"));
  // The next request sends only the tool output; the server has the rest.
  const json second =
      respond(req(json::array({{{"type", "function_call_output"}, {"call_id", call["call_id"]}, {"output", "18 C"}}}),
                  {{"tools", kTools},
                   {"previous_response_id", first["id"]},
                   {"strata_test_output", "Got it.</think>18 C in Paris." + kEos}}));
  EXPECT_EQ(second["status"], "completed");
  EXPECT_EQ(second["previous_response_id"], first["id"]);
  EXPECT_EQ(second["output"].back()["content"][0]["text"], "18 C in Paris.");
  EXPECT_GT(second["usage"]["input_tokens_details"]["cached_tokens"].get<int>(), 0)
      << "the continued conversation reused the first one's prompt";
  // store: false keeps nothing to continue from; an unknown id is a 404.
  const json unstored = respond(req("x", {{"store", false}, {"max_output_tokens", 1}}));
  const json missing = respond(req("y", {{"previous_response_id", unstored["id"]}}), 404);
  EXPECT_EQ(missing["error"]["code"], "previous_response_not_found");
  EXPECT_EQ(missing["error"]["param"], "previous_response_id");
}

TEST_F(Responses, StreamLifecycle) {
  start();
  json body = req("Weather?", {{"tools", kTools}, {"strata_test_output", kToolScript}, {"stream", true}});
  auto r = post("/v1/responses", body);
  ASSERT_TRUE(r);
  ASSERT_EQ(r->status, 200) << r->body;
  const std::vector<Event> ev = parse_events(r->body);
  ASSERT_GE(ev.size(), 6u);
  EXPECT_EQ(ev[0].type, "response.created");
  EXPECT_EQ(ev[1].type, "response.in_progress");
  EXPECT_EQ(ev.back().type, "response.completed");
  std::string args;
  int added = 0, done = 0;
  for (size_t i = 0; i < ev.size(); ++i) {
    EXPECT_EQ(ev[i].data["sequence_number"], i);
    added += ev[i].type == "response.output_item.added";
    done += ev[i].type == "response.output_item.done";
    if (ev[i].type == "response.function_call_arguments.delta") args += ev[i].data["delta"].get<std::string>();
  }
  EXPECT_EQ(added, 2);
  EXPECT_EQ(done, 2);
  const json& final_output = ev.back().data["response"]["output"];
  ASSERT_EQ(final_output.size(), 2u);
  EXPECT_EQ(final_output[1]["arguments"], args);
  // The streamed response is stored too.
  const json next = respond(req(
      json::array({{{"type", "function_call_output"}, {"call_id", final_output[1]["call_id"]}, {"output", "18 C"}}}),
      {{"tools", kTools}, {"previous_response_id", ev.back().data["response"]["id"]}, {"max_output_tokens", 1}}));
  EXPECT_EQ(next["object"], "response");
}

// GET /v1/responses/{id} returns the stored response object (streamed ones too); DELETE drops it.
TEST_F(Responses, RetrieveAndDeleteStoredResponses) {
  start();
  const json r = respond(req("Hi", {{"reasoning", {{"effort", "none"}}}, {"strata_test_output", "Hello!" + kEos}}));
  httplib::Client c("127.0.0.1", srv_->port());
  auto got = c.Get("/v1/responses/" + r["id"].get<std::string>());
  ASSERT_TRUE(got);
  ASSERT_EQ(got->status, 200) << got->body;
  EXPECT_EQ(json::parse(got->body), r) << "the same object as the POST answered";
  auto del = c.Delete("/v1/responses/" + r["id"].get<std::string>());
  ASSERT_TRUE(del);
  ASSERT_EQ(del->status, 200) << del->body;
  EXPECT_EQ(json::parse(del->body), (json{{"id", r["id"]}, {"object", "response"}, {"deleted", true}}));
  auto expect_404 = [](const httplib::Result& res) {
    ASSERT_TRUE(res);
    EXPECT_EQ(res->status, 404) << res->body;
    EXPECT_EQ(json::parse(res->body)["error"]["type"], "invalid_request_error");
  };
  expect_404(c.Get("/v1/responses/" + r["id"].get<std::string>()));
  expect_404(c.Delete("/v1/responses/" + r["id"].get<std::string>()));
  expect_404(c.Get("/v1/responses/resp_nope"));
  EXPECT_EQ(respond(req("y", {{"previous_response_id", r["id"]}}), 404)["error"]["code"], "previous_response_not_found")
      << "deleted: nothing to continue from";
  // A streamed response is stored as its final object; store: false stores none.
  auto s =
      post("/v1/responses",
           req("Hi", {{"stream", true}, {"reasoning", {{"effort", "none"}}}, {"strata_test_output", "Yo" + kEos}}));
  ASSERT_TRUE(s);
  const json streamed = parse_events(s->body).back().data["response"];
  got = c.Get("/v1/responses/" + streamed["id"].get<std::string>());
  ASSERT_TRUE(got);
  ASSERT_EQ(got->status, 200);
  EXPECT_EQ(json::parse(got->body), streamed);
  const json unstored = respond(req("x", {{"store", false}, {"max_output_tokens", 1}}));
  got = c.Get("/v1/responses/" + unstored["id"].get<std::string>());
  ASSERT_TRUE(got);
  EXPECT_EQ(got->status, 404);
  auto bad = c.Put("/v1/responses/" + r["id"].get<std::string>(), "{}", "application/json");
  ASSERT_TRUE(bad);
  EXPECT_EQ(bad->status, 405);
}

// A message max_output_tokens cut is "incomplete", not "completed" (streamed and not).
TEST_F(Responses, MessageCutByTheTokenLimitIsIncomplete) {
  start();
  const json body = req("Hi", {{"reasoning", {{"effort", "none"}}},
                               {"max_output_tokens", 2},
                               {"strata_test_output", "Hello there, world, and more" + kEos}});
  const json r = respond(body);
  EXPECT_EQ(r["status"], "incomplete");
  ASSERT_EQ(r["output"].size(), 1u) << r;
  EXPECT_EQ(r["output"][0]["type"], "message");
  EXPECT_EQ(r["output"][0]["status"], "incomplete");
  json sb = body;
  sb["stream"] = true;
  auto s = post("/v1/responses", sb);
  ASSERT_TRUE(s);
  const std::vector<Event> ev = parse_events(s->body);
  ASSERT_FALSE(ev.empty());
  EXPECT_EQ(ev.back().type, "response.incomplete");
  EXPECT_EQ(ev.back().data["response"]["output"][0]["status"], "incomplete");
  // A finished message stays completed.
  EXPECT_EQ(respond(req("Hi", {{"reasoning", {{"effort", "none"}}},
                               {"strata_test_output", "Hi" + kEos}}))["output"][0]["status"],
            "completed");
}

TEST_F(Responses, ErrorsUseOpenAIsEnvelope) {
  ServerOptions o;
  o.ctx = 64;
  start(o);
  json e = respond(json{{"model", kModel}}, 400);
  EXPECT_EQ(e["error"]["param"], "input");
  e = respond(req(json::array({{{"type", "function_call_output"}, {"call_id", "nope"}, {"output", "x"}}})), 400);
  EXPECT_EQ(e["error"]["param"], "input[0].call_id");
  e = respond(req("Hi", {{"max_output_tokens", 60}}), 400);
  EXPECT_EQ(e["error"]["code"], "context_length_exceeded");
  EXPECT_EQ(e["error"]["param"], "max_output_tokens");
  EXPECT_EQ(respond(req("Hi", {{"max_output_tokens", 1}}))["object"], "response");
  // Fields strata does not serve: 400 naming them (never silently ignored).
  e = respond(req("Hi", {{"previous_response_id", ""}}), 400);
  EXPECT_EQ(e["error"]["param"], "previous_response_id");
  for (const char* k : {"conversation", "top_logprobs", "max_tool_calls"}) {
    e = respond(req("Hi", {{k, k == std::string("conversation") ? json("conv_1") : json(2)}}), 400);
    EXPECT_EQ(e["error"]["param"], k);
    EXPECT_EQ(e["error"]["code"], "unsupported_parameter");
  }
  e = respond(req("Hi", {{"prompt", {{"id", "pmpt_1"}}}}), 400);
  EXPECT_EQ(e["error"]["param"], "prompt");
  e = respond(req("Hi", {{"no_such_field", 1}}), 400);
  EXPECT_EQ(e["error"]["param"], "no_such_field");
  EXPECT_EQ(e["error"]["code"], "unknown_parameter");
}

}  // namespace
}  // namespace strata::server
