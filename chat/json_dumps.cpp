#include "chat/json_dumps.h"

#include "core/json_nesting.h"

#include <charconv>
#include <cmath>
#include <cstdio>
#include <system_error>

namespace strata::chat {

namespace {

void dump(const Json& v, std::string* out) {
  switch (v.type()) {
    case Json::value_t::null:
      *out += "null";
      return;
    case Json::value_t::boolean:
      *out += v.get<bool>() ? "true" : "false";
      return;
    case Json::value_t::number_integer:
      *out += std::to_string(v.get<int64_t>());
      return;
    case Json::value_t::number_unsigned:
      *out += std::to_string(v.get<uint64_t>());
      return;
    case Json::value_t::number_float:
      *out += python_float_repr(v.get<double>());
      return;
    case Json::value_t::string:
      json_dumps_string(v.get_ref<const std::string&>(), out);
      return;
    case Json::value_t::array: {
      *out += '[';
      bool first = true;
      for (const Json& e : v) {
        if (!first) *out += ", ";
        first = false;
        dump(e, out);
      }
      *out += ']';
      return;
    }
    case Json::value_t::object: {
      *out += '{';
      bool first = true;
      for (auto it = v.begin(); it != v.end(); ++it) {
        if (!first) *out += ", ";
        first = false;
        json_dumps_string(it.key(), out);
        *out += ": ";
        dump(it.value(), out);
      }
      *out += '}';
      return;
    }
    case Json::value_t::binary:
    case Json::value_t::discarded:
      *out += "null";  // never produced by the JSON parser
      return;
  }
}

}  // namespace

void json_dumps_string(std::string_view s, std::string* out) {
  out->reserve(out->size() + s.size() + 2);
  *out += '"';
  for (const char ch : s) {
    const auto c = static_cast<unsigned char>(ch);
    switch (c) {
      case '"': *out += "\\\""; break;
      case '\\': *out += "\\\\"; break;
      case '\n': *out += "\\n"; break;
      case '\r': *out += "\\r"; break;
      case '\t': *out += "\\t"; break;
      case '\b': *out += "\\b"; break;
      case '\f': *out += "\\f"; break;
      default:
        if (c < 0x20) {
          char buf[8];
          std::snprintf(buf, sizeof buf, "\\u%04x", c);
          *out += buf;
        } else {
          *out += ch;  // ensure_ascii=False: everything else raw, DEL and non-ASCII included
        }
    }
  }
  *out += '"';
}

std::string python_float_repr(double v) {
  if (std::isnan(v)) return "NaN";
  if (std::isinf(v)) return v > 0 ? "Infinity" : "-Infinity";
  if (v == 0) return std::signbit(v) ? "-0.0" : "0.0";
  // Shortest round-trip digits, as Python's repr (David Gay's mode 0) picks them.
  char buf[64];
  const auto r = std::to_chars(buf, buf + sizeof buf, v, std::chars_format::scientific);
  std::string_view sci(buf, static_cast<size_t>(r.ptr - buf));  // "-d.ddde+XX"
  std::string out;
  if (sci.front() == '-') {
    out += '-';
    sci.remove_prefix(1);
  }
  const size_t e = sci.find('e');
  std::string digits;
  for (const char c : sci.substr(0, e))
    if (c != '.') digits += c;
  int exp10 = 0;
  std::from_chars(sci.data() + e + 1 + (sci[e + 1] == '+'), sci.data() + sci.size(), exp10);
  const int decpt = exp10 + 1;  // digits d1 d2 ... with the decimal point after decpt of them
  const int nd = static_cast<int>(digits.size());
  // pystrtod.c format_float_short, repr mode: exponent notation when decpt <= -4 or decpt > 16.
  if (decpt <= -4 || decpt > 16) {
    out += digits[0];
    if (nd > 1) {
      out += '.';
      out.append(digits, 1, std::string::npos);
    }
    char eb[16];
    std::snprintf(eb, sizeof eb, "e%c%02d", exp10 < 0 ? '-' : '+', exp10 < 0 ? -exp10 : exp10);
    out += eb;
  } else if (decpt <= 0) {
    out += "0.";
    out.append(static_cast<size_t>(-decpt), '0');
    out += digits;
  } else if (decpt >= nd) {
    out += digits;
    out.append(static_cast<size_t>(decpt - nd), '0');
    out += ".0";
  } else {
    out.append(digits, 0, static_cast<size_t>(decpt));
    out += '.';
    out.append(digits, static_cast<size_t>(decpt), std::string::npos);
  }
  return out;
}

Json parse_json_bounded(std::string_view text, int max_depth) {
  if (json_nests_deeper_than(text, max_depth)) return Json(Json::value_t::discarded);
  return Json::parse(text, nullptr, /*allow_exceptions=*/false);
}

std::string json_dumps(const Json& value) {
  std::string out;
  dump(value, &out);
  return out;
}

}  // namespace strata::chat
