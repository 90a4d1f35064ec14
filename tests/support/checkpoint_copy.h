// Copies the v41-tiny fixture checkpoint into a test directory with its safetensors header or
// config edited, for tests of bad checkpoints.
#pragma once

#include <cstdint>
#include <cstring>
#include <filesystem>
#include <functional>
#include <nlohmann/json.hpp>
#include <string>

#include "tests/support/files.h"
#include "tests/support/tiny_model.h"

namespace strata::testing {

// Copies the tiny checkpoint into `dst`, letting `edit_header` change the safetensors header JSON
// (data offsets are relative to the data start, so they stay valid whatever the header's length)
// and `edit_config` the config. `edit_data` (optional) may change the data region's bytes, given
// the (edited) header.
inline void copy_tiny(const std::string& dst, const std::function<void(nlohmann::json&)>& edit_header,
                      const std::function<void(nlohmann::json&)>& edit_config = nullptr,
                      const std::function<void(const nlohmann::json&, std::string&)>& edit_data = nullptr) {
  const std::string src = tiny_dir() + "/checkpoint";
  std::filesystem::copy_file(src + "/tokenizer.json", dst + "/tokenizer.json");
  auto cfg = nlohmann::json::parse(read_all(src + "/config.json"));
  if (edit_config) edit_config(cfg);
  write_all(dst + "/config.json", cfg.dump(2));
  const std::string st = read_all(src + "/model.safetensors");
  uint64_t n = 0;
  std::memcpy(&n, st.data(), 8);
  auto header = nlohmann::json::parse(st.substr(8, n));
  if (edit_header) edit_header(header);
  std::string h = header.dump();
  h.append((8 - h.size() % 8) % 8, ' ');
  uint64_t hn = h.size();
  std::string out(8, '\0');
  std::memcpy(out.data(), &hn, 8);
  out += h;
  std::string data = st.substr(8 + n);
  if (edit_data) edit_data(header, data);
  out += data;
  write_all(dst + "/model.safetensors", out);
}

// copy_tiny with tensor `name` removed from the header and its bytes from the data region (later
// tensors move down), so the shard stays well-formed: a checkpoint that lacks the tensor.
inline void copy_tiny_without(const std::string& dst, const std::string& name) {
  uint64_t begin = 0, end = 0;
  copy_tiny(
      dst,
      [&](nlohmann::json& h) {
        begin = h[name]["data_offsets"][0].get<uint64_t>();
        end = h[name]["data_offsets"][1].get<uint64_t>();
        h.erase(name);
        for (auto& [key, entry] : h.items()) {
          if (key == "__metadata__") continue;
          auto& o = entry["data_offsets"];
          if (o[0].get<uint64_t>() >= end) o = {o[0].get<uint64_t>() - (end - begin), o[1].get<uint64_t>() - (end - begin)};
        }
      },
      nullptr, [&](const nlohmann::json&, std::string& data) { data.erase(begin, end - begin); });
}

}  // namespace strata::testing
