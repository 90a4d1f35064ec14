// The strata subcommands. Each registers its flags on the CLI11 app and returns the function that
// runs it (0 = success; on failure it has printed one "strata: error: ..." line and returns 1).
// Flags are parsed only here, in cli/ (STYLE.md §3.8).
#pragma once

#include <functional>

namespace CLI {
class App;
}

namespace strata::cli {

using Command = std::function<int()>;

// Exit status of every usage error: an unknown flag, a bad or missing flag value, flags that do not
// go together (CLI11's own codes 105, 106, 109, ... are not passed on). Other errors exit 1.
inline constexpr int kExitUsage = 2;

Command register_run(CLI::App& app);
Command register_tokenize(CLI::App& app);
Command register_logits(CLI::App& app);
Command register_synth(CLI::App& app);
Command register_quantize(CLI::App& app);
Command register_calibrate(CLI::App& app);
Command register_eval(CLI::App& app);
Command register_probe(CLI::App& app);
Command register_plan(CLI::App& app);
Command register_bench(CLI::App& app);
Command register_serve(CLI::App& app);

}  // namespace strata::cli
