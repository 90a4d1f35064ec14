// The V4.1 tokenizer for chat tests, built once from the fixture checkpoint's V3 tokenizer.json
// (tokenizer/v41_tokenizer.h), the same way `strata synth` writes it. Null when the fixture is missing.
#pragma once

#include <fstream>
#include <memory>
#include <string>

#include "tests/support/files.h"
#include "tokenizer/tokenizer.h"
#include "tokenizer/v41_tokenizer.h"

namespace strata::testing {

inline std::string v3_tokenizer_path() { return std::string(STRATA_FIXTURES_DIR) + "/v41-tiny/checkpoint/tokenizer.json"; }

inline const tokenizer::Tokenizer* v41_tokenizer() {
  static const std::unique_ptr<tokenizer::Tokenizer> tok = []() -> std::unique_ptr<tokenizer::Tokenizer> {
    if (!std::ifstream(v3_tokenizer_path())) return nullptr;
    auto json = tokenizer::make_v41_tokenizer_json(read_all(v3_tokenizer_path()));
    if (!json.ok()) return nullptr;
    auto t = tokenizer::Tokenizer::from_json(*json, "v41");
    if (!t.ok()) return nullptr;
    return std::make_unique<tokenizer::Tokenizer>(std::move(t).value());
  }();
  return tok.get();
}

}  // namespace strata::testing
