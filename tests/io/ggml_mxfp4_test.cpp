// io/ggml_mxfp4.h: ggml MXFP4 blocks <-> official MXFP4 codes + scales, lossless both ways, and the
// values agree with ggml's own dequantize_row_mxfp4 (ggml-quants.c, from the npm prebuilt
// libggml-base.so: tests/support/ggml_library.h; skipped, saying why, without it).
#include <gtest/gtest.h>

#include <algorithm>
#include <bit>
#include <cstring>
#include <filesystem>
#include <random>
#include <vector>

#include "io/checkpoint.h"
#include "io/ggml_mxfp4.h"
#include "io/gguf_writer.h"
#include "kernels/linear.h"
#include "tests/support/ggml_library.h"
#include "tests/support/temp_dir.h"

namespace strata::io {
namespace {

std::vector<uint8_t> random_bytes(size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::vector<uint8_t> v(n);
  for (uint8_t& b : v) b = static_cast<uint8_t>(rng());
  return v;
}

TEST(GgmlMxfp4, OfficialToGgmlAndBackIsTheIdentity) {
  for (int64_t nb : {1, 2, 7, 64, 448}) {
    const auto codes = random_bytes(static_cast<size_t>(nb * 16), 1 + static_cast<uint32_t>(nb));
    const auto scales = random_bytes(static_cast<size_t>(nb), 100 + static_cast<uint32_t>(nb));
    std::vector<uint8_t> ggml(static_cast<size_t>(nb * kMxfp4BlockBytes));
    official_to_ggml_mxfp4(codes.data(), scales.data(), nb, ggml.data());
    std::vector<uint8_t> c2(codes.size()), s2(scales.size());
    ggml_mxfp4_to_official(ggml.data(), nb, c2.data(), s2.data());
    EXPECT_EQ(c2, codes) << nb << " blocks";
    EXPECT_EQ(s2, scales) << nb << " blocks";
    // And ggml bytes -> official -> ggml: every block is reachable.
    std::vector<uint8_t> g2(ggml.size());
    official_to_ggml_mxfp4(c2.data(), s2.data(), nb, g2.data());
    EXPECT_EQ(g2, ggml);
  }
}

// The fast regroup (SSE2 or a word at a time) equals the byte-at-a-time reference, on random
// blocks and on adversarial ones: scales 0 and 255, every qs byte 0x00 / 0x0F / 0xF0 / 0xFF, and
// each of the 256 byte values at every one of the 16 qs positions.
TEST(GgmlMxfp4, FastRegroupEqualsTheScalarReference) {
  std::vector<uint8_t> ggml = random_bytes(448 * kMxfp4BlockBytes, 5);
  for (uint8_t fill : {0x00, 0x0F, 0xF0, 0xFF}) {
    std::vector<uint8_t> blk(kMxfp4BlockBytes, fill);
    blk[0] = fill == 0x00 ? 0 : 255;
    ggml.insert(ggml.end(), blk.begin(), blk.end());
  }
  for (int pos = 0; pos < 16; ++pos)
    for (int v = 0; v < 256; ++v) {
      std::vector<uint8_t> blk(kMxfp4BlockBytes, static_cast<uint8_t>(0x5A ^ pos));
      blk[0] = static_cast<uint8_t>(v);
      blk[static_cast<size_t>(1 + pos)] = static_cast<uint8_t>(v);
      ggml.insert(ggml.end(), blk.begin(), blk.end());
    }
  const int64_t nb = static_cast<int64_t>(ggml.size()) / kMxfp4BlockBytes;
  std::vector<uint8_t> want_c(static_cast<size_t>(nb * 16)), want_s(static_cast<size_t>(nb));
  ggml_mxfp4_to_official_scalar(ggml.data(), nb, want_c.data(), want_s.data());
  std::vector<uint8_t> c(want_c.size()), s(want_s.size());
  ggml_mxfp4_to_official(ggml.data(), nb, c.data(), s.data());
  EXPECT_EQ(c, want_c);
  EXPECT_EQ(s, want_s);
  // In place (codes == ggml), as unpack_ggml_mxfp4 calls it.
  std::vector<uint8_t> g = ggml;
  std::vector<uint8_t> s2(want_s.size());
  ggml_mxfp4_to_official(g.data(), nb, g.data(), s2.data());
  EXPECT_TRUE(std::equal(want_c.begin(), want_c.end(), g.begin()));
  EXPECT_EQ(s2, want_s);
}

// unpack_ggml_mxfp4 regroups in place for every split of a slice between the two buffers: slices
// smaller than one block's 17 bytes of codes, ones whose last blocks straddle, and large ones.
TEST(GgmlMxfp4, UnpackInPlaceEqualsTheReferenceAtEverySize) {
  for (int64_t nb : {1, 2, 3, 16, 17, 18, 33, 100, 1000}) {
    const auto ggml = random_bytes(static_cast<size_t>(nb * kMxfp4BlockBytes), 40 + static_cast<uint32_t>(nb));
    std::vector<uint8_t> want_c(static_cast<size_t>(nb * 16)), want_s(static_cast<size_t>(nb));
    ggml_mxfp4_to_official_scalar(ggml.data(), nb, want_c.data(), want_s.data());
    TensorInfo ci{"c", DType::kI8, Shape{nb, 16}, 0, 0, static_cast<uint64_t>(nb * 16)};
    ci.packing = TensorInfo::Packing::kGgmlMxfp4Codes;
    TensorInfo si{"s", DType::kF8E8M0, Shape{nb, 1}, 0, ci.nbytes, static_cast<uint64_t>(nb)};
    si.packing = TensorInfo::Packing::kGgmlMxfp4Scales;
    std::vector<uint8_t> c(ggml.begin(), ggml.begin() + static_cast<long>(ci.nbytes));
    std::vector<uint8_t> s(ggml.begin() + static_cast<long>(ci.nbytes), ggml.end());
    ASSERT_TRUE(unpack_ggml_mxfp4(ci, si, c.data(), s.data()).ok());
    EXPECT_EQ(c, want_c) << nb << " blocks";
    EXPECT_EQ(s, want_s) << nb << " blocks";
  }
}

TEST(GgmlMxfp4, OneBlockByHand) {
  // Official: value k = code k (k = 0..31 mod 16), element 2i in the low nibble of byte i.
  uint8_t codes[16], scale = 127;
  for (int i = 0; i < 16; ++i) codes[i] = static_cast<uint8_t>(((2 * i) & 15) | (((2 * i + 1) & 15) << 4));
  uint8_t ggml[17];
  official_to_ggml_mxfp4(codes, &scale, 1, ggml);
  EXPECT_EQ(ggml[0], 127);
  // ggml: value j in the low nibble of qs[j], value j + 16 in its high nibble (block_mxfp4).
  for (int j = 0; j < 16; ++j) EXPECT_EQ(ggml[1 + j], (j & 15) | (((j + 16) & 15) << 4)) << j;
}

TEST(GgmlMxfp4, UnpackRegroupsASplitSliceInPlace) {
  const int64_t out = 3, in = 64, nb = out * in / 32;
  const auto ggml = random_bytes(static_cast<size_t>(nb * kMxfp4BlockBytes), 7);
  std::vector<uint8_t> want_c(static_cast<size_t>(nb * 16)), want_s(static_cast<size_t>(nb));
  ggml_mxfp4_to_official(ggml.data(), nb, want_c.data(), want_s.data());
  TensorInfo ci{"layers.0.ffn.experts.0.w1.weight", DType::kI8, Shape{out, in / 2}, 0, 1000, static_cast<uint64_t>(nb * 16)};
  ci.packing = TensorInfo::Packing::kGgmlMxfp4Codes;
  TensorInfo si{"layers.0.ffn.experts.0.w1.scale", DType::kF8E8M0, Shape{out, in / 32}, 0, 1000 + ci.nbytes,
                static_cast<uint64_t>(nb)};
  si.packing = TensorInfo::Packing::kGgmlMxfp4Scales;
  // The two halves in separate buffers, as a store places them.
  std::vector<uint8_t> c(ggml.begin(), ggml.begin() + static_cast<long>(ci.nbytes));
  std::vector<uint8_t> s(ggml.begin() + static_cast<long>(ci.nbytes), ggml.end());
  ASSERT_TRUE(unpack_ggml_mxfp4(ci, si, c.data(), s.data()).ok());
  EXPECT_EQ(c, want_c);
  EXPECT_EQ(s, want_s);
  // Not a pair: refused, naming both.
  TensorInfo plain = si;
  plain.packing = TensorInfo::Packing::kPlain;
  Status bad = unpack_ggml_mxfp4(ci, plain, c.data(), s.data());
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.message().find("w1.scale"), std::string::npos) << bad.message();
}

// ggml's dequantize_row_mxfp4 of the ggml blocks == strata's exact MXFP4 dequantisation
// (kernels::dequant_fp4, the official layout) of the unpacked codes and scales, value for value.
TEST(GgmlMxfp4, ValuesEqualGgmlsDequantizeRowMxfp4) {
  strata::testing::GgmlLibrary g;
  STRATA_REQUIRE_GGML(g);
  using DequantFn = void (*)(const void*, float*, int64_t);
  auto dequant = g.symbol<DequantFn>("dequantize_row_mxfp4");
  ASSERT_NE(dequant, nullptr) << "libggml-base.so has no dequantize_row_mxfp4";
  const int64_t out = 5, in = 256, nb = out * in / 32;
  auto codes = random_bytes(static_cast<size_t>(nb * 16), 11);
  // Every scale code but 255 (NaN in OCP E8M0, 2^127 in ggml's half table; no weight carries it),
  // the subnormal 0 and 1 included.
  std::vector<uint8_t> scales(static_cast<size_t>(nb));
  for (int64_t b = 0; b < nb; ++b) scales[static_cast<size_t>(b)] = static_cast<uint8_t>((b * 37) % 255);
  scales[0] = 0;
  scales[1] = 1;
  std::vector<uint8_t> ggml(static_cast<size_t>(nb * kMxfp4BlockBytes));
  official_to_ggml_mxfp4(codes.data(), scales.data(), nb, ggml.data());
  std::vector<float> want(static_cast<size_t>(out * in)), got(static_cast<size_t>(out * in));
  for (int64_t r = 0; r < out; ++r)
    dequant(ggml.data() + r * (in / 32) * kMxfp4BlockBytes, want.data() + r * in, in);
  kernels::dequant_fp4(kernels::Fp4Weight{codes.data(), scales.data(), out, in}, got.data());
  for (size_t i = 0; i < got.size(); ++i) {
    // Code 8 is -0 in E2M1 and +0 in ggml's int8 table: equal as values, not as bits.
    if (want[i] == 0.0f) {
      EXPECT_EQ(got[i], 0.0f) << i;
      continue;
    }
    EXPECT_EQ(std::bit_cast<uint32_t>(got[i]), std::bit_cast<uint32_t>(want[i])) << "value " << i << ": " << got[i]
                                                                                 << " vs ggml " << want[i];
  }
}

// A GGUF of one ggml MXFP4 tensor, opened as a checkpoint.
Result<std::unique_ptr<Checkpoint>> open_one(const testing::TempDir& d, const std::string& name, Shape shape) {
  GgufWriterOptions wo;
  wo.fsync = false;
  const std::string path = d.file("one.gguf");
  std::filesystem::remove(path);
  STRATA_ASSIGN_OR_RETURN(auto w, GgufWriter::create(path, {{"general.architecture", GgufValue::string("deepseek41")}},
                                                     {GgufTensorDecl{name, GgmlType::kMxfp4, shape}}, wo));
  const std::vector<uint8_t> bytes(static_cast<size_t>(shape.numel() / 32 * 17), 0x11);
  STRATA_RETURN_IF_ERROR(w->write(bytes.data(), bytes.size()));
  STRATA_RETURN_IF_ERROR(w->finish());
  return Checkpoint::open_gguf(path);
}

TEST(GgmlMxfp4, StackedExpertsBindAsOfficialCodesAndScales) {
  testing::TempDir d;
  auto ck = open_one(d, "blk.2.ffn_down_exps.weight", Shape{3, 4, 64});
  ASSERT_TRUE(ck.ok()) << ck.error().to_string();
  const TensorInfo* w = (*ck)->find("layers.2.ffn.experts.1.w2.weight");
  const TensorInfo* s = (*ck)->find("layers.2.ffn.experts.1.w2.scale");
  ASSERT_TRUE(w && s);
  EXPECT_EQ(w->dtype, DType::kI8);
  EXPECT_EQ(w->shape, (Shape{4, 32}));
  EXPECT_EQ(s->dtype, DType::kF8E8M0);
  EXPECT_EQ(s->shape, (Shape{4, 2}));
  EXPECT_EQ(s->offset, w->offset + w->nbytes);          // the two tile the expert's slice
  EXPECT_EQ(w->nbytes + s->nbytes, 4u * 64 / 32 * 17);  // out * in / 32 blocks of 17 bytes
  // Every block 0x11: scale 0x11, codes 1 in every nibble (either order gives 0x11).
  std::vector<uint8_t> c(w->nbytes), sc(s->nbytes);
  ASSERT_TRUE((*ck)->read(*w, c.data()).ok());
  ASSERT_TRUE((*ck)->read(*s, sc.data()).ok());
  EXPECT_EQ(c, std::vector<uint8_t>(c.size(), 0x11));
  EXPECT_EQ(sc, std::vector<uint8_t>(sc.size(), 0x11));
}

TEST(GgmlMxfp4, Mxfp4OutsideTheStackedExpertsIsNamed) {
  testing::TempDir d;
  auto dense = open_one(d, "blk.0.attn_q_a.weight", Shape{4, 64});
  ASSERT_FALSE(dense.ok());
  EXPECT_EQ(dense.error().code(), StatusCode::kNotSupported);
  EXPECT_NE(dense.error().message().find("one.gguf: tensor 'blk.0.attn_q_a.weight'"), std::string::npos)
      << dense.error().message();
  auto flat = open_one(d, "blk.0.ffn_gate_exps.weight", Shape{4, 64});
  ASSERT_FALSE(flat.ok());
  EXPECT_EQ(flat.error().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(flat.error().message().find("'blk.0.ffn_gate_exps.weight'"), std::string::npos) << flat.error().message();
  EXPECT_NE(flat.error().message().find("[n_experts, out, in]"), std::string::npos) << flat.error().message();
  auto scale = open_one(d, "blk.0.ffn_gate_exps.scale", Shape{2, 4, 64});
  ASSERT_FALSE(scale.ok());
  EXPECT_NE(scale.error().message().find("'blk.0.ffn_gate_exps.scale'"), std::string::npos) << scale.error().message();
}

}  // namespace
}  // namespace strata::io
