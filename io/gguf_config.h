// config.json of a V4.1 GGUF made by another tool (ik_llama.cpp `deepseek41`, antirez/ds4), built
// from its `deepseek41.*` metadata (docs/gguf.md "GGUFs from ik_llama.cpp and ds4").
//
// strata's own GGUFs carry config.json verbatim (`strata.config_json`); these files do not. The
// keys are config.json's own names under the architecture prefix ("deepseek41.hidden_size"), the
// rope-scaling and Engram groups nested ("deepseek41.rope_scaling.factor",
// "deepseek41.engram.layer_ids"); an embedded config blob ("deepseek41.config", a JSON string)
// wins when present. The result is config.json text in the HF layout that model::ModelConfig
// parses, so a foreign GGUF and a directory go through the same parser and validation.
#pragma once

#include <string>

#include "core/status.h"
#include "io/gguf.h"

namespace strata::io {

// The architecture these files name in general.architecture.
inline constexpr const char* kForeignGgufArch = "deepseek41";

// Whether `g` is a V4.1 GGUF written by another tool: general.architecture = "deepseek41" and no
// `strata.config_json`.
bool is_foreign_gguf(const GgufModel& g);

// config.json text for a foreign GGUF. `path` names the file in errors.
//   - the blob "deepseek41.config" (a JSON object as a string) is taken as config.json when present;
//   - else every mapped key is read (table in gguf_config.cpp); a missing required key is
//     kInvalidArgument "PATH: missing metadata key 'deepseek41.hidden_size' (config.json
//     hidden_size)"; a key of the wrong GGUF type is kInvalidArgument naming it and the type found;
//   - ik_llama.cpp's key list lacks engram.max_ngram_size / n_heads / head_dim / vocab_size: when
//     absent they are derived from engram.multipliers, engram.primes and the first Engram table's
//     row width (see derive_engram_field in the .cpp; the primes are then checked by the model);
//   - a file with no "mtp.*" tensor loads without DSpark: num_nextn_predict_layers and
//     dspark_block_size become 0 and compress_ratios keeps the backbone's entries.
// bos/eos ids come from tokenizer.ggml.{bos,eos}_token_id. f32 values are written as the shortest
// decimal that reads back as the same f32 (1e-20 stays 1e-20, as config.json spelled it).
// engram.primes / multipliers / token_map / pad_id are not config: model/engram_gguf_check.h checks
// them against what strata computes.
[[nodiscard]] Result<std::string> foreign_gguf_config_json(const GgufModel& g, const std::string& path);

}  // namespace strata::io
