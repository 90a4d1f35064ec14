// model/engram_hash: constants and row ids against the official engram.py outputs.
//
// Fixtures: engram_full_config_vectors.json (real V4.1 config: multipliers, primes, offsets and row ids of
// the first 32 v41-tiny prompt tokens, computed by the official engram.py), v41-tiny/manifest.json
// "engram" (tiny-config constants) and v41-tiny/golden/prefill_engram_row_ids.npy ([S, 2, 12] row ids of
// the whole 197-token prompt). spec: ARCHITECTURE.md §Engram.
#include "model/engram_hash.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "tests/support/npy.h"

namespace strata::model {
namespace {

using nlohmann::json;
using strata::testing::fixtures_dir;

// Parses a JSON file without exceptions; a discarded value on failure.
json load_json(const std::string& path) {
  std::ifstream f(path);
  return json::parse(f, nullptr, false);
}

std::vector<uint32_t> load_token_map(const std::string& path) {
  strata::testing::Npy npy;
  std::string err;
  if (!strata::testing::read_npy(path, &npy, &err) || npy.descr != "<u4") return {};
  return npy.as<uint32_t>();
}

std::vector<int64_t> flat_i64(const json& j) {
  std::vector<int64_t> out;
  if (j.is_array()) {
    for (const json& e : j) {
      std::vector<int64_t> sub = flat_i64(e);
      out.insert(out.end(), sub.begin(), sub.end());
    }
  } else if (j.is_number_integer()) {
    out.push_back(j.get<int64_t>());
  }
  return out;
}

// Concatenation over layers of a per-layer accessor (primes / offsets / multipliers).
template <typename Fn>
std::vector<int64_t> all_layers(const EngramHasher& h, Fn fn) {
  std::vector<int64_t> out;
  for (int l = 0; l < h.n_layers(); ++l) {
    std::span<const int64_t> s = fn(l);
    out.insert(out.end(), s.begin(), s.end());
  }
  return out;
}

// The real DeepSeek-V4.1-Flash Engram config (config.json text_config.engram_*).
EngramHashParams real_params() {
  EngramHashParams p;
  p.layer_ids = {1, 14};
  p.num_embeddings = {384006168, 384016682};
  p.max_ngram_size = 4;
  p.n_heads = 8;
  p.engram_vocab_size = 16000000;
  p.compressed_vocab_size = 99092;
  p.pad_class = 2;  // engram_pad_token_id 2 -> compressed id 2 (fixture pad_compressed_id)
  return p;
}

TEST(EngramHash, RealConfigConstantsAndRowIds) {
  const std::string path = fixtures_dir() + "/engram_full_config_vectors.json";
  STRATA_REQUIRE_FIXTURE(path);
  const json fx = load_json(path);
  ASSERT_FALSE(fx.is_discarded()) << path << ": not JSON";

  EngramHashParams p = real_params();
  ASSERT_EQ(fx["compressed_vocab_size_used_for_multipliers"].get<int64_t>(), p.compressed_vocab_size);
  ASSERT_EQ(flat_i64(fx["expected_prime_sums_engram_num_embeddings"]), p.num_embeddings);
  ASSERT_EQ(fx["pad_compressed_id"].get<int64_t>(), p.pad_class);
  auto hasher = EngramHasher::create(p);
  ASSERT_TRUE(hasher.has_value()) << hasher.error().to_string();
  const EngramHasher& h = *hasher;
  ASSERT_EQ(h.n_layers(), 2);
  ASSERT_EQ(h.n_cols(), 24);

  EXPECT_EQ(h.multiplier_bound(), fx["multiplier_bound"].get<int64_t>());
  EXPECT_EQ(all_layers(h, [&](int l) { return h.multipliers(l); }), flat_i64(fx["multipliers"]));
  EXPECT_EQ(all_layers(h, [&](int l) { return h.primes(l); }), flat_i64(fx["primes"]));
  EXPECT_EQ(all_layers(h, [&](int l) { return h.offsets(l); }), flat_i64(fx["offsets"]));
  EXPECT_EQ(h.prime(1, 3, 2), fx["primes"][1][1][2].get<int64_t>());

  // The fixture's compressed ids are the v41-tiny token map applied to the prompt's first 32 ids.
  std::vector<uint32_t> compressed;
  for (const json& c : fx["compressed_ids_first32"]) compressed.push_back(c.get<uint32_t>());
  const std::string map_path = fixtures_dir() + "/v41-tiny/golden/engram_token_map.npy";
  if (std::ifstream(map_path)) {
    const std::vector<uint32_t> map = load_token_map(map_path);
    ASSERT_FALSE(map.empty()) << map_path;
    std::vector<uint32_t> mapped;
    for (const json& t : fx["token_ids_first32"]) mapped.push_back(map.at(t.get<size_t>()));
    EXPECT_EQ(mapped, compressed);
  }

  std::vector<int64_t> rows(compressed.size() * 2 * 24);
  h.hash_rows(h.new_history(), compressed, rows);
  EXPECT_EQ(rows, flat_i64(fx["row_ids_first32"]));
}

// Tiny config from v41-tiny/checkpoint/config.json; pad class from the tiny token map.
struct Tiny {
  EngramHashParams params;
  std::vector<uint32_t> token_map;
  std::vector<uint32_t> prompt;  // compressed ids of tokens.json
};

bool load_tiny(Tiny* tiny, std::string* err) {
  const std::string dir = fixtures_dir() + "/v41-tiny";
  const json cfg = load_json(dir + "/checkpoint/config.json");
  const json tokens = load_json(dir + "/tokens.json");
  if (cfg.is_discarded() || tokens.is_discarded()) {
    *err = "config.json or tokens.json does not parse";
    return false;
  }
  tiny->token_map = load_token_map(dir + "/golden/engram_token_map.npy");
  if (tiny->token_map.empty()) {
    *err = "engram_token_map.npy unreadable";
    return false;
  }
  const json& tc = cfg["text_config"];
  EngramHashParams& p = tiny->params;
  p.layer_ids = tc["engram_layer_ids"].get<std::vector<int>>();
  p.num_embeddings = tc["engram_num_embeddings"].get<std::vector<int64_t>>();
  p.max_ngram_size = tc["engram_max_ngram_size"].get<int>();
  p.n_heads = tc["engram_n_heads"].get<int>();
  p.engram_vocab_size = tc["engram_vocab_size"].get<int64_t>();
  p.compressed_vocab_size = tc["engram_compressed_vocab_size"].get<int64_t>();
  p.pad_class = tiny->token_map.at(tc["engram_pad_token_id"].get<size_t>());
  for (const json& id : tokens["ids"]) tiny->prompt.push_back(tiny->token_map.at(id.get<size_t>()));
  return true;
}

#define LOAD_TINY(tiny)                                                             \
  STRATA_REQUIRE_FIXTURE(fixtures_dir() + "/v41-tiny/checkpoint/config.json");      \
  STRATA_REQUIRE_FIXTURE(fixtures_dir() + "/v41-tiny/golden/engram_token_map.npy"); \
  Tiny tiny;                                                                        \
  {                                                                                 \
    std::string load_err;                                                           \
    ASSERT_TRUE(load_tiny(&tiny, &load_err)) << load_err;                           \
  }

TEST(EngramHash, TinyConfigConstantsMatchManifest) {
  const std::string manifest_path = fixtures_dir() + "/v41-tiny/manifest.json";
  STRATA_REQUIRE_FIXTURE(manifest_path);
  LOAD_TINY(tiny);
  const json manifest = load_json(manifest_path);
  ASSERT_FALSE(manifest.is_discarded());
  const json& fx = manifest["engram"];

  EXPECT_EQ(static_cast<int64_t>(tiny.params.pad_class), fx["pad_compressed_id"].get<int64_t>());
  auto hasher = EngramHasher::create(tiny.params);
  ASSERT_TRUE(hasher.has_value()) << hasher.error().to_string();
  const EngramHasher& h = *hasher;
  EXPECT_EQ(all_layers(h, [&](int l) { return h.primes(l); }), flat_i64(fx["primes"]));
  EXPECT_EQ(all_layers(h, [&](int l) { return h.offsets(l); }), flat_i64(fx["offsets"]));
  EXPECT_EQ(all_layers(h, [&](int l) { return h.multipliers(l); }), flat_i64(fx["multipliers"]));
}

TEST(EngramHash, TinyPrefillRowIdsMatchGolden) {
  const std::string golden_path = fixtures_dir() + "/v41-tiny/golden/prefill_engram_row_ids.npy";
  STRATA_REQUIRE_FIXTURE(golden_path);
  LOAD_TINY(tiny);
  strata::testing::Npy golden;
  std::string err;
  ASSERT_TRUE(strata::testing::read_npy(golden_path, &golden, &err)) << err;
  ASSERT_EQ(golden.descr, "<i8");

  auto hasher = EngramHasher::create(tiny.params);
  ASSERT_TRUE(hasher.has_value()) << hasher.error().to_string();
  const EngramHasher& h = *hasher;
  const int64_t n_tokens = static_cast<int64_t>(tiny.prompt.size());
  ASSERT_EQ(golden.shape, (std::vector<int64_t>{n_tokens, h.n_layers(), h.n_cols()}));

  std::vector<int64_t> rows(static_cast<size_t>(n_tokens) * h.n_layers() * h.n_cols());
  h.hash_rows(h.new_history(), tiny.prompt, rows);
  const std::vector<int64_t> expected = golden.as<int64_t>();
  ASSERT_EQ(rows.size(), expected.size());
  for (size_t i = 0; i < rows.size(); ++i) {
    ASSERT_EQ(rows[i], expected[i]) << "position " << i / (h.n_layers() * h.n_cols()) << ", layer "
                                    << (i / h.n_cols()) % h.n_layers() << ", column " << i % h.n_cols();
  }
}

std::vector<uint32_t> ids_of(const EngramHistory& history) {
  return std::vector<uint32_t>(history.ids().begin(), history.ids().end());
}

TEST(EngramHash, ChunkedWithHistoryEqualsOneShot) {
  LOAD_TINY(tiny);
  auto hasher = EngramHasher::create(tiny.params);
  ASSERT_TRUE(hasher.has_value());
  const EngramHasher& h = *hasher;
  const size_t per_token = static_cast<size_t>(h.n_layers()) * h.n_cols();
  std::vector<int64_t> one_shot(tiny.prompt.size() * per_token);
  h.hash_rows(h.new_history(), tiny.prompt, one_shot);

  // A prefill chunk shorter than the history, a long one, then single-token decode steps.
  const size_t cuts[] = {0, 2, 120, 121, 122, 150};
  EngramHistory history = h.new_history();
  std::vector<int64_t> chunked;
  for (size_t c = 0; c < std::size(cuts); ++c) {
    const size_t begin = cuts[c];
    const size_t end = c + 1 < std::size(cuts) ? cuts[c + 1] : tiny.prompt.size();
    std::span<const uint32_t> chunk(tiny.prompt.data() + begin, end - begin);
    std::vector<int64_t> out(chunk.size() * per_token);
    h.hash_rows(history, chunk, out);
    history.append(chunk);
    chunked.insert(chunked.end(), out.begin(), out.end());
  }
  EXPECT_EQ(chunked, one_shot);
  // The history ends with the prompt's last three ids, oldest first.
  const std::vector<uint32_t> tail(tiny.prompt.end() - 3, tiny.prompt.end());
  EXPECT_EQ(ids_of(history), tail);
}

TEST(EngramHash, HistoryAppendKeepsNewest) {
  EngramHistory history(3, 7);
  EXPECT_EQ(ids_of(history), (std::vector<uint32_t>{7, 7, 7}));
  const uint32_t a[] = {1};
  history.append(a);
  EXPECT_EQ(ids_of(history), (std::vector<uint32_t>{7, 7, 1}));
  const uint32_t b[] = {2, 3};
  history.append(b);
  EXPECT_EQ(ids_of(history), (std::vector<uint32_t>{1, 2, 3}));
  const uint32_t c[] = {4, 5, 6, 8, 9};
  history.append(c);
  EXPECT_EQ(ids_of(history), (std::vector<uint32_t>{6, 8, 9}));
  history.append(std::span<const uint32_t>());
  EXPECT_EQ(ids_of(history), (std::vector<uint32_t>{6, 8, 9}));
}

TEST(EngramHash, DeadTokenBlocksLookback) {
  auto hasher = EngramHasher::create(real_params());
  ASSERT_TRUE(hasher.has_value());
  const EngramHasher& h = *hasher;
  const uint32_t pad = h.pad_class();
  const uint32_t dead = EngramHasher::kDeadClass;
  const size_t n = static_cast<size_t>(h.n_layers()) * h.n_cols();
  auto hash = [&](std::vector<uint32_t> window) {
    std::vector<int64_t> out(n);
    h.hash_window(window, out);
    return out;
  };
  // A dead token k back turns it and everything older into pad (NgramHashState.forward's `blocked`).
  EXPECT_EQ(hash({11, dead, 33, 44}), hash({11, pad, pad, pad}));
  EXPECT_EQ(hash({11, 22, dead, 44}), hash({11, 22, pad, pad}));
  EXPECT_EQ(hash({dead, 22, 33, 44}), hash({pad, pad, pad, pad}));
  EXPECT_NE(hash({11, 22, 33, 44}), hash({11, 22, 33, pad}));
  // In a chunk: the token after an image span does not look into it.
  const uint32_t tokens[] = {11, dead, 33, 44};
  std::vector<int64_t> rows(4 * n);
  h.hash_rows(h.new_history(), tokens, rows);
  EXPECT_EQ(std::vector<int64_t>(rows.begin() + 2 * n, rows.begin() + 3 * n), hash({33, pad, pad, pad}));
  EXPECT_EQ(std::vector<int64_t>(rows.begin() + 3 * n, rows.end()), hash({44, 33, pad, pad}));
}

TEST(EngramHash, RowIdsStayInsideEachColumnsRange) {
  auto hasher = EngramHasher::create(real_params());
  ASSERT_TRUE(hasher.has_value());
  const EngramHasher& h = *hasher;
  const uint32_t v_max = static_cast<uint32_t>(h.compressed_vocab_size() - 1);
  const std::vector<uint32_t> window = {v_max, v_max - 1, v_max, 0};  // largest products
  std::vector<int64_t> out(static_cast<size_t>(h.n_layers()) * h.n_cols());
  h.hash_window(window, out);
  for (int l = 0; l < h.n_layers(); ++l) {
    for (int c = 0; c < h.n_cols(); ++c) {
      const int64_t row = out[static_cast<size_t>(l) * h.n_cols() + c];
      EXPECT_GE(row, h.offsets(l)[c]);
      EXPECT_LT(row, h.offsets(l)[c] + h.primes(l)[c]);
    }
  }
}

TEST(EngramHash, IsPrime) {
  // 2^61-1 and 2^64-59 (the largest prime below 2^64) are prime; 561 is a Carmichael number, 3215031751 a
  // strong pseudoprime to bases 2, 3, 5, 7 and 3825123056546413051 one to every base up to 23.
  const uint64_t primes[] = {
      2, 3, 5, 37, 41, 601, 16000057, 2147483647ull, 2305843009213693951ull, 18446744073709551557ull};
  const uint64_t composites[] = {
      0, 1, 4, 561, 16000059, 3215031751ull, 3825123056546413051ull, 18446744073709551615ull};
  for (uint64_t p : primes) EXPECT_TRUE(is_prime_u64(p)) << p;
  for (uint64_t c : composites) EXPECT_FALSE(is_prime_u64(c)) << c;
}

TEST(EngramHash, BadParamsGiveClearErrors) {
  auto expect_error = [](const EngramHashParams& p, const std::vector<std::string>& needles) {
    auto r = EngramHasher::create(p);
    ASSERT_FALSE(r.has_value());
    EXPECT_EQ(r.error().code(), StatusCode::kInvalidArgument);
    for (const std::string& needle : needles) {
      EXPECT_NE(r.error().message().find(needle), std::string::npos)
          << "'" << needle << "' not in: " << r.error().message();
    }
  };
  EngramHashParams p = real_params();
  p.num_embeddings[1] += 1;
  expect_error(p, {"engram_num_embeddings[1] (layer 14) is 384016683, expected 384016682", "hash primes"});

  p = real_params();
  p.layer_ids.clear();
  p.num_embeddings.clear();
  expect_error(p, {"engram_layer_ids is empty"});

  p = real_params();
  p.layer_ids[0] = -1;
  expect_error(p, {"negative layer id -1"});

  p = real_params();
  p.num_embeddings.pop_back();
  expect_error(p, {"engram_num_embeddings has 1 entries, expected 2"});

  p = real_params();
  p.max_ngram_size = 1;
  expect_error(p, {"engram_max_ngram_size=1"});

  p = real_params();
  p.n_heads = 0;
  expect_error(p, {"engram_n_heads=0"});

  p = real_params();
  p.engram_vocab_size = 0;
  expect_error(p, {"engram_vocab_size=0"});

  p = real_params();
  p.compressed_vocab_size = 0;
  expect_error(p, {"engram_compressed_vocab_size=0"});

  p = real_params();
  p.pad_class = 99092;
  expect_error(p, {"pad class", "99092"});
}

}  // namespace
}  // namespace strata::model
