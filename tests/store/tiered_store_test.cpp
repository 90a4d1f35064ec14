// The tiered store on the v41-tiny fixture checkpoint: stream and mmap placement give logits bit
// identical to resident (including a budget so small that every layer evicts), the budget floor is
// enforced with the minimum in the message, read errors mid-generation fail that request naming
// the tensor and offset while the store keeps working, a shard that changed size is a clear error,
// pinned / hot experts stay in RAM, LFU and LRU evict differently, and Engram rows come back exactly.
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <random>
#include <sstream>

#include "tests/support/forward_one.h"
#include "io/checkpoint.h"
#include "io/file.h"
#include "runtime/sampler.h"
#include "store/expert_catalog.h"
#include "store/open_store.h"
#include "store/resident_store.h"
#include "store/tiered_store.h"
#include "tests/support/files.h"
#include "tests/support/npy.h"
#include "tests/support/temp_dir.h"
#include "tests/support/tiny_model.h"

namespace strata::store {
namespace {

std::string ckpt() { return testing::tiny_dir() + "/checkpoint"; }

std::vector<int32_t> prompt_ids() {
  std::ifstream f(testing::tiny_dir() + "/tokens.json");
  std::stringstream ss;
  ss << f.rdbuf();
  return nlohmann::json::parse(ss.str())["ids"].get<std::vector<int32_t>>();
}

Result<std::unique_ptr<model::Model>> load_with(const PlacementOptions& p, const std::string& dir = ckpt()) {
  STRATA_ASSIGN_OR_RETURN(model::CompressedVocabMap v, testing::vocab_of(dir));
  model::ModelOptions opt;
  opt.n_threads = 2;
  opt.placement = p;
  return model::Model::load(dir, v, opt);
}

StoreShape tiny_shape(const model::ModelConfig& c) {
  StoreShape s;
  s.n_layers = c.n_layers;
  for (int l = 0; l < c.n_layers + c.n_mtp_layers; ++l) {
    s.max_active = std::max(s.max_active, c.n_active(l));
    if (l < c.n_layers) s.active_per_token += c.n_active(l);
  }
  return s;
}

PlacementOptions stream(uint64_t budget = 0) {
  PlacementOptions p;
  p.mode = LoadMode::kStream;
  p.ram_budget_bytes = budget;
  return p;
}

// The smallest budget the store accepts, read from the refusal of a 1-byte budget (which also
// checks that the refusal names the minimum).
uint64_t minimum_budget(const PlacementOptions& base = stream()) {
  PlacementOptions p = base;
  p.ram_budget_bytes = 1;
  auto m = load_with(p);
  EXPECT_FALSE(m.ok());
  if (m.ok()) return 0;
  const std::string msg = m.error().message();
  EXPECT_EQ(m.error().code(), StatusCode::kResourceExhausted) << msg;
  const std::string key = "the minimum --ram-budget is ";
  const size_t at = msg.find(key);
  EXPECT_NE(at, std::string::npos) << msg;
  if (at == std::string::npos) return 0;
  return std::strtoull(msg.c_str() + at + key.size(), nullptr, 10);
}

struct Outputs {
  std::vector<float> prefill;  // [S, V]
  std::vector<float> decode;   // [steps, V]
  std::vector<int32_t> tokens;
};

// The fixture prompt with logits at every position, then `steps` greedy decode steps.
Result<Outputs> run(model::Model& m, int steps = 8) {
  const std::vector<int32_t> ids = prompt_ids();
  const int64_t V = m.config().vocab_size, S = static_cast<int64_t>(ids.size());
  Outputs o;
  o.prefill.resize(static_cast<size_t>(S * V));
  model::KvCache cache = m.new_cache();
  model::LogitsRequest all;
  all.kind = model::LogitsRequest::Kind::kAll;
  STRATA_RETURN_IF_ERROR(strata::test::forward_one(m, cache, ids, all, o.prefill.data()));
  std::vector<float> row(o.prefill.end() - V, o.prefill.end());
  o.tokens.push_back(runtime::argmax(row));
  for (int k = 0; k < steps; ++k) {
    const int32_t t[1] = {o.tokens.back()};
    STRATA_RETURN_IF_ERROR(strata::test::forward_one(m, cache, t, model::LogitsRequest{}, row.data()));
    o.decode.insert(o.decode.end(), row.begin(), row.end());
    o.tokens.push_back(runtime::argmax(row));
  }
  return o;
}

bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

class TieredTiny : public ::testing::Test {
 protected:
  void SetUp() override {
    STRATA_REQUIRE_FIXTURE(testing::tiny_dir() + "/manifest.json");
    if (!reference_) {
      PlacementOptions p;
      p.mode = LoadMode::kResident;
      auto m = load_with(p);
      ASSERT_TRUE(m.ok()) << m.error().to_string();
      auto o = run(**m);
      ASSERT_TRUE(o.ok()) << o.error().to_string();
      reference_ = std::make_unique<Outputs>(std::move(*o));
    }
  }
  void expect_identical(const PlacementOptions& p, const char* what, PlacementStats* stats_out = nullptr) {
    auto m = load_with(p);
    ASSERT_TRUE(m.ok()) << what << ": " << m.error().to_string();
    auto o = run(**m);
    ASSERT_TRUE(o.ok()) << what << ": " << o.error().to_string();
    EXPECT_TRUE(same_bits(o->prefill, reference_->prefill)) << what << ": prefill logits differ";
    EXPECT_TRUE(same_bits(o->decode, reference_->decode)) << what << ": decode logits differ";
    EXPECT_EQ(o->tokens, reference_->tokens) << what;
    if (stats_out) *stats_out = (*m)->store().stats();
  }
  static std::unique_ptr<Outputs> reference_;
};
std::unique_ptr<Outputs> TieredTiny::reference_;

TEST_F(TieredTiny, StreamAndMmapLogitsAreBitIdenticalToResident) {
  PlacementStats st;
  expect_identical(stream(), "stream, default budget", &st);
  EXPECT_GT(st.expert_loads, 0u);
  EXPECT_GT(st.engram_rows_read, 0u);
  PlacementOptions mm;
  mm.mode = LoadMode::kMmap;
  expect_identical(mm, "mmap");
}

// Resident placement reads every routed expert and Engram table while loading, so generation never
// waits for a first use: RAM held after load covers them, and forward passes read nothing more.
TEST_F(TieredTiny, ResidentReadsExpertsAndEngramTablesAtLoad) {
  PlacementOptions p;
  p.mode = LoadMode::kResident;
  auto m = load_with(p);
  ASSERT_TRUE(m.ok()) << m.error().to_string();
  auto* rs = dynamic_cast<ResidentStore*>(&(*m)->store());
  ASSERT_NE(rs, nullptr);
  uint64_t lazy = 0;  // the tensors decode used to read on first use (DSpark stages are not run)
  for (const auto& [name, t] : rs->checkpoint().tensors())
    if (name.rfind("mtp.", 0) != 0 &&
        (name.find(".ffn.experts.") != std::string::npos || name.find(".engram.embed.") != std::string::npos))
      lazy += t.nbytes;
  ASSERT_GT(lazy, 0u);
  const uint64_t after_load = rs->resident_bytes();
  EXPECT_GE(after_load, lazy);
  ASSERT_TRUE(run(**m).ok());
  EXPECT_EQ(rs->resident_bytes(), after_load) << "a forward pass read tensors that load should have read";
}

TEST_F(TieredTiny, BitIdenticalWhenEveryLayerEvicts) {
  const uint64_t min = minimum_budget();
  ASSERT_GT(min, 0u);
  PlacementStats st;
  expect_identical(stream(min), "stream at the minimum budget", &st);
  // 3 slots for 8 layers x 8 experts: each layer's experts push out the previous layer's.
  EXPECT_GT(st.expert_evictions, 100u);
  EXPECT_GT(st.expert_loads, st.expert_evictions);
  PlacementOptions lru = stream(min);
  lru.policy = CachePolicy::kLru;
  lru.prefetch = false;
  expect_identical(lru, "stream, minimum budget, LRU, no prefetch");
  PlacementOptions direct = stream(min + 8 * 4096);
  direct.expert_io = ExpertIo::kDirect;
  direct.queue_depth = 2;
  direct.read_chunk_bytes = 4096;
  expect_identical(direct, "stream, O_DIRECT, depth 2, 4 KiB requests");
  PlacementOptions buffered = stream(min);
  buffered.expert_io = ExpertIo::kBuffered;
  expect_identical(buffered, "stream, minimum budget, buffered expert reads");
}

// The default expert I/O is O_DIRECT exactly when the shards' file system takes an O_DIRECT read;
// --buffered-io and --direct-io override it.
TEST_F(TieredTiny, AutoExpertIoFollowsTheFileSystem) {
  auto direct_ok = io::direct_read_works(ckpt() + "/model.safetensors");
  ASSERT_TRUE(direct_ok.ok()) << direct_ok.error().to_string();
  for (ExpertIo mode : {ExpertIo::kAuto, ExpertIo::kBuffered, ExpertIo::kDirect}) {
    if (mode == ExpertIo::kDirect && !*direct_ok) continue;
    PlacementOptions p = stream();
    p.expert_io = mode;
    auto loaded = load_with(p);
    ASSERT_TRUE(loaded.ok()) << loaded.error().to_string();
    const std::string d = (*loaded)->store().describe();
    const bool want_direct = mode == ExpertIo::kDirect || (mode == ExpertIo::kAuto && *direct_ok);
    EXPECT_EQ(d.find("O_DIRECT") != std::string::npos, want_direct) << expert_io_name(mode) << ": " << d;
    EXPECT_EQ(d.find("buffered") != std::string::npos, !want_direct) << expert_io_name(mode) << ": " << d;
    EXPECT_EQ((*loaded)->store().expert_reads(), want_direct ? ExpertReads::kDirect : ExpertReads::kBuffered)
        << expert_io_name(mode);
  }
  // Resident keeps experts in RAM: nothing streamed (bench compares this with the plan's mode).
  PlacementOptions resident;
  resident.mode = LoadMode::kResident;
  auto in_ram = load_with(resident);
  ASSERT_TRUE(in_ram.ok()) << in_ram.error().to_string();
  EXPECT_EQ((*in_ram)->store().expert_reads(), ExpertReads::kNotStreamed);
}

TEST_F(TieredTiny, BudgetBelowOneTokensWorkingSetIsRefused) {
  const uint64_t min = minimum_budget();
  ASSERT_GT(min, 0u);
  auto below = load_with(stream(min - 1));
  ASSERT_FALSE(below.ok());
  EXPECT_EQ(below.error().code(), StatusCode::kResourceExhausted);
  EXPECT_NE(below.error().message().find("working set"), std::string::npos) << below.error().to_string();
  EXPECT_NE(below.error().message().find(std::to_string(min)), std::string::npos) << below.error().to_string();
  EXPECT_TRUE(load_with(stream(min)).ok());
  // Pinned layers raise the floor.
  PlacementOptions pin = stream(min);
  pin.pin_first = 0;
  pin.pin_last = 1;
  auto pinned = load_with(pin);
  ASSERT_FALSE(pinned.ok());
  EXPECT_NE(pinned.error().message().find("pinned"), std::string::npos) << pinned.error().to_string();
  PlacementOptions bad = stream();
  bad.pin_first = 3;
  bad.pin_last = 99;
  auto r = load_with(bad);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.error().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(r.error().message().find("3-99"), std::string::npos) << r.error().to_string();
}

TEST_F(TieredTiny, ResidentRefusesACheckpointOverTheBudget) {
  PlacementOptions p;
  p.mode = LoadMode::kResident;
  p.ram_budget_bytes = 1 << 20;
  auto m = load_with(p);
  ASSERT_FALSE(m.ok());
  EXPECT_NE(m.error().message().find("--load-mode stream"), std::string::npos) << m.error().to_string();
  // auto picks stream instead (here the resident tensors alone are most of the checkpoint, so the
  // Engram row cache and scales go to disk to leave room under its size).
  p.mode = LoadMode::kAuto;
  p.engram_cache_rows = 0;
  p.engram_scales = EngramScales::kDisk;
  p.ram_budget_bytes = minimum_budget(p);
  ASSERT_LT(p.ram_budget_bytes, std::filesystem::file_size(ckpt() + "/model.safetensors"));
  auto a = load_with(p);
  ASSERT_TRUE(a.ok()) << a.error().to_string();
  EXPECT_EQ((*a)->store().describe().rfind("stream", 0), 0u) << (*a)->store().describe();
}

// A read error (EIO, or a short read) injected into one expert's bytes after prefill: the decode
// step that needs the expert fails naming the tensor and the byte offset; the store stays usable,
// and once the disk is healthy again a new sequence gives the reference logits.
class ExpertFault : public TieredTiny, public ::testing::WithParamInterface<int> {};

TEST_P(ExpertFault, FailsTheRequestNamingTensorAndOffsetThenRecovers) {
  auto loaded = load_with(stream(minimum_budget()));
  ASSERT_TRUE(loaded.ok()) << loaded.error().to_string();
  model::Model& m = **loaded;
  auto& ts = dynamic_cast<TieredStore&>(m.store());
  const std::vector<int32_t> ids = prompt_ids();
  const int64_t V = m.config().vocab_size;
  std::vector<float> row(static_cast<size_t>(V));
  model::KvCache cache = m.new_cache();
  ASSERT_TRUE(strata::test::forward_one(m, cache, ids, model::LogitsRequest{}, row.data()).ok());

  // Break the w2 bytes of every expert of layer 3 (some of them the next step will need).
  const io::Checkpoint& ck = ts.checkpoint();
  std::vector<uint64_t> bad;
  for (int e = 0; e < m.config().n_experts(3); ++e) bad.push_back(ck.find("layers.3.ffn.experts." + std::to_string(e) + ".w2.weight")->offset + 100);
  const int shard = ck.find("layers.3.ffn.experts.0.w2.weight")->shard;
  // One FaultSpec covers one offset: chain wrappers, one per expert.
  std::unique_ptr<io::File> f;
  {
    auto base = io::open_file(ck.shard(shard).path());
    ASSERT_TRUE(base.ok());
    f = std::move(*base);
  }
  for (uint64_t off : bad) f = io::make_faulty_file(std::move(f), io::FaultSpec{off, GetParam()});
  ts.mutable_checkpoint().replace_shard_file(shard, std::move(f));

  const int32_t t[1] = {runtime::argmax(row)};
  Status s = strata::test::forward_one(m, cache, t, model::LogitsRequest{}, row.data());
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.code(), GetParam() ? StatusCode::kIOError : StatusCode::kCorruption) << s.to_string();
  EXPECT_NE(s.message().find("layers.3.ffn.experts."), std::string::npos) << s.to_string();
  EXPECT_NE(s.message().find(".w2.weight"), std::string::npos) << s.to_string();
  EXPECT_NE(s.message().find("at offset "), std::string::npos) << s.to_string();
  EXPECT_NE(s.message().find(GetParam() ? "injected" : "short read"), std::string::npos) << s.to_string();

