// ModelConfig: the V4.1 shape, read from a checkpoint's config.json.
//
// Field names are the official ModelArgs names (model.py), so one grep finds the reference, the
// checkpoint and strata. Both layouts are accepted: the HF release config.json (fields under
// `text_config`, HF names such as hidden_size / sliding_window / kv_source_layer_ids) and the flat
// inference/config.json (ModelArgs keys). Nothing about the shape is hard-coded: the tiny fixtures
// and the full model go through the same code.
// Source: ARCHITECTURE.md §Shape; fixtures README "Config naming"; model.py `ModelArgs`.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/status.h"

namespace strata::model {

// The router's score function (config.json "scoring_func"): an enum from load on, so the router
// compares no strings per token.
enum class ScoreFunc { kSqrtSoftplus, kSoftmax, kSigmoid };
// "sqrtsoftplus", "softmax", "sigmoid".
const char* score_func_name(ScoreFunc f);
// Parses one of the names above (kInvalidArgument naming the value and the accepted ones).
[[nodiscard]] Result<ScoreFunc> parse_score_func(const std::string& s);

struct ModelConfig {
  // --- shape -------------------------------------------------------------------------------------
  int64_t vocab_size = 0;            // 129,280
  int64_t dim = 0;                   // hidden size, 5120
  int64_t moe_inter_dim = 0;         // expert hidden size, 2304
  int n_layers = 0;                  // backbone layers, 40
  int n_mtp_layers = 0;              // DSpark draft stages after the backbone, 3
  int n_heads = 0;                   // attention heads, 64
  int64_t head_dim = 0;              // 512 (one shared KV head: K = V)
  int64_t rope_head_dim = 0;         // RoPE on the last 64 dims
  int64_t q_lora_rank = 0;           // 1280
  int o_groups = 0;                  // grouped low-rank output: 8 groups
  int64_t o_lora_rank = 0;           // 1024 per group
  double norm_eps = 1e-20;           // every RMSNorm and the mHC / Engram normalisations
  // --- MoE ---------------------------------------------------------------------------------------
  int n_routed_experts = 0;          // 384
  int n_shared_experts = 1;
  int n_activated_experts = 0;       // top-6
  ScoreFunc score_func = ScoreFunc::kSqrtSoftplus;  // config.json "scoring_func", parsed at load
  double gate_temp = 1.0;
  bool norm_topk_prob = true;
  double route_scale = 1.0;          // 1.5
  double swiglu_limit = 0.0;         // clamp of up (both sides) and gate (above)
  // --- CSA2 attention ----------------------------------------------------------------------------
  int64_t window_size = 0;           // sliding window, 128
  std::vector<int> compress_ratios;  // per layer incl. DSpark stages: 0 window only, 2 encoder, 1 decoder
  std::vector<int> kv_source_layers;     // layers that compute compressed KV: [2, 8, 14, 20]
  std::vector<int> index_source_layers;  // layers that run an indexer: [2, 8, 14, 20, 24, ...]
  int candidate_source_layer = -1;   // layer whose indexer picks candidate blocks (20), -1 = off
  int candidate_topk_blocks = 0;     // 2048
  int candidate_block_size = 0;      // 8
  int index_n_heads = 0;             // 32
  int64_t index_head_dim = 0;        // 128
  int index_topk = 0;                // 512
  // --- RoPE --------------------------------------------------------------------------------------
  double rope_theta = 10000.0;           // window-only layers
  double compress_rope_theta = 160000.0; // compressed layers (with YaRN)
  int64_t original_seq_len = 0;          // YaRN original context (65,536); 0 disables YaRN
  double rope_factor = 1.0;              // YaRN factor, 16
  double beta_fast = 32, beta_slow = 1;
  int64_t max_position_embeddings = 1 << 20;
  // --- mHC ---------------------------------------------------------------------------------------
  int hc_mult = 4;
  int hc_sinkhorn_iters = 20;
  double hc_eps = 1e-6;
  // --- Engram ------------------------------------------------------------------------------------
  std::vector<int> engram_layer_ids;            // [1, 14]
  std::vector<int64_t> engram_num_embeddings;   // table rows per Engram layer
  int engram_max_ngram_size = 0;                // n-gram orders 2..max
  int64_t engram_vocab_size = 0;                // prime search start
  int engram_n_heads = 0;
  int64_t engram_head_dim = 0;
  int64_t engram_pad_id = 2;
  int64_t engram_compressed_vocab_size = 0;     // classes of the tokenizer's compressed map
  // --- DSpark ------------------------------------------------------------------------------------
  int dspark_block_size = 0;
  int64_t dspark_noise_token_id = -1;  // -1: absent (an error when DSpark is on)
  std::vector<int> dspark_target_layer_ids;
  int64_t dspark_markov_rank = 0;
  int dspark_n_routed_experts = 0;
  int dspark_n_activated_experts = 0;
  // --- tokens and storage ------------------------------------------------------------------------
  int64_t bos_token_id = 0;
  int64_t eos_token_id = 1;
  std::string expert_dtype = "fp4";
  int weight_block_size = 32;        // quantization_config.weight_block_size ([32, 32])

  // Parses config.json text. `what` names the file in errors, e.g.
  //   "config.json: missing field 'text_config.hidden_size' (ModelArgs.dim)".
  [[nodiscard]] static Result<ModelConfig> parse(const std::string& json_text, const std::string& what);
  // Reads and parses DIR/config.json.
  [[nodiscard]] static Result<ModelConfig> load(const std::string& dir);

  // Consistency checks (layer lists in range, ratios, divisibility); errors name the field.
  [[nodiscard]] Status validate() const;

  // --- layer roles (spec §Attention) ------------------------------------------------------------
  int compress_ratio(int layer) const { return compress_ratios[static_cast<size_t>(layer)]; }
  bool is_kv_source(int layer) const;     // computes compressed KV (backbone only)
  bool is_index_source(int layer) const;  // runs its own indexer (backbone only)
  bool owns_index_keys(int layer) const { return is_kv_source(layer) && is_index_source(layer); }
  bool is_candidate_source(int layer) const { return layer == candidate_source_layer; }
  bool uses_candidates(int layer) const { return candidate_source_layer >= 0 && layer > candidate_source_layer; }
  // The sources a compressed layer reads (model/attention.cpp; pipeline cuts, model/pipeline_cuts.h),
  // -1 when there is none at or before `layer`: its compressed KV (the latest kv source), its top-k
  // selection (the latest index source), its index keys (the latest kv source that is also an
  // index source).
  int kv_source_of(int layer) const;
  int index_source_of(int layer) const;
  int key_owner_of(int layer) const;
  // Index of `layer` in engram_layer_ids, or -1.
  int engram_index(int layer) const;
  // (max_ngram_size - 1) * n_heads: Engram rows read per token per Engram layer.
  int engram_n_cols() const { return (engram_max_ngram_size - 1) * engram_n_heads; }
  // Routed expert count / top-k of a layer (DSpark stages have their own).
  int n_experts(int layer) const;
  int n_active(int layer) const;
};

}  // namespace strata::model
