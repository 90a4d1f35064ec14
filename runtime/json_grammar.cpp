#include "runtime/json_grammar.h"

#include <algorithm>
#include <cmath>
#include <set>

namespace strata::runtime {

namespace {

using Json = nlohmann::ordered_json;

// Keywords that only annotate a schema: accepted and ignored.
bool is_annotation(const std::string& k) {
  return k == "title" || k == "description" || k == "default" || k == "examples" || k == "$schema" || k == "$id" ||
         k == "$comment";
}

bool is_supported(const std::string& k) {
  static const char* const kSupported[] = {"type",      "properties", "required", "additionalProperties",
                                           "items",     "minItems",   "maxItems", "minLength",
                                           "maxLength", "enum",       "const",    "anyOf"};
  for (const char* s : kSupported)
    if (k == s) return true;
  return is_annotation(k);
}

constexpr std::string_view kSupportedList =
    "type, properties, required, additionalProperties, items, minItems, maxItems, minLength, maxLength, enum, const, "
    "anyOf";

// DSML tags (chat/dsml.h; runtime cannot include chat, so the few needed are spelled here).
constexpr std::string_view kParamOpen = "<｜DSML｜ parameter name=\"";
constexpr std::string_view kParamClose = "</｜DSML｜ parameter>\n";
constexpr std::string_view kInvokeOpen = "<｜DSML｜ invoke name=\"";
constexpr std::string_view kInvokeCloseCalls = "</｜DSML｜ invoke>\n</｜DSML｜ calls>";

// Number limits (header: DECISION).
constexpr int kMaxIntDigits = 15, kMaxFracDigits = 15, kMaxExpDigits = 2;  // 1e114 at most: a double
// Generic values (json_object, {} schemas).
constexpr int64_t kAnyStringMax = 512, kAnyMembersMax = 64;
constexpr int32_t kAnyDepth = 8;

// The JSON text of an enum/const value or a key. In a DSML call (`dsml`) '<' is written \u003c, so
// no JSON text can hold a closing tag such as `</｜DSML｜parameter>` (chat-and-api.md §5: a value
// runs to the closing tag, taken raw; a '<' inside a JSON string is the only way one could appear).
std::string json_text(const Json& v, bool dsml) {
  std::string t = v.dump();
  if (!dsml) return t;
  std::string out;
  for (const char ch : t) {
    if (ch == '<')
      out += "\\u003c";
    else
      out += ch;
  }
  return out;
}

// Whether enum/const value `v` is of JSON Schema type `t`.
bool of_type(const Json& v, const std::string& t) {
  if (t == "string") return v.is_string();
  if (t == "integer")
    return v.is_number_integer() || (v.is_number_float() && std::trunc(v.get<double>()) == v.get<double>());
  if (t == "number") return v.is_number();
  if (t == "boolean") return v.is_boolean();
  if (t == "null") return v.is_null();
  if (t == "object") return v.is_object();
  if (t == "array") return v.is_array();
  return false;
}

Status bad(const std::string& path, const std::string& what) { return InvalidArgument(path + ": " + what); }

Status read_count(const Json& s, const char* key, const std::string& path, int64_t* out) {
  auto it = s.find(key);
  if (it == s.end()) return Status();
  if (!it->is_number_integer() || (it->is_number_unsigned() ? false : it->get<int64_t>() < 0))
    return bad(path + "." + key, "expected a non-negative integer");
  if (it->is_number_unsigned() && it->get<uint64_t>() > static_cast<uint64_t>(INT32_MAX))
    return bad(path + "." + key, "larger than " + std::to_string(INT32_MAX));
  *out = it->get<int64_t>();
  return Status();
}

bool number_complete(uint8_t st) { return st == 2 || st == 3 || st == 5 || st == 8; }
bool is_digit(uint8_t b) { return b >= '0' && b <= '9'; }
bool is_hex(uint8_t b) { return is_digit(b) || (b >= 'a' && b <= 'f') || (b >= 'A' && b <= 'F'); }

}  // namespace

int32_t JsonGrammar::add(Node n) {
  if (n.kind == Kind::kObject) {
    // The member texts (keys, then the closing tags as index keys.size()) in byte order, and the
    // first required property from each index on: what step() matches a member start against.
    const auto n_props = static_cast<int32_t>(n.keys.size());
    const auto text = [&n, n_props](int32_t j) -> const std::string& { return j == n_props ? n.close : n.keys[static_cast<size_t>(j)]; };
    n.by_text.clear();
    for (int32_t j = 0; j < n_props; ++j) n.by_text.push_back(j);
    if (!n.close.empty()) n.by_text.push_back(n_props);
    std::stable_sort(n.by_text.begin(), n.by_text.end(), [&](int32_t a, int32_t b) { return text(a) < text(b); });
    n.next_required.assign(static_cast<size_t>(n_props) + 1, n_props);
    for (int32_t j = n_props - 1; j >= 0; --j)
      n.next_required[static_cast<size_t>(j)] = n.required[static_cast<size_t>(j)] ? j : n.next_required[static_cast<size_t>(j) + 1];
  }
  nodes_.push_back(std::move(n));
  return static_cast<int32_t>(nodes_.size()) - 1;
}

int32_t JsonGrammar::add_literals(std::vector<std::string> lits) {
  std::sort(lits.begin(), lits.end());
  lits.erase(std::unique(lits.begin(), lits.end()), lits.end());
  Node n;
  n.kind = Kind::kLiterals;
  n.literals = std::move(lits);
  return add(std::move(n));
}

std::array<bool, 256> JsonGrammar::first_bytes(int32_t node) const {
  std::array<bool, 256> f{};
  const Node& n = nodes_[static_cast<size_t>(node)];
  switch (n.kind) {
    case Kind::kObject:
      if (n.style == ObjectStyle::kJson)
        f['{'] = true;
      else
        f['<'] = true;
      break;
    case Kind::kAnyObject:
      f['{'] = true;
      break;
    case Kind::kArray:
      f['['] = true;
      break;
    case Kind::kString:
      f['"'] = true;
      break;
    case Kind::kRawString:
      for (int b = 0; b < 256; ++b) f[static_cast<size_t>(b)] = true;
      break;
    case Kind::kNumber:
    case Kind::kInteger:
      f['-'] = true;
      for (int b = '0'; b <= '9'; ++b) f[static_cast<size_t>(b)] = true;
      break;
    case Kind::kLiterals:
      for (const std::string& l : n.literals)
        if (!l.empty()) f[static_cast<uint8_t>(l[0])] = true;
      break;
    case Kind::kUnion:
      for (int b = 0; b < 256; ++b) f[static_cast<size_t>(b)] = n.by_first[static_cast<size_t>(b)] >= 0;
      break;
  }
  return f;
}

Status JsonGrammar::add_union(std::vector<int32_t> alts, const std::string& path, int32_t* out) {
  Node u;
  u.kind = Kind::kUnion;
  u.by_first.fill(-1);
  for (int32_t a : alts) {
    const std::array<bool, 256> f = first_bytes(a);
    for (size_t b = 0; b < 256; ++b) {
      if (!f[b]) continue;
      if (u.by_first[b] >= 0 && u.by_first[b] != a)
        return bad(path, "alternatives that can start with the same byte ('" + std::string(1, static_cast<char>(b)) +
                             "') are not supported (each alternative must be a different JSON type)");
      u.by_first[b] = a;
    }
  }
  *out = add(std::move(u));
  return Status();
}

int32_t JsonGrammar::any_value(int32_t max_depth) {
  // One generic value: '{' / '[' open containers of generic values (only below max_depth frames).
  Node str;
  str.kind = Kind::kString;
  str.max_count = kAnyStringMax;
  const int32_t s = add(str);
  Node num;
  num.kind = Kind::kNumber;
  const int32_t n = add(num);
  const int32_t lit = add_literals({"true", "false", "null"});
  Node u;
  u.kind = Kind::kUnion;
  u.by_first.fill(-1);
  u.max_depth = max_depth;
  const int32_t any = add(u);
  Node obj;
  obj.kind = Kind::kAnyObject;
  obj.items = s;
  obj.value = any;
  obj.max_count = kAnyMembersMax;
  const int32_t o = add(obj);
  Node arr;
  arr.kind = Kind::kArray;
  arr.items = any;
  arr.max_count = kAnyMembersMax;
  const int32_t a = add(arr);
  Node& un = nodes_[static_cast<size_t>(any)];
  un.by_first['"'] = s;
  un.by_first['-'] = n;
  for (int b = '0'; b <= '9'; ++b) un.by_first[static_cast<size_t>(b)] = n;
  un.by_first['t'] = un.by_first['f'] = un.by_first['n'] = lit;
  un.by_first['{'] = o;
  un.by_first['['] = a;
  return any;
}

Status JsonGrammar::compile(const Json& s, const std::string& path, bool raw_string_ok, int32_t* out, bool* raw) {
  *raw = false;
  // Limits (header): checked before the subschema is compiled, so the cost of a request is bounded.
  if (++n_schemas_ > kMaxSchemas)
    return bad(path, "more than " + std::to_string(kMaxSchemas) + " subschemas in one schema (the limit)");
  if (depth_ >= kMaxDepth)
    return bad(path, "nested deeper than " + std::to_string(kMaxDepth) + " levels (the limit)");
  struct DepthGuard {
    int32_t* d;
    explicit DepthGuard(int32_t* x) : d(x) { ++*d; }
    ~DepthGuard() { --*d; }
  } guard(&depth_);
  if (s.is_boolean() && s.get<bool>()) {
    *out = any_value(kAnyDepth);
    return Status();
  }
  if (!s.is_object()) return bad(path, "expected a schema object");
  for (auto it = s.begin(); it != s.end(); ++it)
    if (!is_supported(it.key()))
      return bad(path + "." + it.key(), "unsupported keyword '" + it.key() + "' (structured output supports " +
                                            std::string(kSupportedList) + ")");
  // enum / const: the values' compact JSON texts (raw strings in DSML when all are strings).
  if (s.contains("const") || s.contains("enum")) {
    std::vector<Json> values;
    if (s.contains("const")) values.push_back(s["const"]);
    if (s.contains("enum")) {
      const Json& e = s["enum"];
      if (!e.is_array() || e.empty()) return bad(path + ".enum", "expected a non-empty array");
      if (s.contains("const")) return bad(path + ".enum", "enum and const together are not supported");
      for (const Json& v : e) values.push_back(v);
    }
    const std::string vpath = path + (s.contains("const") ? ".const" : ".enum");
    // A value outside the schema's `type` could never be valid: 400 rather than generate it.
    if (auto t = s.find("type"); t != s.end() && (t->is_string() || t->is_array())) {
      const std::vector<std::string> types =
          t->is_string() ? std::vector<std::string>{t->get<std::string>()} : std::vector<std::string>{};
      for (size_t i = 0; i < values.size(); ++i) {
        bool ok = false;
        if (t->is_string()) ok = of_type(values[i], types[0]);
        for (const Json& x : t->is_array() ? *t : Json::array()) ok = ok || (x.is_string() && of_type(values[i], x));
        if (!ok)
          return bad(s.contains("const") ? vpath : vpath + "[" + std::to_string(i) + "]",
                     "value " + values[i].dump() + " is not of the schema's type " + t->dump());
      }
    }
    bool all_raw = raw_string_ok;
    for (const Json& v : values)
      all_raw = all_raw && v.is_string() && v.get_ref<const std::string&>().find('<') == std::string::npos;
    std::vector<std::string> lits;
    for (const Json& v : values) lits.push_back(all_raw ? v.get<std::string>() : json_text(v, dsml_));
    if (all_raw)
      for (const std::string& l : lits)
        if (l.empty()) all_raw = false;  // an empty raw value has no first byte to dispatch on; write JSON
    if (!all_raw) {
      lits.clear();
      for (const Json& v : values) lits.push_back(json_text(v, dsml_));
    }
    n_literals_ += lits.size();
    for (const std::string& l : lits) literal_bytes_ += l.size();
    if (n_literals_ > kMaxEnumValues)
      return bad(vpath, "more than " + std::to_string(kMaxEnumValues) + " enum/const values in one schema (the limit)");
    if (literal_bytes_ > kMaxEnumBytes)
      return bad(vpath, "enum/const values longer than " + std::to_string(kMaxEnumBytes) +
                            " bytes of JSON text in one schema (the limit)");
    *raw = all_raw;
    *out = add_literals(std::move(lits));
    return Status();
  }
  if (s.contains("anyOf")) {
    const Json& a = s["anyOf"];
    if (!a.is_array() || a.empty()) return bad(path + ".anyOf", "expected a non-empty array of schemas");
    std::vector<int32_t> alts;
    for (size_t i = 0; i < a.size(); ++i) {
      int32_t n = 0;
      bool r = false;
      STRATA_RETURN_IF_ERROR(compile(a[i], path + ".anyOf[" + std::to_string(i) + "]", false, &n, &r));
      alts.push_back(n);
    }
    return add_union(std::move(alts), path + ".anyOf", out);
  }
  std::vector<std::string> types;
  if (auto t = s.find("type"); t != s.end()) {
    if (t->is_string()) {
      types.push_back(t->get<std::string>());
    } else if (t->is_array() && !t->empty()) {
      for (const Json& x : *t) {
        if (!x.is_string()) return bad(path + ".type", "expected a type name or an array of them");
        types.push_back(x.get<std::string>());
      }
    } else {
      return bad(path + ".type", "expected a type name or an array of them");
    }
  } else if (s.contains("properties") || s.contains("required") || s.contains("additionalProperties")) {
    types.push_back("object");
  } else if (s.contains("items")) {
    types.push_back("array");
  } else {
    *out = any_value(kAnyDepth);
    return Status();
  }
  std::vector<int32_t> alts;
  const bool has_number = std::find(types.begin(), types.end(), "number") != types.end();
  for (const std::string& t : types) {
    int32_t n = -1;
    if (t == "object") {
      STRATA_RETURN_IF_ERROR(compile_object(s, path, &n));
    } else if (t == "array") {
      Node a;
      a.kind = Kind::kArray;
      STRATA_RETURN_IF_ERROR(read_count(s, "minItems", path, &a.min_count));
      STRATA_RETURN_IF_ERROR(read_count(s, "maxItems", path, &a.max_count));
      if (a.max_count >= 0 && a.min_count > a.max_count) return bad(path + ".minItems", "greater than maxItems");
      if (auto it = s.find("items"); it != s.end()) {
        if (it->is_array()) return bad(path + ".items", "tuple items (an array of schemas) are not supported");
        bool r = false;
        STRATA_RETURN_IF_ERROR(compile(*it, path + ".items", false, &a.items, &r));
      } else {
        a.items = any_value(kAnyDepth);
      }
      n = add(std::move(a));
    } else if (t == "string") {
      Node str;
      str.kind = raw_string_ok && types.size() == 1 ? Kind::kRawString : Kind::kString;
      STRATA_RETURN_IF_ERROR(read_count(s, "minLength", path, &str.min_count));
      STRATA_RETURN_IF_ERROR(read_count(s, "maxLength", path, &str.max_count));
      if (str.max_count >= 0 && str.min_count > str.max_count)
        return bad(path + ".minLength", "greater than maxLength");
      *raw = str.kind == Kind::kRawString;
      n = add(std::move(str));
    } else if (t == "number" || t == "integer") {
      if (t == "integer" && has_number) continue;  // number covers it
      Node num;
      num.kind = t == "number" ? Kind::kNumber : Kind::kInteger;
      n = add(std::move(num));
    } else if (t == "boolean") {
      n = add_literals({"true", "false"});
    } else if (t == "null") {
      n = add_literals({"null"});
    } else {
      return bad(path + ".type", "unknown type '" + t + "' (object, array, string, number, integer, boolean, null)");
    }
    alts.push_back(n);
  }
  if (alts.size() == 1) {
    *out = alts[0];
    return Status();
  }
  *raw = false;
  return add_union(std::move(alts), path + ".type", out);
}

Status JsonGrammar::compile_object(const Json& s, const std::string& path, int32_t* out) {
  const Json* props = s.contains("properties") ? &s["properties"] : nullptr;
  if (props && !props->is_object()) return bad(path + ".properties", "expected an object");
  bool additional = true;
  if (auto it = s.find("additionalProperties"); it != s.end()) {
    if (!it->is_boolean()) return bad(path + ".additionalProperties", "only true or false is supported");
    additional = it->get<bool>();
  }
  std::set<std::string> required;
  if (auto it = s.find("required"); it != s.end()) {
    if (!it->is_array()) return bad(path + ".required", "expected an array of property names");
    for (const Json& r : *it) {
      if (!r.is_string()) return bad(path + ".required", "expected an array of property names");
      if (!props || !props->contains(r.get<std::string>()))
        return bad(path + ".required", "'" + r.get<std::string>() + "' is not in properties");
      required.insert(r.get<std::string>());
    }
  }
  if (!props && additional) {  // any object
    const int32_t any = any_value(kAnyDepth);
    *out = nodes_[static_cast<size_t>(any)].by_first['{'];
    return Status();
  }
  Node o;
  o.kind = Kind::kObject;
  o.style = ObjectStyle::kJson;
  if (props) {
    if (props->size() > kMaxProperties)
      return bad(path + ".properties", "more than " + std::to_string(kMaxProperties) + " properties in one object");
    for (auto it = props->begin(); it != props->end(); ++it) {
      int32_t v = 0;
      bool r = false;
      STRATA_RETURN_IF_ERROR(compile(it.value(), path + ".properties." + it.key(), false, &v, &r));
      o.keys.push_back(json_text(Json(it.key()), dsml_) + ":");
      o.values.push_back(v);
      o.required.push_back(required.count(it.key()) > 0);
    }
  }
  *out = add(std::move(o));
  return Status();
}

Result<JsonGrammar> JsonGrammar::from_schema(const Json& schema, const std::string& path) {
  JsonGrammar g;
  bool raw = false;
  STRATA_RETURN_IF_ERROR(g.compile(schema, path, false, &g.root_, &raw));
  return g;
}

JsonGrammar JsonGrammar::any_object() {
  JsonGrammar g;
  const int32_t any = g.any_value(kAnyDepth);
  g.root_ = g.nodes_[static_cast<size_t>(any)].by_first['{'];
  return g;
}

Result<JsonGrammar> JsonGrammar::dsml_call(std::span<const DsmlTool> tools, bool named, const std::string& path) {
  if (tools.empty()) return InvalidArgument(path + ": no tools to call");
  JsonGrammar g;
  g.dsml_ = true;
  std::vector<int32_t> bodies;
  for (size_t t = 0; t < tools.size(); ++t) {
    const DsmlTool& tool = tools[t];
    const std::string tp = path + "[" + std::to_string(t) + "].function.parameters";
    Node o;
    o.kind = Kind::kObject;
    o.style = ObjectStyle::kDsmlInvoke;
    o.close = std::string(kInvokeCloseCalls);
    const Json& p = tool.parameters;
    if (!p.is_null()) {
      if (!p.is_object()) return bad(tp, "expected a schema object");
      for (auto it = p.begin(); it != p.end(); ++it)
        if (!is_supported(it.key()))
          return bad(tp + "." + it.key(), "unsupported keyword '" + it.key() + "' (structured output supports " +
                                              std::string(kSupportedList) + ")");
      if (p.contains("type") && p["type"] != "object")
        return bad(tp + ".type", "tool parameters must be an object schema");
      std::set<std::string> required;
      if (auto it = p.find("required"); it != p.end() && it->is_array())
        for (const Json& r : *it)
          if (r.is_string()) required.insert(r.get<std::string>());
      if (auto it = p.find("properties"); it != p.end()) {
        if (!it->is_object()) return bad(tp + ".properties", "expected an object");
        if (it->size() > kMaxProperties)
          return bad(tp + ".properties", "more than " + std::to_string(kMaxProperties) + " properties in one object");
        for (auto q = it->begin(); q != it->end(); ++q) {
          const std::string& key = q.key();
          if (key.empty() || key.find_first_of("\"<\n") != std::string::npos)
            return bad(tp + ".properties", "property name '" + key + "' cannot be written in a DSML tag");
          int32_t v = 0;
          bool raw = false;
          STRATA_RETURN_IF_ERROR(g.compile(q.value(), tp + ".properties." + key, true, &v, &raw));
          o.keys.push_back(std::string(kParamOpen) + key + "\" string=\"" + (raw ? "true" : "false") + "\">");
          o.values.push_back(v);
          o.required.push_back(required.count(key) > 0);
        }
      }
    }
    bodies.push_back(g.add(std::move(o)));
    if (named) break;
  }
  if (named) {
    g.root_ = bodies[0];
    return g;
  }
  Node choice;
  choice.kind = Kind::kObject;
  choice.style = ObjectStyle::kDsmlChoice;
  for (size_t t = 0; t < bodies.size(); ++t) {
    choice.keys.push_back(std::string(kInvokeOpen) + tools[t].name + "\">\n");
    choice.values.push_back(bodies[t]);
    choice.required.push_back(false);
  }
  if (choice.keys.size() > kMaxTools) return bad(path, "more than " + std::to_string(kMaxTools) + " tools");
  g.root_ = g.add(std::move(choice));
  return g;
}

JsonGrammar::Frame JsonGrammar::fresh(int32_t node, const Node& n) {
  Frame f;
  f.node = node;
  if (n.kind == Kind::kLiterals) f.hi = static_cast<uint16_t>(n.literals.size());
  if (n.kind == Kind::kObject && n.style != ObjectStyle::kJson) f.st = 1;  // no opening byte
  return f;
}

JsonGrammar::State JsonGrammar::start() const {
  State s;
  s.frames.push_back(fresh(root_, nodes_[static_cast<size_t>(root_)]));
  return s;
}

JsonGrammar::Cursor JsonGrammar::load(const State& s, std::vector<Frame>* arena) const {
  arena->clear();
  Cursor c;
  c.depth = static_cast<int32_t>(s.frames.size());
  for (size_t i = 0; i + 1 < s.frames.size(); ++i) {
    Frame f = s.frames[i];
    f.parent = static_cast<int32_t>(i) - 1;
    arena->push_back(f);
  }
  if (!s.frames.empty()) {
    c.top = s.frames.back();
    c.top.parent = static_cast<int32_t>(s.frames.size()) - 2;
  }
  return c;
}

JsonGrammar::State JsonGrammar::save(const Cursor& c, const std::vector<Frame>& arena) const {
  State s;
  if (c.depth == 0) return s;
  s.frames.push_back(c.top);
  for (int32_t p = c.top.parent; p >= 0; p = arena[static_cast<size_t>(p)].parent)
    s.frames.push_back(arena[static_cast<size_t>(p)]);
  std::reverse(s.frames.begin(), s.frames.end());
  return s;
}

void JsonGrammar::push(Cursor* c, int32_t node, std::vector<Frame>* arena) const {
  arena->push_back(c->top);
  Frame f = fresh(node, nodes_[static_cast<size_t>(node)]);
  f.parent = static_cast<int32_t>(arena->size()) - 1;
  c->top = f;
  ++c->depth;
}

void JsonGrammar::pop(Cursor* c, const std::vector<Frame>& arena) const {
  --c->depth;
  if (c->top.parent >= 0) c->top = arena[static_cast<size_t>(c->top.parent)];
}

bool JsonGrammar::step_utf8(Frame* f, uint8_t b) const {
  if (f->u8_need > 0) {
    if (b < f->u8_lo || b > f->u8_hi) return false;
    --f->u8_need;
    f->u8_lo = 0x80;
    f->u8_hi = 0xBF;
    return true;
  }
  // A lead byte (RFC 3629 table: no overlong forms, no surrogates, nothing above U+10FFFF).
  if (b < 0x80) {
  } else if (b >= 0xC2 && b <= 0xDF) {
    f->u8_need = 1;
  } else if (b >= 0xE0 && b <= 0xEF) {
    f->u8_need = 2;
    if (b == 0xE0) f->u8_lo = 0xA0;
    if (b == 0xED) f->u8_hi = 0x9F;
  } else if (b >= 0xF0 && b <= 0xF4) {
    f->u8_need = 3;
    if (b == 0xF0) f->u8_lo = 0x90;
    if (b == 0xF4) f->u8_hi = 0x8F;
  } else {
    return false;
  }
  ++f->count;
  return true;
}

bool JsonGrammar::step(Cursor* c, uint8_t b, std::vector<Frame>* arena) const {
  for (;;) {
    if (c->depth == 0) return false;
    Frame& f = c->top;
    const Node& n = nodes_[static_cast<size_t>(f.node)];
    switch (n.kind) {
      case Kind::kLiterals: {
        // The literals in [lo, hi) share their first `pos` bytes and are sorted, so those with byte b
        // at `pos` are one run (a literal that ends at `pos` sorts first): two binary searches, not a
        // scan, so a step costs O(log values) however long the enum (docs/serving.md#structured-output).
        const auto byte_at = [&](int32_t k) -> int {
          const std::string& l = n.literals[static_cast<size_t>(k)];
          return l.size() > f.pos ? static_cast<uint8_t>(l[f.pos]) : -1;
        };
        int32_t a = f.lo, z = f.hi;
        while (a < z) {  // first k with byte_at(k) >= b
          const int32_t m = a + (z - a) / 2;
          if (byte_at(m) < b)
            a = m + 1;
          else
            z = m;
        }
        const int32_t nlo = a;
        z = f.hi;
        while (a < z) {  // first k with byte_at(k) > b
          const int32_t m = a + (z - a) / 2;
          if (byte_at(m) <= b)
            a = m + 1;
          else
            z = m;
        }
        const int32_t nhi = a;
        if (nlo < nhi) {
          f.lo = static_cast<uint16_t>(nlo);
          f.hi = static_cast<uint16_t>(nhi);
          ++f.pos;
          return true;
        }
        // A complete literal (sorted: the shortest of the range) ends here; b is the parent's.
        if (f.pos > 0 && n.literals[f.lo].size() == f.pos) {
          pop(c, *arena);
          continue;
        }
        return false;
      }
      case Kind::kNumber:
      case Kind::kInteger: {
        const bool integer = n.kind == Kind::kInteger;
        const bool digit = is_digit(b);
        switch (f.st) {
          case 0:
            if (b == '-') {
              f.st = 1;
              return true;
            }
            [[fallthrough]];
          case 1:
            if (b == '0') {
              f.st = 2;
              return true;
            }
            if (digit) {
              f.st = 3;
              f.count = 1;
              return true;
            }
            return false;
          case 2:
          case 3:
            if (f.st == 3 && digit && f.count < kMaxIntDigits) {
              ++f.count;
              return true;
            }
            if (!integer && b == '.') {
              f.st = 4;
              return true;
            }
            if (!integer && (b == 'e' || b == 'E')) {
              f.st = 6;
              return true;
            }
            break;
          case 4:
            if (!digit) return false;
            f.st = 5;
            f.count = 1;
            return true;
          case 5:
            if (digit && f.count < kMaxFracDigits) {
              ++f.count;
              return true;
            }
            if (b == 'e' || b == 'E') {
              f.st = 6;
              return true;
            }
            break;
          case 6:
            if (b == '+' || b == '-') {
              f.st = 7;
              return true;
            }
            [[fallthrough]];
          case 7:
            if (!digit) return false;
            f.st = 8;
            f.count = 1;
            return true;
          case 8:
            if (digit && f.count < kMaxExpDigits) {
              ++f.count;
              return true;
            }
            break;
          default:
            return false;
        }
        // The number is complete; b belongs to the enclosing value.
        pop(c, *arena);
        continue;
      }
      case Kind::kString:
        switch (f.st) {
          case 0:
            if (b != '"') return false;
            f.st = 1;
            return true;
          case 1:
            if (f.u8_need > 0) return step_utf8(&f, b);
            if (b == '"') {
              if (f.count < n.min_count) return false;
              pop(c, *arena);
              return true;
            }
            if (n.max_count >= 0 && f.count >= n.max_count) return false;
            if (b == '\\') {
              f.st = 2;
              return true;
            }
            if (b < 0x20 || (b == '<' && dsml_)) return false;  // DSML: '<' is written \u003c (json_text)
            return step_utf8(&f, b);
          case 2:
            if (b == '"' || b == '\\' || b == '/' || b == 'b' || b == 'f' || b == 'n' || b == 'r' || b == 't') {
              f.st = 1;
              ++f.count;
              return true;
            }
            if (b != 'u') return false;
            f.st = 3;
            return true;
          default:  // 3..6: the four hex digits of \u
            if (!is_hex(b) || (f.st == 3 && (b == 'd' || b == 'D'))) return false;
            if (f.st == 6) {
              f.st = 1;
              ++f.count;
            } else {
              ++f.st;
            }
            return true;
        }
      case Kind::kRawString:
        if (f.u8_need > 0) return step_utf8(&f, b);
        if (b == '<') {  // the closing tag begins: the parent's byte
          if (f.count < n.min_count) return false;
          pop(c, *arena);
          continue;
        }
        if (n.max_count >= 0 && f.count >= n.max_count) return false;
        if (b < 0x20 && b != '\n' && b != '\t') return false;
        return step_utf8(&f, b);
      case Kind::kArray:
        switch (f.st) {
          case 0:
            if (b != '[') return false;
            f.st = 1;
            return true;
          case 1:
            if (b == ']') {
              if (n.min_count > 0) return false;
              pop(c, *arena);
              return true;
            }
            if (n.max_count == 0) return false;
            f.st = 2;
            ++f.count;
            push(c, n.items, arena);
            continue;
          case 2:
            if (b == ',' && (n.max_count < 0 || f.count < n.max_count)) {
              f.st = 3;
              return true;
            }
            if (b == ']' && f.count >= n.min_count) {
              pop(c, *arena);
              return true;
            }
            return false;
          case 3:
            if (b == ' ') {
              f.st = 4;
              return true;
            }
            [[fallthrough]];
          default:
            f.st = 2;
            ++f.count;
            push(c, n.items, arena);
            continue;
        }
      case Kind::kAnyObject:
        switch (f.st) {
          case 0:
            if (b != '{') return false;
            f.st = 1;
            return true;
          case 1:
            if (b == '}') {
              pop(c, *arena);
              return true;
            }
            f.st = 5;
            ++f.count;
            push(c, n.items, arena);
            continue;
          case 5:
            if (b != ':') return false;
            f.st = 6;
            return true;
          case 6:
            if (b == ' ') {
              f.st = 7;
              return true;
            }
            [[fallthrough]];
          case 7:
            f.st = 2;
            push(c, n.value, arena);
            continue;
          case 2:
            if (b == ',' && f.count < n.max_count) {
              f.st = 3;
              return true;
            }
            if (b == '}') {
              pop(c, *arena);
              return true;
            }
            return false;
          case 3:
            if (b == ' ') {
              f.st = 4;
              return true;
            }
            [[fallthrough]];
          default:
            f.st = 5;
            ++f.count;
            push(c, n.items, arena);
            continue;
        }
      case Kind::kUnion: {
        const int32_t alt = n.by_first[b];
        if (alt < 0) return false;
        if (n.max_depth > 0 && c->depth > n.max_depth && (b == '{' || b == '[')) return false;
        Frame nf = fresh(alt, nodes_[static_cast<size_t>(alt)]);
        nf.parent = f.parent;
        c->top = nf;
        continue;
      }
      case Kind::kObject: {
        const auto n_props = static_cast<int32_t>(n.keys.size());
        const bool json = n.style == ObjectStyle::kJson;
        // Candidates at a member start: the next properties up to the first required one; the close
        // (index n_props) when no required property remains. A choice takes exactly one member.
        // While a member's text is matched, by_text[lo, hi) are the texts that share the bytes
        // matched so far (contiguous: by_text is in byte order); a byte narrows the range, and is
        // allowed when some candidate in the new range is still eligible.
        const int32_t last = n.next_required[static_cast<size_t>(f.count)];  // last eligible property
        const bool req_left = last < n_props;
        auto text = [&](int32_t j) -> const std::string& { return j == n_props ? n.close : n.keys[static_cast<size_t>(j)]; };
        auto match = [&]() -> bool {
          const size_t pos = f.pos;
          const auto key = [&](int32_t j) -> int { const std::string& t = text(j); return t.size() > pos ? static_cast<uint8_t>(t[pos]) : -1; };
          const auto first = n.by_text.begin() + f.lo, end = n.by_text.begin() + f.hi;
          const auto a = std::partition_point(first, end, [&](int32_t j) { return key(j) < b; });
          const auto e = std::partition_point(a, end, [&](int32_t j) { return key(j) <= b; });
          int32_t done = -1;
          bool any = false;
          for (auto it = a; it != e; ++it) {
            const int32_t j = *it;
            if (j == n_props ? !f.close_ok : (j < f.count || j > last)) continue;
            any = true;
            if (text(j).size() == pos + 1) {
              done = j;
              break;
            }
          }
          if (!any) return false;
          f.lo = static_cast<uint16_t>(a - n.by_text.begin());
          f.hi = static_cast<uint16_t>(e - n.by_text.begin());
          ++f.pos;
          if (done < 0) return true;
          if (done == n_props) {  // the closing tags
            pop(c, *arena);
            return true;
          }
          if (n.style == ObjectStyle::kDsmlChoice) {  // the invoke's body replaces the choice
            const int32_t body = n.values[static_cast<size_t>(done)];
            Frame nf = fresh(body, nodes_[static_cast<size_t>(body)]);
            nf.parent = f.parent;
            c->top = nf;
            return true;
          }
          f.count = done + 1;
          if (json) {
            f.st = 6;
            return true;
          }
          f.st = 9;
          f.pos = 0;
          push(c, n.values[static_cast<size_t>(done)], arena);
          return true;
        };
        auto start_key = [&](bool allow_close) -> bool {
          f.close_ok = allow_close && !req_left && !json && !n.close.empty();
          f.lo = 0;
          f.hi = static_cast<uint16_t>(n.by_text.size());
          f.pos = 0;
          f.st = 5;
          return match();
        };
        switch (f.st) {
          case 0:  // JSON only
            if (b != '{') return false;
            f.st = 1;
            return true;
          case 1:
            if (json && b == '}') {
              if (req_left) return false;
              pop(c, *arena);
              return true;
            }
            return start_key(/*allow_close=*/true);
          case 2:  // JSON: after a value
            if (b == ',' && f.count < n_props) {
              f.st = 3;
              return true;
            }
            if (b == '}' && !req_left) {
              pop(c, *arena);
              return true;
            }
            return false;
          case 3:
            if (b == ' ') {
              f.st = 4;
              return true;
            }
            return start_key(false);
          case 4:
            return start_key(false);
          case 5:  // matching a key (or the close) against the candidates
            return match();
          case 6:  // JSON: after `"key":`
            if (b == ' ') {
              f.st = 7;
              return true;
            }
            [[fallthrough]];
          case 7:
            f.st = 2;
            push(c, n.values[static_cast<size_t>(f.count - 1)], arena);
            continue;
          case 9:  // DSML: the parameter's closing tag
            if (f.pos >= kParamClose.size() || static_cast<uint8_t>(kParamClose[f.pos]) != b) return false;
            if (++f.pos == kParamClose.size()) {
              f.st = 1;
              f.pos = 0;
            }
            return true;
          default:
            return false;
        }
      }
    }
  }
}

bool JsonGrammar::can_end(const Cursor& c0, const std::vector<Frame>& arena) const {
  Cursor c = c0;
  for (;;) {
    if (c.depth == 0) return true;
    const Node& n = nodes_[static_cast<size_t>(c.top.node)];
    const bool open_number = (n.kind == Kind::kNumber || n.kind == Kind::kInteger) && number_complete(c.top.st);
    const bool open_literal = n.kind == Kind::kLiterals && c.top.pos > 0 && n.literals[c.top.lo].size() == c.top.pos;
    if (!open_number && !open_literal) return false;
    pop(&c, arena);
  }
}

bool JsonGrammar::advance(State* s, std::string_view bytes) const {
  std::vector<Frame> arena;
  Cursor c = load(*s, &arena);
  for (const char ch : bytes)
    if (!step(&c, static_cast<uint8_t>(ch), &arena)) return false;
  *s = save(c, arena);
  return true;
}

void JsonGrammar::cache_key(const State& s, size_t horizon, std::vector<Frame>* key) const {
  key->assign(s.frames.begin(), s.frames.end());
  for (Frame& f : *key) f.parent = 0;
  if (key->empty()) return;
  Frame& top = key->back();
  const Node& n = nodes_[static_cast<size_t>(top.node)];
  const bool body = (n.kind == Kind::kString && top.st == 1) || n.kind == Kind::kRawString;
  if (!body || top.count < n.min_count) return;
  // The count is read only against minLength (met, and it only grows) and maxLength.
  if (n.max_count < 0 || n.max_count - top.count >= static_cast<int64_t>(horizon)) top.count = -1;
}

bool JsonGrammar::can_end(const State& s) const {
  std::vector<Frame> arena;
  const Cursor c = load(s, &arena);
  return can_end(c, arena);
}

}  // namespace strata::runtime
