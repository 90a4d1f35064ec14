#include "server/completion_request.h"

namespace strata::server {

ApiError parse_completion_request(const std::string& body_text, const ServerOptions& o, CompletionRequest* out) {
  Json body;
  if (ApiError e = parse_body(body_text, &body); !e.ok()) return e;
  CompletionRequest r;
  const Json* model = field(body, "model");
  if (!model) return bad_request("model: required", "model");
  if (!model->is_string()) return bad_request("model: expected a string", "model");
  r.model = model->get<std::string>();
  if (!o.any_model && r.model != o.model_id && r.model != "deepseek-flash" && r.model != "deepseek-chat" &&
      r.model != "deepseek-reasoner")
    return model_not_found(r.model);
  if (ApiError e = check_unsupported(body, /*chat=*/false); !e.ok()) return e;
  if (ApiError e = read_logprobs(body, /*chat=*/false, &r.logprobs); !e.ok()) return e;

  const Json* p = field(body, "prompt");
  if (!p) return bad_request("prompt: required", "prompt");
  if (p->is_string()) {
    r.prompt_text = p->get<std::string>();
  } else if (p->is_array() && p->size() == 1 && (*p)[0].is_string()) {
    r.prompt_text = (*p)[0].get<std::string>();
  } else if (p->is_array() && !p->empty() && (*p)[0].is_number_integer()) {
    r.has_ids = true;
    for (size_t i = 0; i < p->size(); ++i) {
      const Json& v = (*p)[i];
      if (!v.is_number_integer() || v.get<int64_t>() < 0 || v.get<int64_t>() > INT32_MAX)
        return bad_request("prompt[" + std::to_string(i) + "]: expected a token id", "prompt[" + std::to_string(i) + "]");
      r.prompt_ids.push_back(static_cast<int32_t>(v.get<int64_t>()));
    }
  } else {
    return bad_request("prompt: expected a string, an array of one string, or an array of token ids (batches are "
                       "not supported)",
                       "prompt");
  }
  if (!r.has_ids && r.prompt_text.empty()) return bad_request("prompt: must not be empty", "prompt");
  if (ApiError e = read_bool(body, "stream", "stream", &r.stream); !e.ok()) return e;
  if (const Json* so = field(body, "stream_options")) {
    if (!so->is_object()) return bad_request("stream_options: expected an object", "stream_options");
    if (ApiError e = read_bool(*so, "include_usage", "stream_options.include_usage", &r.include_usage); !e.ok()) return e;
  }
  if (field(body, "max_tokens")) {
    if (ApiError e = read_int(body, "max_tokens", "max_tokens", 1, INT32_MAX, &r.max_tokens); !e.ok()) return e;
    r.max_tokens_explicit = true;
  }
  if (ApiError e = read_sampling(body, &r.sampling); !e.ok()) return e;
  if (ApiError e = read_stop(body, "stop", &r.stop); !e.ok()) return e;
  if (o.test_scripted_output) {
    if (ApiError e = read_string(body, "strata_test_output", "strata_test_output", &r.test_output); !e.ok()) return e;
    r.has_test_output = field(body, "strata_test_output") != nullptr;
  }
  *out = std::move(r);
  return {};
}

}  // namespace strata::server
