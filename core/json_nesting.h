// How deeply JSON text nests, found before any parser sees it.
//
// nlohmann::json builds a node per value and its serializer recurses once per level: text from a
// file or a client that nests thousands of levels costs stack and memory out of all proportion
// (issue 13 item 8: a 240 MB header of nested arrays took 69 s and 9 GB). Every JSON input strata
// reads has a known, shallow shape, so one linear scan decides first.
#pragma once

#include <string_view>

namespace strata {

// True when `text` opens more than `max_depth` nested arrays/objects. Brackets inside JSON strings
// (escapes included) do not count. O(n), no allocation; does not otherwise validate the JSON.
bool json_nests_deeper_than(std::string_view text, int max_depth);

// True when an object in `text` has more than `max_members` members. An order-keeping parser
// (nlohmann::ordered_json, which keeps a client's key order for rendering) checks every new key
// against the earlier ones: an object of n keys costs n^2/2 comparisons (128K keys, 1.7 MB: 15 s).
// O(n); allocates one flag per open bracket.
bool json_object_wider_than(std::string_view text, int max_members);

}  // namespace strata
