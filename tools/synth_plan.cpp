// The tensor list and config files of a synthetic V4.1 checkpoint.
// Names, dtypes, shapes and weight scales follow shared/tools/make_tiny_v41.py (write_block, main),
// which writes the release's storage format.
#include "tools/synth_plan.h"

#include <cmath>
#include <nlohmann/json.hpp>

#include "tools/synth_fill.h"

namespace strata::tools {

namespace {

using ojson = nlohmann::ordered_json;

class TensorList {
 public:
  TensorList(uint64_t seed, std::vector<SynthTensor>* out) : seed_(seed), out_(out) {}

  void add(std::string name, DType dtype, Shape shape, FillKind fill, float mean, float std, uint64_t key,
           int block_rows = 32, int64_t value_cols = 0) {
    SynthTensor t;
    t.decl.name = std::move(name);
    t.decl.dtype = dtype;
    t.decl.shape = shape;
    t.fill = fill;
    t.mean = mean;
    t.std = std;
    t.key = key;
    t.block_rows = block_rows;
    t.value_cols = value_cols;
    out_->push_back(std::move(t));
  }
  void normal(const std::string& name, DType dtype, Shape shape, float mean, float std) {
    add(name, dtype, shape, FillKind::kNormal, mean, std, fill_key(seed_, name));
  }
  void bf16(const std::string& name, Shape shape, double std) {
    normal(name, DType::kBF16, shape, 0.0f, static_cast<float>(std));
  }
  // RMSNorm weight: 1 + N(0, 0.1^2).
  void norm(const std::string& name, int64_t n) { normal(name, DType::kBF16, Shape{n}, 1.0f, 0.1f); }
  // FP8 E4M3 [out, in] + UE8M0 scale per [32, 32] block, N(0, (gain / sqrt(in))^2).
  void fp8_linear(const std::string& prefix, int64_t out, int64_t in, double gain = 1.0) {
    const float std = static_cast<float>(gain / std::sqrt(static_cast<double>(in)));
    const uint64_t key = fill_key(seed_, prefix);
    add(prefix + ".weight", DType::kF8E4M3, Shape{out, in}, FillKind::kFp8Weight, 0, std, key, 32, in);
    add(prefix + ".scale", DType::kF8E8M0, Shape{(out + 31) / 32, (in + 31) / 32}, FillKind::kFp8Scale, 0, std, key,
        32);
  }
  // MXFP4 [out, in/2] packed E2M1 (I8) + E8M0 [out, in/32], N(0, (gain / sqrt(in))^2).
  void fp4_linear(const std::string& prefix, int64_t out, int64_t in, double gain) {
    const float std = static_cast<float>(gain / std::sqrt(static_cast<double>(in)));
    const uint64_t key = fill_key(seed_, prefix);
    add(prefix + ".weight", DType::kI8, Shape{out, in / 2}, FillKind::kFp4Weight, 0, std, key, 1, in);
    add(prefix + ".scale", DType::kF8E8M0, Shape{out, in / 32}, FillKind::kFp4Scale, 0, std, key, 1);
  }
  // Engram table: E4M3 [rows, head_dim] + E8M0 [rows, head_dim/32], N(0, 1).
  void fp8_rows(const std::string& prefix, int64_t rows, int64_t cols) {
    const uint64_t key = fill_key(seed_, prefix);
    add(prefix + ".weight", DType::kF8E4M3, Shape{rows, cols}, FillKind::kFp8Weight, 0, 1.0f, key, 1, cols);
    add(prefix + ".scale", DType::kF8E8M0, Shape{rows, cols / 32}, FillKind::kFp8Scale, 0, 1.0f, key, 1);
  }

