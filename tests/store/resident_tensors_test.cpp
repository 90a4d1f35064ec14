// ResidentTensors::read_all (issue 15 item 2): the parallel load pass returns, for every tensor, the
// same bytes as one pread of it, 64-byte aligned, whatever the readers and piece size; a failed read
// names its tensor and keeps nothing of the call; progress ends at the total; get() reuses the bytes.
#include "store/resident_tensors.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <vector>

#include "io/checkpoint.h"
#include "io/file.h"
#include "tests/support/checkpoint_copy.h"
#include "tests/support/npy.h"
#include "tests/support/temp_dir.h"
#include "tests/support/tiny_model.h"

namespace strata::store {
namespace {

class ResidentTensorsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    STRATA_REQUIRE_FIXTURE(testing::tiny_dir() + "/checkpoint/config.json");
    auto c = io::Checkpoint::open(testing::tiny_dir() + "/checkpoint");
    ASSERT_TRUE(c.ok()) << c.error().to_string();
    ck = std::move(*c);
    for (const auto& [name, t] : ck->tensors()) all.push_back(&t);
  }
  std::vector<uint8_t> disk(const io::TensorInfo& t) const {
    std::vector<uint8_t> b(t.nbytes);
    EXPECT_TRUE(ck->read(t, b.data()).ok());
    return b;
  }
  std::unique_ptr<io::Checkpoint> ck;
  std::vector<const io::TensorInfo*> all;
};

TEST_F(ResidentTensorsTest, ReadAllEqualsOnePreadPerTensor) {
  using D = BulkReadOptions::Direct;
  for (const BulkReadOptions& o : {BulkReadOptions{1, 4096, D::kAlways}, BulkReadOptions{3, 4096, D::kAlways},
                                   BulkReadOptions{4, 8 << 20, D::kAlways}, BulkReadOptions{2, 12288, D::kAlways},
                                   BulkReadOptions{1, 4096, D::kNever}, BulkReadOptions{4, 8 << 20, D::kNever},
                                   BulkReadOptions{3, 4096}, BulkReadOptions{}}) {
    ResidentTensors rt;
    Status s = rt.read_all(*ck, all, o);
    ASSERT_TRUE(s.ok()) << s.to_string();
    uint64_t total = 0;
    for (const io::TensorInfo* t : all) {
      auto v = rt.get(*ck, t->name);
      ASSERT_TRUE(v.ok());
      EXPECT_EQ(reinterpret_cast<uintptr_t>(v->data) % 64, 0u) << t->name;
      EXPECT_EQ(v->dtype, t->dtype);
      const std::vector<uint8_t> want = disk(*t);
      EXPECT_EQ(std::memcmp(v->data, want.data(), want.size()), 0)
          << t->name << " readers " << o.readers << " chunk " << o.chunk_bytes << " direct mode " << static_cast<int>(o.direct);
      total += t->nbytes;
    }
    EXPECT_EQ(rt.bytes(), total);
  }
}

// The equality above exercises O_DIRECT only where the fixture's file system takes it: say so.
TEST_F(ResidentTensorsTest, FixtureShardsTakeDirectReads) {
  auto works = io::direct_read_works(ck->shard(0).path());
  ASSERT_TRUE(works.ok()) << works.error().to_string();
  if (!*works) GTEST_SKIP() << ck->shard(0).path() << ": this file system refuses O_DIRECT; only buffered reads were compared";
  EXPECT_GE(ck->shard(0).native_fd(), 0);
}

// Just read, a shard is in the page cache (kAuto then reads it buffered); the count is bounded by
// the file's size.
TEST_F(ResidentTensorsTest, PageCacheBytesSeesAFileJustRead) {
  const io::File& f = ck->shard(0);
  std::vector<uint8_t> all_bytes(f.size());
  ASSERT_TRUE(f.read_at(0, all_bytes.size(), all_bytes.data()).ok());
  auto cached = io::page_cache_bytes(f.path());
  ASSERT_TRUE(cached.ok()) << cached.error().to_string();
  EXPECT_GT(*cached, 0u);
  EXPECT_LE(*cached, f.size());
  EXPECT_FALSE(io::page_cache_bytes(f.path() + ".missing").ok());
}