  // Other experts still load while the fault is there.
  {
    auto other = ts.acquire_expert(4, 1);
    EXPECT_TRUE(other.ok()) << other.error().to_string();
  }

  // The disk heals: a new sequence computes the reference logits.
  auto healthy = io::open_file(ck.shard(shard).path());
  ASSERT_TRUE(healthy.ok());
  ts.mutable_checkpoint().replace_shard_file(shard, std::move(*healthy));
  auto o = run(m);
  ASSERT_TRUE(o.ok()) << o.error().to_string();
  EXPECT_TRUE(same_bits(o->prefill, reference_->prefill));
  EXPECT_TRUE(same_bits(o->decode, reference_->decode));
}

INSTANTIATE_TEST_SUITE_P(EioAndShortRead, ExpertFault, ::testing::Values(5, 0));

TEST_F(TieredTiny, EngramReadErrorNamesTheTableAndOffset) {
  auto loaded = load_with(stream());
  ASSERT_TRUE(loaded.ok());
  model::Model& m = **loaded;
  auto& ts = dynamic_cast<TieredStore&>(m.store());
  const io::TensorInfo* t = ts.checkpoint().find("layers.1.engram.embed.weight");
  ASSERT_NE(t, nullptr);
  auto base = io::open_file(ts.checkpoint().shard(t->shard).path());
  ASSERT_TRUE(base.ok());
  // Fault every row of the table: whatever rows the prompt hashes to, one read fails.
  std::unique_ptr<io::File> f = std::move(*base);
  for (int64_t r = 0; r < t->shape[0]; r += 4096 / 32)
    f = io::make_faulty_file(std::move(f), io::FaultSpec{t->offset + static_cast<uint64_t>(r) * 32, 5});
  ts.mutable_checkpoint().replace_shard_file(t->shard, std::move(f));
  std::vector<float> row(static_cast<size_t>(m.config().vocab_size));
  model::KvCache cache = m.new_cache();
  Status s = strata::test::forward_one(m, cache, prompt_ids(), model::LogitsRequest{}, row.data());
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find("layers.1.engram.embed.weight"), std::string::npos) << s.to_string();
  EXPECT_NE(s.message().find("at offset "), std::string::npos) << s.to_string();
  EXPECT_NE(s.message().find("Engram row "), std::string::npos) << s.to_string();
}

