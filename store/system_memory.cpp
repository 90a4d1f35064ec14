#include "store/system_memory.h"

#include <cstdlib>
#include <sstream>
#include <string>

#include "io/file.h"

namespace strata::store {

namespace {

// Value of "key:" in a /proc text file of `key: value [kB]` lines, or -1.
int64_t proc_field(const std::string& text, const std::string& key) {
  std::istringstream in(text);
  std::string line;
  while (std::getline(in, line)) {
    if (line.compare(0, key.size(), key) != 0 || line.size() <= key.size() || line[key.size()] != ':') continue;
    char* end = nullptr;
    const long long v = std::strtoll(line.c_str() + key.size() + 1, &end, 10);
    if (end == line.c_str() + key.size() + 1 || v < 0) return -1;
    return line.find("kB", static_cast<size_t>(end - line.c_str())) != std::string::npos ? v * 1024 : v;
  }
  return -1;
}

}  // namespace

Result<uint64_t> available_memory_bytes() {
  STRATA_ASSIGN_OR_RETURN(std::string text, io::read_file_to_string("/proc/meminfo", 1 << 20));
  const int64_t v = proc_field(text, "MemAvailable");
  if (v < 0) return Corruption("/proc/meminfo: no MemAvailable line (give --ram-budget explicitly)");
  return static_cast<uint64_t>(v);
}

uint64_t process_read_bytes() {
  auto text = io::read_file_to_string("/proc/self/io", 1 << 16);
  if (!text.ok()) return 0;
  const int64_t v = proc_field(*text, "read_bytes");
  return v < 0 ? 0 : static_cast<uint64_t>(v);
}

}  // namespace strata::store
