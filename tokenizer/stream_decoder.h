// Incremental detokenization for streaming output: ids go in one at a time, and only complete
// UTF-8 comes out, so a character whose bytes span several byte-level tokens (CJK, emoji) is
// never split across two chunks.
//
// Bytes that can no longer become a valid character are emitted as U+FFFD (one per maximal
// ill-formed subpart, from_utf8_lossy semantics) as soon as that is certain; a valid but
// unfinished tail (at most 3 bytes) is held until the next id or flush().
// Ownership: borrows the Tokenizer, which must outlive it. Thread safety: one decoder per stream.
#pragma once

#include <cstdint>
#include <string>

#include "tokenizer/tokenizer.h"

namespace strata::tokenizer {

class StreamDecoder {
 public:
  // skip_special: drop tokens marked `special` (BOS, EOS, placeholders), as Tokenizer::decode.
  explicit StreamDecoder(const Tokenizer& tokenizer, bool skip_special = false)
      : tokenizer_(&tokenizer), skip_special_(skip_special) {}

  // Adds one id; returns the newly complete text (valid UTF-8, possibly empty). Ids out of range
  // are ignored.
  std::string push(int32_t id);

  // Ends the stream: returns whatever is held, an unfinished tail becoming U+FFFD; then resets.
  std::string flush();

  // Bytes currently held back (0..3).
  size_t pending_bytes() const { return pending_.size(); }

  // Drops held bytes (e.g. a new request on the same decoder).
  void reset() { pending_.clear(); }

 private:
  const Tokenizer* tokenizer_;
  bool skip_special_;
  std::string pending_;
};

}  // namespace strata::tokenizer
