// POST /v1/completions request parsing: a raw prompt (no chat template), OpenAI's legacy shape.
// `prompt` is a string, an array of one string, or an array of token ids. The text is tokenized
// with special-token strings recognised (a raw prompt may spell out chat markup) and BOS is
// prepended unless the prompt starts with it. max_tokens defaults to 16 (OpenAI's default).
// Thread safety: pure functions.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "server/api_error.h"
#include "server/options.h"
#include "server/request_fields.h"

namespace strata::server {

struct CompletionRequest {
  std::string model;
  bool has_ids = false;
  std::string prompt_text;
  std::vector<int32_t> prompt_ids;
  bool stream = false;
  bool include_usage = false;
  int64_t max_tokens = 16;
  bool max_tokens_explicit = false;
  SamplingFields sampling;
  std::vector<std::string> stop;
  int logprobs = -1;             // -1 = off; else alternatives per token (read_logprobs)
  bool has_test_output = false;  // TEST ONLY (ServerOptions::test_scripted_output)
  std::string test_output;
};

[[nodiscard]] ApiError parse_completion_request(const std::string& body, const ServerOptions& options,
                                                CompletionRequest* out);

}  // namespace strata::server
