// What a V4.1 checkpoint weighs and what each token touches, from config.json alone (no weights):
// the footprint half of `strata plan`.
//
// Sizes come from the tensor list `strata synth` writes for the same config (tools/synth_plan.h
// synth_tensors: release names, dtypes and shapes), so `strata plan` and `strata synth --dry-run`
// can never disagree. On top of that list this file adds what a placement needs:
//   - components by dtype (embedding, head, attention, mHC + norms, router, Engram projection,
//     shared experts, routed experts, Engram tables, DSpark, vision),
//   - bytes in RAM (+ attn.wo_a's blocked copy: FP8 codes, or bf16 when widened),
//   - the packed KV cache per token (ARCHITECTURE.md §Attention "Caches": compressed main KV E2M1 +
//     E4M3 scale per 16 = 288 B per entry at head_dim 512, index keys E2M1 + E8M0 per 32 = 68 B per
//     entry, one entry per compress_ratio tokens at each KV source / index-key owner) and the fixed
//     per-sequence part (sliding-window ring, compressor state),
//   - with `strata quantize`'s dials (plan --quant, or a GGUF's types), each tensor as quantize
//     writes it (tools/quant_choice.h),
//   - the Engram rows one token reads (rows x (head_dim + head_dim/32) bytes; with the Engram dial
//     `engram` set, the tables as one block-format tensor each and rows of the type's bytes for
//     head_dim values, as `strata quantize --engram T` writes them),
//   - the linears every token runs (per layer, with the dtype the kernel runs) and the parameters
//     and bytes active per token in decode and prefill (exact: every layer; replay: encoder layers).
// Vision (when config.json has vision_config or flat vision_* keys) is an estimate: strata does not
// load the vision tower, and its layout is taken from the official vision.py as quoted by a
// third-party port (ViT blocks: qkv + proj with bias, SwiGLU w1 [2*inter, dim] / w2, two RMSNorms;
// patch embed; aligner w1 [dim * r^2 -> text dim], w2), stored BF16.
// Source: ARCHITECTURE.md §Checkpoint format, §Shape, §Attention, §Memory math; tools/synth_plan.cpp.
#pragma once

#include <array>
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "core/dtype.h"
#include "core/status.h"
#include "model/config.h"
#include "tools/quant_choice.h"

