#include "model/config.h"

#include "io/checkpoint.h"

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <limits>
#include <nlohmann/json.hpp>

#include "io/file.h"
#include "io/json_limits.h"

namespace strata::model {

const char* score_func_name(ScoreFunc f) {
  switch (f) {
    case ScoreFunc::kSqrtSoftplus: return "sqrtsoftplus";
    case ScoreFunc::kSoftmax: return "softmax";
    case ScoreFunc::kSigmoid: return "sigmoid";
  }
  return "?";
}

Result<ScoreFunc> parse_score_func(const std::string& s) {
  for (ScoreFunc f : {ScoreFunc::kSqrtSoftplus, ScoreFunc::kSoftmax, ScoreFunc::kSigmoid})
    if (s == score_func_name(f)) return f;
  return InvalidArgument("config.json: scoring_func '" + s + "' is not one of sqrtsoftplus, softmax, sigmoid");
}

namespace {

using json = nlohmann::json;

// Looks a field up by its HF name (inside text_config when present) or its ModelArgs name.
class FieldReader {
 public:
  FieldReader(const json& root, std::string what) : root_(root), what_(std::move(what)) {
    auto tc = root.find("text_config");
    text_ = (tc != root.end() && tc->is_object()) ? &*tc : &root;
    prefix_ = (text_ != &root) ? "text_config." : "";
  }

  // Finds `hf` (dotted path inside text_config) or `flat` at the root; nullptr if neither.
  const json* find(const std::string& hf, const std::string& flat, std::string* found_as) const {
    if (!hf.empty()) {
      const json* j = text_;
      size_t start = 0;
      bool ok = true;
      while (ok) {
        size_t dot = hf.find('.', start);
        std::string part = hf.substr(start, dot == std::string::npos ? std::string::npos : dot - start);
        auto it = j->find(part);
        if (it == j->end()) {
          ok = false;
          break;
        }
        j = &*it;
        if (dot == std::string::npos) break;
        start = dot + 1;
      }
      if (ok && !j->is_null()) {
        *found_as = prefix_ + hf;
        return j;
      }
    }
    if (!flat.empty()) {
      for (const json* base : {text_, &root_}) {
        auto it = base->find(flat);
        if (it != base->end() && !it->is_null()) {
          *found_as = (base == text_ ? prefix_ : "") + flat;
          return &*it;
        }
      }
    }
    return nullptr;
  }

  Status missing(const std::string& hf, const std::string& flat) const {
    std::string name = !hf.empty() ? prefix_ + hf : flat;
    return InvalidArgument(what_ + ": missing field '" + name + "' (ModelArgs." + flat + ")");
  }
  Status wrong(const std::string& as, const std::string& expected) const {
    return InvalidArgument(what_ + ": field '" + as + "' must be " + expected);
  }

  template <typename T>
  Status get_int(const std::string& hf, const std::string& flat, T* out, bool required) const {
    std::string as;
    const json* j = find(hf, flat, &as);
    if (!j) return required ? missing(hf, flat) : Status();
    if (!j->is_number_integer()) return wrong(as, "an integer");
    const int64_t v = j->get<int64_t>();
    if (v < static_cast<int64_t>(std::numeric_limits<T>::min()) || v > static_cast<int64_t>(std::numeric_limits<T>::max()))
      return wrong(as, "an integer in [" + std::to_string(std::numeric_limits<T>::min()) + ", " +
                           std::to_string(std::numeric_limits<T>::max()) + "], got " + std::to_string(v));
    *out = static_cast<T>(v);
    return Status();
  }
  Status get_double(const std::string& hf, const std::string& flat, double* out, bool required) const {
    std::string as;
    const json* j = find(hf, flat, &as);
    if (!j) return required ? missing(hf, flat) : Status();
    if (!j->is_number()) return wrong(as, "a number");
    *out = j->get<double>();
    return Status();
  }
  Status get_bool(const std::string& hf, const std::string& flat, bool* out, bool required) const {
    std::string as;
    const json* j = find(hf, flat, &as);
    if (!j) return required ? missing(hf, flat) : Status();
    if (!j->is_boolean()) return wrong(as, "true or false");
    *out = j->get<bool>();
    return Status();
  }
  Status get_string(const std::string& hf, const std::string& flat, std::string* out, bool required) const {
    std::string as;
    const json* j = find(hf, flat, &as);
    if (!j) return required ? missing(hf, flat) : Status();
    if (!j->is_string()) return wrong(as, "a string");
    *out = j->get<std::string>();
    return Status();
  }
  template <typename T>
  Status get_int_list(const std::string& hf, const std::string& flat, std::vector<T>* out, bool required) const {
    std::string as;
    const json* j = find(hf, flat, &as);
    if (!j) return required ? missing(hf, flat) : Status();
    if (!j->is_array()) return wrong(as, "a list of integers");
    out->clear();
    for (const auto& v : *j) {
      if (!v.is_number_integer()) return wrong(as, "a list of integers");
      const int64_t x = v.get<int64_t>();
      if (x < static_cast<int64_t>(std::numeric_limits<T>::min()) || x > static_cast<int64_t>(std::numeric_limits<T>::max()))
        return wrong(as, "a list of integers in range, got " + std::to_string(x));
      out->push_back(static_cast<T>(x));
    }
    return Status();
  }

