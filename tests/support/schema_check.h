// A tiny JSON-schema validator for tests: the subset runtime::JsonGrammar compiles (type and type
// arrays, properties, required, additionalProperties false, items, minItems, maxItems, minLength,
// maxLength, enum, const, anyOf). Written separately from the grammar, on parsed values, so a test
// can check what the grammar let through. Returns "" when `v` is valid, else the first violation.
#pragma once

#include <nlohmann/json.hpp>
#include <string>

namespace strata::test {

inline size_t utf8_code_points(const std::string& s) {
  size_t n = 0;
  for (unsigned char c : s) n += (c & 0xC0) != 0x80;
  return n;
}

inline std::string schema_violation(const nlohmann::ordered_json& v, const nlohmann::ordered_json& s,
                                    const std::string& path = "$") {
  using J = nlohmann::ordered_json;
  if (s.is_boolean()) return s.get<bool>() ? "" : path + ": false schema";
  if (s.contains("const") && v != s["const"]) return path + ": not the const";
  if (s.contains("enum")) {
    bool found = false;
    for (const J& e : s["enum"]) found = found || e == v;
    if (!found) return path + ": not in enum";
  }
  if (s.contains("anyOf")) {
    for (const J& alt : s["anyOf"])
      if (schema_violation(v, alt, path).empty()) return "";
    return path + ": matches no anyOf alternative";
  }
  if (s.contains("type")) {
    auto is = [&](const std::string& t) {
      if (t == "object") return v.is_object();
      if (t == "array") return v.is_array();
      if (t == "string") return v.is_string();
      if (t == "number") return v.is_number();
      if (t == "integer") return v.is_number_integer();
      if (t == "boolean") return v.is_boolean();
      if (t == "null") return v.is_null();
      return false;
    };
    bool ok = false;
    if (s["type"].is_string())
      ok = is(s["type"].get<std::string>());
    else
      for (const J& t : s["type"]) ok = ok || is(t.get<std::string>());
    if (!ok) return path + ": wrong type " + std::string(v.type_name());
  }
  if (v.is_object()) {
    const J props = s.value("properties", J::object());
    for (const J& r : s.value("required", J::array()))
      if (!v.contains(r.get<std::string>())) return path + ": missing required '" + r.get<std::string>() + "'";
    for (auto it = v.begin(); it != v.end(); ++it) {
      if (props.contains(it.key())) {
        std::string e = schema_violation(it.value(), props[it.key()], path + "." + it.key());
        if (!e.empty()) return e;
      } else if (s.contains("additionalProperties") && s["additionalProperties"] == false) {
        return path + ": additional property '" + it.key() + "'";
      }
    }
  }
  if (v.is_array()) {
    if (s.contains("minItems") && v.size() < s["minItems"].get<size_t>()) return path + ": too few items";
    if (s.contains("maxItems") && v.size() > s["maxItems"].get<size_t>()) return path + ": too many items";
    if (s.contains("items"))
      for (size_t i = 0; i < v.size(); ++i) {
        std::string e = schema_violation(v[i], s["items"], path + "[" + std::to_string(i) + "]");
        if (!e.empty()) return e;
      }
  }
  if (v.is_string()) {
    const size_t n = utf8_code_points(v.get<std::string>());
    if (s.contains("minLength") && n < s["minLength"].get<size_t>()) return path + ": too short";
    if (s.contains("maxLength") && n > s["maxLength"].get<size_t>()) return path + ": too long";
  }
  return "";
}

}  // namespace strata::test
