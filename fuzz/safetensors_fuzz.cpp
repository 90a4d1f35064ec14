// Fuzz target: safetensors shard headers (io/safetensors.h).
//
// The input is a whole shard file: u64 little-endian header length, the JSON header, the data
// region. It goes through read_safetensors_header over an in-memory File, then once more straight
// into parse_safetensors_header with the file's size taken from the input's last 8 bytes (so sizes
// near 2^64, far beyond any input, are tried too). Whatever is accepted must keep the promises of
// the header comment: known dtype, byte size = the offset span = numel * dtype size, every tensor
// inside the data region of the file, no two tensors sharing bytes.
#include <algorithm>
#include <cstdint>
#include <vector>

#include "core/dtype.h"
#include "fuzz/fuzz_support.h"
#include "io/safetensors.h"

namespace {

using strata::io::TensorInfo;

void check_accepted(const std::vector<TensorInfo>& tensors, uint64_t data_start, uint64_t file_size) {
  std::vector<const TensorInfo*> order;
  for (const TensorInfo& t : tensors) {
    STRATA_FUZZ_CHECK(t.offset >= data_start, t.name + ": tensor starts inside the header");
    STRATA_FUZZ_CHECK(t.offset <= file_size && t.nbytes <= file_size - t.offset, t.name + ": tensor past the end");
    STRATA_FUZZ_CHECK(t.shape.rank >= 0 && t.shape.rank <= strata::kMaxDims, t.name + ": rank");
    // numel * dtype size without overflow: the product of the dims must equal nbytes / size.
    const uint64_t es = strata::dtype_size(t.dtype);
    STRATA_FUZZ_CHECK(es > 0 && t.nbytes % es == 0, t.name + ": nbytes not a whole number of elements");
    unsigned __int128 numel = 1;
    for (int i = 0; i < t.shape.rank; ++i) {
      STRATA_FUZZ_CHECK(t.shape.dims[static_cast<size_t>(i)] >= 0, t.name + ": negative dim");
      numel *= static_cast<unsigned __int128>(t.shape.dims[static_cast<size_t>(i)]);
      if (numel > (static_cast<unsigned __int128>(1) << 64)) break;
    }
    STRATA_FUZZ_CHECK(numel == t.nbytes / es, t.name + ": nbytes != numel * dtype size");
    order.push_back(&t);
  }
  std::sort(order.begin(), order.end(), [](const TensorInfo* a, const TensorInfo* b) { return a->offset < b->offset; });
  for (size_t i = 1; i < order.size(); ++i)
    STRATA_FUZZ_CHECK(order[i - 1]->offset + order[i - 1]->nbytes <= order[i]->offset ||
                          order[i - 1]->nbytes == 0 || order[i]->nbytes == 0,
                      order[i - 1]->name + " and " + order[i]->name + " overlap");
}

uint64_t load_u64(const uint8_t* p) {
  uint64_t v = 0;
  for (int i = 7; i >= 0; --i) v = (v << 8) | p[i];
  return v;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  // 1. The whole file through the File interface.
  strata::fuzz::MemFile file(data, size, "fuzz.safetensors");
  auto r = strata::io::read_safetensors_header(file, 3);
  if (r.ok()) {
    check_accepted(*r, 8 + load_u64(data), size);
    for (const TensorInfo& t : *r) STRATA_FUZZ_CHECK(t.shard == 3, "shard index");
  }

  // 2. The header text straight into the parser, with a claimed file size from the last 8 bytes.
  if (size >= 16) {
    const uint64_t n = std::min<uint64_t>(load_u64(data), size - 16);
    const std::string header(reinterpret_cast<const char*>(data) + 8, static_cast<size_t>(n));
    const uint64_t data_start = 8 + n;
    const uint64_t file_size = load_u64(data + size - 8);
    auto p = strata::io::parse_safetensors_header("fuzz.json", header, data_start, file_size, 0);
    if (p.ok()) {
      STRATA_FUZZ_CHECK(data_start <= file_size, "data start past the end accepted");
      check_accepted(*p, data_start, file_size);
    }
  }
  return 0;
}
