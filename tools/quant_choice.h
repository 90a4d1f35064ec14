// The four dials of `strata quantize` (tools/quantize.h) as one value, and the rules that say which
// dial a checkpoint tensor belongs to and whether a block format fits it. `strata quantize` writes
// GGUFs by these rules and `strata plan --quant` sizes a checkpoint by them, so a plan of a choice
// and the GGUF quantize writes for it agree (tests/tools/plan_quant_test.cpp checks it).
//   experts  routed experts w1/w2/w3 (MXFP4 in the release) of every layer and DSpark stage: each
//            matrix takes the type, or llama.cpp's fallback for it where its rows are not whole
//            blocks (expert_quant_type); when a matrix fits neither, every expert is kept (an
//            expert is all block formats or all MXFP4: model/weights.cpp check_experts)
//   dense    every other FP8-stored linear with a .scale (attention, shared experts, Engram wkv,
//            DSpark main_proj); a matrix whose rows are not whole blocks is kept
//   head     the LM head (BF16); kept when its rows are not whole blocks
//   engram   the Engram tables (FP8 + E8M0 per 32): one block-format tensor each, no scale tensor;
//            a type whose block does not divide engram_head_dim is refused
// Never quantised: norms, mHC, sinks, router, compressor/indexer BF16 projections, embeddings.
// Source: tools/quantize.cpp quantize_checkpoint; docs/gguf.md.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "core/dtype.h"
#include "core/status.h"
#include "core/tensor.h"
#include "io/checkpoint.h"

namespace strata::tools {

// One block format per dial; nullopt = keep (the official bytes: FP8 + E8M0, MXFP4, BF16).
struct QuantChoice {
  std::optional<DType> experts, dense, head, engram;
  bool any() const { return experts || dense || head || engram; }
  // "experts=q4_k,dense=keep,head=keep,engram=keep" (what `plan --quant` takes back).
  std::string to_string() const;
  bool operator==(const QuantChoice&) const = default;
};

// The names `strata quantize` and `strata plan --quant` accept for a type.
inline constexpr const char* kQuantTypeNames = "keep, q8_0, q6_k, q4_k, q3_k, q2_k, iq4_nl";
inline constexpr const char* kQuantKeys = "experts, dense, head, engram";

// "q8_0", "q6_k", "q4_k", "q3_k", "q2_k", "iq4_nl" -> the DType; "keep" -> nullopt; case-insensitive.
// kInvalidArgument naming the accepted values otherwise.
[[nodiscard]] Result<std::optional<DType>> parse_quant_choice(const std::string& s);
// The GGUF/CLI name of a choice ("keep", "q4_k").
std::string quant_choice_name(const std::optional<DType>& d);

// Parses `plan --quant`: "experts=q2_k,engram=q4_k" (any subset of the keys, comma separated,
// case-insensitive; an absent key is keep). kInvalidArgument naming `flag`, the key or the type
// and what is accepted.
[[nodiscard]] Result<QuantChoice> parse_quant_spec(const std::string& spec, const std::string& flag = "--quant");

// The dial a checkpoint tensor (official name, stored dtype) belongs to; kNone for tensors no dial
// touches (and for the .scale tensors, which go with their weight).
enum class QuantDial : uint8_t { kNone, kExperts, kDense, kHead, kEngram };
// `has_scale`: a "<prefix>.scale" tensor sits beside this "<prefix>.weight".
QuantDial quant_dial_of(const std::string& name, DType dtype, bool has_scale);

// Values per row of a stored matrix: shape[1], doubled for packed E2M1 (I8: two values a byte).
int64_t quant_row_values(const Shape& shape, DType dtype);
// Whether a stored 2-D matrix's rows are a whole number of `t`'s blocks.
bool quant_fits(DType t, const Shape& shape, DType dtype);

// llama.cpp's type for a matrix whose rows are not whole blocks of `t` (llama-quant.cpp
// llama_tensor_get_type's fallback): Q2_K, Q3_K, Q4_K -> IQ4_NL (llama.cpp takes Q5_0 after Q4_K;
// strata has no Q5_0, IQ4_NL is the nearest), Q6_K -> Q8_0; nullopt for the 32-blocks.
std::optional<DType> expert_fallback(DType t);
// The type a routed-expert matrix (stored shape and dtype) gets under the experts dial `chosen`:
// `chosen` where its rows are whole blocks, else expert_fallback(chosen) where that fits, else
// nullopt (then quantize keeps every expert official). E.g. the scaled checkpoints' w2 (rows of
// moe_inter 448) under q2_k: IQ4_NL.
std::optional<DType> expert_quant_type(DType chosen, const Shape& shape, DType dtype);

// The notes quantize prints and plan --quant repeats for a routed-expert matrix `tensor` (stored
// shape/dtype) that is not whole blocks of `chosen`: given `fallback`, or (nullopt) every expert kept.
std::string expert_note(DType chosen, const std::optional<DType>& fallback, const std::string& tensor, const Shape& shape,
                        DType dtype);

// Engram tables as `t`: OK when t's block divides head_dim, else kInvalidArgument starting with
// `where` (e.g. "--quant engram=q4_k" or "--engram q4_k: Engram table 'layers.1.engram.embed.weight'").
[[nodiscard]] Status check_engram_quant(DType t, int64_t head_dim, const std::string& where);

// The dials a GGUF was written with, read from its tensor types (a checkpoint from
// io::Checkpoint::open_gguf): each dial takes the block format its tensors carry (none = keep).
// kNotSupported when one dial's tensors carry two block formats (not a file quantize writes),
// naming both tensors; routed experts may carry a type and its expert_fallback (the dial is the type).
[[nodiscard]] Result<QuantChoice> quant_choice_of_checkpoint(const io::Checkpoint& ck);

}  // namespace strata::tools
