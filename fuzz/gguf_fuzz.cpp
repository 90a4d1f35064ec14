// Fuzz target: GGUF headers (io/gguf.h).
//
// The input is a whole GGUF file. It goes through parse_gguf over an in-memory File, and through
// GgufModel::open_files as a one-file model (which adds the split.* key checks). Whatever is
// accepted must keep the promises of the header comment: every tensor is of a supported type with
// 1..4 dims, shape == ne reversed, nbytes == ggml_nbytes, its offset is aligned inside the data
// section and its bytes inside the file, no two tensors share bytes, names and keys are unique, the
// alignment is a power of two, and the model can read each tensor's first and last byte.
#include <algorithm>
#include <bit>
#include <cstdint>
#include <set>
#include <vector>

#include "fuzz/fuzz_support.h"
#include "io/gguf.h"

namespace {

using strata::io::GgufFile;
using strata::io::GgufTensorInfo;

void check_accepted(const GgufFile& g, uint64_t size) {
  STRATA_FUZZ_CHECK(g.file_size == size, "file size");
  STRATA_FUZZ_CHECK(g.alignment > 0 && std::has_single_bit(g.alignment), "alignment not a power of two");
  STRATA_FUZZ_CHECK(g.data_offset <= size, "data section past the end");
  std::set<std::string> keys;
  for (const auto& [k, v] : g.metadata) {
    STRATA_FUZZ_CHECK(!k.empty() && keys.insert(k).second, "empty or repeated key '" + k + "'");
    (void)v.to_string();
    if (v.is_array())
      for (uint64_t i = 0; i < std::min<uint64_t>(v.array_size(), 4); ++i) (void)v.uint_at(i), (void)v.float_at(i);
  }
  std::set<std::string> names;
  std::vector<const GgufTensorInfo*> order;
  for (const GgufTensorInfo& t : g.tensors) {
    STRATA_FUZZ_CHECK(!t.name.empty() && names.insert(t.name).second, "empty or repeated name '" + t.name + "'");
    STRATA_FUZZ_CHECK(strata::io::ggml_type_info(static_cast<uint32_t>(t.type)).has_value(), t.name + ": type");
    STRATA_FUZZ_CHECK(!t.ne.empty() && t.ne.size() <= 4 && t.shape.rank == static_cast<int>(t.ne.size()),
                      t.name + ": rank");
    for (size_t d = 0; d < t.ne.size(); ++d)
      STRATA_FUZZ_CHECK(t.ne[d] >= 0 && t.shape.dims[t.ne.size() - 1 - d] == t.ne[d], t.name + ": shape != ne reversed");
    auto nb = strata::io::ggml_nbytes(t.type, t.ne, t.name);
    STRATA_FUZZ_CHECK(nb.ok() && *nb == t.nbytes, t.name + ": nbytes");
    STRATA_FUZZ_CHECK(t.offset >= g.data_offset && (t.offset - g.data_offset) % g.alignment == 0,
                      t.name + ": offset not aligned inside the data section");
    STRATA_FUZZ_CHECK(t.offset <= size && t.nbytes <= size - t.offset, t.name + ": data past the end");
    if (t.nbytes > 0) order.push_back(&t);
  }
  std::sort(order.begin(), order.end(),
            [](const GgufTensorInfo* a, const GgufTensorInfo* b) { return a->offset < b->offset; });
  for (size_t i = 1; i < order.size(); ++i)
    STRATA_FUZZ_CHECK(order[i - 1]->offset + order[i - 1]->nbytes <= order[i]->offset,
                      order[i - 1]->name + " and " + order[i]->name + " overlap");
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  strata::fuzz::MemFile file(data, size, "fuzz.gguf");
  auto g = strata::io::parse_gguf(file, 0);
  if (g.ok()) check_accepted(*g, size);

  std::vector<std::unique_ptr<strata::io::File>> files;
  files.push_back(std::make_unique<strata::fuzz::MemFile>(data, size, "fuzz-00001-of-00001.gguf"));
  auto m = strata::io::GgufModel::open_files(std::move(files));
  if (m.ok()) {
    STRATA_FUZZ_CHECK(g.ok(), "the model accepted a file parse_gguf refused");
    STRATA_FUZZ_CHECK((*m)->tensors().size() == g->tensors.size(), "tensor count");
    for (const auto& [name, t] : (*m)->tensors()) {
      if (t.nbytes == 0) continue;
      uint8_t b = 0;
      STRATA_FUZZ_CHECK((*m)->read_range(t, 0, 1, &b).ok() && (*m)->read_range(t, t.nbytes - 1, 1, &b).ok(),
                        name + ": its bytes cannot be read");
    }
  }
  return 0;
}