namespace strata::tools {

// The vision tower's shape (HF `vision_config` or flat `vision_*` keys); layers == 0 = none.
struct VisionShape {
  int layers = 0;
  int64_t dim = 0, heads = 0, inter = 0, patch = 0, downsample = 0;
};
// Reads the vision shape from config.json text (either layout). Absent keys give layers == 0.
// kInvalidArgument for malformed JSON or a vision field with a wrong type (naming the field).
[[nodiscard]] Result<VisionShape> parse_vision_shape(const std::string& config_json, const std::string& what);

// The kernel a linear runs on (kernels/linear.h). kBf16Any: BF16 in free summation order
// (kernels::linear_bf16_any_order), what the model runs the LM head with (its logits feed no
// rounding point); kBf16 is the bit-exact order every other BF16 linear needs. kBf16E4m3: the same
// bit-exact BF16 chains reading a blocked weight's E4M3 codes and [32, 32] E8M0 scales
// (Bf16Weight::e4m3, the release's FP8 attn.wo_a): one byte a weight but the widening's work per
// value, so its rate per stored byte is its own (at AVX2 about half the bf16 kernel's, measured).
enum class LinearKind : uint8_t { kFp8, kFp4, kBf16, kF32, kBf16Any, kBf16E4m3 };
inline constexpr int kLinearKinds = 6;
// "fp8", "fp4", "bf16", "f32", "bf16_any", "bf16_e4m3": the names in a probe profile's "kernels".
const char* linear_kind_name(LinearKind k);

// One linear a token runs. Routed experts appear once per layer (expert 0's shapes) with
// `routed` set: a token runs n_active of them.
struct LinearUse {
  std::string name;      // tensor prefix, e.g. "layers.3.attn.wq_b" ("head" for the LM head)
  int layer = -1;        // backbone layer, -1 for the head
  LinearKind kind = LinearKind::kFp8;
  int64_t out = 0, in = 0;  // per call
  int calls = 1;            // calls per application (attn.wo_a runs once per output group)
  double per_token = 1;     // applications per token (indexer.wk: once per compress_ratio tokens)
  uint64_t bytes = 0;       // weight bytes in RAM read per call (codes + scales)
  bool routed = false;      // a routed expert's w1/w2/w3
  // A ggml block format (plan --quant, or a GGUF's type): `kind` is then kFp8, whose measured rates
  // stand in for the block kernel's (the probe measures none; plan says so: tools/plan.h).
  std::optional<DType> block;
};

// A component of the checkpoint.
struct ComponentSize {
  std::string name;   // "routed experts"
  std::string group;  // "backbone", "shared experts", "routed experts", "Engram tables", "DSpark", "vision"
  uint64_t bytes = 0;        // as stored in the checkpoint
  uint64_t ram_bytes = 0;    // once loaded (+ attn.wo_a's blocked copy)
  uint64_t params = 0;       // logical weight values (E2M1: two per byte; scale tensors: none)
  std::map<DType, uint64_t> bytes_by_dtype;
  bool estimated = false;    // vision: estimated from its shape, not in strata's tensor list
};

// The packed KV cache of one sequence (ARCHITECTURE.md §Attention "Caches").
struct KvFootprint {
  uint64_t main_entry_bytes = 0;   // compressed main KV per entry: head_dim/2 + head_dim/16 (288 at 512)
  uint64_t index_entry_bytes = 0;  // index key per entry: index_head_dim/2 + index_head_dim/32 (68 at 128)
  double bytes_per_token = 0;      // sum over KV sources / key owners of entry_bytes / compress_ratio (890)
  uint64_t fixed_bytes = 0;        // per sequence: window rings (E4M3 + E8M0 per 32) + compressor state (f32)
  // Bytes held after `tokens` tokens: completed entries at every source plus the fixed part.
  uint64_t bytes_at(int64_t tokens) const;
  std::vector<std::pair<int, int>> main_sources;  // (layer, ratio) of the KV sources
  std::vector<std::pair<int, int>> key_owners;    // (layer, ratio) of the index-key owners
};

// Parameters and bytes one token touches.
struct ActivePerToken {
  uint64_t params = 0;         // weights multiplied (routed: n_active experts per layer; embed: one row)
  uint64_t weight_bytes = 0;   // bytes of those weights in RAM
  uint64_t expert_bytes = 0;   // of which routed experts
  uint64_t engram_bytes = 0;   // Engram table rows read
  uint64_t engram_rows = 0;
  double linear_flops = 0;     // 2 * params of the linears
};

struct ModelFootprint {
  std::vector<ComponentSize> components;  // in report order; vision last when present
  uint64_t checkpoint_bytes = 0;   // every tensor (text + vision estimate)
  uint64_t text_bytes = 0;         // without vision: what `strata synth` writes for this config
  uint64_t text_ram_bytes = 0;     // loaded, without vision
  size_t n_tensors = 0;            // text tensors
  // Resident set of the backbone: everything but routed experts, Engram tables, DSpark and vision
  // (RAM bytes; includes embedding and head).
  uint64_t dense_ram_bytes = 0;
  uint64_t dspark_ram_bytes = 0;
  uint64_t dspark_expert_bytes = 0;      // DSpark routed experts (read per use, never bound resident)
  // Routed experts of the backbone.
  uint64_t expert_bytes = 0;             // one expert: w1, w2, w3 with their scales
  // The six parts of expert_bytes in store order: w1, w1.scale, w2, w2.scale, w3, w3.scale (a
  // block format's scale parts are 0).
  std::array<uint64_t, 6> expert_part_bytes{};
  std::vector<int> experts_per_layer;    // n_routed_experts per backbone layer
  uint64_t routed_bytes = 0;             // all backbone routed experts
  // Engram.
  uint64_t engram_table_bytes = 0;
  uint64_t engram_scale_bytes = 0;       // of which the E8M0 scale tensors
  int engram_rows_per_token = 0;         // engram layers x (max_ngram - 1) x heads (48)
  uint64_t engram_row_bytes = 0;         // head_dim + head_dim / 32 (264); a block format's bytes (Q4_K: 144)
  std::optional<DType> engram_dtype;     // the dial: nullopt = official FP8 + E8M0 scales
  // The quantize dials as applied (tools/quant_choice.h): `experts` reset when some expert matrix
  // is not whole blocks (quantize keeps them all then); what was kept and why in quant_notes.
  QuantChoice quant;
  std::vector<std::string> quant_notes;
  uint64_t engram_bytes_per_token = 0;   // rows x row bytes (12,672)
  KvFootprint kv;
  int first_decoder_layer = -1;          // first layer with compress ratio 1 (-1: none)
  // Linears one token runs through the backbone and head (DSpark stages do not run yet).
  std::vector<LinearUse> linears;
  ActivePerToken decode;          // one generated token: every layer, the head
  ActivePerToken prefill_exact;   // one prompt token in exact prefill: every layer, no head
  ActivePerToken prefill_replay;  // one prompt token under bounded replay: encoder layers only
};

// The footprint of config `c` (+ `vision`, may be empty) with the tensors `strata quantize` would
// write for `quant` (tools/quant_choice.h; all keep = the official checkpoint): a quantised matrix
// is its type's bytes for its values and loses its .scale (routed experts: all or none; a dense or
// head matrix whose rows are not whole blocks is kept, with a note), attn.wo_a takes its stored bytes
// plus the model's blocked copy in RAM (its FP8 bytes again when o_lora_rank is a multiple of 32,
// else two bytes a weight: the model widens it), Engram rows are the type's bytes for head_dim values.
// Errors: a config that fails validate(); kInvalidArgument for an Engram type whose block does not
// divide engram_head_dim.
[[nodiscard]] Result<ModelFootprint> model_footprint(const model::ModelConfig& c, const VisionShape& vision = {},
                                                     const QuantChoice& quant = {});

// One expert-cache slot in the stream store, as store::ExpertCatalog sizes it: `stacked` (a GGUF,
// whose tensors stack one matrix of all a layer's experts) = one read span per non-empty part,
// else the official layout's one span for the six back-to-back parts. Each span is its bytes
// rounded up to 64 B, or with `direct_io` to 4 KiB plus one more 4 KiB block for a start that is
// not on a boundary (the worst case, which the largest of many experts meets); the slot is a 4 KiB
// multiple. Bytes.
uint64_t expert_slot_bytes(const ModelFootprint& f, bool direct_io, bool stacked);

// KV footprint alone (pure function of the config).
KvFootprint kv_footprint(const model::ModelConfig& c);

}  // namespace strata::tools
