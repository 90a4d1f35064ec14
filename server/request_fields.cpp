#include "server/request_fields.h"

#include "chat/json_dumps.h"
#include "core/json_nesting.h"
#include "runtime/logprobs.h"

#include <cmath>

namespace strata::server {

namespace {

std::string type_name(const Json& v) {
  switch (v.type()) {
    case Json::value_t::null: return "null";
    case Json::value_t::boolean: return "a boolean";
    case Json::value_t::string: return "a string";
    case Json::value_t::array: return "an array";
    case Json::value_t::object: return "an object";
    case Json::value_t::number_integer:
    case Json::value_t::number_unsigned:
    case Json::value_t::number_float: return "a number";
    default: return "an unsupported value";
  }
}

std::string num_text(double v) {
  if (v == std::floor(v) && std::fabs(v) < 1e15) return std::to_string(static_cast<int64_t>(v));
  return Json(v).dump();
}

}  // namespace

const Json* field(const Json& obj, const char* key) {
  if (!obj.is_object()) return nullptr;
  auto it = obj.find(key);
  if (it == obj.end() || it->is_null()) return nullptr;
  return &*it;
}

ApiError read_bool(const Json& obj, const char* key, const std::string& path, bool* out) {
  const Json* v = field(obj, key);
  if (!v) return {};
  if (!v->is_boolean()) return bad_request(path + ": expected a boolean, got " + type_name(*v), path);
  *out = v->get<bool>();
  return {};
}

ApiError read_number(const Json& obj, const char* key, const std::string& path, double lo, double hi, bool lo_open,
                     double* out) {
  const Json* v = field(obj, key);
  if (!v) return {};
  if (!v->is_number()) return bad_request(path + ": expected a number, got " + type_name(*v), path);
  const double d = v->get<double>();
  if (!(lo_open ? d > lo : d >= lo) || !(d <= hi) || !std::isfinite(d))
    return bad_request(path + ": " + v->dump() + " is outside " + (lo_open ? "(" : "[") + num_text(lo) + ", " +
                           num_text(hi) + "]",
                       path);
  *out = d;
  return {};
}

ApiError read_int(const Json& obj, const char* key, const std::string& path, int64_t lo, int64_t hi, int64_t* out) {
  const Json* v = field(obj, key);
  if (!v) return {};
  int64_t i = 0;
  if (v->is_number_integer()) {
    if (v->is_number_unsigned() && v->get<uint64_t>() > static_cast<uint64_t>(INT64_MAX))
      return bad_request(path + ": " + v->dump() + " is too large", path);
    i = v->get<int64_t>();
  } else if (v->is_number_float() && std::floor(v->get<double>()) == v->get<double>() &&
             std::fabs(v->get<double>()) < 9e18) {
    i = static_cast<int64_t>(v->get<double>());
  } else {
    return bad_request(path + ": expected an integer, got " + (v->is_number() ? v->dump() : type_name(*v)), path);
  }
  if (i < lo || i > hi)
    return bad_request(path + ": " + std::to_string(i) + " is outside [" + std::to_string(lo) + ", " +
                           std::to_string(hi) + "]",
                       path);
  *out = i;
  return {};
}

ApiError read_string(const Json& obj, const char* key, const std::string& path, std::string* out) {
  const Json* v = field(obj, key);
  if (!v) return {};
  if (!v->is_string()) return bad_request(path + ": expected a string, got " + type_name(*v), path);
  *out = v->get<std::string>();
  return {};
}

ApiError read_stop(const Json& obj, const std::string& path, std::vector<std::string>* out) {
  return read_stop(obj, "stop", path, out);
}

ApiError read_stop(const Json& obj, const char* key, const std::string& path, std::vector<std::string>* out) {
  const Json* v = field(obj, key);
  if (!v) return {};
  if (v->is_string()) {
    if (v->get_ref<const std::string&>().empty()) return bad_request(path + ": stop strings must not be empty", path);
    if (v->get_ref<const std::string&>().size() > kMaxStopBytes)
      return bad_request(path + ": a stop string may have at most " + std::to_string(kMaxStopBytes) + " bytes", path);
    out->push_back(v->get<std::string>());
    return {};
  }
  if (!v->is_array()) return bad_request(path + ": expected a string or an array of strings", path);
  if (v->size() > 16) return bad_request(path + ": at most 16 stop strings, got " + std::to_string(v->size()), path);
  for (size_t i = 0; i < v->size(); ++i) {
    const Json& s = (*v)[i];
    const std::string p = path + "[" + std::to_string(i) + "]";
    if (!s.is_string()) return bad_request(p + ": expected a string, got " + type_name(s), p);
    if (s.get_ref<const std::string&>().empty()) return bad_request(p + ": stop strings must not be empty", p);
    if (s.get_ref<const std::string&>().size() > kMaxStopBytes)
      return bad_request(p + ": a stop string may have at most " + std::to_string(kMaxStopBytes) + " bytes", p);
    out->push_back(s.get<std::string>());
  }
  return {};
}

ApiError read_sampling(const Json& body, SamplingFields* out) {
  if (ApiError e = read_number(body, "temperature", "temperature", 0, 2, false, &out->temperature); !e.ok()) return e;
  if (ApiError e = read_number(body, "top_p", "top_p", 0, 1, true, &out->top_p); !e.ok()) return e;
  if (ApiError e = read_int(body, "top_k", "top_k", -1, 1 << 24, &out->top_k); !e.ok()) return e;
  if (out->top_k < 0) out->top_k = 0;  // -1 = off (vLLM's spelling)
  if (ApiError e = read_number(body, "min_p", "min_p", 0, 1, false, &out->min_p); !e.ok()) return e;
  if (out->min_p >= 1) return bad_request("min_p: must be below 1", "min_p");
  if (const Json* s = field(body, "seed")) {
    if (s->is_number_unsigned()) {
      out->seed = static_cast<int64_t>(s->get<uint64_t>());
    } else if (ApiError e = read_int(body, "seed", "seed", INT64_MIN, INT64_MAX, &out->seed); !e.ok()) {
      return e;
    }
    out->has_seed = true;
  }
  if (ApiError e = read_number(body, "presence_penalty", "presence_penalty", -2, 2, false, &out->presence_penalty);
      !e.ok())
    return e;
  if (ApiError e = read_number(body, "frequency_penalty", "frequency_penalty", -2, 2, false, &out->frequency_penalty);
      !e.ok())
    return e;
  if (const Json* lb = field(body, "logit_bias")) {
    if (!lb->is_object())
      return bad_request("logit_bias: expected an object mapping token ids (strings) to biases in [-100, 100]",
                         "logit_bias");
    for (auto it = lb->begin(); it != lb->end(); ++it) {
      const std::string& k = it.key();
      const std::string p = "logit_bias." + k;
      const bool digits = !k.empty() && k.size() <= 9 && k.find_first_not_of("0123456789") == std::string::npos;
      if (!digits) return bad_request(p + ": '" + k + "' is not a token id (a non-negative integer)", "logit_bias");
      if (!it->is_number() || !(it->get<double>() >= -100 && it->get<double>() <= 100))
        return bad_request(p + ": expected a number in [-100, 100], got " + it->dump(), "logit_bias");
      out->logit_bias.emplace_back(std::stoi(k), static_cast<float>(it->get<double>()));
    }
  }
  return {};
}

ApiError check_json_schema_name(const Json& obj, const std::string& param) {
  const Json* n = field(obj, "name");
  if (!n) return bad_request(param + ": required (1 to 64 characters a-z, A-Z, 0-9, _ or -)", param);
  static constexpr std::string_view kNameChars = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_-";
  const std::string* s = n->is_string() ? &n->get_ref<const std::string&>() : nullptr;
  const bool ok = s && !s->empty() && s->size() <= 64 && s->find_first_not_of(kNameChars) == std::string::npos;
  if (!ok) return bad_request(param + ": expected 1 to 64 characters a-z, A-Z, 0-9, _ or -, got " + n->dump(), param);
  // `strict` (a sibling of `name`) is a boolean; its value changes nothing (the schema is always enforced).
  const std::string strict = param.substr(0, param.rfind('.') + 1) + "strict";
  bool b = false;
  if (ApiError e = read_bool(obj, "strict", strict, &b); !e.ok()) return e;
  return {};
}

ApiError check_logit_bias(const SamplingFields& s, int32_t vocab_size) {
  for (const auto& [id, bias] : s.logit_bias)
    if (id >= vocab_size)
      return bad_request("logit_bias." + std::to_string(id) + ": token id out of range (vocabulary size " +
                             std::to_string(vocab_size) + ")",
                         "logit_bias");
  return {};
}

ApiError check_unsupported(const Json& body, bool chat) {
  int64_t n = 1;
  if (ApiError e = read_int(body, "n", "n", 1, 1 << 20, &n); !e.ok()) return e;
  if (n != 1) return bad_request("n: only n = 1 is supported, got " + std::to_string(n), "n", "unsupported_parameter");
  if (chat) {
    if (const Json* m = field(body, "modalities")) {
      if (!m->is_array()) return bad_request("modalities: expected an array of strings", "modalities");
      for (const Json& x : *m)
        if (!x.is_string() || x.get<std::string>() != "text")
          return bad_request("modalities: only \"text\" is supported", "modalities", "unsupported_parameter");
    }
    if (field(body, "audio")) return bad_request("audio: audio output is not supported", "audio", "unsupported_parameter");
  } else {
    bool echo = false;
    if (ApiError e = read_bool(body, "echo", "echo", &echo); !e.ok()) return e;
    if (echo) return bad_request("echo: not supported", "echo", "unsupported_parameter");
    if (const Json* s = field(body, "suffix"); s && !(s->is_string() && s->get<std::string>().empty()))
      return bad_request("suffix: not supported", "suffix", "unsupported_parameter");
    int64_t best_of = 1;
    if (ApiError e = read_int(body, "best_of", "best_of", 1, 1, &best_of); !e.ok()) return e;
  }
  return {};
}

ApiError read_logprobs(const Json& body, bool chat, int* out) {
  *out = -1;
  const std::string range = "[0, " + std::to_string(runtime::kMaxTopLogprobs) + "]";
  if (!chat) {  // legacy completions: logprobs is the number of alternatives
    int64_t n = -1;
    if (ApiError e = read_int(body, "logprobs", "logprobs", 0, runtime::kMaxTopLogprobs, &n); !e.ok()) return e;
    *out = static_cast<int>(n);
    return {};
  }
  bool on = false;
  if (ApiError e = read_bool(body, "logprobs", "logprobs", &on); !e.ok()) return e;
  int64_t top = 0;
  if (ApiError e = read_int(body, "top_logprobs", "top_logprobs", 0, runtime::kMaxTopLogprobs, &top); !e.ok()) return e;
  if (field(body, "top_logprobs") && !on)
    return bad_request("top_logprobs: needs \"logprobs\": true", "top_logprobs");
  if (on) *out = static_cast<int>(top);
  return {};
}

ApiError parse_body(const std::string& body, Json* out) {
  // Nesting is bounded before anything recursive (the serializer, the renderer) walks the value.
  if (json_nests_deeper_than(body, kMaxJsonDepth))
    return bad_request("the request body nests deeper than " + std::to_string(kMaxJsonDepth) + " levels", "",
                       "invalid_json");
  if (json_object_wider_than(body, kMaxJsonObjectMembers))
    return bad_request("an object in the request body has more than " + std::to_string(kMaxJsonObjectMembers) +
                           " members",
                       "", "invalid_json");
  *out = Json::parse(body, nullptr, /*allow_exceptions=*/false);
  if (out->is_discarded()) {
    // A number beyond a double (1e400) is valid JSON that nlohmann refuses: say so (parsing again
    // with exceptions only on this failure path, for the reason).
    try {
      const Json again = Json::parse(body);
      (void)again;
    } catch (const Json::out_of_range& e) {
      const std::string what = e.what();
      const size_t q = what.find('\'');
      return bad_request("the request body holds a number outside the range of a double" +
                             (q == std::string::npos ? std::string() : " (" + what.substr(q) + ")"),
                         "", "invalid_json");
    } catch (const std::exception&) {
    }
    return bad_request("the request body is not valid JSON (UTF-8)", "", "invalid_json");
  }
  if (!out->is_object()) return bad_request("the request body must be a JSON object", "", "invalid_json");
  return {};
}

}  // namespace strata::server
