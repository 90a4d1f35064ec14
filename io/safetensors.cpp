#include "io/safetensors.h"

#include <algorithm>
#include <nlohmann/json.hpp>
#include <unordered_set>

#include "io/json_limits.h"

namespace strata::io {

namespace {

// SAX handler that records the first repeated key of the top-level object.
struct DuplicateKeyScan : nlohmann::json_sax<nlohmann::json> {
  int depth = 0;
  bool ok = true;
  std::unordered_set<std::string> names;
  std::string duplicate;
  bool null() override { return true; }
  bool boolean(bool) override { return true; }
  bool number_integer(number_integer_t) override { return true; }
  bool number_unsigned(number_unsigned_t) override { return true; }
  bool number_float(number_float_t, const string_t&) override { return true; }
  bool string(string_t&) override { return true; }
  bool binary(binary_t&) override { return true; }
  bool start_object(std::size_t) override { return ++depth, true; }
  bool end_object() override { return --depth, true; }
  bool start_array(std::size_t) override { return ++depth, true; }
  bool end_array() override { return --depth, true; }
  bool key(string_t& k) override {
    if (depth == 1 && duplicate.empty() && !names.insert(k).second) duplicate = k;
    return true;
  }
  bool parse_error(std::size_t, const std::string&, const nlohmann::detail::exception&) override {
    ok = false;
    return false;
  }
};

}  // namespace

Result<std::vector<TensorInfo>> parse_safetensors_header(const std::string& what, const std::string& header_json,
                                                         uint64_t data_start, uint64_t file_size, int shard) {
  STRATA_RETURN_IF_ERROR(check_json_nesting(header_json, kMaxSafetensorsHeaderDepth, what + ": safetensors header"));
  // JSON objects may repeat a key and the parser keeps the last: two entries for one tensor name
  // would let two readers of the same shard see different weights. Every top-level key is counted
  // by a SAX pass; nlohmann's callback parser would do it in one pass but rescans the parent object
  // at every nested object's end (quadratic: 22% of a warm load of a 40k-tensor checkpoint).
  DuplicateKeyScan scan;
  if (!nlohmann::json::sax_parse(header_json, &scan) || !scan.ok)
    return Corruption(what + ": safetensors header is not valid JSON, or not a JSON object");
  if (!scan.duplicate.empty())
    return Corruption(what + ": tensor '" + scan.duplicate + "' appears twice in the safetensors header");
  auto j = nlohmann::json::parse(header_json, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.is_object())
    return Corruption(what + ": safetensors header is not valid JSON, or not a JSON object");
  if (data_start > file_size)
    return Corruption(what + ": header ends at byte " + std::to_string(data_start) + ", past the end of the file (" +
                      std::to_string(file_size) + " bytes)");
  const uint64_t region = file_size - data_start;  // bytes of the data region
  std::vector<TensorInfo> out;
  out.reserve(j.size());
  for (auto it = j.begin(); it != j.end(); ++it) {
    const std::string& name = it.key();
    if (name == "__metadata__") continue;
    const auto& e = it.value();
    auto bad = [&](const std::string& m) { return Corruption(what + ": tensor '" + name + "': " + m); };
    if (!e.is_object()) return bad("header entry is not an object");
    auto dt = e.find("dtype");
    auto sh = e.find("shape");
    auto off = e.find("data_offsets");
    if (dt == e.end() || !dt->is_string()) return bad("missing string field 'dtype'");
    if (sh == e.end() || !sh->is_array()) return bad("missing array field 'shape'");
    if (off == e.end() || !off->is_array() || off->size() != 2) return bad("'data_offsets' must be [begin, end]");
    TensorInfo t;
    t.name = name;
    t.shard = shard;
    auto parsed = dtype_from_name(dt->get<std::string>());
    if (!parsed) return bad("unknown dtype '" + dt->get<std::string>() + "'");
    t.dtype = *parsed;
    if (sh->size() > static_cast<size_t>(kMaxDims))
      return bad("rank " + std::to_string(sh->size()) + " > " + std::to_string(kMaxDims));
    for (const auto& d : *sh) {
      if (!d.is_number_integer() || d.get<int64_t>() < 0) return bad("shape entries must be non-negative integers");
      if (d.get<int64_t>() > (int64_t{1} << 40)) return bad("implausible dimension " + d.dump());
      t.shape.dims[t.shape.rank++] = d.get<int64_t>();
    }
    for (const auto& o : *off)
      if (!o.is_number_unsigned()) return bad("data_offsets must be non-negative integers");
    const uint64_t b = (*off)[0].get<uint64_t>(), en = (*off)[1].get<uint64_t>();
    if (en < b) return bad("data_offsets end < begin");
    // The byte size in checked arithmetic: each dimension is at most 2^40 but their product is not
    // bounded (a U8 [2^32, 2^32] tensor with offsets [0, 0] passed as 0 bytes; found by fuzzing).
    uint64_t want = dtype_size(t.dtype);
    for (int d = 0; d < t.shape.rank; ++d)
      if (__builtin_mul_overflow(want, static_cast<uint64_t>(t.shape.dims[d]), &want))
        return bad("shape " + t.shape.to_string() + " has more bytes than fit in 64 bits");
    if (en - b != want)
      return bad("data_offsets span " + std::to_string(en - b) + " bytes, expected " + std::to_string(want) +
                 " for " + std::string(dtype_name(t.dtype)) + " " + t.shape.to_string());
    // Compared against the data region's size, never as data_start + offset: offsets near 2^64
    // would wrap that sum below the file size and point into the header or below byte 0
    // (issue 13 item 1).
    if (en > region)
      return bad("data ends at byte " + std::to_string(en) + " of the data region, past the end of the file (" +
                 std::to_string(region) + " data bytes after the " + std::to_string(data_start) +
                 "-byte header; truncated shard?)");
    t.offset = data_start + b;
    t.nbytes = want;
    out.push_back(std::move(t));
  }
  // The data region must be covered exactly, as the safetensors format requires ("entirely indexed,
  // no holes"): two tensors sharing bytes would alias each other's weights, and a gap (a header
  // length one byte short shifts every tensor) would run on misaligned bytes (issue 13 item 7).
  std::vector<const TensorInfo*> by_offset;
  for (const auto& t : out) by_offset.push_back(&t);
  std::sort(by_offset.begin(), by_offset.end(), [](const TensorInfo* a, const TensorInfo* b) {
    return a->offset != b->offset ? a->offset < b->offset : a->nbytes < b->nbytes;
  });
  uint64_t covered = data_start;  // absolute end of the bytes indexed so far
  const TensorInfo* prev = nullptr;
  for (const TensorInfo* t : by_offset) {
    if (t->offset < covered)
      return Corruption(what + ": tensors '" + prev->name + "' and '" + t->name + "' overlap (data_offsets share bytes)");
    if (t->offset > covered)
      return Corruption(what + ": bytes " + std::to_string(covered - data_start) + ".." +
                        std::to_string(t->offset - data_start) + " of the data region belong to no tensor (before '" +
                        t->name + "'); the header length or data_offsets are wrong");
    covered = t->offset + t->nbytes;
    prev = t;
  }
  if (covered != file_size)
    return Corruption(what + ": the tensors cover " + std::to_string(covered - data_start) + " of the " +
                      std::to_string(region) + " bytes of the data region; the header length (" +
                      std::to_string(data_start - 8) + ") or data_offsets are wrong, or the file has trailing bytes");
  return out;
}

Result<std::vector<TensorInfo>> read_safetensors_header(const File& file, int shard) {
  const std::string& what = file.path();
  if (file.size() < 8) return Corruption(what + ": " + std::to_string(file.size()) + " bytes, too small for a safetensors header");
  unsigned char len_bytes[8];
  STRATA_RETURN_IF_ERROR(file.read_at(0, 8, len_bytes));
  uint64_t n = 0;
  for (int i = 7; i >= 0; --i) n = (n << 8) | len_bytes[i];
  if (n > kMaxSafetensorsHeader || n > file.size() - 8)
    return Corruption(what + ": safetensors header length " + std::to_string(n) + " exceeds the file (" +
                      std::to_string(file.size()) + " bytes) or the limit");
  std::string header(static_cast<size_t>(n), '\0');
  STRATA_RETURN_IF_ERROR(file.read_at(8, header.size(), header.data()));
  return parse_safetensors_header(what, header, 8 + n, file.size(), shard);
}

}  // namespace strata::io
