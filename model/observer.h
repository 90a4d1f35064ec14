// Observer: a named-intermediate hook (STYLE.md §3.7, llama.cpp's cb(cur, "attn_norm", il)).
//
// The forward pass reports selected intermediates by name and layer; `strata logits --dump DIR`
// writes them as .npy files named like the golden fixtures so ../shared/tools/check_fixture.py can
// compare them. A null observer costs one pointer test per site. Names: "block_out" [n, hc, dim],
// "attn_out" [n, dim], "ffn_pre_mix" [n, hc], "router_topk_idx" / "router_weights" [n, topk],
// "after_engram" [n, hc, dim], "engram_rows_dequant" [n, cols, head_dim], "compressor_latent"
// [groups, head_dim], "indexer_topk" [n, index_topk] (group ids, -1 = none; no offset),
// "candidate_mask" [n, width] (0/1), "final_norm_out" [n, dim], "engram_row_ids" [n, layers, cols].
// linear_input reports the rows entering each linear that `strata quantize` can re-quantise, for
// `strata calibrate --imatrix` (tools/imatrix.h): the official weight name within its layer and the
// rows as the matrix multiplies them (before any activation rounding of the FP8/MXFP4 paths):
//   "attn.wq_a", "attn.wkv"   x [n, dim]                 (attention input, after attn_norm / mHC)
//   "attn.wq_b", "attn.indexer.wq_b"  [n, q_lora_rank]   (after q_norm)
//   "attn.wo_a"   [n * o_groups, heads * head_dim / o_groups]  one row per (token, group): group g of
//                 token t multiplies the g-th slice of its heads' outputs by its own o_lora_rank rows
//                 of the one matrix, so one importance per column sums over the groups
//   "attn.wo_b"   [n, o_groups * o_lora_rank]
//   "ffn.shared_experts.w1" / "w3" [n, dim], "ffn.shared_experts.w2" [n, moe_inter_dim]
//   "ffn.experts.w1" / "w3" [m, dim], "ffn.experts.w2" [m, moe_inter_dim], `expert` set: the m rows
//                 routed to that expert (w2's input carries the routing weight, model.py Expert)
//   "engram.wkv"  [n, engram_n_cols * engram_head_dim]
//   "head"        [n, dim] at layer -1 (final norm output, every position)
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
  // x holds rows of `cols` values (x.size() / cols rows); expert = -1 except for routed experts.
  virtual void linear_input(std::string_view weight, int layer, int expert, std::span<const float> x, int64_t cols) {}
};

}  // namespace strata::model
