// Session files over the v41-tiny checkpoint: a saved and loaded session decodes with bit-identical
// logits to one never saved; damaged, truncated, foreign-model and other-version files are rejected
// with a clear error; read errors surface as kIOError; saving replaces a file atomically. Plus the
// XXH64 checksum against the specification's test vectors.
#include "runtime/session_file.h"

#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <random>
#include <sstream>

#include "tests/support/files.h"
#include "tests/support/npy.h"
#include "tests/support/temp_dir.h"
#include "tests/support/tiny_model.h"
#include "tests/support/tiny_suite.h"

namespace strata::runtime {
namespace {

TEST(Xxh64, SpecificationVectors) {
  EXPECT_EQ(xxh64("", 0), 0xEF46DB3751D8E999ull);
  EXPECT_EQ(xxh64("a", 1), 0xD24EC4F1A98C6E5Bull);
  EXPECT_EQ(xxh64("abc", 3), 0x44BC2CF5AD770999ull);
  const std::string fox = "The quick brown fox jumps over the lazy dog";
  EXPECT_EQ(xxh64(fox.data(), fox.size()), 0x0B242D361FDA71BCull);
}

TEST(Xxh64, StreamingEqualsOneShot) {
  std::vector<uint8_t> data(1000);
  std::mt19937 rng(7);
  for (auto& b : data) b = static_cast<uint8_t>(rng());
  for (size_t cut1 : {0u, 1u, 31u, 32u, 33u, 100u})
    for (size_t cut2 : {0u, 5u, 64u, 500u}) {
      const size_t a = std::min(cut1, data.size()), b = std::min(a + cut2, data.size());
      Xxh64 h(99);
      h.update(data.data(), a);
      h.update(data.data() + a, b - a);
      h.update(data.data() + b, data.size() - b);
      EXPECT_EQ(h.digest(), xxh64(data.data(), data.size(), 99)) << cut1 << " " << cut2;
    }
}

class SessionFileTiny : public testing::TinyModelSuite<SessionFileTiny> {
 protected:
  static void SetUpTestSuite() {
    TinyModelSuite::SetUpTestSuite();
    if (model_ == nullptr) return;
    auto id = model_identity(testing::tiny_dir() + "/checkpoint");
    ASSERT_TRUE(id.ok()) << id.error().to_string();
    id_ = *id;
  }
  // A session with history crossing the window and compressor groups at odd positions, ending
  // with a decoded token (compressor partial groups are non-empty).
  static Session make_session() {
    Session s(*model_);
    EXPECT_TRUE(s.append(ids_, nullptr, 64).ok());
    const int32_t t[1] = {1234};
    EXPECT_TRUE(s.append(t, nullptr).ok());
    return s;
  }
  // Greedy decode of n steps; returns every step's logits.
  static std::vector<float> decode(Session& s, int n) {
    std::vector<float> out;
    for (int i = 0; i < n; ++i) {
      auto l = s.last_logits();
      const int32_t next[1] = {static_cast<int32_t>(std::max_element(l.begin(), l.end()) - l.begin())};
      EXPECT_TRUE(s.append(next, nullptr).ok());
      out.insert(out.end(), s.last_logits().begin(), s.last_logits().end());
    }
    return out;
  }
  std::string saved() {
    const std::string p = dir_.file("s.strata");
    Session s = make_session();
    EXPECT_TRUE(save_session(s, id_, p).ok());
    return p;
  }
  static ModelIdentity id_;
  testing::TempDir dir_;
};
ModelIdentity SessionFileTiny::id_;

TEST_F(SessionFileTiny, LoadedSessionDecodesBitIdentically) {
  Session never_saved = make_session();
  const std::string p = dir_.file("s.strata");
  ASSERT_TRUE(save_session(never_saved, id_, p).ok());
  auto loaded = load_session(*model_, id_, p);
  ASSERT_TRUE(loaded.ok()) << loaded.error().to_string();
  EXPECT_EQ(loaded->tokens(), never_saved.tokens());
  EXPECT_EQ(loaded->n_past(), never_saved.n_past());
  EXPECT_EQ(loaded->cache().bytes(), never_saved.cache().bytes());
  ASSERT_EQ(loaded->last_logits().size(), never_saved.last_logits().size());
  EXPECT_EQ(std::memcmp(loaded->last_logits().data(), never_saved.last_logits().data(),
                        never_saved.last_logits().size() * sizeof(float)),
            0);
  // 20 decode steps: crosses compressor groups and wraps the window ring (16) again.
  auto a = decode(never_saved, 20);
  auto b = decode(*loaded, 20);
  ASSERT_EQ(a.size(), b.size());
  EXPECT_EQ(std::memcmp(a.data(), b.data(), a.size() * sizeof(float)), 0);
  // No temp file left behind.
  int files = 0;
  for (const auto& e : std::filesystem::directory_iterator(dir_.path())) files += e.is_regular_file() ? 1 : 0;
  EXPECT_EQ(files, 1);
}

TEST_F(SessionFileTiny, ReplayedSessionKeepsItsFlag) {
  Session s(*model_);
  AppendOptions o;
  o.mode = PrefillMode::kReplay;
  ASSERT_TRUE(s.append(ids_, o).ok());
  const std::string p = dir_.file("r.strata");
  ASSERT_TRUE(save_session(s, id_, p).ok());
  auto l = load_session(*model_, id_, p);
  ASSERT_TRUE(l.ok()) << l.error().to_string();
  EXPECT_TRUE(l->replayed());
  auto a = decode(s, 3);
  auto b = decode(*l, 3);
  EXPECT_EQ(std::memcmp(a.data(), b.data(), a.size() * sizeof(float)), 0);
}

TEST_F(SessionFileTiny, CorruptedPayloadIsRejected) {
  const std::string p = saved();
  std::string bytes = testing::read_all(p);
  bytes[bytes.size() / 2] ^= 0x10;
  testing::write_all(p, bytes);
  auto l = load_session(*model_, id_, p);
  ASSERT_FALSE(l.ok());
  EXPECT_EQ(l.error().code(), StatusCode::kCorruption);
  EXPECT_NE(l.error().message().find("payload checksum mismatch"), std::string::npos) << l.error().to_string();
  EXPECT_NE(l.error().message().find(p), std::string::npos);
}

TEST_F(SessionFileTiny, DamagedHeaderIsRejected) {
  const std::string p = saved();
  std::string bytes = testing::read_all(p);
  bytes[33] ^= 0x01;  // payload size
  testing::write_all(p, bytes);
  auto l = load_session(*model_, id_, p);
  ASSERT_FALSE(l.ok());
  EXPECT_EQ(l.error().code(), StatusCode::kCorruption);
  EXPECT_NE(l.error().message().find("header checksum mismatch"), std::string::npos) << l.error().to_string();
}

TEST_F(SessionFileTiny, TruncatedFileIsRejected) {
  const std::string p = saved();
  const std::string bytes = testing::read_all(p);
  for (size_t keep : {bytes.size() - 1, bytes.size() / 3, size_t{70}, size_t{10}}) {
    testing::write_all(p, bytes.substr(0, keep));
    auto l = load_session(*model_, id_, p);
    ASSERT_FALSE(l.ok()) << keep;
    EXPECT_EQ(l.error().code(), StatusCode::kCorruption) << keep;
    EXPECT_NE(l.error().message().find("truncated"), std::string::npos) << l.error().to_string();
  }
}

// Found by fuzz/session_fuzz: a file whose checksums are right but whose Engram history holds a
// class id past engram_compressed_vocab_size loaded, and the next decode aborted the process in the
// Engram hash. Such a file is now refused at load.
TEST_F(SessionFileTiny, EngramHistoryOutsideTheCompressedVocabIsRejected) {
  const std::string p = saved();
  std::string bytes = testing::read_all(p);
  // Walk the payload records (u32 tag, u64 length, bytes) to the Engram history (tag 4).
  size_t at = 64;
  uint32_t tag = 0;
  uint64_t len = 0;
  for (;;) {
    ASSERT_LE(at + 12, bytes.size());
    std::memcpy(&tag, bytes.data() + at, 4);
    std::memcpy(&len, bytes.data() + at + 4, 8);
    if (tag == 4) break;
    at += 12 + len;
  }
  ASSERT_GE(len, 4u) << "the tiny model has Engram layers";
  const uint32_t bad_class = static_cast<uint32_t>(model_->config().engram_compressed_vocab_size);
  std::memcpy(bytes.data() + at + 12, &bad_class, 4);
  // Re-seal: payload checksum, then the header checksum.
  const uint64_t payload_sum = xxh64(bytes.data() + 64, bytes.size() - 64);
  std::memcpy(bytes.data() + 40, &payload_sum, 8);
  const uint64_t header_sum = xxh64(bytes.data(), 56);
  std::memcpy(bytes.data() + 56, &header_sum, 8);
  testing::write_all(p, bytes);
  auto l = load_session(*model_, id_, p);
  ASSERT_FALSE(l.ok());
  EXPECT_EQ(l.error().code(), StatusCode::kCorruption);
  EXPECT_NE(l.error().message().find("Engram history entry 0 holds class " + std::to_string(bad_class)),
            std::string::npos)
      << l.error().to_string();
}

TEST_F(SessionFileTiny, NotASessionFileIsRejected) {
  const std::string p = dir_.file("x.strata");
  testing::write_all(p, std::string(200, 'x'));
  auto l = load_session(*model_, id_, p);
  ASSERT_FALSE(l.ok());
  EXPECT_EQ(l.error().code(), StatusCode::kCorruption);
  EXPECT_NE(l.error().message().find("not a strata session file"), std::string::npos) << l.error().to_string();
  auto missing = load_session(*model_, id_, dir_.file("none.strata"));
  EXPECT_EQ(missing.error().code(), StatusCode::kNotFound);
}

TEST_F(SessionFileTiny, ForeignModelIsRejected) {
  const std::string p = saved();
  // Same tensors, another config.json (a copy of the checkpoint with one more key).
  testing::TempDir other;
  for (const auto& e : std::filesystem::directory_iterator(testing::tiny_dir() + "/checkpoint"))
    std::filesystem::create_symlink(e.path(), other.file(e.path().filename().string()));
  std::filesystem::remove(other.file("config.json"));
  auto j = nlohmann::json::parse(testing::read_all(testing::tiny_dir() + "/checkpoint/config.json"));
  j["note"] = "another model";
  testing::write_all(other.file("config.json"), j.dump());
  auto other_id = model_identity(other.path());
  ASSERT_TRUE(other_id.ok()) << other_id.error().to_string();
  EXPECT_NE(other_id->config_hash, id_.config_hash);
  EXPECT_EQ(other_id->tensors_hash, id_.tensors_hash);
  auto l = load_session(*model_, *other_id, p);
  ASSERT_FALSE(l.ok());
  EXPECT_EQ(l.error().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(l.error().message().find("saved from another model (config.json differs"), std::string::npos)
      << l.error().to_string();
  ModelIdentity tensors = id_;
  tensors.tensors_hash ^= 1;
  auto t = load_session(*model_, tensors, p);
  ASSERT_FALSE(t.ok());
  EXPECT_NE(t.error().message().find("the tensors differ"), std::string::npos) << t.error().to_string();
}

TEST_F(SessionFileTiny, OtherFormatVersionIsRejected) {
  const std::string p = saved();
  std::string bytes = testing::read_all(p);
  const uint32_t v = kSessionFormatVersion + 1;
  std::memcpy(bytes.data() + 8, &v, 4);
  const uint64_t hc = xxh64(bytes.data(), 56);
  std::memcpy(bytes.data() + 56, &hc, 8);
  testing::write_all(p, bytes);
  auto l = load_session(*model_, id_, p);
  ASSERT_FALSE(l.ok());
  EXPECT_EQ(l.error().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(l.error().message().find("format version 2"), std::string::npos) << l.error().to_string();
}

// Fuzz-style: payloads mutated and then given valid checksums, so the parser itself meets bad
// lengths, counts and positions. Every load must end in a status (no crash, no huge allocation);
// one that succeeds must still be a session of this model's shape.
TEST_F(SessionFileTiny, MutatedPayloadsWithValidChecksumsNeverCrash) {
  const std::string p = saved();
  const std::string good = testing::read_all(p);
  std::mt19937 rng(2024);
  int truncations_rejected = 0;
  for (int iter = 0; iter < 300; ++iter) {
    std::string b = good;
    const int kind = iter % 3;
    if (kind == 0) {  // a few random bytes, often in the first records (shape, tokens, lengths)
      for (int k = 0; k < 3; ++k) {
        const size_t at = 64 + (rng() % 2 ? rng() % 200 : rng() % (b.size() - 64));
        b[at] = static_cast<char>(rng());
      }
    } else if (kind == 1) {  // truncate the payload
      b.resize(64 + rng() % (b.size() - 64));
    } else {  // a huge length or count somewhere
      const size_t at = 64 + rng() % (b.size() - 72);
      const uint64_t big = (rng() % 2) ? ~0ull : (1ull << (30 + rng() % 30));
      std::memcpy(b.data() + at, &big, 8);
    }
    const uint64_t payload = b.size() - 64, sum = xxh64(b.data() + 64, payload);
    std::memcpy(b.data() + 32, &payload, 8);
    std::memcpy(b.data() + 40, &sum, 8);
    const uint64_t hc = xxh64(b.data(), 56);
    std::memcpy(b.data() + 56, &hc, 8);
    testing::write_all(p, b);
    auto l = load_session(*model_, id_, p);
    if (!l.ok()) {
      truncations_rejected += kind == 1 ? 1 : 0;
      EXPECT_TRUE(l.error().code() == StatusCode::kCorruption || l.error().code() == StatusCode::kInvalidArgument)
          << l.error().to_string();
    } else {
      // Bytes of cached values changed (legal content): the session must still run.
      EXPECT_EQ(static_cast<int64_t>(l->tokens().size()), l->n_past());
      const int32_t t[1] = {42};
      EXPECT_TRUE(l->append(t, nullptr).ok());
    }
  }
  EXPECT_EQ(truncations_rejected, 100);  // a cut payload always lacks its end record
}

TEST_F(SessionFileTiny, ReadErrorsAreIOErrors) {
  const std::string p = saved();
  auto f = io::open_file(p);
  ASSERT_TRUE(f.ok());
  io::FaultSpec spec;
  spec.fail_offset = 5000;
  auto faulty = io::make_faulty_file(std::move(*f), spec);
  auto l = load_session(*model_, id_, *faulty);
  ASSERT_FALSE(l.ok());
  EXPECT_EQ(l.error().code(), StatusCode::kIOError) << l.error().to_string();
}

TEST_F(SessionFileTiny, SavingReplacesAtomically) {
  const std::string p = saved();
  Session s = make_session();
  decode(s, 2);
  ASSERT_TRUE(save_session(s, id_, p).ok());
  auto l = load_session(*model_, id_, p);
  ASSERT_TRUE(l.ok());
  EXPECT_EQ(l->n_past(), s.n_past());
  // A directory that does not exist: kIOError, nothing created.
  Status bad = save_session(s, id_, dir_.file("no/such/dir/s.strata"));
  EXPECT_EQ(bad.code(), StatusCode::kIOError);
  EXPECT_NE(bad.message().find("create"), std::string::npos) << bad.to_string();
}

}  // namespace
}  // namespace strata::runtime
