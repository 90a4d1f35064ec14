// Small file helpers shared by tests.
#pragma once

#include <fstream>
#include <sstream>
#include <string>

namespace strata::testing {

// The whole file as bytes ("" when it cannot be opened).
inline std::string read_all(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

// Writes `data` to `path`, replacing it.
inline void write_all(const std::string& path, const std::string& data) {
  std::ofstream f(path, std::ios::binary);
  f.write(data.data(), static_cast<std::streamsize>(data.size()));
}

}  // namespace strata::testing
