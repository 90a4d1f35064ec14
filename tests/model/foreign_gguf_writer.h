// Test-only: rewrites a GGUF written by `strata quantize` into the layout of ik_llama.cpp's
// `deepseek41` / antirez/ds4's converter (docs/gguf.md "GGUFs from ik_llama.cpp and ds4"), so the
// foreign-GGUF path can be tested on the v41-tiny fixture without those tools.
//
// Always: general.architecture "deepseek41", the model's config as deepseek41.* keys (config.json
// names, rope_scaling.* and ds4's engram.* group), the Engram hash tables ds4 ships (engram.primes,
// .multipliers, .token_map, .pad_id, computed here from the config and tokenizer), the vocabulary
// as tokenizer.ggml.* (gpt2 / deepseek-v3, padded with "[PAD<i>]" unused tokens to vocab_size as
// llama.cpp's converter does), no strata.config_json / strata.tokenizer_json, no mtp.* tensors, and
// each Engram table as one I8 tensor of interleaved rows (E4M3 bytes then E8M0 scales).
// lossy (ds4's recipe on this fixture): token_embd, hc_*_fn, compressor, indexer and Engram
// projections as F16; every FP8 linear and the head as Q8_0 (from the exact dequantised values);
// routed experts as the input has them (quantize them with --experts q8_0 first).
// exact (!lossy): BF16/F32 tensors and the official FP8/MXFP4 bits (strata.raw_tensors) kept, so
// only the layout differs from the official checkpoint.
#pragma once

#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "core/status.h"
#include "io/gguf.h"

namespace strata::test {

struct ForeignGgufOptions {
  bool lossy = true;
  int engram_row_pad = 0;  // extra bytes per Engram row (an error test: a bad row width)
  // Edits the metadata before writing (error tests: drop a key, change a value).
  std::function<void(std::vector<std::pair<std::string, io::GgufValue>>*)> edit_metadata;
};

// Reads `strata_gguf` (from tools::quantize_checkpoint, Engram kept) and writes `out`.
[[nodiscard]] Status write_foreign_gguf(const std::string& strata_gguf, const std::string& out,
                                        const ForeignGgufOptions& options);

}  // namespace strata::test
