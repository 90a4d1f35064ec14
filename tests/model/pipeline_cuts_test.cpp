// Pipeline cuts (model/pipeline_cuts.h): which layers a pipeline may cut at (no cache or attention
// selection crosses the cut), the default cuts (the CED boundary at 2 ranks, balanced weight
// bytes beyond), and the errors for declared cuts, naming the layer that reads across.
#include <gtest/gtest.h>

#include <vector>

#include "model/model.h"
#include "model/pipeline_cuts.h"
#include "tests/support/npy.h"

namespace strata::model {
namespace {

ModelConfig release() {
  auto c = ModelConfig::load(testing::fixtures_dir() + "/real-config");
  EXPECT_TRUE(c.ok()) << c.error().to_string();
  return c.ok() ? *c : ModelConfig{};
}

TEST(PipelineCuts, ReleaseCleanCutsAreBeforeEachKvSource) {
  STRATA_REQUIRE_FIXTURE(testing::fixtures_dir() + "/real-config/config.json");
  const ModelConfig c = release();
  EXPECT_EQ(clean_cuts(c), (std::vector<int>{1, 2, 8, 14, 20}));
  EXPECT_TRUE(check_clean_cut(c, 20).ok());
  const Status s = check_clean_cut(c, 21);
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("layer 21 reads the compressed KV of layer 20, before the cut at 21"), std::string::npos)
      << s.message();
  EXPECT_NE(s.message().find("clean cuts of this config: 1,2,8,14,20"), std::string::npos) << s.message();
  EXPECT_FALSE(check_clean_cut(c, 0).ok());
  EXPECT_FALSE(check_clean_cut(c, 40).ok());
}

TEST(PipelineCuts, CandidatesAndTopKCountAsCrossings) {
  STRATA_REQUIRE_FIXTURE(testing::fixtures_dir() + "/real-config/config.json");
  ModelConfig c = release();
  // A decoder KV source at 30 would own layers 30-39's compressed KV, but 30 still reads the
  // top-k of the index source 28 and the candidate blocks of layer 20.
  c.kv_source_layers = {2, 8, 14, 20, 30};
  const Status s = check_clean_cut(c, 30);
  EXPECT_NE(s.message().find("layer 30 reads the top-k selection of layer 28"), std::string::npos) << s.message();
  // With 30 an index source too, it owns its keys and top-k; the candidate blocks still cross.
  c.index_source_layers = {2, 8, 14, 20, 24, 28, 30, 32, 36};
  const Status t = check_clean_cut(c, 30);
  EXPECT_NE(t.message().find("layer 30 reads the candidate blocks of layer 20"), std::string::npos) << t.message();
  // An index source that is no KV source borrows the keys of the latest owner (20).
  c.candidate_source_layer = -1;
  c.kv_source_layers = {2, 8, 14, 20};
  c.index_source_layers = {2, 8, 14, 20, 24, 28, 32, 36};
  const Status u = check_clean_cut(c, 24);
  EXPECT_NE(u.message().find("layer 24 reads the compressed KV of layer 20"), std::string::npos) << u.message();
}

TEST(PipelineCuts, DefaultsBoundaryAtTwoRanksBalancedBeyond) {
  STRATA_REQUIRE_FIXTURE(testing::fixtures_dir() + "/real-config/config.json");
  const ModelConfig c = release();
  const std::vector<uint64_t> equal(40, 1);
  auto two = default_cuts(c, 2, equal);
  ASSERT_TRUE(two.ok()) << two.error().to_string();
  EXPECT_EQ(*two, std::vector<int>{20});
  // Equal layers: no clean cut after 20, so the last range is [20, 40) at best (20 layers); the
  // first two ranges are then balanced among themselves: [0, 8) [8, 20).
  auto three = default_cuts(c, 3, equal);
  ASSERT_TRUE(three.ok()) << three.error().to_string();
  EXPECT_EQ(*three, (std::vector<int>{8, 20}));
  // Heavy decoder layers move the cuts: layers 20-39 ten times the encoder's.
  std::vector<uint64_t> heavy(40, 1);
  for (int l = 20; l < 40; ++l) heavy[static_cast<size_t>(l)] = 10;
  auto h = default_cuts(c, 3, heavy);
  ASSERT_TRUE(h.ok());
  EXPECT_EQ(*h, (std::vector<int>{8, 20}));  // no clean cut inside the decoder: 20 is the best
  std::vector<uint64_t> heavy_encoder(40, 1);
  for (int l = 0; l < 20; ++l) heavy_encoder[static_cast<size_t>(l)] = 10;
  auto e = default_cuts(c, 3, heavy_encoder);
  ASSERT_TRUE(e.ok());
  EXPECT_EQ(*e, (std::vector<int>{8, 14}));  // 80 | 60 | 60 + 20 bytes
  auto too_many = default_cuts(c, 7, equal);
  ASSERT_FALSE(too_many.ok());
  EXPECT_NE(too_many.error().message().find("need 6 clean cuts; this config has 5 (1,2,8,14,20)"), std::string::npos)
      << too_many.error().message();
}

TEST(PipelineCuts, DeclaredCutsAreCheckedAndNamed) {
  STRATA_REQUIRE_FIXTURE(testing::fixtures_dir() + "/real-config/config.json");
  const ModelConfig c = release();
  EXPECT_TRUE(check_cuts(c, 3, std::vector<int>{8, 20}).ok());
  EXPECT_NE(check_cuts(c, 3, std::vector<int>{20}).message().find("1 cut for 3 ranks: expected 2"), std::string::npos);
  EXPECT_NE(check_cuts(c, 3, std::vector<int>{20, 8}).message().find("strictly increasing (20 then 8)"), std::string::npos);
  EXPECT_NE(check_cuts(c, 3, std::vector<int>{8, 25}).message().find("layer 25 reads the compressed KV of layer 20"),
            std::string::npos);
}

TEST(PipelineCuts, TinyFixtureCuts) {
  STRATA_REQUIRE_FIXTURE(testing::fixtures_dir() + "/v41-tiny/checkpoint/config.json");
  auto c = ModelConfig::load(testing::fixtures_dir() + "/v41-tiny/checkpoint");
  ASSERT_TRUE(c.ok()) << c.error().to_string();
  EXPECT_EQ(clean_cuts(*c), (std::vector<int>{1, 2, 4, 5}));
  auto two = default_cuts(*c, 2, std::vector<uint64_t>(8, 1));
  ASSERT_TRUE(two.ok());
  EXPECT_EQ(*two, std::vector<int>{5});
}

}  // namespace
}  // namespace strata::model