TEST_F(TieredTiny, ShardThatChangedSizeIsAClearError) {
  testing::TempDir d;
  namespace fs = std::filesystem;
  for (const auto& e : fs::directory_iterator(ckpt())) {
    const std::string to = d.file(e.path().filename().string());
    fs::copy_file(e.path(), to);
    fs::permissions(to, fs::perms::owner_read | fs::perms::owner_write);
  }
  for (LoadMode mode : {LoadMode::kStream, LoadMode::kMmap}) {
    PlacementOptions p = stream(mode == LoadMode::kStream ? minimum_budget() : 0);
    p.mode = mode;
    auto loaded = load_with(p, d.path());
    ASSERT_TRUE(loaded.ok()) << loaded.error().to_string();
    model::Model& m = **loaded;
    {
      std::ofstream grow(d.file("model.safetensors"), std::ios::app | std::ios::binary);
      grow << "trailing bytes";
    }
    std::vector<float> row(static_cast<size_t>(m.config().vocab_size));
    model::KvCache cache = m.new_cache();
    Status s = strata::test::forward_one(m, cache, prompt_ids(), model::LogitsRequest{}, row.data());
    ASSERT_FALSE(s.ok()) << load_mode_name(mode);
    EXPECT_EQ(s.code(), StatusCode::kCorruption) << s.to_string();
    EXPECT_NE(s.message().find("changed size since load"), std::string::npos) << s.to_string();
    EXPECT_NE(s.message().find("model.safetensors"), std::string::npos) << s.to_string();
    fs::resize_file(d.file("model.safetensors"), fs::file_size(ckpt() + "/model.safetensors"));
  }
}

