// Sparse attention with sinks and the indexer: every level equals kernels::ref bit for bit over
// shapes with head/dim/entry tails (every tail of the AVX2 score and output blocks), entries
// scattered in memory (as window ring + compressed cache pointers are), and thread counts; the
// reference matches a double-precision definition; the fast top-k equals the reference selection,
// ties included.
#include "kernels/attention.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <random>

#include "core/thread_pool.h"
#include "kernels/indexer.h"
#include "kernels/quant.h"
#include "tests/kernels/ops_test_util.h"

namespace strata::kernels {
namespace {

class AttentionLevel : public testing::OpsLevel {};

struct AttnCase {
  int heads;
  int64_t dim, entries;
};

TEST_P(AttentionLevel, MatchesRef) {
  std::mt19937 rng(8);
  // Two and three threads: head vectors that divide among them (one pass) and that do not (48 heads
  // in 3 vectors of 16 on 2 threads, 64 in 4 on 3: scores by entries, outputs by heads).
  ThreadPool pool2(2), pool3(3);
  for (const AttnCase c : {AttnCase{1, 16, 1}, AttnCase{4, 64, 9}, AttnCase{3, 40, 33}, AttnCase{17, 24, 5},
                           AttnCase{64, 512, 70}, AttnCase{8, 7, 3}, AttnCase{5, 96, 0}, AttnCase{64, 64, 640},
                           AttnCase{48, 128, 452}}) {
    // Entries live in one pool in shuffled order, like ring slots and selected compressed groups.
    std::vector<float> store = testing::random_floats(static_cast<size_t>((c.entries + 3) * c.dim), rng, 1.0f);
    std::vector<const float*> ent;
    for (int64_t j = 0; j < c.entries; ++j) ent.push_back(store.data() + ((j * 7) % (c.entries + 3)) * c.dim);
    std::vector<float> q = testing::random_floats(static_cast<size_t>(c.heads * c.dim), rng, 0.5f);
    std::vector<float> sinks = testing::random_floats(static_cast<size_t>(c.heads), rng, 2.0f);
    std::vector<float> out(static_cast<size_t>(c.heads * c.dim), 123.0f), out_r(out.size());
    const float scale = 1.0f / std::sqrt(static_cast<float>(c.dim));
    SparseAttentionArgs a{q.data(), c.heads, c.dim, ent.data(), c.entries, sinks.data(), scale, out.data()};
    for (ThreadPool* p : {static_cast<ThreadPool*>(nullptr), &pool2, &pool3}) {
      sparse_attention(a, p, level());
      SparseAttentionArgs r = a;
      r.out = out_r.data();
      ref::sparse_attention(r);
      STRATA_EXPECT_BITS_EQ(out.data(), out_r.data(), c.heads * c.dim,
                            "attention heads=" + std::to_string(c.heads) + " dim=" + std::to_string(c.dim) +
                                " entries=" + std::to_string(c.entries) +
                                " threads=" + std::to_string(p ? p->n_threads() : 1));
    }
  }
}

TEST(Attention, RefMatchesDefinition) {
  std::mt19937 rng(9);
  const int H = 3;
  const int64_t D = 8, m = 5;
  std::vector<float> e = testing::random_floats(static_cast<size_t>(m * D), rng), q = testing::random_floats(H * D, rng);
  std::vector<const float*> ent;
  for (int64_t j = 0; j < m; ++j) ent.push_back(e.data() + j * D);
  const float sinks[H] = {0.5f, -1.0f, 3.0f};
  std::vector<float> out(static_cast<size_t>(H * D));
  ref::sparse_attention(SparseAttentionArgs{q.data(), H, D, ent.data(), m, sinks, 0.35f, out.data()});
  for (int h = 0; h < H; ++h) {
    std::vector<double> s(static_cast<size_t>(m));
    double den = std::exp(static_cast<double>(sinks[h]));
    for (int64_t j = 0; j < m; ++j) {
      double d = 0;
      for (int64_t k = 0; k < D; ++k) d += static_cast<double>(q[h * D + k]) * e[j * D + k];
      s[static_cast<size_t>(j)] = std::exp(d * 0.35);
      den += s[static_cast<size_t>(j)];
    }
    for (int64_t k = 0; k < D; ++k) {
      double o = 0;
      for (int64_t j = 0; j < m; ++j) o += s[static_cast<size_t>(j)] / den * e[j * D + k];
      EXPECT_NEAR(out[static_cast<size_t>(h * D + k)], o, 1e-5) << h << " " << k;
    }
  }
}

TEST_P(AttentionLevel, IndexScoresMatchRef) {
  std::mt19937 rng(10);
  ThreadPool pool(3);
  struct Case {
    int heads;
    int64_t dim, keys, stride;
  };
  for (const Case c : {Case{1, 16, 1, 16}, Case{4, 32, 40, 32}, Case{3, 24, 17, 30}, Case{32, 128, 1000, 128},
                       Case{9, 128, 33, 140}, Case{32, 128, 0, 128}}) {
    // FP4-rounded q and keys, as the model feeds them.
    std::vector<float> q = testing::random_floats(static_cast<size_t>(c.heads * c.dim), rng, 2.0f);
    std::vector<float> k = testing::random_floats(static_cast<size_t>(std::max<int64_t>(1, c.keys) * c.stride), rng, 2.0f);
    if (c.dim % 32 == 0) {
      fp4_quant_e8m0_inplace(q.data(), static_cast<int64_t>(q.size()), 32);
      if (c.stride % 32 == 0) fp4_quant_e8m0_inplace(k.data(), static_cast<int64_t>(k.size()), 32);
    }
    std::vector<float> w = testing::random_floats(static_cast<size_t>(c.heads), rng);
    std::vector<float> s(static_cast<size_t>(c.keys) + 1, -7.0f), sr(s.size(), -7.0f);
    IndexScoreArgs a{q.data(), w.data(), c.heads, c.dim, k.data(), c.stride, c.keys, s.data()};
    for (ThreadPool* p : {static_cast<ThreadPool*>(nullptr), &pool}) {
      index_scores(a, p, level());
      IndexScoreArgs r = a;
      r.scores = sr.data();
      ref::index_scores(r);
      STRATA_EXPECT_BITS_EQ(s.data(), sr.data(), c.keys + 1, "index_scores keys=" + std::to_string(c.keys));
    }
  }
}

// Packed index keys decode bit for bit as the reference at every level: every byte value in every
// nibble position, every E8M0 scale code (0 = 2^-127 subnormal, 255 = NaN), dims 32..512.
TEST_P(AttentionLevel, DequantIndexKeyMatchesRef) {
  std::mt19937 rng(12);
  for (int64_t dim : {32, 64, 128, 512}) {
    for (int rep = 0; rep < 64; ++rep) {
      std::vector<uint8_t> row(static_cast<size_t>(dim / 2 + dim / 32));
      for (size_t i = 0; i < row.size(); ++i) row[i] = static_cast<uint8_t>(rep * 37 + i * 11 + rng());
      for (int64_t b = 0; b < dim / 32; ++b) row[static_cast<size_t>(dim / 2 + b)] = static_cast<uint8_t>((rep * 4 + b) % 256);
      std::vector<float> got(static_cast<size_t>(dim) + 1, -7.0f), want(got.size(), -7.0f);
      dequant_index_key(row.data(), dim, got.data(), level());
      ref::dequant_index_key(row.data(), dim, want.data());
      STRATA_EXPECT_BITS_EQ(got.data(), want.data(), dim + 1, "dequant_index_key dim=" + std::to_string(dim));
    }
  }
}

TEST(Indexer, DequantIndexKeyRefDefinition) {
  // Codes 0x21 -> (0.5, 1.0), 0x9F -> (-6, -0.5) (sign bit 3 of each nibble); scale code 128 = 2.
  uint8_t row[16 + 1] = {0x21, 0x9F};
  row[16] = 128;
  float out[32];
  ref::dequant_index_key(row, 32, out);
  EXPECT_EQ(out[0], 1.0f);
  EXPECT_EQ(out[1], 2.0f);
  EXPECT_EQ(out[2], -12.0f);
  EXPECT_EQ(out[3], -1.0f);
  EXPECT_EQ(out[4], 0.0f);
}

TEST(Indexer, RefDefinition) {
  const float q[4] = {1.0f, -2.0f, 0.5f, 0.5f};  // 2 heads x 2
  const float w[2] = {2.0f, -1.0f};
  const float k[4] = {3.0f, 1.0f, -4.0f, 2.0f};
  float s[2];
  ref::index_scores(IndexScoreArgs{q, w, 2, 2, k, 2, 2, s});
  EXPECT_EQ(s[0], 2.0f * std::max(1.0f, 0.0f) + -1.0f * 2.0f);  // dots 1, 2
  EXPECT_EQ(s[1], 2.0f * 0.0f + -1.0f * 0.0f);                  // dots -8, -1
}

TEST(TopK, FastEqualsRefIncludingTiesAndInfinities) {
  std::mt19937 rng(12);
  for (int64_t n : {0, 1, 5, 100, 513, 4096, 40000}) {
    for (int k : {1, 7, 512, 2048}) {
      for (int variant = 0; variant < 5; ++variant) {
        std::vector<float> s(static_cast<size_t>(n));
        std::uniform_int_distribution<int> small(-20, 20);
        std::normal_distribution<float> normal(0.0f, 100.0f);
        for (auto& v : s) {
          switch (variant) {
            case 0: v = normal(rng); break;
            case 1: v = static_cast<float>(small(rng)) * 0.5f; break;  // many exact ties
            case 2: v = rng() % 3 == 0 ? -INFINITY : normal(rng); break;
            case 3: v = rng() % 2 ? 0.0f : -0.0f; break;  // signed zeros tie
            default: v = normal(rng); break;
          }
        }
        if (variant == 4 && n > 0)  // the fast path's sample positions score highest: its bound misses
          for (int64_t i = 0; i < 2048; ++i) s[static_cast<size_t>(i * std::max<int64_t>(1, n / 2048) % n)] = 1e6f + i;
        std::vector<int32_t> a(static_cast<size_t>(k)), b(static_cast<size_t>(k));
        const int ma = topk_ascending(s.data(), n, k, a.data());
        const int mb = ref::topk_ascending(s.data(), n, k, b.data());
        EXPECT_EQ(ma, mb) << "n=" << n << " k=" << k << " variant=" << variant;
        EXPECT_EQ(a, b) << "n=" << n << " k=" << k << " variant=" << variant;
      }
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Levels, AttentionLevel, ::testing::ValuesIn(kAllKernelLevels), testing::level_param_name);

}  // namespace
}  // namespace strata::kernels
