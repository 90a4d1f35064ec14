// model/numpy_rng: bit-exact against NumPy.
//
// Every expected number below was produced with numpy 1.24.2 (/usr/bin/python3), e.g.
//   np.random.SeedSequence(seed).pool, .generate_state(8, np.uint32)
//   np.random.default_rng(seed).bit_generator.state['state']   (state, inc)
//   np.random.PCG64(seed).random_raw(3)
//   np.random.default_rng(seed).integers(low, high, size=n, dtype=np.int64)
// The multiplier check against the real-config fixture lives in engram_hash_test.cpp.
#include "model/numpy_rng.h"

#include <gtest/gtest.h>

#include <array>
#include <cstdint>
#include <vector>

namespace strata::model {
namespace {

unsigned __int128 u128(uint64_t hi, uint64_t lo) { return (static_cast<unsigned __int128>(hi) << 64) | lo; }

struct SeedCase {
  uint64_t seed;
  std::array<uint32_t, 4> pool;
  std::array<uint32_t, 8> state_words;
  uint64_t state_hi, state_lo, inc_hi, inc_lo;
  std::array<uint64_t, 3> raw;
};

// numpy 1.24.2: SeedSequence pool / generate_state(8, uint32), PCG64 state after seeding, random_raw(3).
// clang-format off
const SeedCase kSeedCases[] = {
    {0,
     {4265667335u, 1328953910u, 1320288413u, 3365567143u},
     {2968811710u, 3677149159u, 745650761u, 2884920346u, 2642120001u, 549907821u, 574372308u, 742431198u},
     0x1aa1b5345996452dull, 0x09585eb7a69561e3ull, 0x418ddadb3af71a82ull, 0x588133bc447873a9ull,
     {11749869230777074271ull, 4976686463289251617ull, 755828109848996024ull}},
    {1,
     {2704793989u, 232979121u, 2500767352u, 1423772289u},
     {1835504127u, 1731038949u, 1320224556u, 2330041505u, 321059914u, 1226144109u, 2879408573u, 3503041500u},
     0x9c5b484bfedb756cull, 0x2a6e7d6f320fbc7eull, 0x922af2da2645f895ull, 0xa19857b95740937bull,
     {9441442522235856127ull, 17532960557476522086ull, 2659275481604167885ull}},
    {10007,  // the multiplier seed of Engram layer 1
     {4053860749u, 2814774274u, 4246066442u, 62394930u},
     {2329349383u, 2010327604u, 3091877797u, 2571032073u, 3362360905u, 3589894878u, 3169929438u, 2105142190u},
     0x3b34af7676e8ddd5ull, 0x556a026c98a77d27ull, 0xabf2e5bd90d31c92ull, 0xfaf3d75d79e291bdull,
     {15187255322829266483ull, 959186003677246517ull, 7126631698937927467ull}},
    {4294967301ull,  // 2^32 + 5: two entropy words
     {1943228144u, 3666975122u, 1548130432u, 663351627u},
     {3796490668u, 4190198742u, 909250263u, 2986482496u, 3873240889u, 2475209855u, 2909026785u, 1592502489u},
     0x2931d0c6dbee79bfull, 0xece8058fe085a345ull, 0x271168ffcdb9ee72ull, 0xbdd751b35ac873c3ull,
     {14281546376153053393ull, 8683300866460616067ull, 12836726618003871680ull}},
    {18446744073709551615ull,  // 2^64 - 1
     {4210289908u, 4195322160u, 3925383783u, 237228537u},
     {2458692877u, 2931597649u, 2251873402u, 295448644u, 1508262567u, 465245526u, 3905202422u, 2808812003u},
     0xddc419442aebde79ull, 0x4d8b0a3b048acdb0ull, 0x37762aacb3cc854full, 0x4ed623c7d18951edull,
     {12544278110101001871ull, 15593249672699323225ull, 136562751618339402ull}},
};
// clang-format on

TEST(NumpyRng, SeedSequencePoolAndState) {
  for (const SeedCase& c : kSeedCases) {
    SCOPED_TRACE(c.seed);
    EXPECT_EQ(seed_sequence_pool(c.seed), c.pool);
    const std::vector<uint32_t> words = seed_sequence_generate_state(c.seed, 8);
    EXPECT_EQ(words, std::vector<uint32_t>(c.state_words.begin(), c.state_words.end()));
  }
}

TEST(NumpyRng, Pcg64SeedingAndRawOutput) {
  for (const SeedCase& c : kSeedCases) {
    SCOPED_TRACE(c.seed);
    Pcg64 gen = Pcg64::from_seed(c.seed);
    EXPECT_TRUE(gen.state() == u128(c.state_hi, c.state_lo));
    EXPECT_TRUE(gen.inc() == u128(c.inc_hi, c.inc_lo));
    for (uint64_t expected : c.raw) EXPECT_EQ(gen.next_uint64(), expected);
  }
}

TEST(NumpyRng, Next32SplitsOneDrawLowHalfFirst) {
  Pcg64 a = Pcg64::from_seed(0);
  Pcg64 b = Pcg64::from_seed(0);
  const uint64_t x = a.next_uint64();
  EXPECT_EQ(b.next_uint32(), static_cast<uint32_t>(x));
  EXPECT_EQ(b.next_uint32(), static_cast<uint32_t>(x >> 32));
  EXPECT_EQ(b.next_uint32(), static_cast<uint32_t>(a.next_uint64()));
}

struct IntegersCase {
  uint64_t seed;
  int64_t low, high;
  std::vector<int64_t> expected;  // default_rng(seed).integers(low, high, size=len, dtype=np.int64)
};

TEST(NumpyRng, IntegersMatchesNumpy) {
  const IntegersCase cases[] = {
      // Engram layer 1 of the real config (B for V_c = 99092): 64-bit Lemire.
      {10007, 0, 46539438283891, {38316048023122, 2419938046656, 17979836159674, 36993668729195}},
      // Small ranges: 32-bit Lemire on buffered halves.
      {0, 0, 1000, {850, 636, 511, 269, 307, 40, 75}},
      {1, -5, 5, {-1, 0, 2, 4, -5, -4}},
      // Range exactly 2^32 (inclusive range 2^32-1: 64-bit path) and 2^32-1 (plain next_uint32 path).
      {42, 0, 4294967296, {383329928, 3324115917, 2811363265}},
      {42, 0, 4294967295, {383329927, 3324115916, 2811363264, 1884968544, 1859786275}},
      // Full int64 range minus one, and a single-value range (no draws).
      {7, INT64_MIN, INT64_MAX, {2307604057237572234, 7327301329031162516, 5085503372737050977}},
      {7, 0, 1, {0, 0, 0}},
      {123, 10, int64_t{1} << 62, {3146792547389340278, 248205639907728210, 1016230544287890093, 850264901591196425}},
      {3, 0, INT64_MAX, {789974133212406139, 2184191404571879930}},
      // Ranges with a 1/4 rejection rate: numpy consumed 17 u64 for these 12 (64-bit) and 15 u32 (32-bit).
      {99,
       0,
       3 * (int64_t{1} << 61),
       {3500481880065316089, 3909037766146263662, 3541193510882511171, 6725127449529328718, 3931117592615139549,
        3835849074008683142, 3234107559103465097, 6436362986249961071, 2140548689831615489, 2705304838181316168,
        2421238572780762075, 6476396064652344541}},
      {99,
       0,
       3 * (int64_t{1} << 29),
       {1543247097, 815019448, 1220282990, 910143778, 286394691, 824498364, 1517069390, 1565815752, 990370831,
        505231581, 915284639, 1548513926}},
  };
  for (const IntegersCase& c : cases) {
    SCOPED_TRACE(::testing::Message() << "seed " << c.seed << " [" << c.low << ", " << c.high << ")");
    auto got = numpy_default_rng_integers(c.seed, c.low, c.high, static_cast<int64_t>(c.expected.size()));
    ASSERT_TRUE(got.has_value()) << got.error().to_string();
    EXPECT_EQ(*got, c.expected);
  }
}

TEST(NumpyRng, RejectionConsumesExtraDraws) {
  // 12 values at a 1/4 rejection rate took 17 raw draws in numpy (state compared via PCG64.advance).
  Pcg64 gen = Pcg64::from_seed(99);
  std::vector<uint64_t> out(12);
  bounded_uint64_fill(gen, 0, 3 * (uint64_t{1} << 61) - 1, out.data(), 12);
  Pcg64 ref = Pcg64::from_seed(99);
  for (int i = 0; i < 17; ++i) (void)ref.next_uint64();
  EXPECT_TRUE(gen.state() == ref.state());
}

TEST(NumpyRng, IntegersRejectsBadArguments) {
  auto empty_range = numpy_default_rng_integers(0, 5, 5, 3);
  ASSERT_FALSE(empty_range.has_value());
  EXPECT_EQ(empty_range.error().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(empty_range.error().message().find("low >= high"), std::string::npos);
  EXPECT_FALSE(numpy_default_rng_integers(0, 0, 5, -1).has_value());
  auto none = numpy_default_rng_integers(0, 0, 5, 0);
  ASSERT_TRUE(none.has_value());
  EXPECT_TRUE(none->empty());
}

}  // namespace
}  // namespace strata::model
