// Typed reads of request JSON fields with OpenAI-style errors (chat-and-api.md §6.1: a wrong type
// or out-of-range value of a known field -> 400 with `param` set to the field path). Absent and
// null fields leave the output untouched. Shared by the chat and completions request parsers.
// Thread safety: pure functions.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "server/api_error.h"

namespace strata::server {

using Json = nlohmann::ordered_json;

// The field `key` of object `obj` if present and not null, else nullptr.
const Json* field(const Json& obj, const char* key);

[[nodiscard]] ApiError read_bool(const Json& obj, const char* key, const std::string& path, bool* out);
// A number within [lo, hi] (lo_open: lo itself excluded).
[[nodiscard]] ApiError read_number(const Json& obj, const char* key, const std::string& path, double lo, double hi,
                                   bool lo_open, double* out);
// An integer within [lo, hi] (a JSON number with no fraction, e.g. 5 or 5.0).
[[nodiscard]] ApiError read_int(const Json& obj, const char* key, const std::string& path, int64_t lo, int64_t hi,
                                int64_t* out);
[[nodiscard]] ApiError read_string(const Json& obj, const char* key, const std::string& path, std::string* out);
// `stop`: a string or an array of at most 16 non-empty strings of at most kMaxStopBytes bytes.
[[nodiscard]] ApiError read_stop(const Json& obj, const std::string& path, std::vector<std::string>* out);
// The same for the field `key` (Anthropic's stop_sequences).
[[nodiscard]] ApiError read_stop(const Json& obj, const char* key, const std::string& path,
                                 std::vector<std::string>* out);

// The sampling fields shared by both endpoints (§6.1).
struct SamplingFields {
  double temperature = 1.0;  // 0..2, 0 = greedy
  double top_p = 0.95;       // (0, 1]
  int64_t top_k = 0;         // extension, 0 = off
  double min_p = 0.0;        // extension, [0, 1)
  bool has_seed = false;
  int64_t seed = 0;
  double presence_penalty = 0.0;   // -2..2
  double frequency_penalty = 0.0;  // -2..2
  // logit_bias: {"token id": bias in [-100, 100]}; ids are checked against the vocabulary by the
  // handler (check_logit_bias), which knows it.
  std::vector<std::pair<int32_t, float>> logit_bias;
};
[[nodiscard]] ApiError read_sampling(const Json& body, SamplingFields* out);
// OpenAI's json_schema `name`: required, 1..64 of a-z A-Z 0-9 _ - ; `param` is its field path
// ("response_format.json_schema.name", "text.format.name"); `obj` is the object that holds it.
[[nodiscard]] ApiError check_json_schema_name(const Json& obj, const std::string& param);
// 400 when a logit_bias id is not below `vocab_size`.
[[nodiscard]] ApiError check_logit_bias(const SamplingFields& s, int32_t vocab_size);

// Checks that fields strata does not implement are absent or harmless: n (must be 1), and for chat
// modalities/audio, for completions echo, suffix and best_of.
[[nodiscard]] ApiError check_unsupported(const Json& body, bool chat);

// The logprobs request of either endpoint, as runtime::SequenceOptions::logprobs: -1 = off, else the
// number of alternatives per token. Chat: `logprobs` (bool) and `top_logprobs` (0..20, only with
// logprobs true). Completions (legacy): `logprobs` is that number (0..20; OpenAI's limit is 5).
[[nodiscard]] ApiError read_logprobs(const Json& body, bool chat, int* out);

// Longest stop string accepted, in bytes. The output parser holds back any content suffix that could
// still become a stop string and rescans it on every generated token, on the model thread: the bound
// keeps one request from slowing every stream.
inline constexpr size_t kMaxStopBytes = 1024;

// Deepest nesting accepted in a request body (tool schemas are rendered recursively).
inline constexpr int kMaxJsonDepth = 128;
// Most members one object of a request body may have (Json keeps the client's key order, at a
// cost quadratic in an object's size; tool schemas and logit_bias are far smaller).
inline constexpr int kMaxJsonObjectMembers = 4096;

// Parses the body as a JSON object: 400 invalid_json otherwise (not JSON, not UTF-8, not an object,
// nested deeper than kMaxJsonDepth).
[[nodiscard]] ApiError parse_body(const std::string& body, Json* out);

}  // namespace strata::server