TEST_F(ResidentTensorsTest, ReadsEachTensorOnceAcrossCallsAndGet) {
  ResidentTensors rt;
  auto first = rt.get(*ck, all[0]->name);
  ASSERT_TRUE(first.ok());
  std::vector<const io::TensorInfo*> twice = all;
  twice.insert(twice.end(), all.begin(), all.end());
  ASSERT_TRUE(rt.read_all(*ck, twice).ok());
  uint64_t total = 0;
  for (const io::TensorInfo* t : all) total += t->nbytes;
  EXPECT_EQ(rt.bytes(), total);
  ASSERT_TRUE(rt.read_all(*ck, all).ok());
  EXPECT_EQ(rt.bytes(), total);
  auto again = rt.get(*ck, all[0]->name);
  ASSERT_TRUE(again.ok());
  EXPECT_EQ(again->data, first->data);
}

// relaid (WeightStore::resident_relaid: the LM head's blocked layout, wo_a's blocked codes), on the
// tiny checkpoint with a 6 MiB tensor added: the copy is made once per (name, layout) and shared;
// the stored bytes' whole 2 MiB chunks go back (bytes() counts the copy, not both), every other
// tensor keeps its bytes (neighbours in the same arena), a later get() reads the stored bytes
// again, and relaid() then gives those chunks back too.
TEST_F(ResidentTensorsTest, RelaidReplacesTheStoredBytesOnce) {
  constexpr uint64_t kBig = 6ull << 20;
  testing::TempDir dir;
  testing::copy_tiny(
      dir.path(),
      [&](nlohmann::json& h) {
        uint64_t end = 0;
        for (auto& [key, e] : h.items())
          if (key != "__metadata__") end = std::max(end, e["data_offsets"][1].get<uint64_t>());
        h["big.weight"] = {{"dtype", "U8"}, {"shape", {kBig}}, {"data_offsets", {end, end + kBig}}};
      },
      nullptr,
      [&](const nlohmann::json&, std::string& data) {
        for (uint64_t i = 0; i < kBig; ++i) data.push_back(static_cast<char>((i * 131 + i / 4096) & 0xFF));
      });
  auto opened = io::Checkpoint::open(dir.path());
  ASSERT_TRUE(opened.ok()) << opened.error().to_string();
  const io::Checkpoint& c = **opened;
  std::vector<const io::TensorInfo*> list;
  uint64_t total = 0;
  for (const auto& [name, t] : c.tensors()) {
    list.push_back(&t);
    total += t.nbytes;
  }
  ResidentTensors rt;
  ASSERT_TRUE(rt.read_all(c, list).ok());
  ASSERT_EQ(rt.bytes(), total);
  const io::TensorInfo* big = c.find("big.weight");
  ASSERT_NE(big, nullptr);
  auto read = [&](const io::TensorInfo& t) {
    std::vector<uint8_t> b(t.nbytes);
    EXPECT_TRUE(c.read(t, b.data()).ok());
    return b;
  };
  auto stored = rt.get(c, big->name);
  ASSERT_TRUE(stored.ok());
  int calls = 0;
  auto reverse = [&](const uint8_t* src, uint8_t* dst, const std::function<void(uint64_t)>&) {
    ++calls;
    for (uint64_t i = 0; i < big->nbytes; ++i) dst[i] = src[big->nbytes - 1 - i];
  };
  const std::vector<uint8_t> want = read(*big);
  const std::vector<uint8_t> reversed(want.rbegin(), want.rend());
  auto v = rt.relaid(c, big->name, "reversed", reverse);
  ASSERT_TRUE(v.ok()) << v.error().to_string();
  EXPECT_EQ(calls, 1);
  EXPECT_NE(v->data, stored->data);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(v->data) % 64, 0u);
  EXPECT_EQ(std::memcmp(v->data, reversed.data(), reversed.size()), 0);
  // 6 MiB hold at least two whole 2 MiB chunks; at most two partial ones stay.
  EXPECT_LE(rt.bytes(), total + kBig - (2ull << 20)) << "the stored bytes' whole chunks were not given back";
  EXPECT_GE(rt.bytes(), total);
  const uint64_t held = rt.bytes();
  for (const io::TensorInfo* t : list) {
    if (t == big) continue;
    auto o = rt.get(c, t->name);
    ASSERT_TRUE(o.ok());
    const std::vector<uint8_t> d = read(*t);
    EXPECT_EQ(std::memcmp(o->data, d.data(), d.size()), 0) << t->name << " lost bytes beside " << big->name;
  }
  EXPECT_EQ(rt.bytes(), held) << "reading the neighbours read nothing new";
  auto again = rt.relaid(c, big->name, "reversed", reverse);
  ASSERT_TRUE(again.ok());
  EXPECT_EQ(again->data, v->data);
  EXPECT_EQ(calls, 1);
  const uint64_t after_first = rt.bytes();
  // The stored bytes, read again on demand (into an arena of their own), then given back again.
  auto reread = rt.get(c, big->name);
  ASSERT_TRUE(reread.ok());
  EXPECT_EQ(std::memcmp(reread->data, want.data(), want.size()), 0);
  EXPECT_EQ(rt.bytes(), after_first + kBig);
  ASSERT_TRUE(rt.relaid(c, big->name, "reversed", reverse).ok());
  EXPECT_LE(rt.bytes(), after_first + (2ull << 20)) << "its own 2 MiB-aligned arena: all but the last partial chunk";
  EXPECT_EQ(calls, 1);
  // A relay that says how far it has read (the LM head's: block by block) gives the stored chunks
  // back as it goes; what it writes is what it read.
  {
    ResidentTensors fresh;
    ASSERT_TRUE(fresh.read_all(c, list).ok());
    uint64_t lowest = fresh.bytes();
    auto copy = [&](const uint8_t* src, uint8_t* dst, const std::function<void(uint64_t)>& done) {
      for (uint64_t at = 0; at < big->nbytes; at += 1u << 20) {
        const uint64_t n = std::min<uint64_t>(1u << 20, big->nbytes - at);
        std::memcpy(dst + at, src + at, n);
        done(at + n);
        lowest = std::min(lowest, fresh.bytes());
      }
    };
    auto piecewise = fresh.relaid(c, big->name, "copied", copy);
    ASSERT_TRUE(piecewise.ok());
    EXPECT_EQ(std::memcmp(piecewise->data, want.data(), want.size()), 0);
    EXPECT_LE(lowest, total - (2ull << 20)) << "no chunk was given back while the relay ran";
    EXPECT_LE(fresh.bytes(), total + (4ull << 20));
  }
  auto missing = rt.relaid(c, "no.such.tensor", "reversed", reverse);
  ASSERT_FALSE(missing.ok());
  EXPECT_EQ(missing.error().code(), StatusCode::kNotFound);
  EXPECT_NE(missing.error().to_string().find("no.such.tensor"), std::string::npos);
}

