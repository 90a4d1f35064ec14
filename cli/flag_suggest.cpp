#include "cli/flag_suggest.h"

#include <CLI/CLI.hpp>

#include <algorithm>

namespace strata::cli {

size_t edit_distance(std::string_view a, std::string_view b) {
  std::vector<size_t> row(b.size() + 1);
  for (size_t j = 0; j <= b.size(); ++j) row[j] = j;
  for (size_t i = 1; i <= a.size(); ++i) {
    size_t diag = row[0];
    row[0] = i;
    for (size_t j = 1; j <= b.size(); ++j) {
      const size_t up = row[j];
      row[j] = std::min({row[j] + 1, row[j - 1] + 1, diag + (a[i - 1] == b[j - 1] ? 0 : 1)});
      diag = up;
    }
  }
  return row[b.size()];
}

std::string closest_flag(std::string_view unknown, const std::vector<std::string>& known) {
  std::string best;
  size_t best_d = SIZE_MAX, best_edits = SIZE_MAX;
  for (const std::string& k : known) {
    const size_t edits = edit_distance(unknown, k);
    size_t d = edits;
    // An abbreviation ("--stat" for "--stats"): 4+ characters after "--" that start the flag.
    if (unknown.size() >= 6 && std::string_view(k).substr(0, unknown.size()) == unknown) d = std::min<size_t>(d, 1);
    if (d < best_d || (d == best_d && edits < best_edits)) {
      best_d = d;
      best_edits = edits;
      best = k;
    }
  }
  const size_t limit = unknown.size() >= 10 ? 3 : 2;
  return best_d <= limit ? best : "";
}

namespace {

// Long flag names ("--temp") of `app`'s options.
void long_flags(const CLI::App& app, std::vector<std::string>* out) {
  for (const CLI::Option* opt : app.get_options())
    for (const std::string& n : opt->get_lnames()) out->push_back("--" + n);
}

}  // namespace

std::string unknown_flag_message(const CLI::App& app, int argc, char** argv, std::string_view parse_error) {
  // The subcommand named in argv (CLI11 may not have marked it parsed when the error came first).
  const CLI::App* sub = nullptr;
  for (int i = 1; i < argc && !sub; ++i)
    for (const CLI::App* s : app.get_subcommands({}))
      if (s->get_name() == argv[i]) {
        sub = s;
        break;
      }
  std::vector<std::string> known;
  long_flags(app, &known);
  if (sub) long_flags(*sub, &known);
  const std::string where = sub ? " for `strata " + sub->get_name() + "`" : "";
  for (int i = 1; i < argc; ++i) {
    const std::string_view a = argv[i];
    if (a == "--") break;
    if (a.size() < 3 || a.substr(0, 2) != "--") continue;
    const std::string_view name = a.substr(0, a.find('='));
    if (std::find(known.begin(), known.end(), name) != known.end()) continue;
    if (parse_error.find(name) == std::string_view::npos) continue;
    const std::string guess = closest_flag(name, known);
    const std::string help = sub ? "strata " + sub->get_name() + " --help" : "strata --help";
    if (!guess.empty()) return "unknown flag " + std::string(name) + where + "; did you mean " + guess + "? (" + help + ")";
    return "unknown flag " + std::string(name) + where + " (" + help + " lists them)";
  }
  return "";
}

}  // namespace strata::cli
