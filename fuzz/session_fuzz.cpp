// Fuzz target: session files (runtime/session_file.h, load_session over an in-memory File).
//
// A session belongs to a model, so the target loads the v41-tiny fixture checkpoint once at start-up
// (STRATA_FIXTURES_DIR/v41-tiny/checkpoint, or $STRATA_FUZZ_TINY_CHECKPOINT), one thread.
//
// Input layout: byte 0 = mode, then the session file.
//   mode bit 0  fix the header up before loading: model identity, payload length, payload and
//               header checksums are rewritten to match, so mutations reach the record parser
//               (without it almost every mutation stops at a checksum)
//   mode bit 1  after a successful load, decode one token (id from the last input byte) on the
//               loaded session: a file that loads must leave caches the forward pass can run on
// Properties: an accepted file gives a valid session whose token count equals n_past, whose logits
// are empty or vocab-sized, and on which a decode step neither crashes nor fails internally.
//
// Seeds: STRATA_FUZZ_SESSION_SEEDS=DIR ./session_fuzz writes valid session files of the tiny model
// (fresh, 5 and 40 tokens, logits dropped to keep them small) into DIR and exits; scripts/fuzz.sh
// never sets it (fuzz/corpus/session/ holds the result).
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <memory>
#include <string>
#include <vector>

#include "fuzz/fuzz_support.h"
#include "model/model.h"
#include "runtime/session.h"
#include "runtime/session_file.h"
#include "tokenizer/compressed_vocab.h"
#include "tokenizer/tokenizer.h"

namespace {

using namespace strata;

// The identity the fuzz inputs carry (any fixed value: nothing here hashes the checkpoint).
constexpr runtime::ModelIdentity kId{0x5354524154414655ull, 0x5a5a46555a5a3031ull};
model::Model* g_model = nullptr;  // reachable for the whole run (not a leak)

std::string checkpoint_dir() {
  if (const char* e = std::getenv("STRATA_FUZZ_TINY_CHECKPOINT")) return e;
  return std::string(STRATA_FIXTURES_DIR) + "/v41-tiny/checkpoint";
}

[[noreturn]] void die(const std::string& m) {
  std::fprintf(stderr, "session_fuzz: %s\n", m.c_str());
  std::exit(2);
}

void put_u64(uint8_t* p, uint64_t v) { std::memcpy(p, &v, 8); }

void write_seeds(const std::string& dir) {
  std::filesystem::create_directories(dir);
  std::vector<int32_t> ids;
  for (int i = 0; i < 40; ++i) ids.push_back(100 + 37 * i);
  int k = 0;
  for (size_t n : {size_t{0}, size_t{5}, size_t{40}}) {
    runtime::Session s(*g_model);
    if (n > 0 && !s.append(std::span<const int32_t>(ids.data(), n), nullptr, 16).ok()) die("append failed");
    // Drop the last logits (vocab_size floats, 517 KB for the tiny model) to keep the seed small.
    runtime::Session small(*g_model, s.tokens(), std::move(s.cache()), {}, s.replayed());
    const std::string path = dir + "/session_" + std::to_string(n) + ".strata";
    if (Status st = runtime::save_session(small, kId, path); !st.ok()) die(st.to_string());
    std::ifstream in(path, std::ios::binary);
    std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    for (char mode : {'\x00', '\x01', '\x03'}) {
      std::ofstream o(dir + "/seed_" + std::to_string(k++), std::ios::binary);
      o.put(mode);
      o.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
    }
    std::filesystem::remove(path);
  }
  std::fprintf(stderr, "session_fuzz: wrote %d seeds to %s\n", k, dir.c_str());
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int* /*argc*/, char*** /*argv*/) {
  const std::string dir = checkpoint_dir();
  if (!std::filesystem::exists(dir + "/config.json"))
    die("the tiny fixture checkpoint is missing: " + dir + " (set STRATA_FUZZ_TINY_CHECKPOINT)");
  auto tok = tokenizer::Tokenizer::load(dir + "/tokenizer.json");
  if (!tok.ok()) die(tok.error().to_string());
  auto cv = tokenizer::build_compressed_vocab(*tok);
  if (!cv.ok()) die(cv.error().to_string());
  model::ModelOptions opt;
  opt.n_threads = 1;
  auto m = model::Model::load(dir, model::CompressedVocabMap{std::move(cv->map), cv->n_classes}, opt);
  if (!m.ok()) die(m.error().to_string());
  g_model = std::move(*m).release();
  if (const char* seeds = std::getenv("STRATA_FUZZ_SESSION_SEEDS")) {
    write_seeds(seeds);
    std::exit(0);
  }
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const uint8_t mode = data[0];
  std::vector<uint8_t> file(data + 1, data + size);
  if ((mode & 1) && file.size() >= 64) {
    put_u64(&file[16], kId.config_hash);
    put_u64(&file[24], kId.tensors_hash);
    put_u64(&file[32], file.size() - 64);
    put_u64(&file[40], runtime::xxh64(file.data() + 64, file.size() - 64));
    put_u64(&file[56], runtime::xxh64(file.data(), 56));
  }
  fuzz::MemFile f(file.data(), file.size(), "fuzz.strata");
  auto r = runtime::load_session(*g_model, kId, f);
  if (!r.ok()) {
    STRATA_FUZZ_CHECK(!r.error().message().empty(), "an error without a message");
    return 0;
  }
  runtime::Session& s = *r;
  const model::ModelConfig& c = g_model->config();
  STRATA_FUZZ_CHECK(s.valid(), "loaded session not valid");
  STRATA_FUZZ_CHECK(static_cast<int64_t>(s.tokens().size()) == s.n_past(), "tokens != n_past");
  STRATA_FUZZ_CHECK(s.last_logits().empty() || static_cast<int64_t>(s.last_logits().size()) == c.vocab_size,
                    "logits size");
  if ((mode & 2) && s.n_past() < 256) {
    const int32_t next[1] = {static_cast<int32_t>(data[size - 1]) * 97};
    // Crafted cache bytes may hold NaN/Inf, which a model may refuse with an error; what must not
    // happen is a crash, an out-of-bounds access or an internal error.
    Status st = s.append(next, nullptr);
    STRATA_FUZZ_CHECK(st.ok() || st.code() != StatusCode::kInternal, "decode after load: " + st.to_string());
    if (st.ok())
      STRATA_FUZZ_CHECK(s.n_past() == static_cast<int64_t>(s.tokens().size()), "tokens != n_past after decode");
  }
  return 0;
}
