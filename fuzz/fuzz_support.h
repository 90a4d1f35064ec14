// Shared pieces of the libFuzzer targets (fuzz/README.md): an in-memory io::File, the tiny V4.1
// tokenizer the chat and request targets render with, and a check macro that crashes the fuzzer
// (so libFuzzer saves the input) when a property of the code under test does not hold.
//
// Every target is deterministic (no clocks, no random_device, no threads) and touches no files
// except the read-only data under fuzz/data/ at start-up (or, for the session target, the tiny
// fixture checkpoint).
#pragma once

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <memory>
#include <sstream>
#include <string>
#include <string_view>

#include "core/status.h"
#include "io/file.h"
#include "tokenizer/tokenizer.h"

namespace strata::fuzz {

// A property the fuzzer must never break: prints it and aborts (libFuzzer records the input).
#define STRATA_FUZZ_CHECK(cond, msg)                                                          \
  do {                                                                                        \
    if (!(cond)) {                                                                            \
      std::fprintf(stderr, "FUZZ CHECK FAILED %s:%d: %s: %s\n", __FILE__, __LINE__, #cond,   \
                   std::string(msg).c_str());                                                 \
      std::abort();                                                                           \
    }                                                                                         \
  } while (0)

// A read-only File over bytes held in memory (the fuzz input). Reads past the end are the
// short-read kCorruption a real file gives.
class MemFile final : public io::File {
 public:
  MemFile(const uint8_t* data, size_t size, std::string path = "fuzz.bin")
      : data_(data), size_(size), path_(std::move(path)) {}
  Status read_at(uint64_t offset, size_t n, void* dst) const override {
    if (offset > size_ || n > size_ - offset)
      return Corruption(path_ + ": short read of " + std::to_string(n) + " bytes at offset " + std::to_string(offset));
    if (n > 0) std::memcpy(dst, data_ + offset, n);
    return Status();
  }
  uint64_t size() const override { return size_; }
  const std::string& path() const override { return path_; }
  Result<uint64_t> current_size() const override { return static_cast<uint64_t>(size_); }

 private:
  const uint8_t* data_;
  size_t size_;
  std::string path_;
};

// Contents of a file under fuzz/data/ (STRATA_FUZZ_DATA_DIR); aborts with a message when missing.
inline std::string read_data_file(const std::string& name) {
  const std::string path = std::string(STRATA_FUZZ_DATA_DIR) + "/" + name;
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    std::fprintf(stderr, "fuzz: cannot read %s\n", path.c_str());
    std::abort();
  }
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

// The tiny V4.1-shaped tokenizer (fuzz/data/tiny_v41_tokenizer.json, made by
// fuzz/make_tiny_tokenizer.py): 659 vocab entries, 400 merges, every V4.1 role/markup token.
// Built once; lives for the whole process (never reported as a leak: it stays reachable).
inline const tokenizer::Tokenizer& tiny_tokenizer() {
  static const tokenizer::Tokenizer* tok = [] {
    auto t = tokenizer::Tokenizer::from_json(read_data_file("tiny_v41_tokenizer.json"), "tiny_v41_tokenizer.json");
    if (!t.ok()) {
      std::fprintf(stderr, "fuzz: tiny tokenizer: %s\n", t.error().to_string().c_str());
      std::abort();
    }
    return new tokenizer::Tokenizer(std::move(t).value());
  }();
  return *tok;
}

inline std::string_view as_text(const uint8_t* data, size_t size) {
  return std::string_view(reinterpret_cast<const char*>(data), size);
}

}  // namespace strata::fuzz
