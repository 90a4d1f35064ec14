// `strata quantize --experts mxfp4` and reading ggml MXFP4 experts (issue 16 item 1): on the
// v41-tiny fixture, the routed experts written as ggml MXFP4 (type 39, ne [in, out, n_experts], the
// llama.cpp forks' layout) read back as the official codes and scales byte for byte, and the logits
// equal the safetensors checkpoint's bit for bit loaded resident and streamed (a RAM budget that
// evicts experts, O_DIRECT and buffered); mmap is refused naming the tensor and the load modes
// that work (docs/gguf.md).
#include <gtest/gtest.h>

#include <atomic>
#include <cstring>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <thread>

#include "io/checkpoint.h"
#include "io/gguf.h"
#include "io/uring_reader.h"
#include "model/model.h"
#include "store/expert_cache.h"
#include "store/expert_catalog.h"
#include "tests/support/fixture_quantize.h"
#include "tests/support/forward_one.h"
#include "tests/support/npy.h"
#include "tests/support/temp_dir.h"
#include "tests/support/tiny_model.h"
#include "tools/quantize.h"

namespace strata::tools {
namespace {

// Logits [n, vocab] of the first n prompt tokens; the load error when the model does not load.
Result<std::vector<float>> logits_of(const std::string& model_path, size_t n, const store::PlacementOptions& placement,
                                     store::PlacementStats* stats = nullptr) {
  STRATA_ASSIGN_OR_RETURN(auto v, testing::vocab_of(testing::tiny_checkpoint()));
  model::ModelOptions opt;
  opt.n_threads = 2;
  opt.placement = placement;
  STRATA_ASSIGN_OR_RETURN(auto m, model::Model::load(model_path, v, opt));
  const std::vector<int32_t> ids = testing::tiny_prompt_ids(n);
  model::KvCache cache = m->new_cache();
  model::LogitsRequest req;
  req.kind = model::LogitsRequest::Kind::kAll;
  std::vector<float> out(ids.size() * static_cast<size_t>(m->config().vocab_size));
  STRATA_RETURN_IF_ERROR(strata::test::forward_one(*m, cache, ids, req, out.data()));
  if (stats) *stats = m->store().stats();
  return out;
}

std::string quantize_mxfp4(const testing::TempDir& d) {
  QuantizeOptions o = testing::fixture_quantize_options(d, "mx.gguf");
  o.experts_ggml_mxfp4 = true;
  return testing::quantize_fixture(o);
}

constexpr size_t kPositions = 24;

TEST(QuantizeMxfp4, ExpertsAreGgmlMxfp4AndReadBackAsTheOfficialBytes) {
  STRATA_REQUIRE_FIXTURE(testing::tiny_dir() + "/tokens.json");
  testing::TempDir d;
  const std::string g = quantize_mxfp4(d);
  auto gm = io::GgufModel::open(g);
  ASSERT_TRUE(gm.ok()) << gm.error().to_string();
  auto src = io::Checkpoint::open(testing::tiny_checkpoint());
  ASSERT_TRUE(src.ok());
  const io::TensorInfo* w0 = (*src)->find("layers.0.ffn.experts.0.w1.weight");
  ASSERT_NE(w0, nullptr);
  const io::GgufTensorInfo* t = (*gm)->find("blk.0.ffn_gate_exps.weight");
  ASSERT_NE(t, nullptr);
  EXPECT_EQ(t->type, io::GgmlType::kMxfp4);
  const int64_t out = w0->shape[0], in = w0->shape[1] * 2;
  EXPECT_EQ(t->ne, (std::vector<int64_t>{in, out, t->ne[2]}));  // ggml order: [in, out, n_experts]
  EXPECT_EQ((*gm)->find("blk.0.ffn_gate_exps.scale"), nullptr) << "the scales live inside the blocks";
  EXPECT_EQ((*gm)->find_key("strata.quantize.experts")->to_string(), "\"mxfp4\"");

  auto q = io::Checkpoint::open(g);
  ASSERT_TRUE(q.ok()) << q.error().to_string();
  int compared = 0;
  for (const auto& [name, st] : (*src)->tensors()) {
    if (name.find(".ffn.experts.") == std::string::npos) continue;
    const io::TensorInfo* qt = (*q)->find(name);
    ASSERT_NE(qt, nullptr) << name;
    EXPECT_EQ(qt->dtype, st.dtype) << name;
    EXPECT_EQ(qt->shape, st.shape) << name;
    EXPECT_NE(qt->packing, io::TensorInfo::Packing::kPlain) << name;
    std::vector<uint8_t> a(st.nbytes), b(qt->nbytes);
    ASSERT_TRUE((*src)->read(st, a.data()).ok());
    ASSERT_TRUE((*q)->read(*qt, b.data()).ok()) << name;  // Checkpoint::read unpacks
    EXPECT_EQ(a, b) << name;
    ++compared;
  }
  EXPECT_GT(compared, 0);
}

TEST(QuantizeMxfp4, LogitsBitIdenticalResidentAndStreamedMmapRefused) {
  STRATA_REQUIRE_FIXTURE(testing::tiny_dir() + "/tokens.json");
  testing::TempDir d;
  const std::string g = quantize_mxfp4(d);
  auto ref = logits_of(testing::tiny_checkpoint(), kPositions, {});
  ASSERT_TRUE(ref.ok()) << ref.error().to_string();
  store::PlacementOptions resident;
  resident.mode = store::LoadMode::kResident;
  auto r = logits_of(g, kPositions, resident);
  ASSERT_TRUE(r.ok()) << r.error().to_string();
  ASSERT_EQ(r->size(), ref->size());
  EXPECT_EQ(std::memcmp(r->data(), ref->data(), ref->size() * sizeof(float)), 0) << "resident";
  // Streamed through a cache of a few slots (the minimum budget: evictions and re-reads), with
  // O_DIRECT and buffered reads.
  for (store::ExpertIo io : {store::ExpertIo::kDirect, store::ExpertIo::kBuffered}) {
    store::PlacementOptions p;
    p.mode = store::LoadMode::kStream;
    p.ram_budget_bytes = 42'000'000;
    p.expert_io = io;
    store::PlacementStats st;
    auto s = logits_of(g, kPositions, p, &st);
    ASSERT_TRUE(s.ok()) << store::expert_io_name(io) << ": " << s.error().to_string();
    EXPECT_EQ(std::memcmp(s->data(), ref->data(), ref->size() * sizeof(float)), 0) << store::expert_io_name(io);
    EXPECT_GT(st.expert_evictions, 0u) << store::expert_io_name(io) << ": the budget should force evictions";
  }
  store::PlacementOptions mm;
  mm.mode = store::LoadMode::kMmap;
  auto m = logits_of(g, kPositions, mm);
  ASSERT_FALSE(m.ok());
  const std::string msg = m.error().to_string();
  EXPECT_NE(msg.find("blk."), std::string::npos) << msg;
  EXPECT_NE(msg.find("--load-mode resident"), std::string::npos) << msg;
}

}  // namespace
// The expert cache regroups each ggml MXFP4 read once, outside its lock, while other threads
// acquire the same experts (they wait for the regroup) and prefetch ahead (reaped reads are
// regrouped by the prefetching thread): every lease holds the safetensors bytes, across evictions.
TEST(QuantizeMxfp4, StreamCacheRegroupsOnceUnderConcurrentAcquires) {
  STRATA_REQUIRE_FIXTURE(testing::tiny_dir() + "/tokens.json");
  testing::TempDir d;
  const std::string g = quantize_mxfp4(d);
  auto q = io::Checkpoint::open(g);
  ASSERT_TRUE(q.ok()) << q.error().to_string();
  auto src = io::Checkpoint::open(testing::tiny_checkpoint());
  ASSERT_TRUE(src.ok());
  auto cat = store::ExpertCatalog::build(**q, /*n_layers=*/8, /*direct_io=*/false);
  ASSERT_TRUE(cat.ok()) << cat.error().to_string();
  auto reader = io::UringReader::create(io::UringReaderOptions{});
  ASSERT_TRUE(reader.ok());
  store::ExpertCacheOptions o;
  o.n_slots = 8;  // fewer than the experts: evictions and re-reads
  o.policy = store::CachePolicy::kLru;
  store::ExpertCache cache(**q, *cat, **reader, nullptr, o);
  ASSERT_TRUE(cache.allocate().ok());
  const int n = static_cast<int>(cat->size());
  // Each id's six parts as the safetensors checkpoint holds them.
  std::vector<std::vector<std::vector<uint8_t>>> want(static_cast<size_t>(n));
  for (int id = 0; id < n; ++id)
    for (int p = 0; p < store::kExpertParts; ++p) {
      const io::TensorInfo* t = (*src)->find(cat->plan(id).tensors[static_cast<size_t>(p)]->name);
      ASSERT_NE(t, nullptr);
      want[static_cast<size_t>(id)].emplace_back(t->nbytes);
      ASSERT_TRUE((*src)->read(*t, want[static_cast<size_t>(id)].back().data()).ok());
    }
  std::atomic<int> bad{0};
  auto worker = [&](int k) {
    for (int round = 0; round < 3; ++round)
      for (int i = 0; i < n; ++i) {
        const int id = (i * (k + 1) + round) % n;  // each thread its own order, often the same id
        if (k == 0) {
          const int ahead[2] = {(id + 1) % n, (id + 2) % n};
          cache.prefetch(ahead, store::PrefetchKind::kPredict);
        }
        auto l = cache.acquire(id);
        if (!l.ok()) {
          ++bad;
          continue;
        }
        const store::ExpertView& v = (*l)->view();
        const TensorView parts[store::kExpertParts] = {v.w1, v.w1_scale, v.w2, v.w2_scale, v.w3, v.w3_scale};
        for (int p = 0; p < store::kExpertParts; ++p) {
          const auto& w = want[static_cast<size_t>(id)][static_cast<size_t>(p)];
          if (std::memcmp(parts[p].data, w.data(), w.size()) != 0) ++bad;
        }
      }
  };
  std::vector<std::thread> ts;
  for (int k = 0; k < 4; ++k) ts.emplace_back(worker, k);
  for (auto& t : ts) t.join();
  EXPECT_EQ(bad.load(), 0);
  store::PlacementStats st;
  cache.add_stats(&st);
  EXPECT_GT(st.expert_evictions, 0u);
}

}  // namespace strata::tools