// Opens a TieredStore directly (no model) for cache-level checks.
std::unique_ptr<WeightStore> open_tiered(const PlacementOptions& p) {
  auto ck = io::Checkpoint::open(ckpt());
  EXPECT_TRUE(ck.ok());
  auto c = model::ModelConfig::load(ckpt());
  EXPECT_TRUE(c.ok());
  auto s = open_store(std::move(*ck), tiny_shape(*c), p);
  EXPECT_TRUE(s.ok()) << s.error().to_string();
  return s.ok() ? std::move(*s) : nullptr;
}

TEST_F(TieredTiny, PinnedLayersAndHotExpertsStayInRam) {
  PlacementOptions p = stream(minimum_budget() + 40 * 4096);  // 43 slots
  p.pin_first = 0;
  p.pin_last = 0;
  p.hot = {{5, 2}, {6, 7}, {5, 2}};
  p.hot_share = 1.0;
  auto s = open_tiered(p);
  ASSERT_NE(s, nullptr);
  EXPECT_NE(s->describe().find("10 pinned"), std::string::npos) << s->describe();
  // Stream through every other expert many times over: the pinned ones never leave.
  for (int round = 0; round < 3; ++round)
    for (int l = 1; l < 8; ++l)
      for (int e = 0; e < 8; ++e) ASSERT_TRUE(s->acquire_expert(l, e).ok());
  const PlacementStats before = s->stats();
  for (int e = 0; e < 8; ++e) ASSERT_TRUE(s->acquire_expert(0, e).ok());
  ASSERT_TRUE(s->acquire_expert(5, 2).ok());
  ASSERT_TRUE(s->acquire_expert(6, 7).ok());
  const PlacementStats d = s->stats().since(before);
  EXPECT_EQ(d.expert_hits, 10u);
  EXPECT_EQ(d.expert_loads, 0u);
  // A hot entry from another model is refused by name.
  PlacementOptions wrong = stream();
  wrong.hot = {{2, 99}};
  auto ck = io::Checkpoint::open(ckpt());
  auto r = open_store(std::move(*ck), tiny_shape(*model::ModelConfig::load(ckpt())), wrong);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.error().message().find("expert 99"), std::string::npos) << r.error().to_string();
}

