#include "io/json_limits.h"

#include <string>

namespace strata::io {

Status check_json_nesting(std::string_view text, int max_depth, std::string_view what) {
  int depth = 0;
  bool in_string = false;
  for (size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    if (in_string) {
      if (c == '\\') {
        ++i;  // the escaped character cannot end the string
      } else if (c == '"') {
        in_string = false;
      }
      continue;
    }
    if (c == '"') {
      in_string = true;
    } else if (c == '[' || c == '{') {
      if (++depth > max_depth)
        return Corruption(std::string(what) + ": JSON nested deeper than " + std::to_string(max_depth) +
                          " levels at byte " + std::to_string(i) + " (this file has a shallow, fixed shape)");
    } else if (c == ']' || c == '}') {
      --depth;
    }
  }
  return Status();
}

}  // namespace strata::io
