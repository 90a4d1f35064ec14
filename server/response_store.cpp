#include "server/response_store.h"

namespace strata::server {

namespace {

uint64_t bytes_of(const std::vector<chat::Message>& conversation) {
  uint64_t n = 0;
  for (const chat::Message& m : conversation) {
    n += m.content.size() + m.reasoning.size() + m.tool_call_id.size() + 64;
    for (const chat::ToolCall& c : m.tool_calls) n += c.id.size() + c.name.size() + c.arguments.dump().size();
  }
  return n;
}

}  // namespace

void ResponseStore::put(const std::string& id, std::vector<chat::Message> conversation, std::string response) {
  const uint64_t bytes = bytes_of(conversation) + response.size();
  std::lock_guard<std::mutex> l(mu_);
  if (auto it = index_.find(id); it != index_.end()) {
    bytes_ -= it->second->bytes;
    lru_.erase(it->second);
    index_.erase(it);
  }
  lru_.push_front(Entry{id, std::move(conversation), std::move(response), bytes});
  index_[id] = lru_.begin();
  bytes_ += bytes;
  while (!lru_.empty() && (lru_.size() > max_entries_ || bytes_ > max_bytes_)) {
    bytes_ -= lru_.back().bytes;
    index_.erase(lru_.back().id);
    lru_.pop_back();
  }
}

std::optional<std::vector<chat::Message>> ResponseStore::get(const std::string& id) {
  std::lock_guard<std::mutex> l(mu_);
  auto it = index_.find(id);
  if (it == index_.end()) return std::nullopt;
  lru_.splice(lru_.begin(), lru_, it->second);
  return it->second->conversation;
}

std::optional<std::string> ResponseStore::get_response(const std::string& id) {
  std::lock_guard<std::mutex> l(mu_);
  auto it = index_.find(id);
  if (it == index_.end()) return std::nullopt;
  lru_.splice(lru_.begin(), lru_, it->second);
  return it->second->response;
}

bool ResponseStore::erase(const std::string& id) {
  std::lock_guard<std::mutex> l(mu_);
  auto it = index_.find(id);
  if (it == index_.end()) return false;
  bytes_ -= it->second->bytes;
  lru_.erase(it->second);
  index_.erase(it);
  return true;
}

size_t ResponseStore::size() const {
  std::lock_guard<std::mutex> l(mu_);
  return lru_.size();
}

}  // namespace strata::server
