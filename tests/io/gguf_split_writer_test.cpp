// io/gguf_split_writer.h: a model written as a gguf-split set reads back (io::GgufModel) with the
// same keys and tensor bytes as the one file; the split rule (gguf-split's: tensor bytes padded to
// 32, a new file when the next would pass the limit, an oversized tensor alone); only split 1 has
// the model's keys; names of the set that exist are refused; a fault or a failed rename anywhere
// leaves no file of the set.
#include "io/gguf_split_writer.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <string>
#include <vector>

#include "io/fault_env.h"
#include "io/gguf.h"
#include "tests/support/temp_dir.h"

namespace strata::io {
namespace {

using Metadata = std::vector<std::pair<std::string, GgufValue>>;

std::vector<uint8_t> bytes_of(uint64_t n, size_t salt) {
  std::vector<uint8_t> b(n);
  for (size_t i = 0; i < b.size(); ++i) b[i] = static_cast<uint8_t>(i * 13 + salt * 5 + 3);
  return b;
}

// Tensor bytes (padded to 32): a 64, b 96, c 0 (empty), d 320, e 32, f 64.
std::vector<GgufTensorDecl> tensors() {
  return {{"a", GgmlType::kF32, Shape{16}},      {"b", GgmlType::kF32, Shape{24}},
          {"c", GgmlType::kF32, Shape{0, 4}},    {"d", GgmlType::kF32, Shape{80}},
          {"e", GgmlType::kI8, Shape{5}},        {"f", GgmlType::kQ8_0, Shape{2, 32}}};
}

Metadata metadata() {
  return {{"general.architecture", GgufValue::string("deepseek41")}, {"t.value", GgufValue::u32(7)}};
}

// Writes the set in chunks of `chunk` bytes (or whole tensors when chunk is 0).
Result<std::vector<std::string>> write_set(const std::string& path, uint64_t max_bytes, size_t chunk, Env* env = nullptr) {
  GgufWriterOptions o;
  o.fsync = false;
  o.env = env;
  const auto ts = tensors();
  STRATA_ASSIGN_OR_RETURN(auto w, GgufSplitWriter::create(path, metadata(), ts, GgufSplitOptions{max_bytes}, o));
  for (size_t i = 0; i < ts.size(); ++i) {
    std::vector<int64_t> ne;
    for (int d = ts[i].shape.rank - 1; d >= 0; --d) ne.push_back(ts[i].shape.dims[static_cast<size_t>(d)]);
    STRATA_ASSIGN_OR_RETURN(uint64_t nb, ggml_nbytes(ts[i].type, ne, ts[i].name));
    const auto b = bytes_of(nb, i);
    if (chunk == 0) {
      STRATA_RETURN_IF_ERROR(w->write_tensor(ts[i].name, b.data(), b.size()));
      continue;
    }
    for (size_t off = 0; off < b.size(); off += chunk)
      STRATA_RETURN_IF_ERROR(w->write(b.data() + off, std::min(chunk, b.size() - off)));
  }
  STRATA_RETURN_IF_ERROR(w->finish());
  return w->paths();
}

size_t files_in(const std::string& dir) {
  size_t n = 0;
  for (const auto& e : std::filesystem::directory_iterator(dir)) ++n, (void)e;
  return n;
}

TEST(GgufSplitWriter, ASetReadsBackAsTheOneFile) {
  testing::TempDir dir;
  auto one = write_set(dir.file("one.gguf"), 0, 0);
  ASSERT_TRUE(one.ok()) << one.error().to_string();
  ASSERT_EQ(*one, std::vector<std::string>{dir.file("one.gguf")});
  for (size_t chunk : {size_t{0}, size_t{7}}) {
    const std::string out = dir.file("set" + std::to_string(chunk) + ".gguf");
    // 200 B per file: [a b c] (160), [d] (320, alone: larger than the limit), [e f] (96).
    auto set = write_set(out, 200, chunk);
    ASSERT_TRUE(set.ok()) << set.error().to_string();
    const std::string prefix = out.substr(0, out.size() - 5);
    ASSERT_EQ(set->size(), 3u);
    for (int k = 0; k < 3; ++k) EXPECT_EQ((*set)[static_cast<size_t>(k)], gguf_split_path(prefix, k + 1, 3));
    auto a = GgufModel::open(dir.file("one.gguf"));
    auto b = GgufModel::open((*set)[1]);  // any file of the set opens the set
    ASSERT_TRUE(a.ok() && b.ok()) << (b.ok() ? "" : b.error().to_string());
    ASSERT_EQ((*b)->files().size(), 3u);
    EXPECT_EQ((*b)->find("a")->file, 0);
    EXPECT_EQ((*b)->find("c")->file, 0);
    EXPECT_EQ((*b)->find("d")->file, 1);
    EXPECT_EQ((*b)->find("e")->file, 2);
    EXPECT_EQ((*b)->find("f")->file, 2);
    for (const auto& [k, v] : metadata()) {
      ASSERT_NE((*b)->find_key(k), nullptr) << k;
      EXPECT_EQ(*(*b)->find_key(k), v) << k;
    }
    // Splits 2.. carry only the split keys.
    for (size_t f = 1; f < 3; ++f) EXPECT_EQ((*b)->files()[f].metadata.size(), 3u);
    EXPECT_EQ((*b)->files()[2].find("split.no")->as_uint(), 2u);
    EXPECT_EQ((*b)->files()[0].find("split.tensors.count")->as_uint(), 6u);
    ASSERT_EQ((*a)->tensors().size(), (*b)->tensors().size());
    for (const auto& [name, t] : (*a)->tensors()) {
      const GgufTensorInfo& u = *(*b)->find(name);
      EXPECT_EQ(u.type, t.type);
      EXPECT_EQ(u.ne, t.ne);
      std::vector<uint8_t> x(t.nbytes), y(u.nbytes);
      ASSERT_TRUE((*a)->read_range(t, 0, t.nbytes, x.data()).ok());
      ASSERT_TRUE((*b)->read_range(u, 0, u.nbytes, y.data()).ok());
      EXPECT_EQ(x, y) << name;
    }
  }
}

TEST(GgufSplitWriter, RefusesAnExistingFileOfTheSetAndANameWithoutGguf) {
  testing::TempDir dir;
  const std::string second = gguf_split_path(dir.file("m"), 2, 3);
  { std::FILE* f = std::fopen(second.c_str(), "wb"); ASSERT_NE(f, nullptr); std::fclose(f); }
  auto r = write_set(dir.file("m.gguf"), 200, 0);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.error().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(r.error().message().find("m-00002-of-00003.gguf: exists"), std::string::npos) << r.error().message();
  EXPECT_EQ(files_in(dir.path()), 1u) << "nothing written beside the file that was there";
  auto bad = write_set(dir.file("m.bin"), 200, 0);
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.error().message().find("must end in .gguf"), std::string::npos) << bad.error().message();
}

// A killed split run's temp files are swept when the next run is created, before its space check
// (which counted their bytes as taken), not only as each file of the set opens; a live run's stay.
TEST(GgufSplitWriter, SweepsADeadRunsTempFilesBeforeItsSpaceCheck) {
  testing::TempDir dir;
  const std::string third = gguf_split_path(dir.file("m"), 3, 3);
  std::string dead = third, live = third;  // (appended: GCC 12 warns on `third + ".tmp."`, -Wrestrict)
  dead.append(".tmp.2147483646");
  live.append(".tmp.").append(std::to_string(::getpid()));
  for (const std::string& p : {dead, live}) {
    std::FILE* f = std::fopen(p.c_str(), "wb");
    ASSERT_NE(f, nullptr);
    std::fclose(f);
  }
  GgufWriterOptions o;
  o.fsync = false;
  auto w = GgufSplitWriter::create(dir.file("m.gguf"), metadata(), tensors(), GgufSplitOptions{200}, o);
  ASSERT_TRUE(w.ok()) << w.error().to_string();
  EXPECT_EQ((*w)->paths().size(), 3u);
  EXPECT_FALSE(std::filesystem::exists(dead)) << "swept at create, before any file of the set opened";
  EXPECT_TRUE(std::filesystem::exists(live)) << "this process is alive: its temp file stays";
  std::filesystem::remove(live);
}

TEST(GgufSplitWriter, AFaultOrAFailedRenameLeavesNoFileOfTheSet) {
  testing::TempDir dir;
  {
    // ENOSPC in the third file, after the first two are complete.
    FaultInjectionEnv env(WriteFaults{.fail_after_bytes = 8, .error = 28, .path_filter = "-00003-of-"});
    auto r = write_set(dir.file("full.gguf"), 200, 7, &env);
    ASSERT_FALSE(r.ok());
    EXPECT_EQ(r.error().code(), StatusCode::kResourceExhausted) << r.error().to_string();
  }
  EXPECT_EQ(files_in(dir.path()), 0u);
  {
    // The second file's rename fails: the first, already renamed, is removed.
    FaultInjectionEnv env(WriteFaults{.fail_rename = 5, .path_filter = "-00002-of-"});
    auto r = write_set(dir.file("ren.gguf"), 200, 0, &env);
    ASSERT_FALSE(r.ok());
  }
  EXPECT_EQ(files_in(dir.path()), 0u);
}

}  // namespace
}  // namespace strata::io
