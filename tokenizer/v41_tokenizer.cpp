#include "tokenizer/v41_tokenizer.h"

#include <map>
#include <nlohmann/json.hpp>

namespace strata::tokenizer {

namespace {

// nlohmann::json (std::map keys): ordered_json would take quadratic time on 128K vocab keys, and key
// order carries no meaning in tokenizer.json.
using Json = nlohmann::json;

constexpr int kV3ModelVocab = 128000;
constexpr int kV3LastAddedId = 128814;

struct NewToken {
  int id;
  const char* text;
  bool special;
};

// The V4.1 rows of chat-and-api.md §1 that V3 lacks (or, for 128799, spells differently).
constexpr NewToken kV41Tokens[] = {
    {128799, "<｜System｜>", false},
    {128821, "<think>", false},
    {128822, "</think>", false},
    {128825, "｜DSML｜", false},
    {128828, "<｜latest_reminder｜>", false},
    {129264, "<｜deepseek_image｜>", true},
};

Json added_token(int id, const std::string& content, bool special) {
  Json t;
  t["id"] = id;
  t["content"] = content;
  t["single_word"] = false;
  t["lstrip"] = false;
  t["rstrip"] = false;
  t["normalized"] = !special;
  t["special"] = special;
  return t;
}

std::string placeholder(int id) { return "<｜place▁holder▁no▁" + std::to_string(id - kV3ModelVocab) + "｜>"; }

}  // namespace

Result<std::string> make_v41_tokenizer_json(std::string_view v3_json) {
  Json root = Json::parse(v3_json.begin(), v3_json.end(), nullptr, /*allow_exceptions=*/false);
  if (root.is_discarded() || !root.is_object()) return Corruption("V3 tokenizer.json: not a JSON object");
  if (!root.contains("model") || !root["model"].is_object() || !root["model"].contains("vocab") ||
      !root["model"]["vocab"].is_object()) {
    return Corruption("V3 tokenizer.json: field 'model.vocab' missing");
  }
  if (root["model"]["vocab"].size() != static_cast<size_t>(kV3ModelVocab)) {
    return InvalidArgument("V3 tokenizer.json: model.vocab has " + std::to_string(root["model"]["vocab"].size()) +
                           " entries, expected 128000 (is this the DeepSeek-V3 tokenizer?)");
  }
  if (!root.contains("added_tokens") || !root["added_tokens"].is_array()) {
    return Corruption("V3 tokenizer.json: field 'added_tokens' missing");
  }

  // Keep V3's rows by id, then lay the V4.1 table over them.
  std::map<int, Json> rows;
  for (const Json& t : root["added_tokens"]) {
    if (!t.is_object() || !t.contains("id") || !t["id"].is_number_integer()) {
      return Corruption("V3 tokenizer.json: added_tokens entry without an integer id: " + t.dump());
    }
    rows[static_cast<int>(t["id"].get<int64_t>())] = t;
  }
  if (rows.empty() || rows.rbegin()->first != kV3LastAddedId) {
    return InvalidArgument("V3 tokenizer.json: last added token id is " +
                           (rows.empty() ? std::string("none") : std::to_string(rows.rbegin()->first)) +
                           ", expected 128814");
  }
  const auto ph = rows.find(128799);
  if (ph == rows.end() || !ph->second.contains("content") || ph->second["content"] != placeholder(128799)) {
    return InvalidArgument("V3 tokenizer.json: id 128799 is not " + placeholder(128799));
  }
  for (int id = kV3LastAddedId + 1; id < kV41VocabSize; ++id) rows[id] = added_token(id, placeholder(id), true);
  for (const NewToken& t : kV41Tokens) rows[t.id] = added_token(t.id, t.text, t.special);

  Json added = Json::array();
  for (auto& [id, row] : rows) added.push_back(std::move(row));
  root["added_tokens"] = std::move(added);
  // The parser already rejected ill-formed UTF-8, so `replace` never fires; it only rules out a throw.
  return root.dump(-1, ' ', false, Json::error_handler_t::replace);
}

}  // namespace strata::tokenizer
