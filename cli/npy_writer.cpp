#include "cli/npy_writer.h"

#include <cstring>

#include "io/file.h"

namespace strata::cli {

Status write_npy(const std::string& path, const std::string& descr, const std::vector<int64_t>& shape, const void* data,
                 size_t elem_size) {
  std::string sh = "(";
  int64_t n = 1;
  for (size_t i = 0; i < shape.size(); ++i) {
    sh += std::to_string(shape[i]);
    if (shape.size() == 1 || i + 1 < shape.size()) sh += ",";
    if (i + 1 < shape.size()) sh += " ";
    n *= shape[i];
  }
  sh += ")";
  std::string header = "{'descr': '" + descr + "', 'fortran_order': False, 'shape': " + sh + ", }";
  const size_t unpadded = 10 + header.size() + 1;
  header.append((64 - unpadded % 64) % 64, ' ');
  header += '\n';
  std::string out = "\x93NUMPY";
  out += '\x01';
  out += '\x00';
  const uint16_t hl = static_cast<uint16_t>(header.size());
  out += static_cast<char>(hl & 0xFF);
  out += static_cast<char>(hl >> 8);
  out += header;
  const size_t bytes = static_cast<size_t>(n) * elem_size;
  const size_t off = out.size();
  out.resize(off + bytes);
  if (bytes) std::memcpy(out.data() + off, data, bytes);
  return io::write_file_atomic(path, out.data(), out.size());
}

}  // namespace strata::cli
