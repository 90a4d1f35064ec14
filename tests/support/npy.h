// Minimal .npy reader for golden fixtures (NumPy format 1.0/2.0, little-endian, C order).
// Supports dtypes <f4, <f8, <i8, <i4, <u4, |u1, |b1; values are returned as the stored type.
#pragma once

#include <cstdint>
#include <cstring>
#include <fstream>
#include <string>
#include <vector>

namespace strata::testing {

struct Npy {
  std::string descr;            // e.g. "<f4"
  std::vector<int64_t> shape;   // outer first
  std::vector<unsigned char> bytes;

  int64_t numel() const {
    int64_t n = 1;
    for (auto d : shape) n *= d;
    return n;
  }
  template <typename T>
  std::vector<T> as() const {
    std::vector<T> v(bytes.size() / sizeof(T));
    std::memcpy(v.data(), bytes.data(), v.size() * sizeof(T));
    return v;
  }
  // Values widened to double whatever the stored dtype.
  std::vector<double> to_f64() const {
    std::vector<double> out;
    const int64_t n = numel();
    out.reserve(n);
    for (int64_t i = 0; i < n; ++i) {
      const unsigned char* p = bytes.data();
      if (descr == "<f4") { float v; std::memcpy(&v, p + 4 * i, 4); out.push_back(v); }
      else if (descr == "<f8") { double v; std::memcpy(&v, p + 8 * i, 8); out.push_back(v); }
      else if (descr == "<i8") { int64_t v; std::memcpy(&v, p + 8 * i, 8); out.push_back(double(v)); }
      else if (descr == "<i4") { int32_t v; std::memcpy(&v, p + 4 * i, 4); out.push_back(v); }
      else if (descr == "<u4") { uint32_t v; std::memcpy(&v, p + 4 * i, 4); out.push_back(v); }
      else if (descr == "|u1" || descr == "|b1") { out.push_back(p[i]); }
    }
    return out;
  }
};

// Reads `path`; returns false (with `err`) when missing or malformed.
inline bool read_npy(const std::string& path, Npy* out, std::string* err) {
  std::ifstream f(path, std::ios::binary);
  if (!f) { *err = "cannot open " + path; return false; }
  char magic[6];
  f.read(magic, 6);
  if (!f || std::memcmp(magic, "\x93NUMPY", 6) != 0) { *err = path + ": not an .npy file"; return false; }
  unsigned char ver[2];
  f.read(reinterpret_cast<char*>(ver), 2);
  uint32_t hlen = 0;
  if (ver[0] == 1) {
    uint16_t h16; f.read(reinterpret_cast<char*>(&h16), 2); hlen = h16;
  } else {
    f.read(reinterpret_cast<char*>(&hlen), 4);
  }
  std::string header(hlen, '\0');
  f.read(header.data(), hlen);
  auto field = [&](const std::string& key) -> std::string {
    auto p = header.find("'" + key + "'");
    if (p == std::string::npos) return "";
    p = header.find(':', p) + 1;
    while (header[p] == ' ') ++p;
    if (header[p] == '\'') { auto e = header.find('\'', p + 1); return header.substr(p + 1, e - p - 1); }
    if (header[p] == '(') { auto e = header.find(')', p); return header.substr(p + 1, e - p - 1); }
    auto e = header.find_first_of(",}", p);
    return header.substr(p, e - p);
  };
  out->descr = field("descr");
  if (field("fortran_order").find("True") != std::string::npos) { *err = path + ": fortran order"; return false; }
  out->shape.clear();
  std::string sh = field("shape");
  size_t i = 0;
  while (i < sh.size()) {
    while (i < sh.size() && (sh[i] == ' ' || sh[i] == ',')) ++i;
    if (i >= sh.size()) break;
    size_t j = i;
    while (j < sh.size() && isdigit(static_cast<unsigned char>(sh[j]))) ++j;
    out->shape.push_back(std::stoll(sh.substr(i, j - i)));
    i = j;
  }
  size_t esize = out->descr.size() >= 3 ? std::stoul(out->descr.substr(2)) : 1;
  size_t nbytes = static_cast<size_t>(out->numel()) * esize;
  out->bytes.resize(nbytes);
  f.read(reinterpret_cast<char*>(out->bytes.data()), nbytes);
  if (!f) { *err = path + ": truncated data"; return false; }
  return true;
}

// The fixtures directory compiled into the tests (../shared/fixtures by default).
inline std::string fixtures_dir() { return STRATA_FIXTURES_DIR; }

}  // namespace strata::testing

// Skips the test (never passes it) when a fixture file is missing.
#define STRATA_REQUIRE_FIXTURE(path)                                                     \
  do {                                                                                   \
    std::ifstream strata_probe_(path);                                                   \
    if (!strata_probe_) GTEST_SKIP() << "fixture missing: " << (path) << " (skipped, not passed)"; \
  } while (0)
