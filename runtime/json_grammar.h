// JsonGrammar: a JSON schema (the structured-output subset) compiled into a pushdown automaton over
// bytes, for constrained decoding (issue 20 item 4; runtime/token_mask.h applies it to the vocabulary).
//
// What compiles (anything else is kInvalidArgument naming the keyword and its schema path):
//   type      object, array, string, number, integer, boolean, null, or an array of these (a union)
//   object    properties, required, additionalProperties (true/false: only declared properties are
//             ever generated, in declaration order; optional ones may be skipped); no properties =
//             any JSON object
//   array     items, minItems, maxItems
//   string    minLength, maxLength (in code points; an escape counts as one)
//   enum, const (values matched as their compact JSON text), anyOf whose alternatives start with
//   different bytes (e.g. a type or null), nesting; annotations (title, description, default,
//   examples, $schema, $id, $comment) are ignored.
// Limits (so that compiling a request and masking each token stay cheap; a schema over one is
// kInvalidArgument naming the schema path where it was crossed, which the server answers with 400):
//   kMaxEnumValues enum/const values and kMaxEnumBytes bytes of their JSON text in one schema (all
//   enums together; OpenAI's structured outputs allow 1000 enum values), kMaxSchemas subschemas,
//   kMaxDepth levels of nesting (the schema itself is level 1), kMaxProperties properties in one
//   object and kMaxTools tools in a DSML choice. An enum/const value that is not of the schema's `type` is refused.
// The grammar accepts one spelling of each document: compact JSON with at most one optional space
// after ':' and ',' and none elsewhere. DECISION: whitespace is bounded so that a model cannot pad
// forever; a value then always ends within max_tokens when the schema bounds its strings and arrays.
// Numbers: at most 15 integer digits, 15 fraction digits and 2 exponent digits (same reason, and
// so that every number fits a double: a JSON parser rejects 1e999). JSON \u escapes whose first hex
// digit is d/D (the surrogate block and its neighbours) are not generated,
// so every accepted document parses (a lone surrogate would not).
//
// The DSML tool-call body (chat-and-api.md §4 rule 5, §5) compiles from the tools' parameter
// schemas: after the forced prefix, `<｜DSML｜ parameter name="K" string="true|false">V</｜DSML｜
// parameter>\n` per property, then `</｜DSML｜ invoke>\n</｜DSML｜ calls>`. A property whose schema
// is {"type": "string"} (or a string enum/const) is written raw with string="true" (its value never
// holds '<', so it cannot end early); any other property is JSON with string="false", in which '<'
// is only ever written as the escape \u003c (an enum value "x</｜DSML｜parameter>y" included), so a
// value can never hold a closing tag either.
//
// The automaton: a stack of Frames, one per open value (object, array, string, number, literal).
// A Cursor holds the top frame by value; the frames below it live in an arena (a vector the caller
// owns) and are never modified once pushed, so copying a Cursor copies one small struct, and a
// depth-first walk over a token trie (runtime/token_mask.h) can keep one Cursor per trie depth and
// truncate the arena when it backtracks.
// Thread safety: a JsonGrammar is immutable after compilation; States and Cursors belong to one caller.
#pragma once

#include <array>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/status.h"

namespace strata::runtime {

// One tool for the DSML grammar: its name and its `parameters` schema (null = no parameters).
struct DsmlTool {
  std::string name;
  nlohmann::ordered_json parameters;
};

class JsonGrammar {
 public:
  static constexpr size_t kMaxEnumValues = 1000;
  static constexpr size_t kMaxEnumBytes = 32768;  // also keeps a literal's byte position in Frame::pos
  static constexpr int32_t kMaxSchemas = 5000;
  static constexpr int32_t kMaxDepth = 16;
  // Properties of one object (a JSON schema's or a tool's parameters) and tools of a forced call.
  static constexpr size_t kMaxProperties = 1000;
  static constexpr size_t kMaxTools = 1000;

  // Compiles a JSON schema. Errors (kInvalidArgument) name the path from `path` and the keyword:
  // "schema.properties.tags.uniqueItems: unsupported keyword ...".
  [[nodiscard]] static Result<JsonGrammar> from_schema(const nlohmann::ordered_json& schema, const std::string& path = "schema");
  // Any JSON object (response_format json_object). Bounded so that a document always ends: strings
  // of at most 512 code points, at most 64 members per object or array, nesting depth at most 8.
  static JsonGrammar any_object();
  // The body of a forced DSML tool call after the rendered prefix: with `named` true the prompt
  // ended with the invoke tag of tools[0] and the body starts at its parameters; otherwise the
  // model writes one `<｜DSML｜ invoke name="NAME">\n` of a tool in `tools` first. Errors name the
  // schema path under `path` (e.g. "tools[0].function.parameters.properties.x.pattern").
  [[nodiscard]] static Result<JsonGrammar> dsml_call(std::span<const DsmlTool> tools, bool named,
                                                     const std::string& path = "tools");

