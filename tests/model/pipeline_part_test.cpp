// Pipeline parallelism's model half (model/pipeline_part.h) without MPI: a loopback PipelineNext
// runs the stages after rank 0 as Models over their own layer ranges in this process, each with its
// own mirror KvCache, as dist/mpi_pipeline.cpp's stages do. The logits of a prompt in two chunks and
// greedy decode steps must be bit-identical to one model at every set of clean cuts of the fixture;
// each part binds only its weights; a stage refuses bounded replay and streams of the wrong size.
#include <gtest/gtest.h>

#include <cstring>
#include <memory>
#include <vector>

#include "model/pipeline_cuts.h"
#include "model/pipeline_part.h"
#include "tests/support/chunked_logits.h"
#include "tests/support/tiny_suite.h"

namespace strata::model {
namespace {

// Stages 1.. of a pipeline in this process: stage s runs layers [cuts[s-1], cuts[s]) on its mirror.
class LoopbackStages : public PipelineNext {
 public:
  struct Stage {
    std::unique_ptr<PipelinePart> part;
    std::unique_ptr<Model> model;
    KvCache mirror;
    std::unique_ptr<Activations> act;
  };
  std::vector<Stage> stages;

  Status forward_rest(std::span<const ForwardEntry* const> entries, std::span<const float> x,
                      std::span<const float> pre_mix) override {
    if (entries.size() != 1) return NotSupported("one entry");
    const ForwardEntry& in = *entries[0];
    std::vector<float> xs(x.begin(), x.end()), pm(pre_mix.begin(), pre_mix.end());
    for (size_t i = 0; i < stages.size(); ++i) {
      Stage& s = stages[i];
      if (in.cache->n_past == 0) s.mirror = s.model->new_cache();
      if (s.mirror.n_past != in.cache->n_past) return InvalidArgument("mirror out of step");
      ForwardEntry e;
      e.cache = &s.mirror;
      e.tokens = in.tokens;
      e.kind = in.kind;
      const bool last = i + 1 == stages.size();
      e.logits = last ? in.logits : LogitsRequest{LogitsRequest::Kind::kNone, {}};
      e.logits_out = last ? in.logits_out : nullptr;
      ForwardRequest req{std::span<ForwardEntry>(&e, 1), nullptr};
      req.x_in = xs;
      req.pre_mix_in = pm;
      STRATA_RETURN_IF_ERROR(s.model->forward(req, *s.act));
      xs = s.act->x;
      pm = s.act->pre_mix;
    }
    return Status();
  }
};

class PipelinePartTiny : public testing::TinyModelSuite<PipelinePartTiny> {
 protected:
  // Logits of the fixture prompt in two chunks then 4 greedy decode steps, all rows concatenated.
  static std::vector<float> run(const Model& m) { return testing::chunked_then_decode_logits(m, ids_); }

  // A model over layers [lo, hi) of the fixture (with `next` on the first part).
  static Result<std::unique_ptr<Model>> part_model(const PipelinePart* part) {
    STRATA_ASSIGN_OR_RETURN(CompressedVocabMap v, testing::vocab_of(testing::tiny_dir() + "/checkpoint"));
    ModelOptions opt;
    opt.n_threads = 2;
    opt.pipeline = part;
    return Model::load(testing::tiny_dir() + "/checkpoint", v, opt);
  }
};

TEST_F(PipelinePartTiny, LogitsBitIdenticalAtEveryCleanCutSet) {
  const std::vector<float> want = run(*model_);
  const ModelConfig& c = model_->config();
  const std::vector<std::vector<int>> cut_sets = {{5}, {1}, {2, 4}, {1, 2, 4, 5}};
  for (const std::vector<int>& cuts : cut_sets) {
    ASSERT_TRUE(check_cuts(c, static_cast<int>(cuts.size()) + 1, cuts).ok());
    std::vector<int> bounds = {0};
    bounds.insert(bounds.end(), cuts.begin(), cuts.end());
    bounds.push_back(c.n_layers);
    LoopbackStages stages;
    for (size_t s = 1; s + 1 < bounds.size(); ++s) {
      LoopbackStages::Stage st;
      st.part = std::make_unique<PipelinePart>(PipelinePart{bounds[s], bounds[s + 1], nullptr});
      auto m = part_model(st.part.get());
      ASSERT_TRUE(m.ok()) << m.error().to_string();
      st.model = std::move(*m);
      st.mirror = st.model->new_cache();
      st.act = std::make_unique<Activations>(st.model->new_activations());
      stages.stages.push_back(std::move(st));
    }
    PipelinePart first{0, bounds[1], &stages};
    auto m0 = part_model(&first);
    ASSERT_TRUE(m0.ok()) << m0.error().to_string();
    EXPECT_EQ((*m0)->weights().head.kind, Linear{}.kind) << "rank 0 binds no head";
    EXPECT_TRUE((*m0)->weights().norm.empty());
    EXPECT_TRUE(stages.stages.back().model->weights().embed.data == nullptr) << "the last stage binds no embedding";
    EXPECT_TRUE(stages.stages.back().model->weights().layers[0].attn_norm.empty()) << "nor layer 0";
    EXPECT_LT((*m0)->weights().resident_bytes, model_->weights().resident_bytes);
    const std::vector<float> got = run(**m0);
    ASSERT_EQ(got.size(), want.size());
    EXPECT_EQ(std::memcmp(got.data(), want.data(), want.size() * sizeof(float)), 0)
        << cuts.size() + 1 << " parts: logits differ";
  }
}

TEST_F(PipelinePartTiny, StageRefusesReplayAndWrongStreams) {
  PipelinePart part{5, model_->config().n_layers, nullptr};
  auto m = part_model(&part);
  ASSERT_TRUE(m.ok()) << m.error().to_string();
  Activations act = (*m)->new_activations();
  KvCache cache = (*m)->new_cache();
  std::vector<float> row(static_cast<size_t>((*m)->config().vocab_size));
  ForwardEntry e;
  e.cache = &cache;
  e.tokens = ids_;
  e.logits_out = row.data();
  std::vector<float> x(3), pm(1);
  ForwardRequest req{std::span<ForwardEntry>(&e, 1), nullptr};
  req.x_in = x;
  req.pre_mix_in = pm;
  Status s = (*m)->forward(req, act);
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("pipeline stage input"), std::string::npos) << s.to_string();
  e.decoder_tail = 2;
  e.logits.kind = LogitsRequest::Kind::kLast;
  s = (*m)->forward(req, act);
  EXPECT_EQ(s.code(), StatusCode::kNotSupported) << s.to_string();
  EXPECT_EQ(cache.n_past, 0);
  PipelinePart bad{3, 2, nullptr};
  EXPECT_FALSE(part_model(&bad).ok());
}

}  // namespace
}  // namespace strata::model
