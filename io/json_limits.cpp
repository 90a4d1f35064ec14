#include "io/json_limits.h"

#include <string>

#include "core/json_nesting.h"

namespace strata::io {

Status check_json_nesting(std::string_view text, int max_depth, std::string_view what) {
  if (json_nests_deeper_than(text, max_depth))
    return Corruption(std::string(what) + ": JSON nested deeper than " + std::to_string(max_depth) +
                      " levels (this file has a shallow, fixed shape)");
  return Status();
}

}  // namespace strata::io
