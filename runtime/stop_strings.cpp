#include "runtime/stop_strings.h"

#include <algorithm>

namespace strata::runtime {

StopStrings::StopStrings(std::vector<std::string> stops, TokenTextFn token_text) : token_text_(std::move(token_text)) {
  for (std::string& s : stops)
    if (!s.empty()) {
      keep_ = std::max(keep_, s.size() - 1);
      stops_.push_back(std::move(s));
    }
}

bool StopStrings::push(int32_t id) {
  if (stops_.empty() || !token_text_) return false;
  const size_t old = tail_.size();
  tail_ += token_text_(id);
  // A match must end inside the new piece (earlier matches were reported before).
  for (const std::string& s : stops_) {
    const size_t from = old >= s.size() - 1 ? old - (s.size() - 1) : 0;
    if (tail_.find(s, from) != std::string::npos) return true;
  }
  if (tail_.size() > keep_) tail_.erase(0, tail_.size() - keep_);
  return false;
}

}  // namespace strata::runtime
