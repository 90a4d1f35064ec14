// io/gguf.h + io/gguf_writer.h: writer -> reader round trips (every metadata type, every supported
// tensor type, several shapes, alignments), gguf-split sets, the writer's refusals and faults, and
// malformed files built byte by byte, each giving the right code and a message naming what is wrong.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <limits>
#include <string>
#include <vector>

#include "io/fault_env.h"
#include "io/gguf.h"
#include "io/gguf_writer.h"
#include "tests/support/temp_dir.h"

namespace strata::io {
namespace {

using Metadata = std::vector<std::pair<std::string, GgufValue>>;

// A read-only File over bytes in memory.
class MemFile final : public File {
 public:
  MemFile(std::string bytes, std::string path = "mem.gguf") : b_(std::move(bytes)), path_(std::move(path)) {}
  Status read_at(uint64_t offset, size_t n, void* dst) const override {
    if (offset > b_.size() || n > b_.size() - offset) return Corruption(path_ + ": short read");
    if (n) std::memcpy(dst, b_.data() + offset, n);
    return Status();
  }
  uint64_t size() const override { return b_.size(); }
  const std::string& path() const override { return path_; }
  Result<uint64_t> current_size() const override { return static_cast<uint64_t>(b_.size()); }

 private:
  std::string b_;
  std::string path_;
};

// Bytes of `t` for the test: deterministic, depending on the tensor index.
std::vector<uint8_t> tensor_bytes(uint64_t n, size_t salt) {
  std::vector<uint8_t> b(n);
  for (size_t i = 0; i < b.size(); ++i) b[i] = static_cast<uint8_t>(i * 31 + salt * 7 + 1);
  return b;
}

Status write_gguf(const std::string& path, const Metadata& md, const std::vector<GgufTensorDecl>& ts,
                  size_t chunk = 1000, Env* env = nullptr) {
  GgufWriterOptions o;
  o.fsync = false;
  o.env = env;
  STRATA_ASSIGN_OR_RETURN(auto w, GgufWriter::create(path, md, ts, o));
  for (size_t i = 0; i < ts.size(); ++i) {
    const auto b = tensor_bytes(w->tensor_bytes(i), i);
    for (size_t off = 0; off < b.size(); off += chunk)
      STRATA_RETURN_IF_ERROR(w->write(b.data() + off, std::min(chunk, b.size() - off)));
  }
  return w->finish();
}

Metadata every_type_metadata() {
  return {
      {"general.architecture", GgufValue::string("deepseek41")},
      {"t.u8", GgufValue::u8(250)},
      {"t.i8", GgufValue::i8(-100)},
      {"t.u16", GgufValue::u16(65000)},
      {"t.i16", GgufValue::i16(-32000)},
      {"t.u32", GgufValue::u32(4000000000u)},
      {"t.i32", GgufValue::i32(-2000000000)},
      {"t.u64", GgufValue::u64(std::numeric_limits<uint64_t>::max())},
      {"t.i64", GgufValue::i64(std::numeric_limits<int64_t>::min())},
      {"t.f32", GgufValue::f32(-1.5e-3f)},
      {"t.f64", GgufValue::f64(3.141592653589793)},
      {"t.bool_true", GgufValue::boolean(true)},
      {"t.bool_false", GgufValue::boolean(false)},
      {"t.string", GgufValue::string("h\xC3\xA9llo\nworld")},
      {"t.empty_string", GgufValue::string("")},
      {"t.arr_u8", GgufValue::array_of<uint8_t>(GgufType::kU8, {0, 1, 255})},
      {"t.arr_i8", GgufValue::array_of<int8_t>(GgufType::kI8, {-128, 0, 127})},
      {"t.arr_u16", GgufValue::array_of<uint16_t>(GgufType::kU16, {1, 65535})},
      {"t.arr_i16", GgufValue::array_of<int16_t>(GgufType::kI16, {-32768, 32767})},
      {"t.arr_u32", GgufValue::array_of<uint32_t>(GgufType::kU32, {7, 8, 9, 4294967295u})},
      {"t.arr_i32", GgufValue::array_of<int32_t>(GgufType::kI32, {-1, 2, -3})},
      {"t.arr_u64", GgufValue::array_of<uint64_t>(GgufType::kU64, {1ull << 63})},
      {"t.arr_i64", GgufValue::array_of<int64_t>(GgufType::kI64, {-5, 1ll << 40})},
      {"t.arr_f32", GgufValue::array_of<float>(GgufType::kF32, {0.25f, -2.0f})},
      {"t.arr_f64", GgufValue::array_of<double>(GgufType::kF64, {1e300, -0.5})},
      {"t.arr_bool", GgufValue::array_of<uint8_t>(GgufType::kBool, {1, 0, 1})},
      {"t.arr_string", GgufValue::string_array({"<s>", "", "token with spaces"})},
      {"t.arr_empty", GgufValue::array_of<uint32_t>(GgufType::kU32, {})},
      {"t.arr_empty_strings", GgufValue::string_array({})},
  };
}

// Every supported type at a shape whose ne[0] is a whole number of blocks, plus ranks 1..4 and an
// empty tensor.
std::vector<GgufTensorDecl> every_type_tensors() {
  return {
      {"token_embd.weight", GgmlType::kF32, Shape{3, 5}},
      {"f16.vec", GgmlType::kF16, Shape{7}},
      {"bf16.rank3", GgmlType::kBf16, Shape{2, 2, 4}},
      {"q8_0.w", GgmlType::kQ8_0, Shape{2, 64}},
      {"q6_K.w", GgmlType::kQ6_K, Shape{2, 256}},
      {"q4_K.w", GgmlType::kQ4_K, Shape{3, 256}},
      {"q3_K.w", GgmlType::kQ3_K, Shape{1, 512}},
      {"q2_K.w", GgmlType::kQ2_K, Shape{2, 256}},
      {"iq4_nl.w", GgmlType::kIq4Nl, Shape{5, 32}},
      {"i8.raw", GgmlType::kI8, Shape{3, 5}},
      {"mxfp4.experts", GgmlType::kMxfp4, Shape{2, 3, 64}},
      {"f32.rank4", GgmlType::kF32, Shape{2, 3, 1, 4}},
      {"f32.empty", GgmlType::kF32, Shape{0, 4}},
      {"f32.last", GgmlType::kF32, Shape{1}},
  };
}

TEST(GgufTypes, IdsAndBlockSizesAreGgmls) {
  struct Row {
    uint32_t id;
    const char* name;
    uint32_t elems, bytes;
  };
  // ggml.h enum ggml_type and ggml.c type_traits.
  const Row rows[] = {{0, "f32", 1, 4},     {1, "f16", 1, 2},       {8, "q8_0", 32, 34},  {10, "q2_K", 256, 84},
                      {11, "q3_K", 256, 110}, {12, "q4_K", 256, 144}, {14, "q6_K", 256, 210}, {20, "iq4_nl", 32, 18},
                      {24, "i8", 1, 1},     {30, "bf16", 1, 2},   {39, "mxfp4", 32, 17}};
  EXPECT_EQ(ggml_supported_types().size(), std::size(rows));
  for (const Row& r : rows) {
    auto t = ggml_type_info(r.id);
    ASSERT_TRUE(t) << r.name;
    EXPECT_STREQ(t->name, r.name);
    EXPECT_EQ(t->block_elems, r.elems) << r.name;
    EXPECT_EQ(t->block_bytes, r.bytes) << r.name;
    EXPECT_EQ(ggml_type_name_any(r.id), std::string_view(r.name));
  }
  EXPECT_FALSE(ggml_type_info(13));  // q5_K: known to ggml, not read by strata
  EXPECT_EQ(ggml_type_name_any(13), "q5_K");
  EXPECT_FALSE(ggml_type_name_any(31));  // removed from GGUF
  EXPECT_FALSE(ggml_type_name_any(1000));
}

TEST(GgufTypes, NbytesChecksBlocksAndOverflow) {
  EXPECT_EQ(*ggml_nbytes(GgmlType::kQ4_K, {512, 3}, "t"), 2u * 144 * 3);
  EXPECT_EQ(*ggml_nbytes(GgmlType::kMxfp4, {64, 3, 2}, "t"), 2u * 17 * 6);
  EXPECT_EQ(ggml_nbytes(GgmlType::kQ8_0, {33}, "t").error().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(ggml_nbytes(GgmlType::kF32, {1ll << 40, 1ll << 40}, "t").error().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(ggml_nbytes(GgmlType::kF32, {}, "t").error().code(), StatusCode::kInvalidArgument);
}

TEST(GgufRoundTrip, EveryMetadataType) {
  testing::TempDir dir;
  const std::string path = dir.file("md.gguf");
  const Metadata md = every_type_metadata();
  ASSERT_TRUE(write_gguf(path, md, {{"x", GgmlType::kF32, Shape{4}}}).ok());
  auto m = GgufModel::open(path);
  ASSERT_TRUE(m.ok()) << m.error().to_string();
  const GgufFile& h = (*m)->header();
  ASSERT_EQ(h.metadata.size(), md.size());
  for (size_t i = 0; i < md.size(); ++i) {
    EXPECT_EQ(h.metadata[i].first, md[i].first);
    EXPECT_TRUE(h.metadata[i].second == md[i].second) << md[i].first << ": " << h.metadata[i].second.to_string();
  }
  EXPECT_EQ(*h.find("t.u8")->as_uint(), 250u);
  EXPECT_EQ(*h.find("t.i8")->as_int(), -100);
  EXPECT_FALSE(h.find("t.i8")->as_uint());
  EXPECT_EQ(*h.find("t.u64")->as_uint(), std::numeric_limits<uint64_t>::max());
  EXPECT_FALSE(h.find("t.u64")->as_int());
  EXPECT_EQ(*h.find("t.i64")->as_int(), std::numeric_limits<int64_t>::min());
  EXPECT_EQ(*h.find("t.f32")->as_float(), -1.5e-3f);
  EXPECT_EQ(*h.find("t.f64")->as_float(), 3.141592653589793);
  EXPECT_EQ(*h.find("t.bool_true")->as_bool(), true);
  EXPECT_EQ(*h.find("t.bool_false")->as_bool(), false);
  EXPECT_EQ(*h.find("t.string")->as_string(), "h\xC3\xA9llo\nworld");
  EXPECT_EQ(*h.find("t.arr_i8")->int_at(0), -128);
  EXPECT_EQ(*h.find("t.arr_u32")->uint_at(3), 4294967295u);
  EXPECT_FALSE(h.find("t.arr_u32")->uint_at(4));
  EXPECT_EQ(*h.find("t.arr_i64")->int_at(1), 1ll << 40);
  EXPECT_EQ(*h.find("t.arr_f64")->float_at(0), 1e300);
  EXPECT_EQ(*h.find("t.arr_f32")->float_at(1), -2.0);
  EXPECT_EQ(h.find("t.arr_bool")->array_size(), 3u);
  EXPECT_EQ((*h.find("t.arr_string")->strings())[2], "token with spaces");
  EXPECT_EQ(h.find("t.arr_empty")->array_size(), 0u);
  EXPECT_EQ(h.find("t.arr_empty_strings")->strings()->size(), 0u);
  EXPECT_EQ(h.find("missing"), nullptr);
}

TEST(GgufRoundTrip, EveryTensorTypeAndShape) {
  for (uint32_t align : {32u, 64u, 1u, 4096u}) {
    SCOPED_TRACE("alignment " + std::to_string(align));
    testing::TempDir dir;
    const std::string path = dir.file("t.gguf");
    Metadata md = {{"general.architecture", GgufValue::string("test")}};
    if (align != 32) md.push_back({"general.alignment", GgufValue::u32(align)});
    const auto ts = every_type_tensors();
    ASSERT_TRUE(write_gguf(path, md, ts, 777).ok());
    auto m = GgufModel::open(path);
    ASSERT_TRUE(m.ok()) << m.error().to_string();
    const GgufFile& h = (*m)->header();
    EXPECT_EQ(h.version, 3u);
    EXPECT_EQ(h.alignment, align);
    EXPECT_EQ(h.data_offset % align, 0u);
    ASSERT_EQ(h.tensors.size(), ts.size());
    for (size_t i = 0; i < ts.size(); ++i) {
      const GgufTensorInfo& t = h.tensors[i];
      SCOPED_TRACE(t.name);
      EXPECT_EQ(t.name, ts[i].name);
      EXPECT_EQ(t.type, ts[i].type);
      EXPECT_EQ(t.shape, ts[i].shape);
      // ggml order: ne is the strata shape reversed.
      ASSERT_EQ(t.ne.size(), static_cast<size_t>(ts[i].shape.rank));
      for (int d = 0; d < ts[i].shape.rank; ++d) EXPECT_EQ(t.ne[static_cast<size_t>(d)], ts[i].shape.dims[ts[i].shape.rank - 1 - d]);
      EXPECT_EQ((t.offset - h.data_offset) % align, 0u);
      const auto want = tensor_bytes(t.nbytes, i);
      std::vector<uint8_t> got(t.nbytes);
      ASSERT_TRUE((*m)->read_range(t, 0, t.nbytes, got.data()).ok());
      EXPECT_EQ(got, want);
    }
    const GgufTensorInfo* q4 = (*m)->find("q4_K.w");
    ASSERT_NE(q4, nullptr);
    EXPECT_EQ(q4->nbytes, 3u * 144);
    EXPECT_EQ(q4->ne, (std::vector<int64_t>{256, 3}));
    EXPECT_EQ((*m)->find("nope"), nullptr);
    EXPECT_EQ((*m)->read_range(*q4, 1, q4->nbytes, nullptr).code(), StatusCode::kInvalidArgument);
    EXPECT_EQ(std::filesystem::file_size(path), h.file_size);
  }
}

TEST(GgufRoundTrip, HeaderOnlyAndNoTensors) {
  testing::TempDir dir;
  ASSERT_TRUE(write_gguf(dir.file("e.gguf"), {{"general.name", GgufValue::string("empty")}}, {}).ok());
  auto m = GgufModel::open(dir.file("e.gguf"));
  ASSERT_TRUE(m.ok()) << m.error().to_string();
  EXPECT_TRUE((*m)->tensors().empty());
  EXPECT_EQ(*(*m)->find_key("general.name")->as_string(), "empty");
}

// ---- the writer's refusals and faults ----------------------------------------------------------------

TEST(GgufWriter, RefusesBadDeclarations) {
  testing::TempDir dir;
  const std::string p = dir.file("w.gguf");
  auto code = [&](const Metadata& md, const std::vector<GgufTensorDecl>& ts) {
    auto w = GgufWriter::create(p, md, ts);
    return w.ok() ? StatusCode::kOk : w.error().code();
  };
  const GgufTensorDecl ok{"a", GgmlType::kF32, Shape{4}};
  EXPECT_EQ(code({}, {ok, ok}), StatusCode::kInvalidArgument);                                   // duplicate name
  EXPECT_EQ(code({}, {{"", GgmlType::kF32, Shape{4}}}), StatusCode::kInvalidArgument);           // empty name
  EXPECT_EQ(code({}, {{std::string(64, 'n'), GgmlType::kF32, Shape{4}}}), StatusCode::kInvalidArgument);
  EXPECT_EQ(code({}, {{"q", GgmlType::kQ4_K, Shape{4, 128}}}), StatusCode::kInvalidArgument);    // not whole blocks
  EXPECT_EQ(code({}, {{"r", GgmlType::kF32, Shape{}}}), StatusCode::kInvalidArgument);           // rank 0
  EXPECT_EQ(code({}, {{"n", GgmlType::kF32, Shape{-1}}}), StatusCode::kInvalidArgument);         // negative
  EXPECT_EQ(code({{"k", GgufValue::u8(1)}, {"k", GgufValue::u8(2)}}, {}), StatusCode::kInvalidArgument);
  EXPECT_EQ(code({{"", GgufValue::u8(1)}}, {}), StatusCode::kInvalidArgument);
  EXPECT_EQ(code({{"b", GgufValue::array(GgufType::kBool, {0, 2})}}, {}), StatusCode::kInvalidArgument);
  EXPECT_EQ(code({{"general.alignment", GgufValue::u32(48)}}, {}), StatusCode::kInvalidArgument);
  EXPECT_EQ(code({{"general.alignment", GgufValue::u64(64)}}, {}), StatusCode::kInvalidArgument);
  EXPECT_EQ(code({{"general.alignment", GgufValue::u32(0)}}, {}), StatusCode::kInvalidArgument);
  EXPECT_EQ(code({}, {{std::string(63, 'n'), GgmlType::kF32, Shape{4}}}), StatusCode::kOk);
  EXPECT_TRUE(std::filesystem::is_empty(dir.path())) << "a refused or abandoned writer leaves no file";
}

TEST(GgufWriter, RefusesAnExistingDestination) {
  testing::TempDir dir;
  const std::string p = dir.file("exists.gguf");
  ASSERT_TRUE(write_gguf(p, {}, {{"a", GgmlType::kF32, Shape{4}}}).ok());
  auto w = GgufWriter::create(p, {}, {});
  ASSERT_FALSE(w.ok());
  EXPECT_EQ(w.error().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(w.error().message().find("exists"), std::string::npos) << w.error().message();
  // A destination that appears while the file is written is not replaced either.
  const std::string q = dir.file("late.gguf");
  auto w2 = GgufWriter::create(q, {}, {});
  ASSERT_TRUE(w2.ok());
  { std::FILE* f = std::fopen(q.c_str(), "w"); ASSERT_NE(f, nullptr); std::fclose(f); }
  EXPECT_EQ((*w2)->finish().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(std::filesystem::file_size(q), 0u);
}

// A file larger than the free space of its file system is refused before anything is written.
TEST(GgufWriter, RefusesAFileLargerThanTheFreeSpace) {
  testing::TempDir dir;
  const std::string p = dir.file("huge.gguf");
  const int64_t n = int64_t{1} << 52;  // 4 PiB of I8
  auto w = GgufWriter::create(p, {}, {{"t", GgmlType::kI8, Shape{n}}});
  ASSERT_FALSE(w.ok());
  EXPECT_EQ(w.error().code(), StatusCode::kResourceExhausted);
  EXPECT_NE(w.error().message().find("bytes free"), std::string::npos) << w.error().message();
  EXPECT_NE(w.error().message().find(p), std::string::npos) << w.error().message();
  EXPECT_TRUE(std::filesystem::is_empty(dir.path())) << "no temp file left";
  GgufWriterOptions o;
  o.check_free_space = false;  // the check can be turned off: then the plan itself is accepted
  auto w2 = GgufWriter::create(p, {}, {{"t", GgmlType::kI8, Shape{n}}}, o);
  ASSERT_TRUE(w2.ok()) << w2.error().to_string();
}

TEST(GgufWriter, ByteCountsAreChecked) {
  testing::TempDir dir;
  const std::vector<GgufTensorDecl> ts = {{"a", GgmlType::kF32, Shape{4}}, {"b", GgmlType::kQ8_0, Shape{32}}};
  {
    auto w = GgufWriter::create(dir.file("over.gguf"), {}, ts);
    ASSERT_TRUE(w.ok());
    std::vector<uint8_t> b(17);
    Status s = (*w)->write(b.data(), b.size());
    EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
    EXPECT_NE(s.message().find("tensor 'a'"), std::string::npos) << s.message();
    EXPECT_EQ((*w)->finish().code(), StatusCode::kInvalidArgument) << "dead after an error";
  }
  {
    auto w = GgufWriter::create(dir.file("short.gguf"), {}, ts);
    ASSERT_TRUE(w.ok());
    std::vector<uint8_t> b(16);
    ASSERT_TRUE((*w)->write_tensor("a", b.data(), b.size()).ok());
    Status s = (*w)->finish();
    EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
    EXPECT_NE(s.message().find("tensor 'b'"), std::string::npos) << s.message();
  }
  {
    auto w = GgufWriter::create(dir.file("order.gguf"), {}, ts);
    ASSERT_TRUE(w.ok());
    std::vector<uint8_t> b(34);
    EXPECT_EQ((*w)->write_tensor("b", b.data(), b.size()).code(), StatusCode::kInvalidArgument);
  }
  EXPECT_TRUE(std::filesystem::is_empty(dir.path())) << "failed writers leave no file";
}

TEST(GgufWriter, FaultsLeaveNoFileAndShortWritesAreIdentical) {
  testing::TempDir dir;
  const auto md = every_type_metadata();
  const auto ts = every_type_tensors();
  ASSERT_TRUE(write_gguf(dir.file("ref.gguf"), md, ts).ok());
  {
    FaultInjectionEnv env(WriteFaults{.max_write_bytes = 7});
    ASSERT_TRUE(write_gguf(dir.file("short.gguf"), md, ts, 1000, &env).ok());
    auto read_all = [](const std::string& p) {
      std::FILE* f = std::fopen(p.c_str(), "rb");
      std::string s;
      char buf[4096];
      for (size_t n; (n = std::fread(buf, 1, sizeof(buf), f)) > 0;) s.append(buf, n);
      std::fclose(f);
      return s;
    };
    EXPECT_EQ(read_all(dir.file("short.gguf")), read_all(dir.file("ref.gguf")));
  }
  for (int err : {28 /*ENOSPC*/, 5 /*EIO*/}) {
    FaultInjectionEnv env(WriteFaults{.fail_after_bytes = 1000, .error = err});
    Status s = write_gguf(dir.file("fail.gguf"), md, ts, 100, &env);
    EXPECT_EQ(s.code(), err == 28 ? StatusCode::kResourceExhausted : StatusCode::kIOError) << s.to_string();
    EXPECT_NE(s.message().find("fail.gguf.tmp."), std::string::npos) << s.message();
    EXPECT_FALSE(std::filesystem::exists(dir.file("fail.gguf")));
  }
  {
    FaultInjectionEnv env(WriteFaults{.fail_rename = 5});
    EXPECT_FALSE(write_gguf(dir.file("fail.gguf"), md, ts, 100, &env).ok());
  }
  size_t n = 0;
  for (const auto& e : std::filesystem::directory_iterator(dir.path())) ++n, (void)e;
  EXPECT_EQ(n, 2u) << "only ref.gguf and short.gguf: no temp files left";
}

// ---- split sets ---------------------------------------------------------------------------------

// Writes PREFIX-0000i-of-0000n.gguf with tensors split as `per_file`; the model's keys go in split 1.
void write_split(const std::string& prefix, const std::vector<std::vector<GgufTensorDecl>>& per_file,
                 int total_override = -1, int no_skew = 0) {
  const int n = static_cast<int>(per_file.size());
  int total = 0;
  for (const auto& f : per_file) total += static_cast<int>(f.size());
  if (total_override >= 0) total = total_override;
  for (int i = 0; i < n; ++i) {
    Metadata md;
    if (i == 0) md.push_back({"general.architecture", GgufValue::string("deepseek41")});
    md.push_back({"split.no", GgufValue::u16(static_cast<uint16_t>(i + (i == n - 1 ? no_skew : 0)))});
    md.push_back({"split.count", GgufValue::u16(static_cast<uint16_t>(n))});
    md.push_back({"split.tensors.count", GgufValue::i32(total)});
    ASSERT_TRUE(write_gguf(gguf_split_path(prefix, i + 1, n), md, per_file[static_cast<size_t>(i)]).ok());
  }
}

TEST(GgufSplit, PathsParse) {
  EXPECT_EQ(gguf_split_path("/m/V4.1-Q2_K", 2, 5), "/m/V4.1-Q2_K-00002-of-00005.gguf");
  auto s = parse_gguf_split_path("/m/V4.1-Q2_K-00002-of-00005.gguf");
  ASSERT_TRUE(s);
  EXPECT_EQ(s->prefix, "/m/V4.1-Q2_K");
  EXPECT_EQ(s->n, 2);
  EXPECT_EQ(s->count, 5);
  EXPECT_FALSE(parse_gguf_split_path("model.gguf"));
  EXPECT_FALSE(parse_gguf_split_path("m-00006-of-00005.gguf"));
  EXPECT_FALSE(parse_gguf_split_path("m-0000a-of-00005.gguf"));
  EXPECT_FALSE(parse_gguf_split_path("m-00000-of-00005.gguf"));
}

TEST(GgufSplit, OpensTheWholeSetFromAnySplit) {
  testing::TempDir dir;
  const std::string prefix = dir.file("V4.1");
  write_split(prefix, {{{"a", GgmlType::kF32, Shape{2, 4}}, {"b", GgmlType::kQ8_0, Shape{32}}},
                       {{"c", GgmlType::kQ4_K, Shape{1, 256}}},
                       {{"d", GgmlType::kQ2_K, Shape{2, 256}}, {"e", GgmlType::kF16, Shape{3}}}});
  for (int i = 1; i <= 3; ++i) {
    auto m = GgufModel::open(gguf_split_path(prefix, i, 3));
    ASSERT_TRUE(m.ok()) << m.error().to_string();
    EXPECT_EQ((*m)->files().size(), 3u);
    EXPECT_EQ((*m)->tensors().size(), 5u);
    EXPECT_EQ(*(*m)->find_key("general.architecture")->as_string(), "deepseek41");
    EXPECT_EQ((*m)->find("a")->file, 0);
    EXPECT_EQ((*m)->find("c")->file, 1);
    EXPECT_EQ((*m)->find("e")->file, 2);
    const GgufTensorInfo& d = *(*m)->find("d");
    std::vector<uint8_t> got(d.nbytes);
    ASSERT_TRUE((*m)->read_range(d, 0, d.nbytes, got.data()).ok());
    EXPECT_EQ(got, tensor_bytes(d.nbytes, 0));  // first tensor of its file
  }
}

TEST(GgufSplit, OneOfOneIsASingleFile) {
  testing::TempDir dir;
  const std::string p = gguf_split_path(dir.file("m"), 1, 1);
  ASSERT_TRUE(write_gguf(p, {}, {{"a", GgmlType::kF32, Shape{4}}}).ok());
  auto m = GgufModel::open(p);
  ASSERT_TRUE(m.ok()) << m.error().to_string();
  EXPECT_EQ((*m)->files().size(), 1u);
  // A file that says it is one of two but is not named like a split cannot find its partner.
  const std::string q = dir.file("lonely.gguf");
  ASSERT_TRUE(write_gguf(q, {{"split.no", GgufValue::u16(0)}, {"split.count", GgufValue::u16(2)},
                             {"split.tensors.count", GgufValue::i32(1)}},
                         {{"a", GgmlType::kF32, Shape{4}}})
                  .ok());
  auto l = GgufModel::open(q);
  ASSERT_FALSE(l.ok());
  EXPECT_NE(l.error().message().find("PREFIX-0000N-of-0000M.gguf"), std::string::npos) << l.error().message();
}

TEST(GgufSplit, MissingSplitIsNotFound) {
  testing::TempDir dir;
  const std::string prefix = dir.file("m");
  write_split(prefix, {{{"a", GgmlType::kF32, Shape{4}}}, {{"b", GgmlType::kF32, Shape{4}}}});
  std::filesystem::remove(gguf_split_path(prefix, 2, 2));
  auto m = GgufModel::open(gguf_split_path(prefix, 1, 2));
  ASSERT_FALSE(m.ok());
  EXPECT_EQ(m.error().code(), StatusCode::kNotFound);
  EXPECT_NE(m.error().message().find("m-00002-of-00002.gguf"), std::string::npos) << m.error().message();
}

TEST(GgufSplit, InconsistentSetsAreCorruption) {
  struct Case {
    const char* name;
    std::vector<std::vector<GgufTensorDecl>> files;
    int total_override, no_skew;
    const char* expect;
  };
  const GgufTensorDecl a{"a", GgmlType::kF32, Shape{4}}, b{"b", GgmlType::kF32, Shape{4}};
  const Case cases[] = {
      {"wrong tensor total", {{a}, {b}}, 3, 0, "split.tensors.count"},
      {"wrong split.no", {{a}, {b}}, -1, 5, "split.no"},
      {"tensor in two splits", {{a}, {a}}, -1, 0, "also in"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    testing::TempDir dir;
    write_split(dir.file("m"), c.files, c.total_override, c.no_skew);
    auto m = GgufModel::open(gguf_split_path(dir.file("m"), 1, 2));
    ASSERT_FALSE(m.ok());
    EXPECT_EQ(m.error().code(), StatusCode::kCorruption);
    EXPECT_NE(m.error().message().find(c.expect), std::string::npos) << m.error().message();
  }
  // A split named 2-of-3 whose split.count says 2.
  testing::TempDir dir;
  ASSERT_TRUE(write_gguf(gguf_split_path(dir.file("m"), 1, 3),
                         {{"split.no", GgufValue::u16(0)}, {"split.count", GgufValue::u16(2)},
                          {"split.tensors.count", GgufValue::i32(0)}},
                         {})
                  .ok());
  auto m = GgufModel::open(gguf_split_path(dir.file("m"), 1, 3));
  ASSERT_FALSE(m.ok());
  EXPECT_EQ(m.error().code(), StatusCode::kCorruption) << m.error().to_string();
}

// ---- malformed files, byte by byte ---------------------------------------------------------------

// Builds GGUF bytes field by field.
struct Bytes {
  std::string s;
  Bytes& u8(uint8_t v) { return raw(&v, 1); }
  Bytes& u32(uint32_t v) { return raw(&v, 4); }
  Bytes& u64(uint64_t v) { return raw(&v, 8); }
  Bytes& str(const std::string& v) { u64(v.size()); s += v; return *this; }
  Bytes& raw(const void* p, size_t n) { s.append(static_cast<const char*>(p), n); return *this; }
  Bytes& pad(size_t align) { s.append((align - s.size() % align) % align, '\0'); return *this; }
  Bytes& zeros(size_t n) { s.append(n, '\0'); return *this; }
  // magic, version, counts
  static Bytes header(uint64_t n_tensors, uint64_t n_kv, uint32_t version = 3) {
    Bytes b;
    b.s = "GGUF";
    return b.u32(version).u64(n_tensors).u64(n_kv);
  }
  // One tensor info.
  Bytes& tensor(const std::string& name, std::vector<uint64_t> ne, uint32_t type, uint64_t off) {
    str(name).u32(static_cast<uint32_t>(ne.size()));
    for (uint64_t d : ne) u64(d);
    return u32(type).u64(off);
  }
};

// ---- reads that fail -----------------------------------------------------------------------------

TEST(GgufRead, OsErrorsAndShortReadsArePassedOn) {
  testing::TempDir dir;
  const std::string p = dir.file("r.gguf");
  ASSERT_TRUE(write_gguf(p, every_type_metadata(), every_type_tensors()).ok());
  for (uint64_t at : {0ull, 40ull, 2000ull}) {
    SCOPED_TRACE(at);
    for (int err : {5 /*EIO*/, 0 /*short read*/}) {
      auto f = open_file(p);
      ASSERT_TRUE(f.ok());
      auto faulty = make_faulty_file(std::move(f).value(), FaultSpec{.fail_offset = at, .error = err});
      auto g = parse_gguf(*faulty);
      ASSERT_FALSE(g.ok());
      EXPECT_EQ(g.error().code(), err ? StatusCode::kIOError : StatusCode::kCorruption) << g.error().to_string();
      EXPECT_NE(g.error().message().find("r.gguf"), std::string::npos) << g.error().message();
    }
  }
  // A tensor read through the model after the header parsed (the header is read in a 1 MiB window:
  // the fault sits in the data of a 2 MiB tensor, past it).
  const std::string q = dir.file("big.gguf");
  ASSERT_TRUE(write_gguf(q, {}, {{"small", GgmlType::kF32, Shape{4}}, {"big", GgmlType::kF32, Shape{1 << 19}}}, 1 << 20).ok());
  auto f = open_file(q);
  ASSERT_TRUE(f.ok());
  const uint64_t size = (*f)->size();
  std::vector<std::unique_ptr<File>> files;
  files.push_back(make_faulty_file(std::move(f).value(), FaultSpec{.fail_offset = size - 40, .error = 5}));
  auto m = GgufModel::open_files(std::move(files));
  ASSERT_TRUE(m.ok()) << m.error().to_string();
  const GgufTensorInfo& big = *(*m)->find("big");
  float v = 0;
  EXPECT_TRUE((*m)->read_range(big, 0, 4, &v).ok());
  std::vector<uint8_t> tail(64);
  EXPECT_EQ((*m)->read_range(big, big.nbytes - 64, 64, tail.data()).code(), StatusCode::kIOError);
}

TEST(GgufRead, Version2HasTheSameLayout) {
  Bytes b = Bytes::header(1, 1, 2).str("general.name").u32(8).str("v2");
  b.tensor("a", {4}, 0, 0).pad(32).zeros(16);
  auto g = parse_gguf(MemFile(b.s));
  ASSERT_TRUE(g.ok()) << g.error().to_string();
  EXPECT_EQ(g->version, 2u);
  EXPECT_EQ(g->tensors[0].nbytes, 16u);
}

Status parse(const std::string& bytes) { return parse_gguf(MemFile(bytes)).error(); }

void expect_error(const std::string& bytes, StatusCode code, const std::string& needle) {
  Status s = parse(bytes);
  EXPECT_EQ(s.code(), code) << s.to_string();
  EXPECT_NE(s.message().find(needle), std::string::npos) << "message: " << s.message() << "\nexpected: " << needle;
  EXPECT_NE(s.message().find("mem.gguf"), std::string::npos) << "errors name the file: " << s.message();
}

TEST(GgufMalformed, ValidBaseParses) {
  // Two f32 tensors, one key: the base the cases below break.
  Bytes b = Bytes::header(2, 1).str("general.name").u32(8).str("x");
  b.tensor("a", {4}, 0, 0).tensor("b", {8}, 0, 32).pad(32).zeros(64);
  auto g = parse_gguf(MemFile(b.s));
  ASSERT_TRUE(g.ok()) << g.error().to_string();
  EXPECT_EQ(g->tensors[1].offset, g->data_offset + 32);
}

TEST(GgufMalformed, EveryTruncationIsAnErrorNotACrash) {
  testing::TempDir dir;
  const std::string p = dir.file("full.gguf");
  ASSERT_TRUE(write_gguf(p, every_type_metadata(), every_type_tensors()).ok());
  std::FILE* f = std::fopen(p.c_str(), "rb");
  std::string full;
  char buf[4096];
  for (size_t n; (n = std::fread(buf, 1, sizeof(buf), f)) > 0;) full.append(buf, n);
  std::fclose(f);
  auto whole = parse_gguf(MemFile(full));
  ASSERT_TRUE(whole.ok());
  // Every prefix that cuts into the header or a tensor's bytes is refused; the zero padding after
  // the last tensor is not needed (the data is whole without it).
  uint64_t data_end = 0;
  for (const GgufTensorInfo& t : whole->tensors) data_end = std::max(data_end, t.offset + t.nbytes);
  ASSERT_LT(data_end, full.size());
  for (size_t n = 0; n < full.size(); ++n) {
    auto r = parse_gguf(MemFile(full.substr(0, n)));
    if (n >= data_end) {
      EXPECT_TRUE(r.ok()) << n << ": " << r.error().to_string();
      continue;
    }
    ASSERT_FALSE(r.ok()) << "prefix of " << n << " bytes accepted";
    EXPECT_EQ(r.error().code(), StatusCode::kCorruption) << n << ": " << r.error().to_string();
  }
}

TEST(GgufMalformed, HeaderFields) {
  expect_error("GGU", StatusCode::kCorruption, "too small");
  Bytes bad_magic = Bytes::header(0, 0);
  bad_magic.s[0] = 'X';
  expect_error(bad_magic.s, StatusCode::kCorruption, "not a GGUF file");
  expect_error(Bytes::header(0, 0, 1).s, StatusCode::kNotSupported, "version 1");
  expect_error(Bytes::header(0, 0, 0x03000000).s, StatusCode::kNotSupported, "big-endian");
  expect_error(Bytes::header(1ull << 40, 0).s, StatusCode::kCorruption, "tensors declared");
  expect_error(Bytes::header(0, ~0ull).s, StatusCode::kCorruption, "metadata keys declared");
  expect_error(Bytes::header(5, 0).zeros(40).s, StatusCode::kCorruption, "tensors declared");
}

TEST(GgufMalformed, MetadataValues) {
  // A key whose length is past the end, or near 2^64.
  expect_error(Bytes::header(0, 1).u64(1000).s + "abc" + std::string(20, '\0'), StatusCode::kCorruption,
               "metadata key 0 length 1000");
  expect_error((Bytes::header(0, 1).u64(~0ull).zeros(16)).s, StatusCode::kCorruption, "exceeds");
  // A string value longer than the file.
  expect_error(Bytes::header(0, 1).str("k").u32(8).u64(1ull << 62).zeros(8).s, StatusCode::kCorruption,
               "key 'k' string length");
  // Arrays: too many elements for the bytes left; elements past the limit; element type invalid;
  // arrays of arrays; a string array whose count overflows a multiplication.
  expect_error(Bytes::header(0, 1).str("k").u32(9).u32(4).u64(1000).zeros(16).s, StatusCode::kCorruption,
               "array of 1000 u32 elements");
  expect_error(Bytes::header(0, 1).str("k").u32(9).u32(0).u64(1ull << 40).zeros(16).s, StatusCode::kCorruption,
               "key 'k': array of");
  expect_error(Bytes::header(0, 1).str("k").u32(9).u32(8).u64(~0ull >> 1).zeros(16).s, StatusCode::kCorruption,
               "string elements");
  expect_error(Bytes::header(0, 1).str("k").u32(9).u32(77).u64(1).zeros(16).s, StatusCode::kCorruption,
               "element type 77");
  expect_error(Bytes::header(0, 1).str("k").u32(9).u32(9).u64(1).zeros(16).s, StatusCode::kNotSupported,
               "arrays of arrays");
  expect_error(Bytes::header(0, 1).str("k").u32(13).zeros(16).s, StatusCode::kCorruption, "value type 13");
  expect_error(Bytes::header(0, 1).str("k").u32(7).u8(2).zeros(16).s, StatusCode::kCorruption, "bool byte 2");
  expect_error(Bytes::header(0, 1).str("k").u32(9).u32(7).u64(2).u8(1).u8(9).zeros(16).s, StatusCode::kCorruption,
               "element 1: bool byte 9");
  expect_error(Bytes::header(0, 2).str("k").u32(0).u8(1).str("k").u32(0).u8(2).zeros(16).s, StatusCode::kCorruption,
               "'k' appears twice");
  expect_error(Bytes::header(0, 1).str("").u32(0).u8(1).zeros(16).s, StatusCode::kCorruption, "is empty");
  // general.alignment: wrong type, zero, not a power of two.
  expect_error(Bytes::header(0, 1).str("general.alignment").u32(10).u64(32).zeros(8).s, StatusCode::kCorruption,
               "expected u32");
  expect_error(Bytes::header(0, 1).str("general.alignment").u32(4).u32(0).zeros(8).s, StatusCode::kCorruption,
               "power of two");
  expect_error(Bytes::header(0, 1).str("general.alignment").u32(4).u32(48).zeros(8).s, StatusCode::kCorruption,
               "power of two");
}

TEST(GgufMalformed, TensorInfos) {
  auto one = [](const std::string& name, std::vector<uint64_t> ne, uint32_t type, uint64_t off, size_t data = 4096) {
    Bytes b = Bytes::header(1, 0);
    b.tensor(name, std::move(ne), type, off).pad(32).zeros(data);
    return b.s;
  };
  expect_error(one("", {4}, 0, 0), StatusCode::kCorruption, "empty name");
  expect_error(one("t", {}, 0, 0), StatusCode::kCorruption, "tensor 't': 0 dims");
  expect_error(one("t", {1, 1, 1, 1, 1}, 0, 0), StatusCode::kCorruption, "tensor 't': 5 dims");
  expect_error(one("t", {~0ull}, 0, 0), StatusCode::kCorruption, "ne[0] = -1 is negative");
  expect_error(one("t", {100}, 12, 0), StatusCode::kCorruption, "not a multiple of the q4_K block");
  expect_error(one("t", {1ull << 40, 1ull << 40}, 0, 0), StatusCode::kCorruption, "64 bits");
  expect_error(one("t", {32}, 13, 0), StatusCode::kNotSupported, "ggml type q5_K (13) is not supported");
  expect_error(one("t", {32}, 31, 0), StatusCode::kCorruption, "ggml type 31 is not a known ggml type");
  expect_error(one("t", {32}, 4000, 0), StatusCode::kCorruption, "ggml type 4000");
  expect_error(one("t", {4}, 0, 16), StatusCode::kCorruption, "not a multiple of the alignment 32");
  expect_error(one("t", {4}, 0, 4096), StatusCode::kCorruption, "runs past the end");
  expect_error(one("t", {4}, 0, ~0ull << 5), StatusCode::kCorruption, "runs past the end");
  expect_error(one("t", {2048}, 0, 0), StatusCode::kCorruption, "runs past the end");
  // A name longer than the limit, or than the file.
  {
    Bytes b = Bytes::header(1, 0);
    b.u64(1u << 20).zeros(100);
    expect_error(b.s, StatusCode::kCorruption, "tensor 0 name length");
  }
  // Two tensors: overlapping data, a repeated name, and infos that end past the file.
  {
    Bytes b = Bytes::header(2, 0);
    b.tensor("a", {16}, 0, 0).tensor("b", {4}, 0, 32).pad(32).zeros(256);
    expect_error(b.s, StatusCode::kCorruption, "tensors 'a' and 'b' overlap");
  }
  {
    Bytes b = Bytes::header(2, 0);
    b.tensor("a", {4}, 0, 0).tensor("a", {4}, 0, 32).pad(32).zeros(256);
    expect_error(b.s, StatusCode::kCorruption, "tensor 'a' appears twice");
  }
  {
    Bytes b = Bytes::header(1, 0);
    b.tensor("a", {4}, 0, 0);  // data section would start past the end (no padding, no data)
    b.s.resize(b.s.size());
    expect_error(b.s, StatusCode::kCorruption, "past the end of the file");
  }
}

TEST(GgufText, LongTextsArePiecesOfWholeCharactersAndReadBack) {
  EXPECT_EQ(gguf_text_value("short").type(), GgufType::kString);
  EXPECT_EQ(*gguf_text_of(gguf_text_value("short")), "short");
  std::string text = "a";  // then 3-byte characters: the cuts land inside them unless moved
  while (text.size() < 3 * kGgufTextPiece + 5) text += "\xE2\x82\xAC";
  const GgufValue v = gguf_text_value(text);
  ASSERT_NE(v.strings(), nullptr);
  EXPECT_EQ(v.strings()->size(), 4u);
  for (const std::string& p : *v.strings()) {
    EXPECT_LE(p.size(), kGgufTextPiece);
    EXPECT_NE(static_cast<unsigned char>(p.front()) & 0xC0, 0x80) << "a piece starts inside a character";
  }
  EXPECT_EQ(*gguf_text_of(v), text);
  EXPECT_FALSE(gguf_text_of(GgufValue::u32(3)));
  // Written and read back through a file, as read_checkpoint_text does.
  testing::TempDir dir;
  ASSERT_TRUE(write_gguf(dir.file("t.gguf"), {{"strata.tokenizer_json", v}, {"after", GgufValue::u8(1)}}, {}).ok());
  auto m = GgufModel::open(dir.file("t.gguf"));
  ASSERT_TRUE(m.ok()) << m.error().to_string();
  EXPECT_EQ(*gguf_text_of(*(*m)->find_key("strata.tokenizer_json")), text);
}

}  // namespace
}  // namespace strata::io
