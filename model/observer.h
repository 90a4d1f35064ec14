// Observer: a named-intermediate hook (STYLE.md §3.7, llama.cpp's cb(cur, "attn_norm", il)).
//
// The forward pass reports selected intermediates by name and layer; `strata logits --dump DIR`
// writes them as .npy files named like the golden fixtures so ../shared/tools/check_fixture.py can
// compare them. A null observer costs one pointer test per site. Names: "block_out" [n, hc, dim],
// "attn_out" [n, dim], "ffn_pre_mix" [n, hc], "router_topk_idx" / "router_weights" [n, topk],
// "after_engram" [n, hc, dim], "engram_rows_dequant" [n, cols, head_dim], "compressor_latent"
// [groups, head_dim], "indexer_topk" [n, index_topk] (group ids, -1 = none; no offset),
// "candidate_mask" [n, width] (0/1), "final_norm_out" [n, dim], "engram_row_ids" [n, layers, cols].
#pragma once

#include <cstdint>
#include <span>
#include <string_view>
#include <vector>

namespace strata::model {

class Observer {
 public:
  virtual ~Observer() = default;
  virtual void tensor(std::string_view name, int layer, std::span<const float> data, std::vector<int64_t> shape) {}
  virtual void ids(std::string_view name, int layer, std::span<const int64_t> data, std::vector<int64_t> shape) {}
};

}  // namespace strata::model
