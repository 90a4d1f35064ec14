// Python's json.dumps(x, ensure_ascii=False) for a JSON value, byte for byte — the serializer the
// V4.1 prompt format is written with (chat-and-api.md §4 "json(...)"): tool schemas, non-string
// tool-call arguments, response_format, and the arguments string of a parsed tool call.
//
//   separators ", " and ": "; keys in the value's own (input) order; strings with non-ASCII written
//   raw and only \" \\ \n \r \t \b \f escaped, other controls as \u00xx (lowercase hex, as Python);
//   integers as parsed; doubles as Python repr (shortest round trip, "1.0", "-0.0", "0.0001",
//   "1e-05", "100000.0", "1e+16"); NaN / infinities as NaN, Infinity, -Infinity (Python's default).
// nlohmann's dump() differs on every one of separators, float format and escapes, hence this file.
// Source: CPython Lib/json/encoder.py and Python/pystrtod.c (repr rules), re-implemented.
// Thread safety: pure functions.
#pragma once

#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

namespace strata::chat {

// JSON values keep their keys in input order, as Python dicts do.
using Json = nlohmann::ordered_json;

// json.dumps(value, ensure_ascii=False). REQUIRES: strings hold valid UTF-8 (nlohmann checks this
// when parsing).
std::string json_dumps(const Json& value);

// Appends json.dumps of one string (with its quotes) to `out`.
void json_dumps_string(std::string_view s, std::string* out);

// Deepest nesting accepted from JSON text that is rendered or re-serialized (json_dumps and the
// renderer recurse once per level; text from a client or the model must not exhaust the stack).
inline constexpr int kMaxJsonNesting = 128;

// nlohmann's parse(text, nullptr, /*allow_exceptions=*/false), except that text nested deeper than
// `max_depth` arrays/objects is refused the same way as invalid JSON: the result is_discarded().
// (The depth is found first by strata::json_nests_deeper_than, core/json_nesting.h.)
Json parse_json_bounded(std::string_view text, int max_depth = kMaxJsonNesting);

// Python repr() of a double ("0.1", "1e-05", "1e+16", "-0.0", "inf" is written as Infinity).
std::string python_float_repr(double v);

}  // namespace strata::chat
