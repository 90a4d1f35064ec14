// tokenizer.json of a GGUF made by another tool, built from its `tokenizer.ggml.*` metadata.
//
// llama.cpp's converters store a byte-level BPE vocabulary as
//   tokenizer.ggml.model       "gpt2"
//   tokenizer.ggml.pre         the pre-tokenizer's name ("deepseek-v3")
//   tokenizer.ggml.tokens      [n] string   token spellings (GPT-2 byte alphabet), id = index
//   tokenizer.ggml.token_type  [n] i32      1 normal, 2 unknown, 3 control, 4 user-defined, 5 unused, 6 byte
//   tokenizer.ggml.merges      [m] string   "a b", in rank order
//   tokenizer.ggml.{bos,eos}_token_id       u32
// (llama.cpp gguf-py constants.py; convert_hf_to_gguf.py get_vocab_base). This rebuilds the
// equivalent tokenizer.json (docs/gguf.md "GGUFs from ik_llama.cpp and ds4"), so
// tokenizer::Tokenizer reads it unchanged:
//   model.vocab   ids 0 .. the last normal token (the HF model vocabulary; a V3 tokenizer.json's BOS,
//                 EOS and pad, ids 0-2, are in it too), merges as given;
//   added_tokens  every control token (special, normalized false) and user-defined token
//                 (not special, normalized true), as HF marks them in DeepSeek's tokenizer.json;
//   pre_tokenizer the named pre-tokenizer's Split regexes then ByteLevel; decoder ByteLevel.
// Not exact where the GGUF dropped information: an added token's lstrip/rstrip/single_word flags
// (all false in DeepSeek's tokenizers) and the normalized flag of a special token (one of DeepSeek
// V3's 804 special tokens is marked normalized; no V4.1 template text depends on it).
#pragma once

#include <string>

#include "core/status.h"
#include "io/gguf.h"

namespace strata::io {

// tokenizer.json text from `g`'s tokenizer.ggml.* keys. `path` names the file in errors.
// Errors (kInvalidArgument naming the key and the file): a missing model/tokens/merges key, a model
// other than "gpt2", a pre-tokenizer strata has no regexes for (the message lists the known one,
// "deepseek-v3"), token_type of another length than tokens, a type outside 1..6. Trailing unused
// tokens (the converter's "[PAD<i>]" up to the model's vocab_size) are dropped.
[[nodiscard]] Result<std::string> foreign_gguf_tokenizer_json(const GgufModel& g, const std::string& path);

}  // namespace strata::io
