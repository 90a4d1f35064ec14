// The machine profile `strata probe` measures, shared by `probe`, `plan` and `bench` (defined in
// cli/cmd_probe.cpp).
#pragma once

#include <string>

#include "core/status.h"
#include "tools/probe.h"

namespace strata::cli {

// Default cache file: <build dir>/probe/machine.json.
std::string default_probe_cache();

// Measures the machine with a progress bar on a terminal and saves the profile to `cache` (unless
// empty).
[[nodiscard]] Result<tools::MachineProfile> probe_machine(const tools::ProbeOptions& o, const std::string& cache);

}  // namespace strata::cli