TEST_F(TieredTiny, LfuKeepsAFrequentExpertThatLruEvicts) {
  for (CachePolicy policy : {CachePolicy::kLfu, CachePolicy::kLru}) {
    PlacementOptions p = stream(minimum_budget());  // 3 slots
    p.policy = policy;
    auto s = open_tiered(p);
    ASSERT_NE(s, nullptr);
    for (int i = 0; i < 5; ++i) ASSERT_TRUE(s->acquire_expert(2, 0).ok());  // a frequent expert
    for (int e = 1; e <= 3; ++e) ASSERT_TRUE(s->acquire_expert(2, e).ok());  // three one-offs
    const PlacementStats before = s->stats();
    ASSERT_TRUE(s->acquire_expert(2, 0).ok());
    const PlacementStats d = s->stats().since(before);
    if (policy == CachePolicy::kLfu) EXPECT_EQ(d.expert_hits, 1u) << "LFU keeps the frequent expert";
    else EXPECT_EQ(d.expert_misses, 1u) << "LRU evicts the least recently used";
  }
}

// held_expert's table (experts_[layer][expert]) fills in any order and gives each expert its own
// six tensors, the same as resident() by name; ids the checkpoint does not hold are errors that
// leave the filled slots as they were.
TEST_F(TieredTiny, ResidentExpertViewsAreTheNamedTensorsInAnyOrder) {
  auto ck = io::Checkpoint::open(ckpt());
  ASSERT_TRUE(ck.ok());
  ResidentStore res(std::move(*ck), 8);
  const std::pair<int, int> order[] = {{5, 7}, {0, 0}, {5, 2}, {7, 7}, {0, 0}, {2, 3}, {5, 7}, {1, 6}};
  for (auto [layer, expert] : order) {
    auto v = res.held_expert(layer, expert);
    ASSERT_TRUE(v.ok()) << v.error().to_string();
    ASSERT_TRUE(v->has_value());
    const std::string p = "layers." + std::to_string(layer) + ".ffn.experts." + std::to_string(expert) + ".";
    const std::pair<const TensorView*, const char*> parts[] = {{&(*v)->w1, "w1.weight"}, {&(*v)->w1_scale, "w1.scale"},
                                                              {&(*v)->w2, "w2.weight"}, {&(*v)->w2_scale, "w2.scale"},
                                                              {&(*v)->w3, "w3.weight"}, {&(*v)->w3_scale, "w3.scale"}};
    for (auto [view, name] : parts) {
      auto named = res.resident(p + name);
      ASSERT_TRUE(named.ok()) << named.error().to_string();
      EXPECT_EQ(view->data, named->data) << p << name;
      EXPECT_EQ(view->shape, named->shape) << p << name;
    }
  }
  auto missing = res.held_expert(0, 8);  // the tiny checkpoint has experts 0..7
  ASSERT_FALSE(missing.ok());
  EXPECT_NE(missing.error().message().find("layers.0.ffn.experts.8.w1.weight"), std::string::npos)
      << missing.error().to_string();
  EXPECT_FALSE(res.held_expert(-1, 0).ok());
  EXPECT_FALSE(res.held_expert(0, -1).ok());
  auto again = res.held_expert(0, 0);  // a failed lookup left the filled slots as they were
  ASSERT_TRUE(again.ok() && again->has_value());
  EXPECT_EQ((*again)->w1.data, res.resident("layers.0.ffn.experts.0.w1.weight")->data);
}