 private:
  const json& root_;
  const json* text_;
  std::string prefix_;
  std::string what_;
};

bool contains(const std::vector<int>& v, int x) { return std::find(v.begin(), v.end(), x) != v.end(); }

}  // namespace

Result<ModelConfig> ModelConfig::parse(const std::string& json_text, const std::string& what) {
  STRATA_RETURN_IF_ERROR(io::check_json_nesting(json_text, 16, what));
  json root = json::parse(json_text, nullptr, false);
  if (root.is_discarded() || !root.is_object()) return InvalidArgument(what + ": not a JSON object");
  FieldReader r(root, what);
  ModelConfig c;
  constexpr bool kReq = true, kOpt = false;
  STRATA_RETURN_IF_ERROR(r.get_int("vocab_size", "vocab_size", &c.vocab_size, kReq));
  STRATA_RETURN_IF_ERROR(r.get_int("hidden_size", "dim", &c.dim, kReq));
  STRATA_RETURN_IF_ERROR(r.get_int("moe_intermediate_size", "moe_inter_dim", &c.moe_inter_dim, kReq));
  STRATA_RETURN_IF_ERROR(r.get_int("num_hidden_layers", "n_layers", &c.n_layers, kReq));
  STRATA_RETURN_IF_ERROR(r.get_int("num_nextn_predict_layers", "n_mtp_layers", &c.n_mtp_layers, kOpt));
  STRATA_RETURN_IF_ERROR(r.get_int("num_attention_heads", "n_heads", &c.n_heads, kReq));
  STRATA_RETURN_IF_ERROR(r.get_int("head_dim", "head_dim", &c.head_dim, kReq));
  STRATA_RETURN_IF_ERROR(r.get_int("qk_rope_head_dim", "rope_head_dim", &c.rope_head_dim, kReq));
  STRATA_RETURN_IF_ERROR(r.get_int("q_lora_rank", "q_lora_rank", &c.q_lora_rank, kReq));
  STRATA_RETURN_IF_ERROR(r.get_int("o_groups", "o_groups", &c.o_groups, kReq));
  STRATA_RETURN_IF_ERROR(r.get_int("o_lora_rank", "o_lora_rank", &c.o_lora_rank, kReq));
  STRATA_RETURN_IF_ERROR(r.get_double("rms_norm_eps", "norm_eps", &c.norm_eps, kOpt));

  STRATA_RETURN_IF_ERROR(r.get_int("n_routed_experts", "n_routed_experts", &c.n_routed_experts, kReq));
  STRATA_RETURN_IF_ERROR(r.get_int("n_shared_experts", "n_shared_experts", &c.n_shared_experts, kOpt));
  STRATA_RETURN_IF_ERROR(r.get_int("num_experts_per_tok", "n_activated_experts", &c.n_activated_experts, kReq));
  {
    std::string sf = score_func_name(c.score_func);
    STRATA_RETURN_IF_ERROR(r.get_string("scoring_func", "score_func", &sf, kOpt));
    STRATA_ASSIGN_OR_RETURN(c.score_func, parse_score_func(sf));
  }
  STRATA_RETURN_IF_ERROR(r.get_double("gate_temp", "gate_temp", &c.gate_temp, kOpt));
  STRATA_RETURN_IF_ERROR(r.get_bool("norm_topk_prob", "norm_topk_prob", &c.norm_topk_prob, kOpt));
  STRATA_RETURN_IF_ERROR(r.get_double("routed_scaling_factor", "route_scale", &c.route_scale, kOpt));
  STRATA_RETURN_IF_ERROR(r.get_double("swiglu_limit", "swiglu_limit", &c.swiglu_limit, kOpt));
  {
    std::string act = "silu";
    STRATA_RETURN_IF_ERROR(r.get_string("hidden_act", "", &act, kOpt));
    if (act != "silu") return NotSupported(what + ": hidden_act '" + act + "', V4.1 experts use 'silu' (SwiGLU)");
  }

  STRATA_RETURN_IF_ERROR(r.get_int("sliding_window", "window_size", &c.window_size, kReq));
  STRATA_RETURN_IF_ERROR(r.get_int_list("compress_ratios", "compress_ratios", &c.compress_ratios, kReq));
  STRATA_RETURN_IF_ERROR(r.get_int_list("kv_source_layer_ids", "kv_source_layers", &c.kv_source_layers, kReq));
  STRATA_RETURN_IF_ERROR(
      r.get_int_list("index_source_layer_ids", "index_source_layers", &c.index_source_layers, kReq));
  STRATA_RETURN_IF_ERROR(
      r.get_int("candidate_source_layer_id", "candidate_source_layer", &c.candidate_source_layer, kOpt));
  STRATA_RETURN_IF_ERROR(r.get_int("candidate_topk_blocks", "candidate_topk_blocks", &c.candidate_topk_blocks, kOpt));
  STRATA_RETURN_IF_ERROR(r.get_int("candidate_block_size", "candidate_block_size", &c.candidate_block_size, kOpt));
  STRATA_RETURN_IF_ERROR(r.get_int("index_n_heads", "index_n_heads", &c.index_n_heads, kReq));
  STRATA_RETURN_IF_ERROR(r.get_int("index_head_dim", "index_head_dim", &c.index_head_dim, kReq));
  STRATA_RETURN_IF_ERROR(r.get_int("index_topk", "index_topk", &c.index_topk, kReq));

  STRATA_RETURN_IF_ERROR(r.get_double("rope_theta", "rope_theta", &c.rope_theta, kReq));
  STRATA_RETURN_IF_ERROR(r.get_double("compress_rope_theta", "compress_rope_theta", &c.compress_rope_theta, kReq));
  STRATA_RETURN_IF_ERROR(
      r.get_int("rope_scaling.original_max_position_embeddings", "original_seq_len", &c.original_seq_len, kOpt));
  STRATA_RETURN_IF_ERROR(r.get_double("rope_scaling.factor", "rope_factor", &c.rope_factor, kOpt));
  STRATA_RETURN_IF_ERROR(r.get_double("rope_scaling.beta_fast", "beta_fast", &c.beta_fast, kOpt));
  STRATA_RETURN_IF_ERROR(r.get_double("rope_scaling.beta_slow", "beta_slow", &c.beta_slow, kOpt));
  STRATA_RETURN_IF_ERROR(
      r.get_int("max_position_embeddings", "max_position_embeddings", &c.max_position_embeddings, kOpt));

  STRATA_RETURN_IF_ERROR(r.get_int("hc_mult", "hc_mult", &c.hc_mult, kReq));
  STRATA_RETURN_IF_ERROR(r.get_int("hc_sinkhorn_iters", "hc_sinkhorn_iters", &c.hc_sinkhorn_iters, kReq));
  STRATA_RETURN_IF_ERROR(r.get_double("hc_eps", "hc_eps", &c.hc_eps, kReq));

  STRATA_RETURN_IF_ERROR(r.get_int_list("engram_layer_ids", "engram_layer_ids", &c.engram_layer_ids, kOpt));
  if (!c.engram_layer_ids.empty()) {
    STRATA_RETURN_IF_ERROR(
        r.get_int_list("engram_num_embeddings", "engram_num_embeddings", &c.engram_num_embeddings, kReq));
    STRATA_RETURN_IF_ERROR(
        r.get_int("engram_max_ngram_size", "engram_max_ngram_size", &c.engram_max_ngram_size, kReq));
    STRATA_RETURN_IF_ERROR(r.get_int("engram_vocab_size", "engram_vocab_size", &c.engram_vocab_size, kReq));
    STRATA_RETURN_IF_ERROR(r.get_int("engram_n_heads", "engram_n_heads", &c.engram_n_heads, kReq));
    STRATA_RETURN_IF_ERROR(r.get_int("engram_head_dim", "engram_head_dim", &c.engram_head_dim, kReq));
    STRATA_RETURN_IF_ERROR(r.get_int("engram_pad_token_id", "engram_pad_id", &c.engram_pad_id, kOpt));
    STRATA_RETURN_IF_ERROR(r.get_int("engram_compressed_vocab_size", "engram_compressed_vocab_size",
                                     &c.engram_compressed_vocab_size, kReq));
  }

  STRATA_RETURN_IF_ERROR(r.get_int("dspark_block_size", "dspark_block_size", &c.dspark_block_size, kOpt));
  STRATA_RETURN_IF_ERROR(r.get_int("dspark_noise_token_id", "dspark_noise_token_id", &c.dspark_noise_token_id, kOpt));
  STRATA_RETURN_IF_ERROR(
      r.get_int_list("dspark_target_layer_ids", "dspark_target_layer_ids", &c.dspark_target_layer_ids, kOpt));
  STRATA_RETURN_IF_ERROR(r.get_int("dspark_markov_rank", "dspark_markov_rank", &c.dspark_markov_rank, kOpt));
  STRATA_RETURN_IF_ERROR(
      r.get_int("dspark_n_routed_experts", "dspark_n_routed_experts", &c.dspark_n_routed_experts, kOpt));
  STRATA_RETURN_IF_ERROR(r.get_int("dspark_num_experts_per_tok", "dspark_n_activated_experts",
                                   &c.dspark_n_activated_experts, kOpt));

  // Root-level (HF) fields.
  if (auto it = root.find("bos_token_id"); it != root.end() && it->is_number_integer()) c.bos_token_id = *it;
  if (auto it = root.find("eos_token_id"); it != root.end() && it->is_number_integer()) c.eos_token_id = *it;
  if (auto q = root.find("quantization_config"); q != root.end() && q->is_object()) {
    if (auto e = q->find("expert_dtype"); e != q->end() && e->is_string()) c.expert_dtype = *e;
    if (auto b = q->find("weight_block_size"); b != q->end()) {
      if (!b->is_array() || b->size() != 2 || !(*b)[0].is_number_integer() || (*b)[0] != (*b)[1])
        return InvalidArgument(what + ": quantization_config.weight_block_size must be [B, B]");
      c.weight_block_size = (*b)[0].get<int>();
    }
    if (auto f = q->find("scale_fmt"); f != q->end() && f->is_string() && *f != "ue8m0")
      return NotSupported(what + ": quantization_config.scale_fmt '" + f->get<std::string>() +
                          "', strata supports 'ue8m0'");
  } else if (auto e = root.find("expert_dtype"); e != root.end() && e->is_string()) {
    c.expert_dtype = *e;
  }

  // The HF config lists a ratio per backbone layer plus the DSpark stages; accept a backbone-only
  // list by padding the stages with 0 (they are window-only).
  // Only counts validate() will accept are used here: a negative or huge num_nextn_predict_layers
  // threw std::length_error or overflowed int (found by fuzz/config_fuzz); validate() names it.
  if (static_cast<int>(c.compress_ratios.size()) == c.n_layers && c.n_layers >= 0 && c.n_layers <= 1024 &&
      c.n_mtp_layers >= 0 && c.n_mtp_layers <= 64)
    c.compress_ratios.resize(static_cast<size_t>(c.n_layers + c.n_mtp_layers), 0);
  Status v = c.validate();
  if (!v.ok()) return v.with_context(what);
  return c;
}

Result<ModelConfig> ModelConfig::load(const std::string& dir) {
  // A GGUF from `strata quantize` carries its config.json as metadata (io::read_checkpoint_text).
  const std::string path =
      io::is_gguf_path(dir) ? dir + ":" + io::gguf_text_key("config.json") : (std::filesystem::path(dir) / "config.json").string();
  STRATA_ASSIGN_OR_RETURN(std::string text, io::read_checkpoint_text(dir, "config.json", 16u << 20));
  return parse(text, path);
}

Status ModelConfig::validate() const {
  auto bad = [](const std::string& m) { return InvalidArgument(m); };
  // Upper bounds far above any V4.1 size: a corrupt or hostile config must fail here, not in an
  // allocation of its implied size.
  struct Limit {
    const char* name;
    int64_t value, max;
  };
  const Limit limits[] = {
      {"vocab_size", vocab_size, 1 << 24},          {"hidden_size (dim)", dim, 1 << 16},
      {"moe_intermediate_size", moe_inter_dim, 1 << 20}, {"num_hidden_layers", n_layers, 1024},
      {"num_nextn_predict_layers", n_mtp_layers, 64}, {"num_attention_heads", n_heads, 4096},
      {"head_dim", head_dim, 1 << 14},              {"q_lora_rank", q_lora_rank, 1 << 16},
      {"o_lora_rank", o_lora_rank, 1 << 16},        {"sliding_window", window_size, 1 << 20},
      {"n_routed_experts", n_routed_experts, 1 << 16}, {"index_n_heads", index_n_heads, 4096},
      {"index_head_dim", index_head_dim, 1 << 14},  {"index_topk", index_topk, 1 << 20},
      {"candidate_topk_blocks", candidate_topk_blocks, 1 << 24}, {"candidate_block_size", candidate_block_size, 1 << 16},
      {"hc_mult", hc_mult, 64},                     {"hc_sinkhorn_iters", hc_sinkhorn_iters, 10000},
      {"engram_head_dim", engram_head_dim, 1 << 14}, {"engram_n_heads", engram_n_heads, 1024},
      {"engram_max_ngram_size", engram_max_ngram_size, 16}, {"max_position_embeddings", max_position_embeddings, int64_t{1} << 30},
      {"dspark_markov_rank", dspark_markov_rank, 1 << 16}, {"dspark_block_size", dspark_block_size, 64},
      {"dspark_n_routed_experts", dspark_n_routed_experts, 1 << 16},
      {"dspark_num_experts_per_tok", dspark_n_activated_experts, 1 << 16},
  };
  for (const Limit& l : limits)
    if (l.value < 0 || l.value > l.max)
      return bad(std::string(l.name) + " = " + std::to_string(l.value) + " is outside [0, " + std::to_string(l.max) + "]");
  auto positive = [](double v) { return std::isfinite(v) && v > 0; };
  if (!positive(rope_theta) || !positive(compress_rope_theta))
    return bad("rope_theta and compress_rope_theta must be positive");
  if (original_seq_len > 0 && !positive(rope_factor)) return bad("rope_scaling.factor must be positive");
  if (!std::isfinite(norm_eps) || norm_eps < 0) return bad("rms_norm_eps must be >= 0");
  if (!std::isfinite(hc_eps) || hc_eps < 0) return bad("hc_eps must be >= 0");
  if (!positive(gate_temp)) return bad("gate_temp must be positive");
  if (!std::isfinite(route_scale) || !std::isfinite(swiglu_limit) || swiglu_limit < 0)
    return bad("routed_scaling_factor and swiglu_limit must be finite (swiglu_limit >= 0)");
  if (vocab_size <= 0 || dim <= 0 || n_layers <= 0 || n_heads <= 0 || head_dim <= 0)
    return bad("vocab_size, dim, n_layers, n_heads and head_dim must be positive");
  if (dim % 32 != 0) return bad("dim " + std::to_string(dim) + " must be a multiple of 32 (FP8 activation blocks)");
  if (moe_inter_dim <= 0 || moe_inter_dim % 32 != 0)
    return bad("moe_inter_dim " + std::to_string(moe_inter_dim) + " must be a positive multiple of 32");
  if (rope_head_dim <= 0 || rope_head_dim > head_dim || rope_head_dim % 2 != 0)
    return bad("rope_head_dim must be even and in (0, head_dim]");
  if (head_dim % 32 != 0) return bad("head_dim must be a multiple of 32");
  if (q_lora_rank <= 0 || q_lora_rank % 32 != 0) return bad("q_lora_rank must be a positive multiple of 32");
  if (o_groups <= 0 || n_heads % o_groups != 0) return bad("n_heads must be a multiple of o_groups");
  if ((n_heads / o_groups) * head_dim % 32 != 0) return bad("(n_heads / o_groups) * head_dim must be a multiple of 32");
  if (o_lora_rank <= 0 || (o_groups * o_lora_rank) % 32 != 0) return bad("o_groups * o_lora_rank must be a multiple of 32");
  if (n_routed_experts <= 0 || n_activated_experts <= 0 || n_activated_experts > n_routed_experts)
    return bad("need 0 < num_experts_per_tok (n_activated_experts) <= n_routed_experts");
  // The DSpark stages route like the backbone, with their own expert counts where given (0 = the
  // backbone's): top-k above the expert count would index past the router's scores (issue 13 item 5).
  if (n_mtp_layers > 0 && n_active(n_layers) > n_experts(n_layers))
    return bad("dspark_num_experts_per_tok (" + std::to_string(n_active(n_layers)) + ") exceeds dspark_n_routed_experts (" +
               std::to_string(n_experts(n_layers)) + "); the DSpark stages need 0 < top-k <= experts");
  if (n_shared_experts != 1) return NotSupported("n_shared_experts " + std::to_string(n_shared_experts) + ", expected 1");
  if (expert_dtype != "fp4") return NotSupported("expert_dtype '" + expert_dtype + "', strata reads 'fp4' (MXFP4) experts");
  if (weight_block_size != 32) return NotSupported("weight_block_size " + std::to_string(weight_block_size) + ", expected 32");
  if (window_size <= 0) return bad("sliding_window (window_size) must be positive");
  if (static_cast<int>(compress_ratios.size()) != n_layers + n_mtp_layers)
    return bad("compress_ratios has " + std::to_string(compress_ratios.size()) + " entries, expected n_layers + " +
               "num_nextn_predict_layers = " + std::to_string(n_layers + n_mtp_layers));
  for (int r : compress_ratios)
    if (r < 0) return bad("compress_ratios entries must be >= 0");
  for (int l = n_layers; l < n_layers + n_mtp_layers; ++l)
    if (compress_ratio(l) != 0) return NotSupported("DSpark stage " + std::to_string(l) + " has compress ratio != 0");
  int prev = -1;
  for (int l : kv_source_layers) {
    if (l <= prev || l < 0 || l >= n_layers || compress_ratio(l) == 0)
      return bad("kv_source_layer_ids must be increasing backbone layers with compress ratio > 0 (layer " +
                 std::to_string(l) + ")");
    prev = l;
  }
  prev = -1;
  for (int l : index_source_layers) {
    if (l <= prev || l < 0 || l >= n_layers || compress_ratio(l) == 0)
      return bad("index_source_layer_ids must be increasing backbone layers with compress ratio > 0 (layer " +
                 std::to_string(l) + ")");
    prev = l;
  }
  // Every compressed layer needs a KV source at or before it with the same ratio, and a top-k source.
  for (int l = 0; l < n_layers; ++l) {
    if (compress_ratio(l) == 0) continue;
    int src = -1, idx = -1;
    for (int s : kv_source_layers)
      if (s <= l) src = s;
    for (int s : index_source_layers)
      if (s <= l) idx = s;
    if (src < 0 || compress_ratio(src) != compress_ratio(l))
      return bad("layer " + std::to_string(l) + " (compress ratio " + std::to_string(compress_ratio(l)) +
                 ") has no earlier kv source layer with the same ratio");
    if (idx < 0 || compress_ratio(idx) != compress_ratio(l))
      return bad("layer " + std::to_string(l) + " has no earlier index source layer with the same ratio");
    // An index source that does not own keys borrows the latest owner's keys: same ratio required.
    if (is_index_source(l) && !is_kv_source(l) && compress_ratio(src) != compress_ratio(l))
      return bad("index source layer " + std::to_string(l) + " borrows index keys of a different ratio");
  }
  if (candidate_source_layer >= 0) {
    if (!is_index_source(candidate_source_layer))
      return bad("candidate_source_layer_id " + std::to_string(candidate_source_layer) + " is not an index source");
    if (candidate_block_size <= 0 || candidate_topk_blocks <= 0)
      return bad("candidate_block_size and candidate_topk_blocks must be positive");
  }
  if (index_n_heads <= 0 || index_head_dim <= 0 || index_head_dim % 32 != 0 || index_head_dim < rope_head_dim)
    return bad("index_head_dim must be a positive multiple of 32 and >= rope_head_dim");
  if (index_topk <= 0) return bad("index_topk must be positive");
  if (hc_mult <= 0 || hc_sinkhorn_iters <= 0) return bad("hc_mult and hc_sinkhorn_iters must be positive");
  if (!engram_layer_ids.empty()) {
    if (engram_num_embeddings.size() != engram_layer_ids.size())
      return bad("engram_num_embeddings must have one entry per engram_layer_ids entry");
    for (int l : engram_layer_ids)
      if (l < 0 || l >= n_layers) return bad("engram_layer_ids entry " + std::to_string(l) + " out of range");
    if (engram_max_ngram_size < 2 || engram_n_heads <= 0 || engram_head_dim <= 0 || engram_head_dim % 32 != 0)
      return bad("engram_max_ngram_size >= 2, engram_n_heads > 0 and engram_head_dim a multiple of 32 required");
    if (engram_compressed_vocab_size <= 0) return bad("engram_compressed_vocab_size must be positive");
  }
  if (n_mtp_layers > 0 && dspark_block_size > 0) {
    if (dspark_target_layer_ids.empty()) return bad("DSpark needs dspark_target_layer_ids");
    // Strictly increasing: the reference concatenates the targets' features in layer order, once each.
    for (size_t i = 0; i < dspark_target_layer_ids.size(); ++i) {
      const int l = dspark_target_layer_ids[i];
      if (l < 0 || l >= n_layers)
        return bad("dspark_target_layer_ids entry " + std::to_string(l) + " is outside the layers [0, " +
                   std::to_string(n_layers) + ")");
      if (i > 0 && l <= dspark_target_layer_ids[i - 1])
        return bad("dspark_target_layer_ids must be strictly increasing (" + std::to_string(dspark_target_layer_ids[i - 1]) +
                   " then " + std::to_string(l) + ")");
    }
    if (dspark_noise_token_id == -1)
      return bad("dspark_noise_token_id is missing (the draft's filler token, needed with dspark_block_size > 0)");
    if (dspark_noise_token_id < 0 || dspark_noise_token_id >= vocab_size)
      return bad("dspark_noise_token_id " + std::to_string(dspark_noise_token_id) + " is outside the vocabulary [0, " +
                 std::to_string(vocab_size) + ")");
  }
  return Status();
}

bool ModelConfig::is_kv_source(int layer) const { return layer < n_layers && contains(kv_source_layers, layer); }
bool ModelConfig::is_index_source(int layer) const {
  return layer < n_layers && contains(index_source_layers, layer);
}
int ModelConfig::kv_source_of(int layer) const {
  int best = -1;
  for (int l : kv_source_layers)
    if (l <= layer) best = l;
  return best;
}
int ModelConfig::index_source_of(int layer) const {
  int best = -1;
  for (int l : index_source_layers)
    if (l <= layer) best = l;
  return best;
}
int ModelConfig::key_owner_of(int layer) const {
  int best = -1;
  for (int l : kv_source_layers)
    if (l <= layer && is_index_source(l)) best = l;
  return best;
}
int ModelConfig::engram_index(int layer) const {
  auto it = std::find(engram_layer_ids.begin(), engram_layer_ids.end(), layer);
  return it == engram_layer_ids.end() ? -1 : static_cast<int>(it - engram_layer_ids.begin());
}
int ModelConfig::n_experts(int layer) const {
  return layer < n_layers ? n_routed_experts : (dspark_n_routed_experts ? dspark_n_routed_experts : n_routed_experts);
}
int ModelConfig::n_active(int layer) const {
  return layer < n_layers ? n_activated_experts
                          : (dspark_n_activated_experts ? dspark_n_activated_experts : n_activated_experts);
}

}  // namespace strata::model
