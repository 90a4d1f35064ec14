// Packed KV storage: the row codecs decode to exactly the reference's fake-quantised values (the
// kernels::*_inplace functions, bit for bit, on random rows and edge cases), the byte layouts of
// the spec, the 890 B/token of the real config, and PagedRows copy-on-write sharing.
#include "model/kv_cache.h"

#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "core/dtype.h"
#include "kernels/quant.h"
#include "tests/support/files.h"
#include "tests/support/npy.h"

namespace strata::model {
namespace {

// Rows with the shapes the caches see: normal values at several scales, plus zeros, tiny values,
// huge values (saturation), single spikes and exact format boundaries.
std::vector<std::vector<float>> test_rows(int64_t n) {
  std::mt19937 rng(1234);
  std::vector<std::vector<float>> rows;
  for (float sd : {1e-6f, 1e-3f, 0.05f, 1.0f, 7.0f, 300.0f, 1e5f}) {
    for (int r = 0; r < 40; ++r) {
      std::normal_distribution<float> d(0.0f, sd);
      std::vector<float> v(static_cast<size_t>(n));
      for (auto& x : v) x = d(rng);
      rows.push_back(v);
    }
  }
  rows.push_back(std::vector<float>(static_cast<size_t>(n), 0.0f));
  std::vector<float> spike(static_cast<size_t>(n), 1e-4f);
  spike[3] = -1000.0f;
  rows.push_back(spike);
  std::vector<float> exact(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) exact[static_cast<size_t>(i)] = strata::kE2M1Values[i % 16] * std::ldexp(1.0f, static_cast<int>(i % 7) - 3);
  rows.push_back(exact);
  std::vector<float> neg_zero(static_cast<size_t>(n), -0.0f);
  neg_zero[0] = 1e-30f;
  rows.push_back(neg_zero);
  return rows;
}

void expect_bits_equal(const std::vector<float>& a, const std::vector<float>& b, const char* what, size_t row) {
  ASSERT_EQ(a.size(), b.size());
  for (size_t i = 0; i < a.size(); ++i)
    ASSERT_EQ(std::bit_cast<uint32_t>(a[i]), std::bit_cast<uint32_t>(b[i]))
        << what << " row " << row << " element " << i << ": " << a[i] << " vs " << b[i];
}

TEST(KvRowCodec, WindowRowEqualsActQuantBitForBit) {
  for (int64_t n : {32, 64, 128, 512, 4096}) {
    auto rows = test_rows(n);
    for (size_t r = 0; r < rows.size(); ++r) {
      std::vector<float> want = rows[r];
      kernels::act_quant_fp8_inplace(want.data(), n, 32);
      std::vector<uint8_t> bytes(static_cast<size_t>(window_row_bytes(n)));
      encode_window_row(rows[r].data(), n, bytes.data());
      std::vector<float> got(static_cast<size_t>(n));
      decode_window_row(bytes.data(), n, got.data());
      expect_bits_equal(got, want, "window", r);
    }
  }
}

TEST(KvRowCodec, CompressedRowEqualsFp4E4m3BitForBit) {
  for (int64_t n : {16, 64, 128, 512}) {
    auto rows = test_rows(n);
    for (size_t r = 0; r < rows.size(); ++r) {
      std::vector<float> want = rows[r];
      kernels::fp4_quant_e4m3_inplace(want.data(), n, 16);
      std::vector<uint8_t> bytes(static_cast<size_t>(compressed_row_bytes(n)));
      encode_compressed_row(rows[r].data(), n, bytes.data());
      std::vector<float> got(static_cast<size_t>(n));
      decode_compressed_row(bytes.data(), n, got.data());
      expect_bits_equal(got, want, "compressed", r);
    }
  }
}

TEST(KvRowCodec, IndexKeyRowEqualsFp4E8m0BitForBit) {
  for (int64_t n : {32, 64, 128}) {
    auto rows = test_rows(n);
    for (size_t r = 0; r < rows.size(); ++r) {
      std::vector<float> want = rows[r];
      kernels::fp4_quant_e8m0_inplace(want.data(), n, 32);
      std::vector<uint8_t> bytes(static_cast<size_t>(index_key_row_bytes(n)));
      encode_index_key_row(rows[r].data(), n, bytes.data());
      std::vector<float> got(static_cast<size_t>(n));
      decode_index_key_row(bytes.data(), n, got.data());
      expect_bits_equal(got, want, "index key", r);
    }
  }
}

TEST(KvRowCodec, ByteLayoutsOfTheSpec) {
  EXPECT_EQ(compressed_row_bytes(512), 288);  // 256 B of E2M1 + 32 E4M3 scales
  EXPECT_EQ(index_key_row_bytes(128), 68);    // 64 B of E2M1 + 4 ue8m0 scales
  EXPECT_EQ(window_row_bytes(512), 528);      // 512 E4M3 + 16 ue8m0 scales
  // Even element in the low nibble, scales after the codes.
  std::vector<float> x(16, 0.0f);
  x[0] = 6.0f;   // code 7 (with scale 1)
  x[1] = -0.5f;  // code 9
  std::vector<uint8_t> b(static_cast<size_t>(compressed_row_bytes(16)));
  encode_compressed_row(x.data(), 16, b.data());
  EXPECT_EQ(b[0], 0x97);
  EXPECT_EQ(strata::e4m3_to_f32(b[8]), 1.0f);
}

TEST(KvFootprint, RealConfigIs890BytesPerToken) {
  const std::string p = testing::fixtures_dir() + "/real-config/config.json";
  STRATA_REQUIRE_FIXTURE(p);
  auto c = ModelConfig::parse(testing::read_all(p), p);
  ASSERT_TRUE(c.ok()) << c.error().to_string();
  ASSERT_TRUE(c->validate().ok());
  const KvFootprint f = kv_footprint(*c);
  EXPECT_DOUBLE_EQ(f.global_bytes_per_token, 890.0);
  EXPECT_DOUBLE_EQ(kv_bytes_per_token(*c), 890.0);
  EXPECT_EQ(f.sources, (std::vector<int>{2, 8, 14, 20}));
  // 40 rings of 128 x 528 B; a 200K-token session holds ~178 MB of global KV.
  EXPECT_EQ(f.window_bytes, 40 * 128 * 528);
  EXPECT_NEAR(static_cast<double>(f.bytes_at(200000) - f.window_bytes - f.state_bytes), 178e6, 0.1e6);
}

TEST(PagedRows, AppendAndReadAcrossPages) {
  PagedRows r(100);
  ASSERT_GE(r.rows_per_page(), 16);
  const int64_t n = r.rows_per_page() * 3 + 5;
  for (int64_t i = 0; i < n; ++i) std::memset(r.append_row(), static_cast<int>(i & 0xFF), 100);
  EXPECT_EQ(r.size(), n);
  EXPECT_EQ(r.n_pages(), 4);
  EXPECT_EQ(r.rows_in_page(3), 5);
  for (int64_t i = 0; i < n; ++i) EXPECT_EQ(r.row(i)[99], static_cast<uint8_t>(i & 0xFF)) << i;
  EXPECT_EQ(r.used_bytes(), static_cast<uint64_t>(n * 100));
}

TEST(PagedRows, CopiesShareFullPagesAndCopyTheSharedTail) {
  PagedRows a(64);
  const int64_t per = a.rows_per_page();
  for (int64_t i = 0; i < per + 3; ++i) std::memset(a.append_row(), 1, 64);
  PagedRows b = a;  // snapshot
  EXPECT_EQ(a.page(0), b.page(0));
  EXPECT_EQ(a.page(1), b.page(1));
  std::memset(a.append_row(), 2, 64);  // writes into the shared tail: a gets its own copy
  EXPECT_EQ(a.page(0), b.page(0));
  EXPECT_NE(a.page(1), b.page(1));
  std::memset(b.append_row(), 3, 64);  // b is now the only holder of the old tail page
  EXPECT_EQ(a.size(), per + 4);
  EXPECT_EQ(b.size(), per + 4);
  EXPECT_EQ(a.row(per + 3)[0], 2);
  EXPECT_EQ(b.row(per + 3)[0], 3);
  for (int64_t i = 0; i < per + 3; ++i) {
    EXPECT_EQ(a.row(i)[5], 1);
    EXPECT_EQ(b.row(i)[5], 1);
  }
}

}  // namespace
}  // namespace strata::model
