#include "io/checkpoint.h"

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <nlohmann/json.hpp>

#include "io/ggml_mxfp4.h"
#include "io/json_limits.h"

namespace strata::io {

namespace fs = std::filesystem;

Result<std::unique_ptr<Checkpoint>> Checkpoint::open(const std::string& dir) {
  if (is_gguf_path(dir)) return open_gguf(dir);
  std::error_code ec;
  if (!fs::is_directory(dir, ec))
    return NotFound(dir + ": not a directory (expected a checkpoint directory with config.json and *.safetensors)");
  auto ck = std::unique_ptr<Checkpoint>(new Checkpoint());
  ck->dir_ = dir;

  // Which shard files, and which tensor the index says lives in each.
  std::vector<std::string> shard_names;
  std::map<std::string, std::string> index_map;
  const std::string index_path = (fs::path(dir) / "model.safetensors.index.json").string();
  if (file_exists(index_path)) {
    // The release's index (~100K tensors) is a few MB; 64 MiB and 8 levels bound a forged one.
    STRATA_ASSIGN_OR_RETURN(std::string text, read_file_to_string(index_path, 64u << 20));
    STRATA_RETURN_IF_ERROR(check_json_nesting(text, 8, index_path));
    auto j = nlohmann::json::parse(text, nullptr, false);
    if (j.is_discarded() || !j.is_object()) return Corruption(index_path + ": not a JSON object");
    auto wm = j.find("weight_map");
    if (wm == j.end() || !wm->is_object()) return Corruption(index_path + ": missing object field 'weight_map'");
    for (auto it = wm->begin(); it != wm->end(); ++it) {
      if (!it.value().is_string())
        return Corruption(index_path + ": weight_map['" + it.key() + "'] is not a file name");
      std::string f = it.value().get<std::string>();
      if (f.find('/') != std::string::npos || f.find("..") != std::string::npos)
        return Corruption(index_path + ": weight_map['" + it.key() + "'] = '" + f + "' is not a plain file name");
      index_map[it.key()] = f;
      if (std::find(shard_names.begin(), shard_names.end(), f) == shard_names.end()) shard_names.push_back(f);
    }
    std::sort(shard_names.begin(), shard_names.end());
  } else {
    for (const auto& e : fs::directory_iterator(dir, ec)) {
      if (e.path().extension() == ".safetensors") shard_names.push_back(e.path().filename().string());
    }
    if (ec) return IOError(dir + ": list directory: " + ec.message());
    std::sort(shard_names.begin(), shard_names.end());
  }
  if (shard_names.empty()) return NotFound(dir + ": no *.safetensors files and no model.safetensors.index.json");

  for (size_t s = 0; s < shard_names.size(); ++s) {
    const std::string path = (fs::path(dir) / shard_names[s]).string();
    STRATA_ASSIGN_OR_RETURN(auto file, open_file(path));
    STRATA_ASSIGN_OR_RETURN(auto infos, read_safetensors_header(*file, static_cast<int>(s)));
    for (auto& t : infos) {
      auto [it, inserted] = ck->tensors_.emplace(t.name, t);
      if (!inserted)
        return Corruption(path + ": tensor '" + t.name + "' also appears in " +
                          shard_names[static_cast<size_t>(it->second.shard)]);
    }
    ck->shards_.push_back(std::move(file));
  }
  for (const auto& [name, file] : index_map) {
    auto it = ck->tensors_.find(name);
    if (it == ck->tensors_.end())
      return Corruption(index_path + ": tensor '" + name + "' is indexed in " + file + " but that shard does not hold it");
    if (shard_names[static_cast<size_t>(it->second.shard)] != file)
      return Corruption(index_path + ": tensor '" + name + "' is indexed in " + file + " but found in " +
                        shard_names[static_cast<size_t>(it->second.shard)]);
  }
  return ck;
}

const TensorInfo* Checkpoint::find(const std::string& name) const {
  auto it = tensors_.find(name);
  return it == tensors_.end() ? nullptr : &it->second;
}

Result<uint64_t> checkpoint_fingerprint(const Checkpoint& ck) {
  uint64_t h = 1469598103934665603ull;  // FNV-1a 64
  auto mix = [&](const void* p, size_t n) {
    for (size_t i = 0; i < n; ++i) h = (h ^ static_cast<const uint8_t*>(p)[i]) * 1099511628211ull;
  };
  for (const auto& [name, t] : ck.tensors()) {
    mix(name.data(), name.size() + 1);
    const auto dt = static_cast<uint32_t>(t.dtype);
    mix(&dt, sizeof dt);
    for (int d = 0; d < t.shape.rank; ++d) mix(&t.shape.dims[static_cast<size_t>(d)], sizeof(int64_t));
    mix(&t.nbytes, sizeof t.nbytes);
  }
  std::vector<uint8_t> buf(64 << 10);
  for (int i = 0; i < ck.n_shards(); ++i) {
    const File& f = ck.shard(i);
    const uint64_t n = std::min<uint64_t>(f.size(), buf.size());
    STRATA_RETURN_IF_ERROR(f.read_at(0, n, buf.data()));
    mix(buf.data(), n);
    // 64 blocks of 4 KiB spread evenly over the rest, the last block included.
    constexpr int kSamples = 64;
    const uint64_t block = std::min<uint64_t>(f.size(), 4096);
    for (int k = 1; k <= kSamples; ++k) {
      const uint64_t at = (f.size() - block) / kSamples * static_cast<uint64_t>(k);
      STRATA_RETURN_IF_ERROR(f.read_at(k == kSamples ? f.size() - block : at, block, buf.data()));
      mix(buf.data(), block);
    }
  }
  return h;
}

uint64_t Checkpoint::total_bytes() const {
  uint64_t n = 0;
  for (const auto& [_, t] : tensors_) n += t.nbytes;
  return n;
}

Status Checkpoint::read_stored_range(const TensorInfo& t, uint64_t offset, uint64_t n, void* dst) const {
  if (offset + n > t.nbytes)
    return Internal("tensor '" + t.name + "': read of " + std::to_string(n) + " bytes at " + std::to_string(offset) +
                    " past its " + std::to_string(t.nbytes) + " bytes");
  const File& f = shard(t.shard);
  STRATA_ASSIGN_OR_RETURN(uint64_t now, f.current_size());
  if (now != f.size())
    return Corruption(f.path() + ": shard changed size since load (" + std::to_string(f.size()) + " -> " +
                      std::to_string(now) + " bytes); reload the model");
  Status s = f.read_at(t.offset + offset, static_cast<size_t>(n), dst);
  if (!s.ok()) return s.with_context("tensor '" + t.name + "' (byte " + std::to_string(offset) + " of the tensor)");
  return s;
}

Status Checkpoint::read_range(const TensorInfo& t, uint64_t offset, uint64_t n, void* dst) const {
  if (t.packing == TensorInfo::Packing::kPlain) return read_stored_range(t, offset, n, dst);
  // Half of a ggml MXFP4 slice: read the whole slice, unpack, copy the part asked for.
  const bool is_codes = t.packing == TensorInfo::Packing::kGgmlMxfp4Codes;
  const std::string stem = t.name.substr(0, t.name.rfind('.'));
  const TensorInfo* other = find(stem + (is_codes ? ".scale" : ".weight"));
  if (!other) return Internal("tensor '" + t.name + "': the other half of its ggml MXFP4 slice is missing");
  const TensorInfo& ci = is_codes ? t : *other;
  const TensorInfo& si = is_codes ? *other : t;
  if (offset + n > t.nbytes)
    return Internal("tensor '" + t.name + "': read of " + std::to_string(n) + " bytes at " + std::to_string(offset) +
                    " past its " + std::to_string(t.nbytes) + " bytes");
  std::vector<uint8_t> buf(static_cast<size_t>(ci.nbytes + si.nbytes));
  STRATA_RETURN_IF_ERROR(read_stored_range(ci, 0, ci.nbytes, buf.data()));
  STRATA_RETURN_IF_ERROR(read_stored_range(si, 0, si.nbytes, buf.data() + ci.nbytes));
  STRATA_RETURN_IF_ERROR(unpack_ggml_mxfp4(ci, si, buf.data(), buf.data() + ci.nbytes));
  std::memcpy(dst, buf.data() + (is_codes ? 0 : ci.nbytes) + offset, static_cast<size_t>(n));
  return Status();
}

Status Checkpoint::read(const TensorInfo& t, void* dst) const { return read_range(t, 0, t.nbytes, dst); }

}  // namespace strata::io
