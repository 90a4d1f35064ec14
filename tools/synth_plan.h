// Internals of `strata synth` shared by its .cpp files: the tensor list of a config, its size, and
// the --target-gb solver. Not part of the tools API (include tools/synth.h).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "model/config.h"
#include "tools/synth.h"

namespace strata::tools {

// Every tensor a V4.1 checkpoint of shape `c` holds, in file order (embed, head, norm, layers.0..,
// mtp.0..), with release names, dtypes and shapes (make_tiny_v41.py's list) and make_tiny_v41.py's
// scales; generator keys derive from `seed` and the tensor (or weight-prefix) name.
std::vector<SynthTensor> synth_tensors(const model::ModelConfig& c, uint64_t seed);

struct SizeBreakdown {
  uint64_t total = 0;               // tensor data
  uint64_t expert_bytes = 0;        // routed experts, backbone and DSpark
  uint64_t engram_table_bytes = 0;  // Engram embed tables + scales
  uint64_t embed_head_bytes = 0;    // embed, head, DSpark markov embed/head
};
SizeBreakdown size_of(const model::ModelConfig& c);
SizeBreakdown size_of(const std::vector<SynthTensor>& tensors);

// Scales `base`'s dims, routed expert count, moe_inter and Engram rows so its tensors total about
// target_gb * 1e9 bytes, keeping its layer layout and its expert : Engram byte ratio. Appends a line
// on the choice to `notes`. kInvalidArgument when even dim 256 does not fit.
[[nodiscard]] Result<model::ModelConfig> scale_to_target(const model::ModelConfig& base, double target_gb,
                                                         std::vector<std::string>* notes);

}  // namespace strata::tools
