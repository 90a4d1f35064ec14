// llama.cpp flags a user may bring to strata, and what to say instead of CLI11's reading of them
// ("-ngl 99" parses as "-n gl", "-ctk q8_0" as "-c tk"). Consulted only when parsing fails, and only
// for the argument the parse error is about, so a prompt that happens to read "-ngl" is never
// refused or blamed.
#pragma once

#include <string>
#include <string_view>

namespace strata::cli {

// A one-line explanation for the first llama.cpp flag in argv[1..argc) (before "--") that CLI11's
// `parse_error` names, or "" when there is none. A flag matches as itself, as "flag=value", or
// (single-dash short flags) directly followed by a digit ("-ngl99"); the error names it when it
// holds the argument, or for a single-dash one the rest CLI11 took as a short option's value
// ("-ngl" -> "'gl'"). `kv_note` (may be empty) is quoted in the KV-cache-type answer: the KV bytes
// per token of the model given with -m (kv_note_for_args in cli/common.h).
std::string llama_cpp_flag_hint(int argc, char** argv, std::string_view parse_error, std::string_view kv_note = {});

}  // namespace strata::cli
