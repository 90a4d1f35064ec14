// llama.cpp flags a user may bring to strata, and what to say instead of CLI11's reading of them
// ("-ngl 99" parses as "-n gl", "-ctk q8_0" as "-c tk"). Consulted only when parsing fails, so a
// prompt that happens to read "-ngl" is never refused.
#pragma once

#include <string>

namespace strata::cli {

// A one-line explanation for the first llama.cpp flag in argv[1..argc) (before "--"), or "" when
// there is none. A flag matches as itself, as "flag=value", or (single-dash short flags) directly
// followed by a digit ("-ngl99").
std::string llama_cpp_flag_hint(int argc, char** argv);

}  // namespace strata::cli
