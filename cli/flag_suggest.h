// "Did you mean" for a mistyped flag. CLI11 reports an unknown flag as "The following arguments were
// not expected: 0.5 --temprature", which names neither the command nor the flag that was meant;
// this turns it into "unknown flag --temprature for `strata run`; did you mean --temperature?".
// Consulted only when parsing fails, and only for arguments CLI11's error names, so a prompt that
// happens to start with "--" is never blamed.
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace CLI {
class App;
}

namespace strata::cli {

// Levenshtein distance (insert, delete, substitute: 1 each) between two ASCII strings.
size_t edit_distance(std::string_view a, std::string_view b);

// The flag in `known` ("--temp", "--top-p", ...) closest to `unknown` ("--temprature"), or "" when
// none is close enough to be a typo: at most 2 edits, or 3 for flags of 10+ characters. A flag that
// `unknown` abbreviates ("--stat" for "--stats") counts as one edit. Ties: fewer real edits, then the
// first in `known`.
std::string closest_flag(std::string_view unknown, const std::vector<std::string>& known);

// A one-line message for the first unknown long flag ("--x" or "--x=v") in argv[1..argc) that
// `parse_error` names, or "" when there is none. `app` is the top-level app after the failed parse:
// the flags of the subcommand given in argv (and the app's own) are the known ones.
std::string unknown_flag_message(const CLI::App& app, int argc, char** argv, std::string_view parse_error);

}  // namespace strata::cli
