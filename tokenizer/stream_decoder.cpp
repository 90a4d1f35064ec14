#include "tokenizer/stream_decoder.h"

#include "tokenizer/utf8.h"

namespace strata::tokenizer {

std::string StreamDecoder::push(int32_t id) {
  if (id < 0 || id >= tokenizer_->vocab_size()) return {};
  if (skip_special_ && tokenizer_->is_special(id)) return {};
  pending_ += tokenizer_->token_bytes(id);
  const size_t hold = utf8_incomplete_tail(pending_);
  std::string out = to_valid_utf8_lossy(std::string_view(pending_).substr(0, pending_.size() - hold));
  pending_.erase(0, pending_.size() - hold);
  return out;
}

std::string StreamDecoder::flush() {
  std::string out = to_valid_utf8_lossy(pending_);
  pending_.clear();
  return out;
}

}  // namespace strata::tokenizer
