// Tensor names of a V4.1 GGUF (docs/gguf.md "V4.1 GGUF naming") <-> the official safetensors names
// strata binds (model/weights.cpp).
//
// Backbone layer L: "layers.L.<suffix>" <-> "blk.L.<gguf suffix>" by the table in gguf_names.cpp
// (ik_llama.cpp deepseek41 / ds4 names). Top level: embed/norm/head <-> token_embd/output_norm/output.
// Strata extensions (no reference layout has them; docs/gguf.md says so):
//   - an FP8 weight kept in its official bits travels as ggml I8 bytes with its E8M0 block scales
//     beside it as "<gguf name without .weight>.scale" (ggml has no E4M3 + [32, 32] UE8M0 type);
//   - DSpark stages "mtp.S.<suffix>" <-> "mtp.S.<gguf suffix>" with the same table;
//   - routed experts are stacked per layer and matrix ("blk.L.ffn_gate_exps.weight",
//     [n_experts, out, in]); kept MXFP4 experts stack their packed codes and their scales
//     ("blk.L.ffn_gate_exps.scale") as I8, or (`--experts mxfp4`, as the llama.cpp forks' files)
//     are one ggml MXFP4 tensor per matrix (io/ggml_mxfp4.h);
//   - Engram tables stay two tensors, "blk.L.engram_embd.weight" (E4M3 codes) and
//     "blk.L.engram_embd.scale" (E8M0), not ds4's interleaved 264-byte rows.
// A suffix the table does not list keeps its strata spelling under the GGUF prefix.
#pragma once

#include <optional>
#include <string>

namespace strata::io {

// The GGUF name of a strata (safetensors) tensor name; a routed expert tensor
// "layers.L.ffn.experts.E.w1.weight" maps to its stacked tensor "blk.L.ffn_gate_exps.weight"
// (expert_index tells E). Names outside "layers.*", "mtp.*" and the three top-level ones keep
// their spelling.
std::string gguf_tensor_name(const std::string& strata_name);

// A routed expert tensor name parsed: its stacked GGUF name and expert index; nullopt for others.
struct ExpertTensorName {
  std::string stacked;  // "blk.L.ffn_{gate,up,down}_exps.{weight,scale}"
  int expert = 0;
};
std::optional<ExpertTensorName> gguf_expert_tensor(const std::string& strata_name);

// The strata name of a (non-stacked) GGUF tensor name: the inverse of gguf_tensor_name.
std::string strata_tensor_name(const std::string& gguf_name);

// For a stacked expert GGUF name, the strata name of expert `e`'s slice; nullopt when `gguf_name`
// is not a stacked expert tensor.
std::optional<std::string> strata_expert_name(const std::string& gguf_name, int e);

}  // namespace strata::io
