#include "server/logprobs_json.h"

namespace strata::server {

namespace {

std::string text_of(const tokenizer::Tokenizer& tok, int32_t id) {
  return id >= 0 && id < tok.vocab_size() ? std::string(tok.token_bytes(id)) : std::string();
}

Json bytes_of(const std::string& s) {
  Json b = Json::array();
  for (unsigned char c : s) b.push_back(static_cast<int>(c));
  return b;
}

Json chat_entry(const std::string& token, float logprob) {
  return Json{{"token", token}, {"logprob", logprob}, {"bytes", bytes_of(token)}};
}

Json chat_list(std::span<const ApiTokenLogprob> tokens) {
  Json list = Json::array();
  for (const ApiTokenLogprob& t : tokens) {
    Json e = chat_entry(t.token, t.logprob);
    Json top = Json::array();
    for (const auto& [text, lp] : t.top) top.push_back(chat_entry(text, lp));
    e["top_logprobs"] = std::move(top);
    list.push_back(std::move(e));
  }
  return list;
}

}  // namespace

ApiTokenLogprob api_token_logprob(const tokenizer::Tokenizer& tok, const runtime::TokenLogprob& r) {
  ApiTokenLogprob a;
  a.token = text_of(tok, r.id);
  a.logprob = r.logprob;
  a.top.reserve(r.top.size());
  for (const auto& [id, lp] : r.top) a.top.emplace_back(text_of(tok, id), lp);
  return a;
}

Json chat_logprobs_json(std::span<const ApiTokenLogprob> content, std::span<const ApiTokenLogprob> reasoning) {
  Json j;
  j["content"] = chat_list(content);
  j["refusal"] = nullptr;
  if (!reasoning.empty()) j["reasoning_content"] = chat_list(reasoning);
  return j;
}

int64_t text_offset_chars(std::string_view bytes) {
  int64_t n = 0;
  for (const char c : bytes) n += (static_cast<unsigned char>(c) & 0xC0) != 0x80;
  return n;
}

Json completion_logprobs_json(std::span<const ApiTokenLogprob> tokens, int64_t first_offset) {
  Json texts = Json::array(), lps = Json::array(), tops = Json::array(), offsets = Json::array();
  int64_t offset = first_offset;
  for (const ApiTokenLogprob& t : tokens) {
    texts.push_back(t.token);
    lps.push_back(t.logprob);
    Json top = Json::object();
    for (const auto& [text, lp] : t.top) top[text] = lp;
    tops.push_back(std::move(top));
    offsets.push_back(offset);
    offset += text_offset_chars(t.token);
  }
  return Json{{"tokens", std::move(texts)},
              {"token_logprobs", std::move(lps)},
              {"top_logprobs", std::move(tops)},
              {"text_offset", std::move(offsets)}};
}

}  // namespace strata::server
