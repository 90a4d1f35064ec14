// TinyModelSuite: a GoogleTest fixture base for suites that share one loaded v41-tiny model and the
// fixture prompt's token ids (tokens.json "ids"). The model loads once per suite; every test is
// skipped with a "fixture missing" message (never passed) when the fixture is absent.
// CRTP: each suite (`class FooTiny : public testing::TinyModelSuite<FooTiny>`) gets its own statics.
#pragma once

#include <gtest/gtest.h>

#include <fstream>
#include <memory>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "tests/support/npy.h"
#include "tests/support/tiny_model.h"

namespace strata::testing {

template <class Suite>
class TinyModelSuite : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    if (!std::ifstream(tiny_dir() + "/tokens.json")) return;
    auto m = load_model(tiny_dir() + "/checkpoint");
    ASSERT_TRUE(m.ok()) << m.error().to_string();
    model_ = std::move(*m).release();
    std::ifstream f(tiny_dir() + "/tokens.json");
    std::stringstream ss;
    ss << f.rdbuf();
    ids_ = nlohmann::json::parse(ss.str())["ids"].get<std::vector<int32_t>>();
  }
  static void TearDownTestSuite() {
    delete model_;
    model_ = nullptr;
  }
  void SetUp() override {
    STRATA_REQUIRE_FIXTURE(tiny_dir() + "/tokens.json");
    ASSERT_NE(model_, nullptr);
  }

  inline static model::Model* model_ = nullptr;  // owned; deleted in TearDownTestSuite
  inline static std::vector<int32_t> ids_;        // the fixture prompt
};

}  // namespace strata::testing