TEST_F(ResidentTensorsTest, ProgressEndsAtTheTotal) {
  ResidentTensors rt;
  std::vector<ProgressEvent> seen;
  uint64_t total = 0;
  for (const io::TensorInfo* t : all) total += t->nbytes;
  ASSERT_TRUE(rt.read_all(*ck, all, BulkReadOptions{2, 4096}, [&](const ProgressEvent& e) { seen.push_back(e); }).ok());
  ASSERT_FALSE(seen.empty());
  for (size_t i = 1; i < seen.size(); ++i) EXPECT_GE(seen[i].done, seen[i - 1].done);
  EXPECT_TRUE(seen.back().finished);
  EXPECT_EQ(seen.back().done, total);
  EXPECT_EQ(seen.back().total, total);
  EXPECT_EQ(std::string(seen.back().unit), "bytes");
}

TEST_F(ResidentTensorsTest, AFailedReadNamesTheTensorAndKeepsNothing) {
  const io::TensorInfo* victim = all[all.size() / 2];
  auto base = io::open_file(ck->shard(victim->shard).path());
  ASSERT_TRUE(base.ok());
  ck->replace_shard_file(victim->shard, io::make_faulty_file(std::move(*base), io::FaultSpec{victim->offset + 3, 5}));
  ResidentTensors rt;
  Status s = rt.read_all(*ck, all, BulkReadOptions{3, 4096});
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.to_string().find(victim->name), std::string::npos) << s.to_string();
  EXPECT_EQ(rt.bytes(), 0u);
  // Healed, the same call reads everything.
  auto healed = io::open_file(ck->shard(victim->shard).path());
  ASSERT_TRUE(healed.ok());
  ck->replace_shard_file(victim->shard, std::move(*healed));
  ASSERT_TRUE(rt.read_all(*ck, all).ok());
  auto v = rt.get(*ck, victim->name);
  ASSERT_TRUE(v.ok());
  EXPECT_EQ(std::memcmp(v->data, disk(*victim).data(), victim->nbytes), 0);
}

TEST_F(ResidentTensorsTest, OptionsAreChecked) {
  ResidentTensors rt;
  EXPECT_EQ(rt.read_all(*ck, all, BulkReadOptions{0, 4096}).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(rt.read_all(*ck, all, BulkReadOptions{2, 100}).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(rt.bytes(), 0u);
}

}  // namespace
}  // namespace strata::store
