// The v41-tiny fixture quantized by tools::quantize_checkpoint, and its prompt, for the tests that
// load the GGUF `strata quantize` writes (tests/tools/quantize_test.cpp, quantize_mxfp4_test.cpp,
// tests/model/foreign_gguf_test.cpp). Tests that use it check the fixture first
// (STRATA_REQUIRE_FIXTURE(testing::tiny_dir() + "/tokens.json")).
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "tests/support/temp_dir.h"
#include "tests/support/tiny_model.h"
#include "tools/quantize.h"

namespace strata::testing {

// The fixture's safetensors checkpoint directory.
inline std::string tiny_checkpoint() { return tiny_dir() + "/checkpoint"; }

// The first n ids (all when fewer) of the fixture's prompt (tokens.json "ids").
inline std::vector<int32_t> tiny_prompt_ids(size_t n) {
  std::ifstream f(tiny_dir() + "/tokens.json");
  std::stringstream ss;
  ss << f.rdbuf();
  auto ids = nlohmann::json::parse(ss.str())["ids"].get<std::vector<int32_t>>();
  ids.resize(std::min(ids.size(), n));
  return ids;
}

// Options that quantize the fixture into d.file(name): everything kept until the caller sets a
// type; no fsync (a test's temporary file), 2 threads.
inline tools::QuantizeOptions fixture_quantize_options(const TempDir& d, const std::string& name) {
  tools::QuantizeOptions o;
  o.src_dir = tiny_checkpoint();
  o.out_path = d.file(name);
  o.fsync = false;
  o.n_threads = 2;
  return o;
}

// Runs o (a test failure when it fails) and returns o.out_path; its report into *report when given.
inline std::string quantize_fixture(const tools::QuantizeOptions& o, tools::QuantizeReport* report = nullptr) {
  auto r = tools::quantize_checkpoint(o);
  EXPECT_TRUE(r.ok()) << r.error().to_string();
  if (r.ok() && report) *report = *r;
  return o.out_path;
}

}  // namespace strata::testing