TEST_F(TieredTiny, EngramRowsMatchResidentAndRepeatsComeFromTheRowCache) {
  auto s = open_tiered(stream());
  ASSERT_NE(s, nullptr);
  auto ck = io::Checkpoint::open(ckpt());
  ASSERT_TRUE(ck.ok());
  ResidentStore res(std::move(*ck), 8);
  for (int layer : {1, 4}) {
    const int64_t n_rows = s->checkpoint().find("layers." + std::to_string(layer) + ".engram.embed.weight")->shape[0];
    std::mt19937_64 rng(layer);
    std::vector<int64_t> rows;
    for (int i = 0; i < 500; ++i) rows.push_back(static_cast<int64_t>(rng() % static_cast<uint64_t>(n_rows)));
    for (int i = 0; i < 50; ++i) rows.push_back(rows[static_cast<size_t>(i * 7)]);  // duplicates
    rows.push_back(0);
    rows.push_back(n_rows - 1);
    const size_t n = rows.size();
    std::vector<uint8_t> w1(n * 32), s1(n), w2(n * 32), s2(n);
    ASSERT_TRUE(res.read_engram_rows(layer, rows, w1.data(), s1.data()).ok());
    const PlacementStats before = s->stats();
    auto f = s->start_engram_rows(layer, rows);
    ASSERT_TRUE(f.ok()) << f.error().to_string();
    ASSERT_TRUE((*f)->wait(w2.data(), s2.data()).ok());
    EXPECT_EQ(w1, w2);
    EXPECT_EQ(s1, s2);
    const PlacementStats d1 = s->stats().since(before);
    EXPECT_EQ(d1.engram_rows_requested, n);
    EXPECT_LT(d1.engram_rows_unique, n);
    // Again: every row from the cache, no disk read.
    std::fill(w2.begin(), w2.end(), 0);
    ASSERT_TRUE(s->read_engram_rows(layer, rows, w2.data(), s2.data()).ok());
    EXPECT_EQ(w1, w2);
    const PlacementStats d2 = s->stats().since(before).since(d1);
    EXPECT_EQ(d2.engram_rows_read, 0u);
    EXPECT_EQ(d2.engram_rows_cached, d2.engram_rows_unique);
    const int64_t bad[1] = {n_rows};
    auto e = s->start_engram_rows(layer, bad);
    ASSERT_FALSE(e.ok());
    EXPECT_NE(e.error().message().find("engram.embed.weight"), std::string::npos) << e.error().to_string();
  }
}

