#include "tokenizer/tokenizer.h"

#include <nlohmann/json.hpp>

#include "io/file.h"
#include "io/json_limits.h"
#include "tokenizer/byte_level.h"

namespace strata::tokenizer {

namespace {

using Json = nlohmann::json;

// tokenizer.json files are ~8 MB; refuse anything absurd before reading it.
constexpr size_t kMaxTokenizerJsonBytes = size_t{1} << 30;

std::string field_error(std::string_view source, std::string_view field, std::string_view what) {
  return std::string(source) + ": field '" + std::string(field) + "': " + std::string(what);
}

std::string type_name(const Json& j) { return j.type_name(); }

// obj[key] when obj is an object and that member is a string, else "" (never throws).
std::string str_field(const Json& obj, const char* key) {
  if (!obj.is_object()) return "";
  const auto it = obj.find(key);
  return it != obj.end() && it->is_string() ? it->get<std::string>() : "";
}

// A bool field that may be absent (then `dflt`).
Result<bool> get_bool(const Json& obj, const char* key, bool dflt, std::string_view source, std::string_view path) {
  const auto it = obj.find(key);
  if (it == obj.end() || it->is_null()) return dflt;
  if (!it->is_boolean()) {
    return Corruption(field_error(source, std::string(path) + "." + key, "expected a boolean, got " + type_name(*it)));
  }
  return it->get<bool>();
}

// Checks that `obj` has no setting that would change encoding in a way this implementation lacks.
Status check_normalizer(const Json& root, std::string_view source) {
  const auto it = root.find("normalizer");
  if (it == root.end() || it->is_null()) return Status();
  const Json& n = *it;
  if (n.is_object() && str_field(n, "type") == "Sequence" && n.contains("normalizers") && n["normalizers"].is_array() &&
      n["normalizers"].empty()) {
    return Status();
  }
  return NotSupported(
      field_error(source, "normalizer", "only null or an empty Sequence is supported, got " + n.dump()));
}

Status check_decoder(const Json& root, std::string_view source) {
  const auto it = root.find("decoder");
  if (it == root.end() || !it->is_object() || str_field(*it, "type") != "ByteLevel") {
    return NotSupported(field_error(source, "decoder", "only the ByteLevel decoder is supported"));
  }
  return Status();
}

// Reads the pre-tokenizer: Split steps (regex or literal, Isolated, not inverted), then ByteLevel.
Result<std::vector<SplitRegex>> parse_pre_tokenizer(const Json& root, std::string_view source) {
  const auto it = root.find("pre_tokenizer");
  if (it == root.end() || !it->is_object()) {
    return NotSupported(
        field_error(source, "pre_tokenizer", "missing; a Sequence of Split steps and ByteLevel is required"));
  }
  std::vector<const Json*> steps;
  if (str_field(*it, "type") == "Sequence") {
    const auto list = it->find("pretokenizers");
    if (list == it->end() || !list->is_array()) {
      return Corruption(field_error(source, "pre_tokenizer.pretokenizers", "expected an array"));
    }
    for (const Json& s : *list) steps.push_back(&s);
  } else {
    steps.push_back(&*it);
  }
  std::vector<SplitRegex> splits;
  bool saw_byte_level = false;
  for (size_t i = 0; i < steps.size(); ++i) {
    const Json& s = *steps[i];
    const std::string path = "pre_tokenizer.pretokenizers[" + std::to_string(i) + "]";
    const std::string type = str_field(s, "type");
    if (saw_byte_level) return NotSupported(field_error(source, path, "steps after ByteLevel are not supported"));
    if (type == "Split") {
      if (str_field(s, "behavior") != "Isolated") {
        return NotSupported(field_error(source, path + ".behavior", "only Isolated is supported"));
      }
      STRATA_ASSIGN_OR_RETURN(const bool invert, get_bool(s, "invert", false, source, path));
      if (invert) return NotSupported(field_error(source, path + ".invert", "inverted splits are not supported"));
      const auto pat = s.find("pattern");
      if (pat == s.end() || !pat->is_object()) {
        return Corruption(field_error(source, path + ".pattern", "expected {\"Regex\": ...} or {\"String\": ...}"));
      }
      const bool literal = pat->contains("String");
      const auto p = pat->find(literal ? "String" : "Regex");
      if (p == pat->end() || !p->is_string()) {
        return Corruption(field_error(source, path + ".pattern", "expected {\"Regex\": ...} or {\"String\": ...}"));
      }
      STRATA_ASSIGN_OR_RETURN(auto re, SplitRegex::compile(p->get<std::string>(), literal,
                                                           std::string(source) + ": field '" + path + ".pattern'"));
      splits.push_back(std::move(re));
    } else if (type == "ByteLevel") {
      STRATA_ASSIGN_OR_RETURN(const bool use_regex, get_bool(s, "use_regex", true, source, path));
      STRATA_ASSIGN_OR_RETURN(const bool prefix, get_bool(s, "add_prefix_space", true, source, path));
      if (use_regex || prefix) {
        return NotSupported(
            field_error(source, path, "ByteLevel needs use_regex=false and add_prefix_space=false (DeepSeek layout)"));
      }
      saw_byte_level = true;
    } else {
      return NotSupported(field_error(source, path + ".type", "unsupported pre-tokenizer '" + type + "'"));
    }
  }
  if (!saw_byte_level) return NotSupported(field_error(source, "pre_tokenizer", "a final ByteLevel step is required"));
  return splits;
}

Status check_model_options(const Json& model, std::string_view source) {
  if (model.contains("type") && model["type"] != "BPE") {
    return NotSupported(field_error(source, "model.type", "only BPE is supported, got " + model["type"].dump()));
  }
  STRATA_ASSIGN_OR_RETURN(const bool byte_fallback, get_bool(model, "byte_fallback", false, source, "model"));
  STRATA_ASSIGN_OR_RETURN(const bool ignore_merges, get_bool(model, "ignore_merges", false, source, "model"));
  if (byte_fallback || ignore_merges) {
    return NotSupported(field_error(source, "model", "byte_fallback and ignore_merges are not supported"));
  }
  for (const char* key : {"continuing_subword_prefix", "end_of_word_suffix"}) {
    const auto it = model.find(key);
    if (it != model.end() && !it->is_null() && !(it->is_string() && it->get<std::string>().empty())) {
      return NotSupported(field_error(source, std::string("model.") + key, "must be null"));
    }
  }
  const auto d = model.find("dropout");
  if (d != model.end() && !d->is_null() && !(d->is_number() && d->get<double>() == 0.0)) {
    return NotSupported(field_error(source, "model.dropout", "BPE dropout is not supported"));
  }
  return Status();
}

Result<std::vector<std::pair<std::string, std::string>>> parse_merges(const Json& model, std::string_view source) {
  const auto it = model.find("merges");
  if (it == model.end()) return Corruption(field_error(source, "model.merges", "missing"));
  if (!it->is_array())
    return Corruption(field_error(source, "model.merges", "expected an array, got " + type_name(*it)));
  std::vector<std::pair<std::string, std::string>> merges;
  merges.reserve(it->size());
  for (size_t i = 0; i < it->size(); ++i) {
    const Json& m = (*it)[i];
    if (m.is_string()) {
      const std::string& s = m.get_ref<const std::string&>();
      const size_t sp = s.find(' ');
      if (sp == std::string::npos || sp == 0 || sp + 1 == s.size() || s.find(' ', sp + 1) != std::string::npos) {
        return Corruption(field_error(source, "model.merges[" + std::to_string(i) + "]",
                                      "expected \"left right\", got \"" + s + "\""));
      }
      merges.emplace_back(s.substr(0, sp), s.substr(sp + 1));
    } else if (m.is_array() && m.size() == 2 && m[0].is_string() && m[1].is_string()) {
      merges.emplace_back(m[0].get<std::string>(), m[1].get<std::string>());
    } else {
      return Corruption(field_error(source, "model.merges[" + std::to_string(i) + "]",
                                    "expected \"left right\" or [left, right], got " + m.dump()));
    }
  }
  return merges;
}

}  // namespace

Result<Tokenizer> Tokenizer::load(const std::string& path) {
  STRATA_ASSIGN_OR_RETURN(std::string text, io::read_file_to_string(path, kMaxTokenizerJsonBytes));
  return from_json(text, path);
}

Result<Tokenizer> Tokenizer::from_json(std::string_view json_text, std::string_view source) {
  STRATA_RETURN_IF_ERROR(io::check_json_nesting(json_text, 32, source));
  const Json root = Json::parse(json_text.begin(), json_text.end(), nullptr, /*allow_exceptions=*/false);
  if (root.is_discarded()) return Corruption(std::string(source) + ": not valid JSON");
  if (!root.is_object()) return Corruption(std::string(source) + ": expected a JSON object at the top level");

  const auto model_it = root.find("model");
  if (model_it == root.end() || !model_it->is_object()) return Corruption(field_error(source, "model", "missing"));
  const Json& model = *model_it;
  STRATA_RETURN_IF_ERROR(check_model_options(model, source));
  STRATA_RETURN_IF_ERROR(check_normalizer(root, source));
  STRATA_RETURN_IF_ERROR(check_decoder(root, source));

  Tokenizer t;
  STRATA_ASSIGN_OR_RETURN(t.splits_, parse_pre_tokenizer(root, source));

  // model.vocab: token -> id.
  const auto vocab_it = model.find("vocab");
  if (vocab_it == model.end()) return Corruption(field_error(source, "model.vocab", "missing"));
  if (!vocab_it->is_object()) {
    return Corruption(field_error(source, "model.vocab", "expected an object, got " + type_name(*vocab_it)));
  }
  const Json* added = nullptr;
  if (const auto a = root.find("added_tokens"); a != root.end() && !a->is_null()) {
    if (!a->is_array()) return Corruption(field_error(source, "added_tokens", "expected an array"));
    added = &*a;
  }
  const size_t n_entries = vocab_it->size() + (added ? added->size() : 0);

  std::vector<std::string> tokens;  // by id; filled from the vocab, then overridden by added tokens
  std::vector<bool> present;
  auto place = [&](int64_t id, const std::string& tok, const std::string& field) -> Status {
    // A dense id space cannot reach past the number of entries; checking first bounds the allocation.
    if (id < 0 || static_cast<uint64_t>(id) >= n_entries) {
      return Corruption(field_error(
          source, field,
          "id " + std::to_string(id) + " outside [0, " + std::to_string(n_entries) + ") (ids must be dense)"));
    }
    if (static_cast<size_t>(id) >= tokens.size()) {
      tokens.resize(id + 1);
      present.resize(id + 1, false);
    }
    // One id, one string: V3 lists its BOS/EOS/pad in both model.vocab and added_tokens with the
    // same text, but an id given two texts would encode one and decode as the other (fuzzing found
    // "!" decoding as "<｜▁pad▁｜>").
    if (present[id] && tokens[id] != tok) {
      return Corruption(field_error(source, field,
                                    "id " + std::to_string(id) + " is already the token \"" + tokens[id] +
                                        "\"; one id cannot name two tokens"));
    }
    tokens[id] = tok;
    present[id] = true;
    return Status();
  };

  t.token_to_id_.reserve(n_entries);
  for (auto it = vocab_it->begin(); it != vocab_it->end(); ++it) {
    if (!it.value().is_number_integer()) {
      return Corruption(field_error(source, "model.vocab[\"" + it.key() + "\"]", "expected an integer id"));
    }
    STRATA_RETURN_IF_ERROR(place(it.value().get<int64_t>(), it.key(), "model.vocab[\"" + it.key() + "\"]"));
    t.token_to_id_[it.key()] = static_cast<int32_t>(it.value().get<int64_t>());
  }
  t.n_model_vocab_ = static_cast<int32_t>(vocab_it->size());

  STRATA_ASSIGN_OR_RETURN(const auto merges, parse_merges(model, source));
  STRATA_ASSIGN_OR_RETURN(t.bpe_, BpeModel::build(t.token_to_id_, merges, source));

  // added_tokens: id, content, special, normalized; lstrip/rstrip/single_word must be false.
  struct AddedInfo {
    int32_t id;
    bool special;
  };
  std::vector<AddedInfo> added_info;
  if (added) {
    for (size_t i = 0; i < added->size(); ++i) {
      const Json& a = (*added)[i];
      const std::string path = "added_tokens[" + std::to_string(i) + "]";
      if (!a.is_object() || !a.contains("id") || !a["id"].is_number_integer() || !a.contains("content") ||
          !a["content"].is_string()) {
        return Corruption(field_error(source, path, "expected an object with integer 'id' and string 'content'"));
      }
      const auto& content = a["content"].get_ref<const std::string&>();
      if (content.empty()) return Corruption(field_error(source, path + ".content", "empty token string"));
      const int64_t id = a["id"].get<int64_t>();
      STRATA_RETURN_IF_ERROR(place(id, content, path + ".id"));
      STRATA_ASSIGN_OR_RETURN(const bool special, get_bool(a, "special", false, source, path));
      STRATA_ASSIGN_OR_RETURN(const bool normalized, get_bool(a, "normalized", !special, source, path));
      for (const char* key : {"lstrip", "rstrip", "single_word"}) {
        STRATA_ASSIGN_OR_RETURN(const bool on, get_bool(a, key, false, source, path));
        if (on) return NotSupported(field_error(source, path + "." + key, "must be false (not implemented)"));
      }
      t.token_to_id_[content] = static_cast<int32_t>(id);
      (normalized ? t.normalized_added_ : t.raw_added_).insert(content, static_cast<int32_t>(id));
      added_info.push_back({static_cast<int32_t>(id), special});
    }
  }

  for (size_t id = 0; id < present.size(); ++id) {
    if (!present[id]) {
      return Corruption(std::string(source) + ": token id " + std::to_string(id) +
                        " is in neither model.vocab nor added_tokens (ids must be dense)");
    }
  }
  const size_t n = tokens.size();
  t.flags_.assign(n, 0);
  for (const auto& a : added_info) t.flags_[a.id] = kAdded | (a.special ? kSpecial : 0);

  // Arenas of token strings and their decoded bytes.
  t.token_offsets_.reserve(n + 1);
  t.bytes_offsets_.reserve(n + 1);
  t.token_offsets_.push_back(0);
  t.bytes_offsets_.push_back(0);
  for (size_t id = 0; id < n; ++id) {
    t.token_arena_ += tokens[id];
    t.token_offsets_.push_back(static_cast<uint32_t>(t.token_arena_.size()));
    t.bytes_arena_ += byte_level_decode(tokens[id]);
    t.bytes_offsets_.push_back(static_cast<uint32_t>(t.bytes_arena_.size()));
  }
  return t;
}

std::string_view Tokenizer::slice(const std::string& arena, const std::vector<uint32_t>& off, int32_t id) {
  if (id < 0 || static_cast<size_t>(id) + 1 >= off.size()) return {};
  return std::string_view(arena).substr(off[id], off[id + 1] - off[id]);
}

std::string_view Tokenizer::token_bytes(int32_t id) const { return slice(bytes_arena_, bytes_offsets_, id); }
std::string_view Tokenizer::id_to_token(int32_t id) const { return slice(token_arena_, token_offsets_, id); }

std::optional<int32_t> Tokenizer::token_to_id(std::string_view token) const {
  const auto it = token_to_id_.find(std::string(token));
  if (it == token_to_id_.end()) return std::nullopt;
  return it->second;
}

bool Tokenizer::is_special(int32_t id) const { return id >= 0 && id < vocab_size() && (flags_[id] & kSpecial) != 0; }
bool Tokenizer::is_added(int32_t id) const { return id >= 0 && id < vocab_size() && (flags_[id] & kAdded) != 0; }

std::vector<TextPiece> Tokenizer::split_added_tokens(std::string_view text) const {
  // Pass 1: tokens with normalized=false on the raw text; pass 2: the others in the text left over.
  auto split_with = [](const TokenTrie& trie, std::string_view s, std::vector<TextPiece>* out) {
    size_t pos = 0;
    while (pos < s.size()) {
      size_t start = 0;
      const TokenTrie::Match m = trie.find_next(s, pos, &start);
      if (m.len == 0) break;
      if (start > pos) out->push_back({s.substr(pos, start - pos), -1});
      out->push_back({s.substr(start, m.len), m.id});
      pos = start + m.len;
    }
    if (pos < s.size()) out->push_back({s.substr(pos), -1});
  };
  std::vector<TextPiece> first;
  split_with(raw_added_, text, &first);
  std::vector<TextPiece> out;
  out.reserve(first.size());
  for (const TextPiece& p : first) {
    if (p.id >= 0) {
      out.push_back(p);
    } else {
      split_with(normalized_added_, p.text, &out);
    }
  }
  return out;
}

namespace {

// Per-call state of one encode: regex and BPE scratch plus a cache of pre-token results, so a
// repeated word (" the") is merged once per call. Per call, not per tokenizer: no shared mutable state.
struct EncodeState {
  RegexScratch regex;
  BpeScratch bpe;
  std::vector<Span> spans, next;
  std::unordered_map<std::string_view, std::pair<uint32_t, uint32_t>> cache;  // word -> (offset, count) in ids
  std::vector<int32_t> cached_ids;
};

}  // namespace

void Tokenizer::encode_ordinary(std::string_view text, std::vector<int32_t>* out) const {
  if (text.empty()) return;
  STRATA_CHECK(text.size() < (size_t{1} << 32), "encode: text over 4 GiB");
  EncodeState st;
  st.spans.push_back({0, static_cast<uint32_t>(text.size())});
  for (const SplitRegex& re : splits_) {
    st.next.clear();
    for (const Span& s : st.spans) re.split(text, s, &st.regex, &st.next);
    std::swap(st.spans, st.next);
  }
  out->reserve(out->size() + text.size() / 3);
  for (const Span& s : st.spans) {
    const std::string_view word = text.substr(s.begin, s.len);
    if (word.size() == 1) {
      bpe_.encode_word(word, &st.bpe, out);
      continue;
    }
    const auto [it, inserted] = st.cache.try_emplace(word, 0, 0);
    if (inserted) {
      const size_t before = st.cached_ids.size();
      bpe_.encode_word(word, &st.bpe, &st.cached_ids);
      it->second = {static_cast<uint32_t>(before), static_cast<uint32_t>(st.cached_ids.size() - before)};
    }
    const auto [off, count] = it->second;
    out->insert(out->end(), st.cached_ids.begin() + off, st.cached_ids.begin() + off + count);
  }
}

std::vector<int32_t> Tokenizer::encode(std::string_view text, bool allow_special) const {
  std::vector<int32_t> out;
  if (!allow_special) {
    encode_ordinary(text, &out);
    return out;
  }
  for (const TextPiece& p : split_added_tokens(text)) {
    if (p.id >= 0) {
      out.push_back(p.id);
    } else {
      encode_ordinary(p.text, &out);
    }
  }
  return out;
}

std::string Tokenizer::decode(std::span<const int32_t> ids, bool skip_special) const {
  std::string out;
  for (const int32_t id : ids) {
    if (id < 0 || id >= vocab_size()) continue;
    if (skip_special && (flags_[id] & kSpecial)) continue;
    out += token_bytes(id);
  }
  return out;
}

}  // namespace strata::tokenizer