  // One open value of the stack. Fields are interpreted per node kind (json_grammar.cpp).
  struct Frame {
    int32_t node = 0;     // index into nodes_
    int32_t parent = -1;  // arena index of the frame below; -1 = the bottom frame
    int32_t count = 0;    // items, code points, digits or the next property, per kind
    uint16_t pos = 0;     // bytes of a literal or key matched
    uint16_t lo = 0, hi = 0;  // candidate range: sorted literals, or an object's Node::by_text
    bool close_ok = false;    // object: the closing tags are a candidate of the member being matched
    uint8_t st = 0;           // per-kind state
    uint8_t u8_need = 0;      // UTF-8 continuation bytes still due
    uint8_t u8_lo = 0x80, u8_hi = 0xBF;  // range of the next continuation byte
    bool operator==(const Frame&) const = default;
  };
  // The automaton's position: the top frame, the depth of the stack (0 = a complete document, no
  // byte allowed) and, in the arena, the frames below.
  struct Cursor {
    Frame top;
    int32_t depth = 0;
  };
  // A position that outlives an arena: the frames bottom first (empty = complete).
  struct State {
    std::vector<Frame> frames;
  };

  // The position before the first byte.
  State start() const;
  // Places `s` in `arena` (cleared first) and returns its cursor.
  Cursor load(const State& s, std::vector<Frame>* arena) const;
  // The State a cursor stands for.
  State save(const Cursor& c, const std::vector<Frame>& arena) const;
  // Advances over one byte; false when the byte is not allowed here (then *c is garbage: the
  // caller drops it). May push frames onto `arena`.
  bool step(Cursor* c, uint8_t b, std::vector<Frame>* arena) const;
  // True when the bytes so far form a complete document (an end token may come now): the stack is
  // empty, or only values that end without a closing byte (numbers, literals) remain open.
  bool can_end(const Cursor& c, const std::vector<Frame>& arena) const;

  // Scalar conveniences (tests, the reference mask): advance `s` over `bytes` (false: a byte was
  // refused, `s` unchanged), and whether `s` may end.
  bool advance(State* s, std::string_view bytes) const;
  bool can_end(const State& s) const;

  // A key for caching masks: two States with equal keys allow the same byte strings of up to
  // `horizon` bytes (and the same end). The frames of `s` with their arena links cleared and, in a
  // string body, the code-point count replaced by what can still matter within `horizon` bytes:
  // nothing once minLength is met and maxLength (if any) is at least `horizon` away. So every
  // token inside a long string has the same key (runtime/token_mask.h caches its mask).
  void cache_key(const State& s, size_t horizon, std::vector<Frame>* key) const;

 private:
  enum class Kind : uint8_t {
    kObject,     // declared properties: JSON object, DSML invoke body or DSML invoke choice
    kAnyObject,  // any JSON object (generic keys, kAny values)
    kArray,
    kString,     // JSON string
    kRawString,  // DSML string="true" value: raw UTF-8 without '<', ended by the closing tag
    kNumber,
    kInteger,
    kLiterals,   // enum / const / true / false / null: sorted byte strings
    kUnion,      // alternatives picked by their first byte (type arrays, anyOf, any value)
  };
  enum class ObjectStyle : uint8_t { kJson, kDsmlInvoke, kDsmlChoice };
  struct Node {
    Kind kind = Kind::kLiterals;
    // kObject
    ObjectStyle style = ObjectStyle::kJson;
    std::vector<std::string> keys;   // per property: `"k":` (JSON), the parameter tag (DSML), the invoke tag (choice)
    std::vector<int32_t> values;     // per property: its value node
    std::vector<bool> required;
    std::string close;               // DSML invoke: the closing tags
    std::vector<int32_t> by_text;    // property indices (keys.size() = the close) in byte order of their text
    std::vector<int32_t> next_required;  // per index j: the first required property >= j (keys.size(): none)
    // kArray: items; kAnyObject: the key node (items) and the value node (value)
    int32_t items = -1, value = -1;
    int64_t min_count = 0, max_count = -1;  // items / members (kArray, kAnyObject); code points (strings)
    int32_t max_depth = 0;                  // kUnion as "any value": '{' / '[' only below this stack depth
    // kLiterals (sorted, unique)
    std::vector<std::string> literals;
    // kUnion: the alternative for each first byte (-1 = none)
    std::array<int32_t, 256> by_first{};
  };

  int32_t add(Node n);
  Status compile(const nlohmann::ordered_json& s, const std::string& path, bool raw_string_ok, int32_t* out, bool* raw);
  Status compile_object(const nlohmann::ordered_json& s, const std::string& path, int32_t* out);
  int32_t add_literals(std::vector<std::string> lits);
  Status add_union(std::vector<int32_t> alts, const std::string& path, int32_t* out);
  std::array<bool, 256> first_bytes(int32_t node) const;
  int32_t any_value(int32_t max_depth);

  // step() helpers.
  void push(Cursor* c, int32_t node, std::vector<Frame>* arena) const;
  void pop(Cursor* c, const std::vector<Frame>& arena) const;
  bool step_utf8(Frame* f, uint8_t b) const;  // a string body byte: false = not allowed
  static Frame fresh(int32_t node, const Node& n);

  std::vector<Node> nodes_;
  int32_t root_ = 0;
  // DSML call: JSON texts write '<' as \u003c and JSON strings refuse a raw '<' (json_grammar.cpp).
  bool dsml_ = false;
  // Compile-time counts against the limits.
  size_t n_literals_ = 0, literal_bytes_ = 0;
  int32_t n_schemas_ = 0, depth_ = 0;
};

}  // namespace strata::runtime
