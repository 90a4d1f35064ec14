// io::SafetensorsWriter under injected faults (issue #13: synth/quantize outputs through an Env):
// ENOSPC, EIO, failed fsync and rename give a clear error naming the shard, the previous
// checkpoint stays intact and no temp file is left; short writes still produce identical shards;
// stale temp shards of a dead writer are swept by create(), a live writer's are left alone.
#include <gtest/gtest.h>

#include <algorithm>
#include <cerrno>
#include <filesystem>
#include <string>
#include <vector>

#include "io/fault_env.h"
#include "io/safetensors_writer.h"
#include "tests/support/files.h"
#include "tests/support/processes.h"
#include "tests/support/temp_dir.h"

namespace strata::io {
namespace {

std::vector<TensorDecl> decls() {
  return {{"a", DType::kF32, Shape{1000}}, {"b", DType::kBF16, Shape{3000}}, {"c", DType::kI8, Shape{5000}}};
}

// Writes the checkpoint with tensor bytes derived from `salt`, in 777-byte chunks.
Status write_checkpoint(const std::string& dir, uint8_t salt, Env* env, uint64_t max_shard_bytes) {
  SafetensorsWriterOptions o;
  o.env = env;
  o.fsync = true;
  o.max_shard_bytes = max_shard_bytes;
  STRATA_ASSIGN_OR_RETURN(auto w, SafetensorsWriter::create(dir, decls(), o));
  for (const TensorDecl& t : decls()) {
    std::vector<uint8_t> b(t.nbytes());
    for (size_t i = 0; i < b.size(); ++i) b[i] = static_cast<uint8_t>(i * 13 + salt);
    for (size_t off = 0; off < b.size(); off += 777)
      STRATA_RETURN_IF_ERROR(w->write(b.data() + off, std::min<size_t>(777, b.size() - off)));
  }
  return w->finish();
}

// name -> bytes of every file in `dir`.
std::vector<std::pair<std::string, std::string>> snapshot(const std::string& dir) {
  std::vector<std::pair<std::string, std::string>> out;
  for (const auto& e : std::filesystem::directory_iterator(dir))
    out.emplace_back(e.path().filename().string(), testing::read_all(e.path().string()));
  std::sort(out.begin(), out.end());
  return out;
}

struct WriterFault {
  const char* name;
  WriteFaults faults;
  StatusCode code;
  const char* says;
};

class SafetensorsWriterFaults : public ::testing::TestWithParam<std::tuple<WriterFault, uint64_t>> {};

TEST_P(SafetensorsWriterFaults, ClearErrorPreviousCheckpointIntactNoTempLeft) {
  const auto& [c, shard_bytes] = GetParam();
  testing::TempDir d;
  ASSERT_TRUE(write_checkpoint(d.path(), 1, nullptr, shard_bytes).ok());
  const auto before = snapshot(d.path());
  FaultInjectionEnv env(c.faults);
  Status s = write_checkpoint(d.path(), 2, &env, shard_bytes);
  ASSERT_FALSE(s.ok()) << c.name;
  EXPECT_EQ(s.code(), c.code) << s.to_string();
  EXPECT_NE(s.message().find(".safetensors"), std::string::npos) << s.to_string();  // names the shard
  EXPECT_NE(s.message().find(c.says), std::string::npos) << s.to_string();
  EXPECT_EQ(snapshot(d.path()), before) << "the previous checkpoint changed or a temp file was left";
}

INSTANTIATE_TEST_SUITE_P(
    Io, SafetensorsWriterFaults,
    ::testing::Combine(
        ::testing::Values(WriterFault{"EnospcFirstWrite",
                                      {.fail_write_call = 0, .error = ENOSPC},
                                      StatusCode::kResourceExhausted,
                                      "No space left on device"},
                          WriterFault{"EioAfterShortWrites",
                                      {.fail_write_call = 9, .error = EIO, .max_write_bytes = 1000},
                                      StatusCode::kIOError,
                                      "Input/output error"},
                          WriterFault{"DiskFullMidShard",
                                      {.fail_after_bytes = 6000, .error = ENOSPC},
                                      StatusCode::kResourceExhausted,
                                      ": No space left on device"},
                          WriterFault{"FsyncEio", {.fail_sync = EIO}, StatusCode::kIOError, "fsync (injected)"},
                          WriterFault{"CloseEio", {.fail_close = EIO}, StatusCode::kIOError, "close (injected)"},
                          WriterFault{"RenameEio", {.fail_rename = EIO}, StatusCode::kIOError, "rename from"}),
        ::testing::Values(uint64_t{0}, uint64_t{8000})),  // one shard; three shards + index
    [](const auto& i) {
      return std::string(std::get<0>(i.param).name) + (std::get<1>(i.param) ? "Sharded" : "OneFile");
    });

TEST(SafetensorsWriterFaults, ShortWritesGiveIdenticalShards) {
  testing::TempDir a, b;
  ASSERT_TRUE(write_checkpoint(a.path(), 5, nullptr, 8000).ok());
  FaultInjectionEnv env({.max_write_bytes = 333});
  ASSERT_TRUE(write_checkpoint(b.path(), 5, &env, 8000).ok());
  EXPECT_EQ(snapshot(a.path()), snapshot(b.path()));
  EXPECT_GT(env.write_calls(), 40);
}

TEST(SafetensorsWriterFaults, CreateSweepsDeadWritersTempShardsOnly) {
  testing::TempDir d;
  testing::LiveChild live;
  const std::string stale = d.file("model.safetensors.tmp." + std::to_string(testing::dead_pid()));
  const std::string stale_shard = d.file("model-00002-of-00003.safetensors.tmp." + std::to_string(testing::dead_pid()));
  const std::string of_live = d.file("model.safetensors.tmp." + std::to_string(live.pid()));
  const std::string other_stem = d.file("other.safetensors.tmp." + std::to_string(testing::dead_pid()));
  for (const std::string& p : {stale, stale_shard, of_live, other_stem}) testing::write_all(p, "partial shard");
  ASSERT_TRUE(write_checkpoint(d.path(), 3, nullptr, 0).ok());
  EXPECT_FALSE(std::filesystem::exists(stale));
  EXPECT_FALSE(std::filesystem::exists(stale_shard));
  EXPECT_TRUE(std::filesystem::exists(of_live));
  EXPECT_TRUE(std::filesystem::exists(other_stem));
}

}  // namespace
}  // namespace strata::io
