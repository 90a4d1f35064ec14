#include "cli/dump_observer.h"

#include <cstring>
#include <filesystem>

#include "cli/npy_writer.h"

namespace strata::cli {

std::string DumpObserver::file_name(std::string_view name, int layer) const {
  std::string f = phase_ + "_";
  if (layer >= 0) f += "L" + std::to_string(layer) + "_";
  f += name;
  return f + ".npy";
}

void DumpObserver::append(const std::string& file, const std::string& descr, size_t elem, std::vector<int64_t> shape,
                          const void* data, size_t n) {
  auto it = arrays_.find(file);
  const bool stacked = phase_ != "prefill";  // decode steps and drafts
  if (stacked) {
    // One decode step: stack along a new first axis (shape [1, ...] rows become [steps, ...]).
    if (!shape.empty() && shape[0] == 1) shape.erase(shape.begin());
    shape.insert(shape.begin(), 1);
  }
  if (it == arrays_.end() || !stacked) {
    Array a{descr, shape, {}, elem};
    a.bytes.resize(n * elem);
    if (n) std::memcpy(a.bytes.data(), data, n * elem);
    arrays_[file] = std::move(a);
    return;
  }
  Array& a = it->second;
  a.shape[0] += 1;
  const size_t off = a.bytes.size();
  a.bytes.resize(off + n * elem);
  if (n) std::memcpy(a.bytes.data() + off, data, n * elem);
}

void DumpObserver::tensor(std::string_view name, int layer, std::span<const float> data, std::vector<int64_t> shape) {
  append(file_name(name, layer), "<f4", 4, std::move(shape), data.data(), data.size());
}

void DumpObserver::ids(std::string_view name, int layer, std::span<const int64_t> data, std::vector<int64_t> shape) {
  const std::string f = file_name(name, layer);
  if (name == "indexer_topk") {
    // Golden layout: int32 compressed positions + offset (S in prefill, window_size in decode), -1 kept.
    std::vector<int32_t> v(data.size());
    for (size_t i = 0; i < data.size(); ++i) v[i] = data[i] < 0 ? -1 : static_cast<int32_t>(data[i] + offset_);
    append(f, "<i4", 4, std::move(shape), v.data(), v.size());
  } else if (name == "candidate_mask") {
    std::vector<uint8_t> v(data.size());
    for (size_t i = 0; i < data.size(); ++i) v[i] = data[i] ? 1 : 0;
    append(f, "|b1", 1, std::move(shape), v.data(), v.size());
  } else {
    append(f, "<i8", 8, std::move(shape), data.data(), data.size());
  }
}

Status DumpObserver::write(const std::string& dir) const {
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec) return IOError(dir + ": create directory: " + ec.message());
  for (const auto& [name, a] : arrays_)
    STRATA_RETURN_IF_ERROR(write_npy((std::filesystem::path(dir) / name).string(), a.descr, a.shape, a.bytes.data(), a.elem));
  return Status();
}

}  // namespace strata::cli
