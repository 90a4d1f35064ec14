// Shape limits on JSON read from files, checked before the text reaches a parser.
//
// nlohmann::json builds a node per value: a 240 MB header of nested arrays took 69 s and 9 GB of
// RSS to reject (issue 13 item 8), and deep nesting costs stack in recursive consumers. The files
// strata reads have a known, shallow shape (a safetensors header is 3 levels deep, config.json 3,
// tokenizer.json about 6), so anything much deeper is refused in one linear scan.
#pragma once

#include <string_view>

#include "core/status.h"

namespace strata::io {

// kCorruption naming `what` when `text` nests arrays/objects deeper than `max_depth` (brackets
// inside strings, with escapes, do not count). O(n), no allocation. Does not validate the JSON
// otherwise: the parser does that next.
[[nodiscard]] Status check_json_nesting(std::string_view text, int max_depth, std::string_view what);

}  // namespace strata::io
