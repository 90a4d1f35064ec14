// The response bodies of chat-and-api.md §6.2-6.3 and of /v1/completions: the non-streaming
// objects, the SSE chunks and the usage object. JSON is written by nlohmann (compact, UTF-8).
// Thread safety: pure functions.
#pragma once

#include <cstdint>
#include <string>

#include "chat/output_parser.h"
#include "server/options.h"
#include "server/request_fields.h"
#include "server/scheduler.h"

namespace strata::server {

// What every object of one response repeats.
struct ResponseHeader {
  std::string id;       // chatcmpl-<32 hex> / cmpl-<32 hex>
  int64_t created = 0;  // unix seconds
  std::string model;
  ReasoningField reasoning_field = ReasoningField::kReasoningContent;
  bool thinking = false;  // reasoning_content is present iff thinking was on (or reasoning appeared)
};

// "<prefix><32 random hex>".
std::string random_id(const std::string& prefix);

// The `system_fingerprint` value: "strata-<version>".
std::string system_fingerprint();

// usage (§6.2): prompt/completion/total tokens, cached and reasoning details, DeepSeek's cache fields.
Json usage_json(const JobStats& stats, int64_t reasoning_tokens);

// The chat.completion object (§6.2). `logprobs`: choices[0].logprobs (null = not requested;
// server/logprobs_json.h).
std::string chat_completion_json(const ResponseHeader& h, const chat::OutputParser& parser, const JobStats& stats,
                                 int64_t reasoning_tokens, std::string_view finish_reason,
                                 const Json& logprobs = Json());

// One chat.completion.chunk `data:` payload with choices[0].delta = `delta` (§6.3) and
// choices[0].logprobs = `logprobs` (null unless requested: the tokens of this chunk).
std::string chat_chunk_json(const ResponseHeader& h, const Json& delta, std::string_view finish_reason,
                            const Json& logprobs = Json());
// The delta object of one parser delta.
Json chunk_delta(const ResponseHeader& h, const chat::Delta& d);
// The include_usage chunk: choices [] and usage.
std::string usage_chunk_json(const ResponseHeader& h, const char* object, const JobStats& stats, int64_t reasoning_tokens);

// /v1/completions: the text_completion object, and one streamed chunk of text (`logprobs`: the
// choice's legacy logprobs object, null unless requested).
std::string completion_json(const ResponseHeader& h, const std::string& text, const JobStats& stats,
                            std::string_view finish_reason, const Json& logprobs = Json());
std::string completion_chunk_json(const ResponseHeader& h, const std::string& text, std::string_view finish_reason,
                                  const Json& logprobs = Json());

// Serializes JSON for the wire (invalid UTF-8 replaced, never thrown).
std::string dump_json(const Json& j);

}  // namespace strata::server
