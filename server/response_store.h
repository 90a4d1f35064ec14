// ResponseStore: the conversations of earlier /v1/responses answers, for `previous_response_id`
// within the server's lifetime (OpenAI Responses API; nothing is written to disk).
//
// Each stored entry is the whole conversation a response ended (the history it continued, its input
// and its output as an assistant message), without its `instructions` (OpenAI does not carry
// instructions over to the next response), and the response object itself (its JSON), which
// GET /v1/responses/{id} returns. Bounded: at most `max_entries` entries and `max_bytes`
// of message text; the least recently used entries are dropped first, after which their ids are
// unknown (404). Thread safety: every method may be called from any thread.
#pragma once

#include <cstdint>
#include <list>
#include <mutex>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "chat/conversation.h"

namespace strata::server {

class ResponseStore {
 public:
  ResponseStore(size_t max_entries, uint64_t max_bytes) : max_entries_(max_entries), max_bytes_(max_bytes) {}

  // Stores `conversation` and the response object `response` (JSON text) under `id` (replacing an
  // entry with that id), then evicts down to the bounds.
  void put(const std::string& id, std::vector<chat::Message> conversation, std::string response = "");
  // The conversation stored under `id` (and marks it recently used), or nullopt.
  std::optional<std::vector<chat::Message>> get(const std::string& id);
  // The response object stored under `id` (and marks it recently used), or nullopt.
  std::optional<std::string> get_response(const std::string& id);
  // Drops the entry `id`; false when there is none.
  bool erase(const std::string& id);
  size_t size() const;

 private:
  struct Entry {
    std::string id;
    std::vector<chat::Message> conversation;
    std::string response;
    uint64_t bytes = 0;
  };
  const size_t max_entries_;
  const uint64_t max_bytes_;
  mutable std::mutex mu_;
  std::list<Entry> lru_;  // most recently used first
  std::unordered_map<std::string, std::list<Entry>::iterator> index_;
  uint64_t bytes_ = 0;
};

}  // namespace strata::server
