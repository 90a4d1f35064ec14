// Checks the Engram hash tables a GGUF from ds4 / ik_llama.cpp ships against what strata computes.
//
// Those files carry the n-gram hash constants as metadata (deepseek41.engram.primes, .multipliers,
// .token_map, .pad_id). strata derives all of them itself (model/engram_hash.h from the config,
// tokenizer/compressed_vocab.h from the vocabulary), so they are never trusted: each one present is
// compared with strata's value, and a difference is an error naming the key. Absent keys are fine.
// Source: docs/gguf.md "GGUFs from ik_llama.cpp and ds4".
#pragma once

#include <cstdint>
#include <span>
#include <string>

#include "core/status.h"
#include "model/engram_hash.h"

namespace strata::model {

// `path`: the GGUF (a non-GGUF path returns OK at once).
//   deepseek41.engram.primes       [n_layers * n_cols] ints, layer-major; == h.primes(l) of each layer
//   deepseek41.engram.multipliers  [n_layers * max_ngram_size] ints; == h.multipliers(l)
//   deepseek41.engram.token_map    [n_tokens] ints; == class_of_token (the tokenizer's compressed map)
//   deepseek41.engram.pad_id       int; == pad_class (DECISION: ds4 writes the compressed pad id)
// Errors: kInvalidArgument "PATH: metadata key 'deepseek41.engram.primes' differs from the primes
// strata computes from the config: entry 5 is 601, strata has 607" (or a length difference); the
// errors of opening the GGUF.
[[nodiscard]] Status check_gguf_engram_tables(const std::string& path, const EngramHasher& h,
                                              std::span<const uint32_t> class_of_token, uint32_t pad_class);

}  // namespace strata::model
