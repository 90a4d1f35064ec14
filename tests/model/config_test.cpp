// ModelConfig: both config layouts, the real V4.1 config, and clear errors for bad fields.
#include "model/config.h"

#include <gtest/gtest.h>

#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <tuple>
#include <vector>

#include "tests/support/files.h"

#include "tests/support/npy.h"

namespace strata::model {
namespace {


TEST(ModelConfig, RealV41FlashConfig) {
  const std::string p = testing::fixtures_dir() + "/real-config/config.json";
  STRATA_REQUIRE_FIXTURE(p);
  auto c = ModelConfig::parse(testing::read_all(p), p);
  ASSERT_TRUE(c.ok()) << c.error().to_string();
  EXPECT_EQ(c->dim, 5120);
  EXPECT_EQ(c->n_layers, 40);
  EXPECT_EQ(c->n_mtp_layers, 3);
  EXPECT_EQ(c->n_heads, 64);
  EXPECT_EQ(c->head_dim, 512);
  EXPECT_EQ(c->rope_head_dim, 64);
  EXPECT_EQ(c->n_routed_experts, 384);
  EXPECT_EQ(c->n_activated_experts, 6);
  EXPECT_EQ(c->window_size, 128);
  EXPECT_EQ(c->compress_ratios.size(), 43u);
  EXPECT_EQ(c->kv_source_layers, (std::vector<int>{2, 8, 14, 20}));
  EXPECT_EQ(c->candidate_source_layer, 20);
  EXPECT_EQ(c->engram_compressed_vocab_size, 99092);
  EXPECT_EQ(c->original_seq_len, 65536);
  EXPECT_DOUBLE_EQ(c->rope_factor, 16);
  EXPECT_DOUBLE_EQ(c->route_scale, 1.5);
  // Layer roles of the real model (ARCHITECTURE.md §Attention).
  EXPECT_TRUE(c->owns_index_keys(20));
  EXPECT_FALSE(c->is_kv_source(24));
  EXPECT_TRUE(c->is_index_source(24));
  EXPECT_TRUE(c->uses_candidates(24));
  EXPECT_EQ(c->engram_n_cols(), 24);
}

TEST(ModelConfig, HfAndFlatLayoutsAgree) {
  const std::string dir = testing::fixtures_dir() + "/v41-tiny/checkpoint";
  STRATA_REQUIRE_FIXTURE(dir + "/config.json");
  auto hf = ModelConfig::parse(testing::read_all(dir + "/config.json"), "config.json");
  auto flat = ModelConfig::parse(testing::read_all(dir + "/inference_config.json"), "inference_config.json");
  ASSERT_TRUE(hf.ok()) << hf.error().to_string();
  ASSERT_TRUE(flat.ok()) << flat.error().to_string();
  EXPECT_EQ(hf->dim, flat->dim);
  EXPECT_EQ(hf->window_size, flat->window_size);
  EXPECT_EQ(hf->kv_source_layers, flat->kv_source_layers);
  EXPECT_EQ(hf->index_source_layers, flat->index_source_layers);
  EXPECT_EQ(hf->compress_ratios, flat->compress_ratios);
  EXPECT_EQ(hf->engram_num_embeddings, flat->engram_num_embeddings);
  EXPECT_EQ(hf->engram_pad_id, flat->engram_pad_id);
  EXPECT_EQ(hf->dspark_n_activated_experts, flat->dspark_n_activated_experts);
  EXPECT_DOUBLE_EQ(hf->swiglu_limit, flat->swiglu_limit);
}

TEST(ModelConfig, MissingFieldIsNamed) {
  const std::string dir = testing::fixtures_dir() + "/v41-tiny/checkpoint";
  STRATA_REQUIRE_FIXTURE(dir + "/config.json");
  auto j = nlohmann::json::parse(testing::read_all(dir + "/config.json"));
  j["text_config"].erase("hidden_size");
  auto c = ModelConfig::parse(j.dump(), "DIR/config.json");
  ASSERT_FALSE(c.ok());
  EXPECT_EQ(c.error().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(c.error().message().find("DIR/config.json: missing field 'text_config.hidden_size' (ModelArgs.dim)"),
            std::string::npos)
      << c.error().to_string();
}

TEST(ModelConfig, BadValuesAreNamed) {
  const std::string dir = testing::fixtures_dir() + "/v41-tiny/checkpoint";
  STRATA_REQUIRE_FIXTURE(dir + "/config.json");
  auto base = nlohmann::json::parse(testing::read_all(dir + "/config.json"));
  {
    auto j = base;
    j["text_config"]["sliding_window"] = "sixteen";
    auto c = ModelConfig::parse(j.dump(), "config.json");
    ASSERT_FALSE(c.ok());
    EXPECT_NE(c.error().message().find("'text_config.sliding_window' must be an integer"), std::string::npos);
  }
  {
    auto j = base;
    j["text_config"]["compress_ratios"] = {0, 0, 2};
    auto c = ModelConfig::parse(j.dump(), "config.json");
    ASSERT_FALSE(c.ok());
    EXPECT_NE(c.error().message().find("compress_ratios"), std::string::npos) << c.error().to_string();
  }
  {
    auto j = base;
    j["text_config"]["kv_source_layer_ids"] = {0, 4, 5};  // layer 0 is window-only
    auto c = ModelConfig::parse(j.dump(), "config.json");
    ASSERT_FALSE(c.ok());
    EXPECT_NE(c.error().message().find("kv_source_layer_ids"), std::string::npos) << c.error().to_string();
  }
  {
    auto j = base;
    j["text_config"]["index_topk"] = 4294967312LL;  // would truncate to 16 as a 32-bit int
    auto c = ModelConfig::parse(j.dump(), "config.json");
    ASSERT_FALSE(c.ok());
    EXPECT_NE(c.error().message().find("'text_config.index_topk' must be an integer in"), std::string::npos)
        << c.error().to_string();
  }
  {
    auto j = base;
    j["text_config"]["sliding_window"] = 1000000000;  // would allocate gigabytes per layer
    auto c = ModelConfig::parse(j.dump(), "config.json");
    ASSERT_FALSE(c.ok());
    EXPECT_NE(c.error().message().find("sliding_window = 1000000000 is outside"), std::string::npos)
        << c.error().to_string();
  }
  // DSpark fields the draft indexes with: each refused with the field, the value and the range.
  for (const auto& [field, value, expect] :
       std::vector<std::tuple<std::string, nlohmann::json, std::string>>{
           {"dspark_noise_token_id", 2000000000, "dspark_noise_token_id 2000000000 is outside the vocabulary [0, 129280)"},
           {"dspark_noise_token_id", -5, "dspark_noise_token_id -5 is outside the vocabulary"},
           {"dspark_block_size", 100000, "dspark_block_size = 100000 is outside [0, 64]"},
           {"dspark_target_layer_ids", nlohmann::json::array({7, 5, 6}), "must be strictly increasing (7 then 5)"},
           {"dspark_target_layer_ids", nlohmann::json::array({5, 5, 7}), "must be strictly increasing (5 then 5)"},
           {"dspark_target_layer_ids", nlohmann::json::array({5, 6, 9}), "entry 9 is outside the layers [0, 8)"},
           // Issue 13 item 5: top-k above the stage's experts crashed the draft; a negative count
           // surfaced as "vector::_M_default_append".
           {"dspark_num_experts_per_tok", 1000, "dspark_num_experts_per_tok (1000) exceeds dspark_n_routed_experts"},
           {"dspark_num_experts_per_tok", -1, "dspark_num_experts_per_tok = -1 is outside [0, 65536]"},
           {"dspark_n_routed_experts", -3, "dspark_n_routed_experts = -3 is outside [0, 65536]"},
           // Found by fuzz/config_fuzz: used to pad compress_ratios before the range check
           // (std::length_error; signed overflow).
           {"num_nextn_predict_layers", -100, "num_nextn_predict_layers = -100 is outside [0, 64]"},
           {"num_nextn_predict_layers", 2147483647, "num_nextn_predict_layers = 2147483647 is outside [0, 64]"}}) {
    auto j = base;
    j["text_config"][field] = value;
    auto c = ModelConfig::parse(j.dump(), "config.json");
    ASSERT_FALSE(c.ok()) << field << " = " << value.dump();
    EXPECT_NE(c.error().message().find(expect), std::string::npos) << c.error().to_string();
  }
  {
    auto j = base;
    j["text_config"].erase("dspark_noise_token_id");
    auto c = ModelConfig::parse(j.dump(), "config.json");
    ASSERT_FALSE(c.ok());
    EXPECT_NE(c.error().message().find("dspark_noise_token_id is missing"), std::string::npos) << c.error().to_string();
  }
  {
    auto j = base;
    j["text_config"]["hidden_act"] = "gelu";
    auto c = ModelConfig::parse(j.dump(), "config.json");
    ASSERT_FALSE(c.ok());
    EXPECT_EQ(c.error().code(), StatusCode::kNotSupported);
  }
  {
    auto j = base;
    j["text_config"]["rope_theta"] = -1;
    EXPECT_FALSE(ModelConfig::parse(j.dump(), "config.json").ok());
  }
  {
    auto c = ModelConfig::parse("[1, 2]", "config.json");
    ASSERT_FALSE(c.ok());
    EXPECT_NE(c.error().message().find("not a JSON object"), std::string::npos);
  }
}

}  // namespace
}  // namespace strata::model