 private:
  uint64_t seed_;
  std::vector<SynthTensor>* out_;
};

// One transformer block (backbone layer or DSpark stage): make_tiny_v41.py write_block.
void block_tensors(TensorList& w, const model::ModelConfig& c, int layer) {
  const bool is_mtp = layer >= c.n_layers;
  const std::string p = is_mtp ? "mtp." + std::to_string(layer - c.n_layers) : "layers." + std::to_string(layer);
  const int64_t dim = c.dim, hc = c.hc_mult;
  const int64_t mix = (2 + hc) * hc;
  // mHC (F32): mixes = fn . (x / rms(x)) ~ N(0, 0.5^2); scale ~1; base sets the operating point.
  for (const char* br : {"attn", "ffn"}) {
    const std::string b = p + ".hc_" + br;
    w.normal(b + "_fn", DType::kF32, Shape{mix, hc * dim}, 0.0f, static_cast<float>(0.5 / std::sqrt(hc * dim)));
    w.normal(b + "_base", DType::kF32, Shape{mix}, 0.0f, 0.5f);
    w.normal(b + "_scale", DType::kF32, Shape{3}, 1.0f, 0.1f);
  }
  w.norm(p + ".attn_norm.weight", dim);
  w.norm(p + ".ffn_norm.weight", dim);
  const std::string a = p + ".attn";
  const int64_t H = c.n_heads, D = c.head_dim, R = c.q_lora_rank;
  w.normal(a + ".attn_sink", DType::kF32, Shape{H}, 0.0f, 1.0f);
  w.fp8_linear(a + ".wq_a", R, dim);
  w.norm(a + ".q_norm.weight", R);
  w.fp8_linear(a + ".wq_b", H * D, R);
  w.fp8_linear(a + ".wkv", D, dim);
  w.norm(a + ".kv_norm.weight", D);
  w.fp8_linear(a + ".wo_a", c.o_groups * c.o_lora_rank, H * D / c.o_groups);
  w.fp8_linear(a + ".wo_b", dim, c.o_groups * c.o_lora_rank);
  if (!is_mtp && c.is_kv_source(layer)) {
    const std::string cp = a + ".compressor";
    w.bf16(cp + ".wkv.weight", Shape{D, dim}, 1.0 / std::sqrt(static_cast<double>(dim)));
    if (c.compress_ratio(layer) > 1)
      w.bf16(cp + ".wgate.weight", Shape{D, dim}, 1.0 / std::sqrt(static_cast<double>(dim)));
    w.norm(cp + ".norm.weight", D);
    const std::string ix = a + ".indexer";
    w.bf16(ix + ".wk.weight", Shape{c.index_head_dim, D}, 1.0 / std::sqrt(static_cast<double>(D)));
    w.norm(ix + ".k_norm.weight", c.index_head_dim);
  }
  if (!is_mtp && c.is_index_source(layer)) {
    const std::string ix = a + ".indexer";
    w.fp8_linear(ix + ".wq_b", c.index_n_heads * c.index_head_dim, R);
    w.bf16(ix + ".weights_proj.weight", Shape{c.index_n_heads, dim}, 1.0 / std::sqrt(static_cast<double>(dim)));
  }
  const int ei = c.engram_index(layer);
  if (!is_mtp && ei >= 0) {
    const std::string e = p + ".engram";
    w.fp8_rows(e + ".embed", c.engram_num_embeddings[static_cast<size_t>(ei)], c.engram_head_dim);
    w.normal(e + ".q_weight", DType::kBF16, Shape{hc, dim}, 1.0f, 0.1f);
    w.normal(e + ".k_weight", DType::kBF16, Shape{hc, dim}, 1.0f, 0.1f);
    w.fp8_linear(e + ".wkv", dim * (hc + 1), c.engram_n_cols() * c.engram_head_dim);
  }
  const std::string f = p + ".ffn";
  const int n_exp = c.n_experts(layer);
  const int64_t inter = c.moe_inter_dim;
  w.bf16(f + ".gate.weight", Shape{n_exp, dim}, 1.0 / std::sqrt(static_cast<double>(dim)));
  w.normal(f + ".gate.bias", DType::kF32, Shape{n_exp}, 0.0f, 0.3f);
  for (int i = 0; i < n_exp; ++i) {
    const std::string x = f + ".experts." + std::to_string(i);
    w.fp4_linear(x + ".w1", inter, dim, 1.5);
    w.fp4_linear(x + ".w2", dim, inter, 0.7);
    w.fp4_linear(x + ".w3", inter, dim, 1.5);
  }
  w.fp8_linear(f + ".shared_experts.w1", inter, dim, 1.5);
  w.fp8_linear(f + ".shared_experts.w2", dim, inter, 0.7);
  w.fp8_linear(f + ".shared_experts.w3", inter, dim, 1.5);
}

// A JSON number: an integer when the value is integral (10000, not 10000.0), as the release writes.
ojson num(double v) {
  if (std::isfinite(v) && std::fabs(v) < 9e15 && v == std::floor(v)) return ojson(static_cast<int64_t>(v));
  return ojson(v);
}

}  // namespace

std::vector<SynthTensor> synth_tensors(const model::ModelConfig& c, uint64_t seed) {
  std::vector<SynthTensor> out;
  TensorList w(seed, &out);
  const int64_t dim = c.dim, V = c.vocab_size;
  w.normal("embed.weight", DType::kBF16, Shape{V, dim}, 0.0f, 1.0f);
  w.bf16("head.weight", Shape{V, dim}, 2.0 / std::sqrt(static_cast<double>(dim)));
  w.norm("norm.weight", dim);
  for (int l = 0; l < c.n_layers; ++l) block_tensors(w, c, l);
  for (int s = 0; s < c.n_mtp_layers; ++s) {
    const std::string p = "mtp." + std::to_string(s);
    block_tensors(w, c, c.n_layers + s);
    if (s == 0) {
      w.fp8_linear(p + ".main_proj", dim, dim * static_cast<int64_t>(c.dspark_target_layer_ids.size()));
      w.norm(p + ".main_norm.weight", dim);
    }
    if (s == c.n_mtp_layers - 1) {
      const int64_t r = c.dspark_markov_rank;
      w.norm(p + ".norm.weight", dim);
      w.bf16(p + ".markov_head.embed.weight", Shape{V, r}, 1.0);
      w.bf16(p + ".markov_head.head.weight", Shape{V, r}, 1.0 / std::sqrt(static_cast<double>(r)));
      w.bf16(p + ".confidence_head.proj.weight", Shape{1, dim + r}, 1.0 / std::sqrt(static_cast<double>(dim + r)));
    }
  }
  return out;
}

SizeBreakdown size_of(const std::vector<SynthTensor>& tensors) {
  SizeBreakdown s;
  for (const SynthTensor& t : tensors) {
    const uint64_t n = t.decl.nbytes();
    const std::string& name = t.decl.name;
    s.total += n;
    if (name.find(".experts.") != std::string::npos)
      s.expert_bytes += n;
    else if (name.find(".engram.embed.") != std::string::npos)
      s.engram_table_bytes += n;
    else if (name == "embed.weight" || name == "head.weight" || name.find(".markov_head.") != std::string::npos)
      s.embed_head_bytes += n;
  }
  return s;
}

SizeBreakdown size_of(const model::ModelConfig& c) { return size_of(synth_tensors(c, 0)); }

std::string config_json(const model::ModelConfig& c, const std::string& note) {
  std::vector<int> ratios = c.compress_ratios;
  ojson t;
  t["model_type"] = "deepseek_v41_text";
  t["vocab_size"] = c.vocab_size;
  t["hidden_size"] = c.dim;
  t["moe_intermediate_size"] = c.moe_inter_dim;
  t["num_hidden_layers"] = c.n_layers;
  t["num_attention_heads"] = c.n_heads;
  t["num_key_value_heads"] = 1;
  t["head_dim"] = c.head_dim;
  t["qk_rope_head_dim"] = c.rope_head_dim;
  t["q_lora_rank"] = c.q_lora_rank;
  t["o_lora_rank"] = c.o_lora_rank;
  t["o_groups"] = c.o_groups;
  t["hidden_act"] = "silu";
  t["swiglu_limit"] = c.swiglu_limit;
  t["rms_norm_eps"] = c.norm_eps;
  t["tie_word_embeddings"] = false;
  t["max_position_embeddings"] = c.max_position_embeddings;
  t["rope_theta"] = num(c.rope_theta);
  t["rope_scaling"] = {{"rope_type", "yarn"},
                       {"factor", num(c.rope_factor)},
                       {"beta_fast", num(c.beta_fast)},
                       {"beta_slow", num(c.beta_slow)},
                       {"original_max_position_embeddings", c.original_seq_len}};
  t["n_routed_experts"] = c.n_routed_experts;
  t["n_shared_experts"] = c.n_shared_experts;
  t["num_experts_per_tok"] = c.n_activated_experts;
  t["scoring_func"] = model::score_func_name(c.score_func);
  t["topk_method"] = "noaux_tc";
  t["norm_topk_prob"] = c.norm_topk_prob;
  t["routed_scaling_factor"] = num(c.route_scale);
  t["sliding_window"] = c.window_size;
  t["compress_ratios"] = ratios;
  t["compress_rope_theta"] = num(c.compress_rope_theta);
  t["kv_source_layer_ids"] = c.kv_source_layers;
  t["index_source_layer_ids"] = c.index_source_layers;
  t["index_n_heads"] = c.index_n_heads;
  t["index_head_dim"] = c.index_head_dim;
  t["index_topk"] = c.index_topk;
  t["candidate_source_layer_id"] = c.candidate_source_layer;
  t["candidate_topk_blocks"] = c.candidate_topk_blocks;
  t["candidate_block_size"] = c.candidate_block_size;
  t["hc_mult"] = c.hc_mult;
  t["hc_sinkhorn_iters"] = c.hc_sinkhorn_iters;
  t["hc_eps"] = c.hc_eps;
  t["engram_layer_ids"] = c.engram_layer_ids;
  t["engram_num_embeddings"] = c.engram_num_embeddings;
  t["engram_max_ngram_size"] = c.engram_max_ngram_size;
  t["engram_vocab_size"] = c.engram_vocab_size;
  t["engram_n_heads"] = c.engram_n_heads;
  t["engram_head_dim"] = c.engram_head_dim;
  t["engram_pad_token_id"] = c.engram_pad_id;
  t["engram_compressed_vocab_size"] = c.engram_compressed_vocab_size;
  t["num_nextn_predict_layers"] = c.n_mtp_layers;
  t["dspark_block_size"] = c.dspark_block_size;
  t["dspark_noise_token_id"] = c.dspark_noise_token_id;
  t["dspark_target_layer_ids"] = c.dspark_target_layer_ids;
  t["dspark_markov_rank"] = c.dspark_markov_rank;
  t["dspark_n_routed_experts"] = c.dspark_n_routed_experts;
  t["dspark_num_experts_per_tok"] = c.dspark_n_activated_experts;

  ojson root;
  root["architectures"] = {"DeepseekV41ForCausalLM"};
  root["model_type"] = "deepseek_v41";
  root["bos_token_id"] = c.bos_token_id;
  root["eos_token_id"] = c.eos_token_id;
  root["image_token_id"] = 129264;
  root["quantization_config"] = {{"quant_method", "fp8"},
                                 {"activation_scheme", "dynamic"},
                                 {"weight_block_size", {c.weight_block_size, c.weight_block_size}},
                                 {"scale_fmt", "ue8m0"},
                                 {"expert_dtype", c.expert_dtype}};
  root["text_config"] = std::move(t);
  root["_synth_note"] = note;
  return root.dump(2, ' ', false, nlohmann::json::error_handler_t::replace) + "\n";
}

std::string inference_config_json(const model::ModelConfig& c) {
  ojson j;
  j["vocab_size"] = c.vocab_size;
  j["dim"] = c.dim;
  j["moe_inter_dim"] = c.moe_inter_dim;
  j["n_layers"] = c.n_layers;
  j["n_mtp_layers"] = c.n_mtp_layers;
  j["dspark_block_size"] = c.dspark_block_size;
  j["dspark_noise_token_id"] = c.dspark_noise_token_id;
  j["dspark_target_layer_ids"] = c.dspark_target_layer_ids;
  j["dspark_markov_rank"] = c.dspark_markov_rank;
  j["dspark_n_routed_experts"] = c.dspark_n_routed_experts;
  j["dspark_n_activated_experts"] = c.dspark_n_activated_experts;
  j["n_heads"] = c.n_heads;
  j["n_routed_experts"] = c.n_routed_experts;
  j["n_shared_experts"] = c.n_shared_experts;
  j["n_activated_experts"] = c.n_activated_experts;
  j["score_func"] = model::score_func_name(c.score_func);
  j["route_scale"] = num(c.route_scale);
  j["swiglu_limit"] = c.swiglu_limit;
  j["q_lora_rank"] = c.q_lora_rank;
  j["head_dim"] = c.head_dim;
  j["rope_head_dim"] = c.rope_head_dim;
  j["norm_eps"] = c.norm_eps;
  j["o_groups"] = c.o_groups;
  j["o_lora_rank"] = c.o_lora_rank;
  j["window_size"] = c.window_size;
  j["kv_source_layers"] = c.kv_source_layers;
  j["index_source_layers"] = c.index_source_layers;
  j["original_seq_len"] = c.original_seq_len;
  j["rope_theta"] = num(c.rope_theta);
  j["rope_factor"] = num(c.rope_factor);
  j["beta_fast"] = num(c.beta_fast);
  j["beta_slow"] = num(c.beta_slow);
  j["index_n_heads"] = c.index_n_heads;
  j["index_head_dim"] = c.index_head_dim;
  j["index_topk"] = c.index_topk;
  j["candidate_source_layer"] = c.candidate_source_layer;
  j["candidate_topk_blocks"] = c.candidate_topk_blocks;
  j["candidate_block_size"] = c.candidate_block_size;
  j["hc_mult"] = c.hc_mult;
  j["hc_sinkhorn_iters"] = c.hc_sinkhorn_iters;
  j["hc_eps"] = c.hc_eps;
  j["engram_layer_ids"] = c.engram_layer_ids;
  j["engram_vocab_size"] = c.engram_vocab_size;
  j["engram_num_embeddings"] = c.engram_num_embeddings;
  j["engram_max_ngram_size"] = c.engram_max_ngram_size;
  j["engram_pad_id"] = c.engram_pad_id;
  j["engram_compressed_vocab_size"] = c.engram_compressed_vocab_size;
  j["dtype"] = "fp8";
  j["expert_dtype"] = c.expert_dtype;
  j["compress_rope_theta"] = num(c.compress_rope_theta);
  j["compress_ratios"] = c.compress_ratios;
  j["vision_n_layers"] = 0;
  j["image_token_id"] = 129264;
  j["engram_n_heads"] = c.engram_n_heads;
  j["engram_head_dim"] = c.engram_head_dim;
  return j.dump(2, ' ', false, nlohmann::json::error_handler_t::replace) + "\n";
}

}  // namespace strata::tools
