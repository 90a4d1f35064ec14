// Shape limits on JSON read from files, checked before the text reaches a parser
// (core/json_nesting.h says why). The files strata reads have a known, shallow shape (a safetensors
// header is 3 levels deep, config.json 3, tokenizer.json about 6): anything much deeper is refused.
#pragma once

#include <string_view>

#include "core/status.h"

namespace strata::io {

// kCorruption naming `what` when `text` nests arrays/objects deeper than `max_depth`
// (strata::json_nests_deeper_than). Does not validate the JSON otherwise: the parser does that next.
[[nodiscard]] Status check_json_nesting(std::string_view text, int max_depth, std::string_view what);

}  // namespace strata::io