TEST(ExpertCatalog, OneSpanPerExpertAndAlignedDirectLayout) {
  STRATA_REQUIRE_FIXTURE(testing::tiny_dir() + "/manifest.json");
  auto ck = io::Checkpoint::open(ckpt());
  ASSERT_TRUE(ck.ok());
  for (bool direct : {false, true}) {
    auto cat = ExpertCatalog::build(**ck, 8, direct);
    ASSERT_TRUE(cat.ok()) << cat.error().to_string();
    EXPECT_EQ(cat->size(), 8 * 8 + 3 * 4);  // backbone + DSpark stages
    EXPECT_EQ(cat->n_experts(8), 4);
    EXPECT_EQ(cat->slot_bytes() % 4096, 0u);
    for (int id = 0; id < cat->size(); ++id) {
      const ExpertPlan& p = cat->plan(id);
      ASSERT_EQ(p.spans.size(), 1u) << "the fixture stores an expert's six tensors back to back";
      EXPECT_GE(p.read_bytes, p.tensor_bytes);
      for (int part = 0; part < kExpertParts; ++part)
        EXPECT_LE(p.slot_offset[static_cast<size_t>(part)] + p.tensors[static_cast<size_t>(part)]->nbytes, p.slot_bytes);
      if (direct) {
        EXPECT_EQ(p.spans[0].file_offset % 4096, 0u);
        EXPECT_EQ(p.spans[0].length % 4096, 0u);
      }
    }
  }
  EXPECT_TRUE(ExpertCatalog::is_expert_tensor("layers.12.ffn.experts.300.w3.scale"));
  EXPECT_TRUE(ExpertCatalog::is_expert_tensor("mtp.0.ffn.experts.1.w1.weight"));
  EXPECT_FALSE(ExpertCatalog::is_expert_tensor("layers.12.ffn.shared_experts.w1.weight"));
  EXPECT_TRUE(ExpertCatalog::is_engram_table("layers.1.engram.embed.scale"));
  EXPECT_FALSE(ExpertCatalog::is_engram_table("layers.1.engram.wkv.weight"));
}

TEST(PlacementOptions, ValidateNamesTheField) {
  PlacementOptions p;
  EXPECT_TRUE(p.validate().ok());
  p.queue_depth = 0;
  EXPECT_NE(p.validate().message().find("queue depth"), std::string::npos);
  p = PlacementOptions();
  p.pin_first = 5;
  p.pin_last = 2;
  EXPECT_NE(p.validate().message().find("5-2"), std::string::npos);
  p = PlacementOptions();
  p.read_chunk_bytes = 1000;
  EXPECT_FALSE(p.validate().ok());
  EXPECT_EQ(parse_load_mode("stream").value(), LoadMode::kStream);
  EXPECT_FALSE(parse_load_mode("ssd").ok());
  EXPECT_EQ(parse_cache_policy("lru").value(), CachePolicy::kLru);
}

}  // namespace
}  // namespace strata::store
