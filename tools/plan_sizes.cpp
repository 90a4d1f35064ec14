// Footprint of a V4.1 config: component sizes, KV and Engram bytes per token, active weights per
// token. Tensor sizes come from synth_tensors (the tensor list `strata synth` writes).
#include "tools/plan_sizes.h"

#include <algorithm>
#include <set>
#include <nlohmann/json.hpp>

#include "tools/synth_plan.h"

namespace strata::tools {

namespace {

using json = nlohmann::json;

// Backbone layer of a tensor name ("layers.12.attn.wq_a.weight" -> 12), -1 for others.
int layer_of(const std::string& name) {
  if (name.rfind("layers.", 0) != 0) return -1;
  return std::atoi(name.c_str() + 7);
}

bool contains(const std::string& s, const char* part) { return s.find(part) != std::string::npos; }
bool ends_with(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

// Report order of the components.
enum Comp { kEmbed, kHead, kAttention, kMhc, kRouter, kEngramProj, kShared, kRouted, kEngramTables, kDSpark, kNComp };
const char* const kCompName[kNComp] = {"embedding",     "LM head + final norm", "attention (incl. compressor, indexer)",
                                       "mHC + norms",   "router",               "Engram projection",
                                       "shared experts", "routed experts",      "Engram tables",
                                       "DSpark draft stages"};
const char* const kCompGroup[kNComp] = {"backbone", "backbone",       "backbone",       "backbone",      "backbone",
                                        "backbone", "shared experts", "routed experts", "Engram tables", "DSpark"};

Comp component_of(const std::string& n) {
  if (n.rfind("mtp.", 0) == 0) return kDSpark;
  if (n == "embed.weight") return kEmbed;
  if (n == "head.weight" || n == "norm.weight") return kHead;
  if (contains(n, ".ffn.experts.")) return kRouted;
  if (contains(n, ".ffn.shared_experts.")) return kShared;
  if (contains(n, ".ffn.gate.")) return kRouter;
  if (contains(n, ".engram.embed.")) return kEngramTables;
  if (contains(n, ".engram.")) return kEngramProj;
  if (contains(n, ".attn.")) return kAttention;
  return kMhc;  // hc_* parameters, attn_norm, ffn_norm
}

// Logical values of a tensor: E2M1 holds two per byte; scale tensors are not parameters.
uint64_t params_of(const SynthTensor& t) {
  if (t.fill == FillKind::kFp8Scale || t.fill == FillKind::kFp4Scale) return 0;
  const uint64_t n = static_cast<uint64_t>(t.decl.shape.numel());
  return t.fill == FillKind::kFp4Weight ? 2 * n : n;
}

// attn.wo_a once loaded (model/weights.cpp): when its output groups are whole 32-row scale blocks
// the store holds the FP8 codes blocked in place of the stored ones (WeightStore::resident_relaid:
// one byte a weight) and the model copies the scales; else the store keeps the stored tensor and
// the model adds a widened bf16 copy outside it (two bytes a weight; also for a block format
// written by quantize). NaN codes or extreme scales also widen it; the planner assumes a sane
// checkpoint. The store gives the stored bytes back in whole 2 MiB chunks and keeps the partial
// ones at the ends: counted as min(bytes, 4 MiB) more (the worst case; 0.17 GiB over the release's
// 43 wo_a; all of a tensor under 2 MiB). (The LM head's blocked layout also replaces its stored
// rows: 4 MiB at most more, not counted.)
bool wo_a_keeps_fp8(const model::ModelConfig& c) { return c.o_lora_rank % 32 == 0; }

// Bytes once loaded of a tensor stored as the release stores it (attn.wo_a: see wo_a_keeps_fp8).
uint64_t ram_bytes_of(const model::ModelConfig& c, const SynthTensor& t) {
  const std::string& n = t.decl.name;
  const uint64_t b = t.decl.nbytes();
  if (!contains(n, ".attn.wo_a.")) return b;
  if (wo_a_keeps_fp8(c)) return ends_with(n, ".scale") ? 2 * b : b + std::min<uint64_t>(b, 4ull << 20);
  return b + (ends_with(n, ".weight") ? 2 * static_cast<uint64_t>(t.decl.shape.numel()) : 0);
}

int64_t get_int(const json& j, const char* key, int64_t dflt) {
  auto it = j.find(key);
  if (it == j.end() || it->is_null()) return dflt;
  return it->is_number() ? it->get<int64_t>() : dflt;
}

}  // namespace

const char* linear_kind_name(LinearKind k) {
  switch (k) {
    case LinearKind::kFp8: return "fp8";
    case LinearKind::kFp4: return "fp4";
    case LinearKind::kBf16: return "bf16";
    case LinearKind::kF32: return "f32";
    case LinearKind::kBf16Any: return "bf16_any";
    case LinearKind::kBf16E4m3: return "bf16_e4m3";
  }
  return "?";
}

Result<VisionShape> parse_vision_shape(const std::string& config_json, const std::string& what) {
  json root = json::parse(config_json, nullptr, /*allow_exceptions=*/false);
  if (root.is_discarded() || !root.is_object()) return InvalidArgument(what + ": not a JSON object");
  VisionShape v;
  const auto bad = [&](const char* field) {
    return InvalidArgument(what + ": vision field '" + std::string(field) + "' must be a non-negative integer");
  };
  if (auto it = root.find("vision_config"); it != root.end() && it->is_object()) {
    const json& vc = *it;
    for (const char* f : {"num_hidden_layers", "hidden_size", "num_attention_heads", "intermediate_size", "patch_size",
                          "downsample_ratio"})
      if (vc.contains(f) && !(vc[f].is_number_integer() && vc[f].get<int64_t>() >= 0)) return bad(f);
    v.layers = static_cast<int>(get_int(vc, "num_hidden_layers", 0));
    v.dim = get_int(vc, "hidden_size", 0);
    v.heads = get_int(vc, "num_attention_heads", 0);
    v.inter = get_int(vc, "intermediate_size", 0);
    v.patch = get_int(vc, "patch_size", 14);
    v.downsample = get_int(vc, "downsample_ratio", 1);
  } else if (root.contains("vision_n_layers")) {
    for (const char* f : {"vision_n_layers", "vision_dim", "vision_n_heads", "vision_inter_dim", "vision_patch_size",
                          "vision_downsample_ratio"})
      if (root.contains(f) && !(root[f].is_number_integer() && root[f].get<int64_t>() >= 0)) return bad(f);
    v.layers = static_cast<int>(get_int(root, "vision_n_layers", 0));
    v.dim = get_int(root, "vision_dim", 0);
    v.heads = get_int(root, "vision_n_heads", 0);
    v.inter = get_int(root, "vision_inter_dim", 0);
    v.patch = get_int(root, "vision_patch_size", 14);
    v.downsample = get_int(root, "vision_downsample_ratio", 1);
  }
  if (v.layers > 0 && (v.dim <= 0 || v.inter <= 0))
    return InvalidArgument(what + ": vision tower has " + std::to_string(v.layers) +
                           " layers but no hidden_size / intermediate_size");
  return v;
}

uint64_t KvFootprint::bytes_at(int64_t tokens) const {
  uint64_t b = fixed_bytes;
  for (const auto& [layer, ratio] : main_sources) b += static_cast<uint64_t>(tokens / ratio) * main_entry_bytes;
  for (const auto& [layer, ratio] : key_owners) b += static_cast<uint64_t>(tokens / ratio) * index_entry_bytes;
  return b;
}

uint64_t expert_slot_bytes(const ModelFootprint& f, bool direct_io, bool stacked) {
  auto span = [&](uint64_t b) { return direct_io ? (b + 4095) / 4096 * 4096 + 4096 : (b + 63) / 64 * 64; };
  uint64_t slot = 0;
  if (stacked) {
    for (uint64_t b : f.expert_part_bytes)
      if (b > 0) slot += span(b);
  } else {
    slot = span(f.expert_bytes);
  }
  return (slot + 4095) / 4096 * 4096;
}

KvFootprint kv_footprint(const model::ModelConfig& c) {
  KvFootprint kv;
  // Compressed main KV: E2M1 codes (head_dim / 2 bytes) + one E4M3 scale per 16 values.
  kv.main_entry_bytes = static_cast<uint64_t>(c.head_dim / 2 + c.head_dim / 16);
  // Index keys: E2M1 codes + one E8M0 scale per 32 values.
  kv.index_entry_bytes = static_cast<uint64_t>(c.index_head_dim / 2 + c.index_head_dim / 32);
  for (int l = 0; l < c.n_layers; ++l) {
    const int r = c.compress_ratio(l);
    if (r <= 0 || !c.is_kv_source(l)) continue;
    kv.main_sources.emplace_back(l, r);
    kv.bytes_per_token += static_cast<double>(kv.main_entry_bytes) / r;
    if (c.owns_index_keys(l)) {
      kv.key_owners.emplace_back(l, r);
      kv.bytes_per_token += static_cast<double>(kv.index_entry_bytes) / r;
    }
  }
  // Per sequence: the window ring of every layer (E4M3 + E8M0 per 32) and the ratio > 1 compressor
  // partial-group state (kv and score, f32).
  kv.fixed_bytes = static_cast<uint64_t>(c.n_layers) * static_cast<uint64_t>(c.window_size) *
                   static_cast<uint64_t>(c.head_dim + c.head_dim / 32);
  for (const auto& [layer, ratio] : kv.main_sources)
    if (ratio > 1) kv.fixed_bytes += 2ull * static_cast<uint64_t>(ratio * c.head_dim) * sizeof(float);
  return kv;
}

Result<ModelFootprint> model_footprint(const model::ModelConfig& c, const VisionShape& vision,
                                       const QuantChoice& quant) {
  STRATA_RETURN_IF_ERROR(c.validate());
  if (quant.engram) {
    if (!dtype_is_block_quant(*quant.engram))
      return InvalidArgument("Engram tables as " + std::string(dtype_name(*quant.engram)) + ": not a block format");
    STRATA_RETURN_IF_ERROR(
        check_engram_quant(*quant.engram, c.engram_head_dim, "Engram tables as " + quant_choice_name(quant.engram)));
  }
  ModelFootprint f;
  f.engram_dtype = quant.engram;
  f.quant = quant;
  const std::vector<SynthTensor> tensors = synth_tensors(c, 0);
  f.n_tensors = tensors.size();
  const SizeBreakdown synth_sizes = size_of(tensors);
  std::map<std::string, const SynthTensor*> by_name;
  for (const SynthTensor& t : tensors) by_name[t.decl.name] = &t;

  // The type quantize gives each weight (tools/quant_choice.h); a quantised weight's .scale is dropped.
  auto has_scale = [&](const std::string& n) {
    return ends_with(n, ".weight") && by_name.count(n.substr(0, n.size() - 7) + ".scale") > 0;
  };
  if (f.quant.experts)
    for (const SynthTensor& t : tensors)
      if (quant_dial_of(t.decl.name, t.decl.dtype, has_scale(t.decl.name)) == QuantDial::kExperts &&
          !expert_quant_type(*f.quant.experts, t.decl.shape, t.decl.dtype)) {
        f.quant_notes.push_back(expert_note(*f.quant.experts, std::nullopt, t.decl.name, t.decl.shape, t.decl.dtype));
        f.quant.experts.reset();
        break;
      }
  std::map<std::string, DType> target;  // weight name -> block format
  std::set<int64_t> fallback_rows;       // row lengths whose fallback is noted
  for (const SynthTensor& t : tensors) {
    const std::string& n = t.decl.name;
    std::optional<DType> want;
    switch (quant_dial_of(n, t.decl.dtype, has_scale(n))) {
      case QuantDial::kExperts:  // the type or llama.cpp's fallback, as quantize writes it (and notes it)
        if (f.quant.experts) {
          want = expert_quant_type(*f.quant.experts, t.decl.shape, t.decl.dtype);
          if (want != f.quant.experts && fallback_rows.insert(quant_row_values(t.decl.shape, t.decl.dtype)).second)
            f.quant_notes.push_back(expert_note(*f.quant.experts, want, n, t.decl.shape, t.decl.dtype));
        }
        break;
      case QuantDial::kDense: want = f.quant.dense; break;
      case QuantDial::kHead: want = f.quant.head; break;
      case QuantDial::kEngram: want = f.quant.engram; break;
      case QuantDial::kNone: break;
    }
    if (!want) continue;
    if (!quant_fits(*want, t.decl.shape, t.decl.dtype)) {
      f.quant_notes.push_back("'" + n + "' kept: rows of " + std::to_string(quant_row_values(t.decl.shape, t.decl.dtype)) +
                              " values are not a multiple of " + quant_choice_name(want) + "'s block of " +
                              std::to_string(dtype_block(*want).elems));
      continue;
    }
    target[n] = *want;
  }
  // Values of a stored matrix (E2M1: two per byte).
  auto values = [](const SynthTensor& t) { return t.decl.shape[0] * quant_row_values(t.decl.shape, t.decl.dtype); };
  // Bytes of a tensor as written: its type's for a quantised weight, none for that weight's scale.
  auto stored = [&](const SynthTensor& t) -> uint64_t {
    const std::string& n = t.decl.name;
    if (auto it = target.find(n); it != target.end()) return dtype_nbytes(it->second, values(t));
    if (ends_with(n, ".scale") && target.count(n.substr(0, n.size() - 6) + ".weight")) return 0;
    return t.decl.nbytes();
  };

  std::array<ComponentSize, kNComp> comp;
  for (int i = 0; i < kNComp; ++i) {
    comp[static_cast<size_t>(i)].name = kCompName[i];
    comp[static_cast<size_t>(i)].group = kCompGroup[i];
  }
  for (const SynthTensor& t : tensors) {
    const std::string& n = t.decl.name;
    ComponentSize& cs = comp[static_cast<size_t>(component_of(n))];
    const uint64_t b = stored(t);
    if (auto it = target.find(n); it != target.end()) {
      cs.bytes += b;
      // A quantised attn.wo_a: the stored tensor and a widened bf16 copy (model/weights.cpp).
      cs.ram_bytes += b + (contains(n, ".attn.wo_a.") ? 2 * static_cast<uint64_t>(values(t)) : 0);
      cs.params += static_cast<uint64_t>(values(t));
      cs.bytes_by_dtype[it->second] += b;
    } else {
      if (b == 0) continue;  // the scale of a quantised weight
      cs.bytes += b;
      cs.ram_bytes += ram_bytes_of(c, t);
      cs.params += params_of(t);
      cs.bytes_by_dtype[t.decl.dtype] += b;
      if (contains(n, ".engram.embed.scale")) f.engram_scale_bytes += b;
    }
    if (n.rfind("mtp.", 0) == 0 && contains(n, ".ffn.experts.")) f.dspark_expert_bytes += b;
  }
  for (ComponentSize& cs : comp) {
    f.text_bytes += cs.bytes;
    f.text_ram_bytes += cs.ram_bytes;
  }
  // The same total as `strata synth --dry-run` (synth_plan.cpp size_of), by construction.
  STRATA_CHECK(quant.any() || f.text_bytes == synth_sizes.total, "plan footprint disagrees with synth's tensor list");
  f.routed_bytes = comp[kRouted].bytes;
  f.engram_table_bytes = comp[kEngramTables].bytes;
  f.dspark_ram_bytes = comp[kDSpark].ram_bytes;
  f.dense_ram_bytes = f.text_ram_bytes - comp[kRouted].ram_bytes - comp[kEngramTables].ram_bytes - f.dspark_ram_bytes;
  f.components.assign(comp.begin(), comp.end());

  // Vision (estimate): ViT blocks + patch embed + aligner + three sentinel embeddings, BF16.
  if (vision.layers > 0) {
    ComponentSize v;
    v.name = "vision tower (estimate)";
    v.group = "vision";
    v.estimated = true;
    const uint64_t h = static_cast<uint64_t>(vision.dim), in = static_cast<uint64_t>(vision.inter);
    const uint64_t per_block = (3 * h * h + 3 * h) + (h * h + h) + (2 * in * h) + (in * h) + 2 * h;
    const uint64_t r2 = static_cast<uint64_t>(vision.downsample * vision.downsample);
    const uint64_t d = static_cast<uint64_t>(c.dim);
    v.params = per_block * static_cast<uint64_t>(vision.layers) + (3 * static_cast<uint64_t>(vision.patch * vision.patch) * h + h) +
               h + (h * r2 * d + d) + (d * d + d) + 3 * d;
    v.bytes = v.ram_bytes = 2 * v.params;
    v.bytes_by_dtype[DType::kBF16] = v.bytes;
    f.components.push_back(v);
  }
  f.checkpoint_bytes = 0;
  for (const ComponentSize& cs : f.components) f.checkpoint_bytes += cs.bytes;

  // Routed experts of the backbone.
  f.experts_per_layer.resize(static_cast<size_t>(c.n_layers));
  for (int l = 0; l < c.n_layers; ++l) f.experts_per_layer[static_cast<size_t>(l)] = c.n_experts(l);
  for (int i = 0; i < 3; ++i) {
    const std::string p = "layers.0.ffn.experts.0.w" + std::to_string(i + 1);
    f.expert_part_bytes[static_cast<size_t>(2 * i)] = stored(*by_name.at(p + ".weight"));
    f.expert_part_bytes[static_cast<size_t>(2 * i + 1)] = stored(*by_name.at(p + ".scale"));
  }
  for (uint64_t b : f.expert_part_bytes) f.expert_bytes += b;

  // Engram rows per token.
  f.engram_rows_per_token = static_cast<int>(c.engram_layer_ids.size()) * c.engram_n_cols();
  f.engram_row_bytes = quant.engram ? dtype_nbytes(*quant.engram, c.engram_head_dim)
                              : static_cast<uint64_t>(c.engram_head_dim + c.engram_head_dim / 32);
  f.engram_bytes_per_token = static_cast<uint64_t>(f.engram_rows_per_token) * f.engram_row_bytes;
  f.kv = kv_footprint(c);
  for (int l = 0; l < c.n_layers; ++l)
    if (c.compress_ratio(l) == 1) {
      f.first_decoder_layer = l;
      break;
    }

  // The linears a token runs: every 2-D weight of the backbone and the head, except lookups
  // (embed, Engram tables) and the Engram q/k weights (elementwise). Routed experts: expert 0.
  for (const SynthTensor& t : tensors) {
    const std::string& n = t.decl.name;
    if (!ends_with(n, ".weight") && !ends_with(n, "_fn")) continue;
    if (t.decl.shape.rank != 2) continue;
    if (n.rfind("mtp.", 0) == 0 || n == "embed.weight" || contains(n, ".engram.embed.") ||
        ends_with(n, ".q_weight") || ends_with(n, ".k_weight"))
      continue;
    const bool routed = contains(n, ".ffn.experts.");
    if (routed && !contains(n, ".ffn.experts.0.")) continue;
    LinearUse u;
    u.name = ends_with(n, ".weight") ? n.substr(0, n.size() - 7) : n;
    u.layer = layer_of(n);
    u.routed = routed;
    u.out = t.decl.shape[0];
    u.in = t.decl.shape[1];
    u.bytes = stored(t);
    if (auto it = by_name.find(u.name + ".scale"); it != by_name.end()) u.bytes += stored(*it->second);
    switch (t.decl.dtype) {
      case DType::kF8E4M3: u.kind = LinearKind::kFp8; break;
      case DType::kI8: u.kind = LinearKind::kFp4; u.in *= 2; break;
      case DType::kBF16: u.kind = LinearKind::kBf16; break;
      default: u.kind = LinearKind::kF32; break;
    }
    // The LM head's logits feed only the sampler: model.cpp runs a BF16 head in free order.
    if (u.layer < 0 && u.kind == LinearKind::kBf16) u.kind = LinearKind::kBf16Any;
    if (auto it = target.find(n); it != target.end()) {
      u.block = it->second;
      u.kind = LinearKind::kFp8;  // rates: see LinearUse::block
    }
    if (contains(n, ".attn.wo_a.")) {  // a BF16 linear (FP8 codes kept or widened), one call per output group
      const bool fp8 = !u.block && t.decl.dtype == DType::kF8E4M3 && wo_a_keeps_fp8(c);
      u.kind = fp8 ? LinearKind::kBf16E4m3 : LinearKind::kBf16;
      u.block.reset();
      u.bytes = (fp8 ? u.bytes : 2 * static_cast<uint64_t>(u.out * u.in)) / static_cast<uint64_t>(c.o_groups);
      u.calls = c.o_groups;
      u.out /= c.o_groups;
    }
    if (contains(n, ".indexer.wk.")) u.per_token = 1.0 / std::max(1, c.compress_ratio(u.layer));
    f.linears.push_back(std::move(u));
  }

  // Active per token.
  const uint64_t embed_row_bytes = by_name.at("embed.weight")->decl.nbytes() / static_cast<uint64_t>(c.vocab_size);
  auto accumulate = [&](ActivePerToken& a, int last_layer, bool head, int extra_layer) {
    a.params = static_cast<uint64_t>(c.dim);  // the embedding row
    a.weight_bytes = embed_row_bytes;
    for (const LinearUse& u : f.linears) {
      const bool in_range = u.layer >= 0 && u.layer <= last_layer;
      // Replay: the first decoder layer still runs its compressor and index keys for every token.
      const bool extra = u.layer == extra_layer && (contains(u.name, ".compressor.") || contains(u.name, ".indexer.wk"));
      if (!(in_range || extra || (head && u.layer < 0))) continue;
      const double mult = u.per_token * u.calls * (u.routed ? c.n_active(u.layer) : 1);
      const uint64_t p = static_cast<uint64_t>(static_cast<double>(u.out * u.in) * mult + 0.5);
      a.params += p;
      const uint64_t b = static_cast<uint64_t>(static_cast<double>(u.bytes) * mult + 0.5);
      a.weight_bytes += b;
      if (u.routed) a.expert_bytes += b;
      a.linear_flops += 2.0 * static_cast<double>(p);
    }
    for (int l : c.engram_layer_ids)
      if (l <= last_layer) {
        a.engram_rows += static_cast<uint64_t>(c.engram_n_cols());
        a.params += static_cast<uint64_t>(c.engram_n_cols() * c.engram_head_dim);
      }
    a.engram_bytes = a.engram_rows * f.engram_row_bytes;
  };
  accumulate(f.decode, c.n_layers - 1, true, -1);
  accumulate(f.prefill_exact, c.n_layers - 1, false, -1);
  if (f.first_decoder_layer >= 0)
    accumulate(f.prefill_replay, f.first_decoder_layer - 1, false, f.first_decoder_layer);
  else
    f.prefill_replay = f.prefill_exact;
  return f;
}

}  // namespace strata::tools
