// DumpObserver: collects the forward pass's named intermediates and writes them as .npy files named
// like the golden fixtures (prefill_L2_indexer_topk.npy, decode_L5_attn_out.npy, ...), for
// ../shared/tools/check_fixture.py --dumps. Decode steps are stacked along the first axis.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "core/status.h"
#include "model/observer.h"

namespace strata::cli {

class DumpObserver final : public model::Observer {
 public:
  // `window_size` is the decode offset of compressed indices (the ring buffer comes first).
  explicit DumpObserver(int64_t window_size) : window_size_(window_size) {}

  // Subsequent callbacks belong to the prefill of n tokens, or to one decode step.
  void begin_prefill(int64_t n_tokens) { phase_ = "prefill"; offset_ = n_tokens; }
  void begin_decode() { phase_ = "decode"; offset_ = window_size_; }
  // Subsequent callbacks are one DSpark draft (dspark_*.npy, stacked per draft like decode steps).
  void begin_dspark() { phase_ = "dspark"; offset_ = 0; }

  void tensor(std::string_view name, int layer, std::span<const float> data, std::vector<int64_t> shape) override;
  void ids(std::string_view name, int layer, std::span<const int64_t> data, std::vector<int64_t> shape) override;

  // Writes every collected array into `dir` (created if needed).
  [[nodiscard]] Status write(const std::string& dir) const;

 private:
  struct Array {
    std::string descr;  // "<f4", "<i8", "<i4", "|b1"
    std::vector<int64_t> shape;
    std::vector<unsigned char> bytes;
    size_t elem = 4;
  };
  std::string file_name(std::string_view name, int layer) const;
  void append(const std::string& file, const std::string& descr, size_t elem, std::vector<int64_t> shape,
              const void* data, size_t n);

  int64_t window_size_;
  std::string phase_ = "prefill";
  int64_t offset_ = 0;
  std::map<std::string, Array> arrays_;
};

}  // namespace strata::cli
