// Presets of `strata synth` and the --target-gb solver: which V4.1 shape a synthetic checkpoint has.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <set>

#include "model/engram_hash.h"
#include "tools/synth.h"
#include "tools/synth_plan.h"

namespace strata::tools {

namespace {

int64_t round32(double x) { return std::max<int64_t>(32, static_cast<int64_t>(std::llround(x / 32.0)) * 32); }

// Fields every preset shares with the release (config.json values).
model::ModelConfig common_config() {
  model::ModelConfig c;
  c.vocab_size = 129280;
  c.n_shared_experts = 1;
  c.score_func = model::ScoreFunc::kSqrtSoftplus;
  c.norm_topk_prob = true;
  c.route_scale = 1.5;
  c.norm_eps = 1e-20;
  c.original_seq_len = 65536;
  c.rope_theta = 10000;
  c.rope_factor = 16;
  c.beta_fast = 32;
  c.beta_slow = 1;
  c.compress_rope_theta = 160000;
  c.max_position_embeddings = 1048576;
  c.hc_mult = 4;
  c.hc_sinkhorn_iters = 20;
  c.hc_eps = 1e-6;
  c.engram_pad_id = 2;
  c.engram_max_ngram_size = 4;
  c.dspark_noise_token_id = 128799;
  c.bos_token_id = 0;
  c.eos_token_id = 1;
  c.expert_dtype = "fp4";
  c.weight_block_size = 32;
  return c;
}

// compress_ratios: `window` window-only layers, `enc` ratio-2 encoder layers, `dec` ratio-1 decoder
// layers, then one 0 per DSpark stage.
std::vector<int> ratios(int window, int enc, int dec, int mtp) {
  std::vector<int> r(static_cast<size_t>(window), 0);
  r.insert(r.end(), static_cast<size_t>(enc), 2);
  r.insert(r.end(), static_cast<size_t>(dec), 1);
  r.insert(r.end(), static_cast<size_t>(mtp), 0);
  return r;
}

// The released shape (fixtures/real-config/config.json).
model::ModelConfig full_config() {
  model::ModelConfig c = common_config();
  c.dim = 5120;
  c.n_layers = 40;
  c.n_mtp_layers = 3;
  c.n_heads = 64;
  c.head_dim = 512;
  c.rope_head_dim = 64;
  c.q_lora_rank = 1280;
  c.o_groups = 8;
  c.o_lora_rank = 1024;
  c.window_size = 128;
  c.compress_ratios = ratios(2, 18, 20, 3);
  c.kv_source_layers = {2, 8, 14, 20};
  c.index_source_layers = {2, 8, 14, 20, 24, 28, 32, 36};
  c.candidate_source_layer = 20;
  c.candidate_topk_blocks = 2048;
  c.candidate_block_size = 8;
  c.index_n_heads = 32;
  c.index_head_dim = 128;
  c.index_topk = 512;
  c.n_routed_experts = 384;
  c.n_activated_experts = 6;
  c.moe_inter_dim = 2304;
  c.swiglu_limit = 10.0;
  c.engram_layer_ids = {1, 14};
  c.engram_n_heads = 8;
  c.engram_head_dim = 256;
  c.engram_vocab_size = 16000000;
  c.dspark_block_size = 5;
  c.dspark_target_layer_ids = {37, 38, 39};
  c.dspark_markov_rank = 256;
  c.dspark_n_routed_experts = 128;
  c.dspark_n_activated_experts = 3;
  return c;
}

// The README demo: the full structure in miniature. 16 layers = 2 window-only, 6 ratio-2 encoder,
// 8 ratio-1 decoder; KV sources every 3 encoder layers plus the first decoder layer (the release:
// every 6, plus 20), index sources there and every 2nd decoder layer (release: every 4), the
// candidate source at the first decoder KV source, Engram at layer 1 and at an encoder KV source
// (release: 1 and 14), DSpark on the last 3 layers.
model::ModelConfig demo_config() {
  model::ModelConfig c = common_config();
  c.dim = 512;
  c.n_layers = 16;
  c.n_mtp_layers = 3;
  c.n_heads = 8;
  c.head_dim = 128;
  c.rope_head_dim = 64;
  c.q_lora_rank = 256;
  c.o_groups = 4;
  c.o_lora_rank = 128;
  c.window_size = 128;
  c.compress_ratios = ratios(2, 6, 8, 3);
  c.kv_source_layers = {2, 5, 8};
  c.index_source_layers = {2, 5, 8, 10, 12, 14};
  c.candidate_source_layer = 8;
  c.candidate_topk_blocks = 32;
  c.candidate_block_size = 8;
  c.index_n_heads = 8;
  c.index_head_dim = 64;
  c.index_topk = 64;
  c.n_routed_experts = 32;
  c.n_activated_experts = 6;
  c.moe_inter_dim = 256;
  c.swiglu_limit = 10.0;
  c.engram_layer_ids = {1, 5};
  c.engram_n_heads = 4;
  c.engram_head_dim = 64;
  c.engram_vocab_size = 6000;
  c.dspark_block_size = 5;
  c.dspark_target_layer_ids = {13, 14, 15};
  c.dspark_markov_rank = 64;
  c.dspark_n_routed_experts = 16;
  c.dspark_n_activated_experts = 3;
  return c;
}

// Tests: the smallest shape with every layer role (fixtures/v41-tiny preset a's shape): 3 and 6
// reuse KV and top-k, 7 has its own indexer with borrowed keys and candidates.
model::ModelConfig tiny_config() {
  model::ModelConfig c = common_config();
  c.dim = 64;
  c.n_layers = 8;
  c.n_mtp_layers = 3;
  c.n_heads = 4;
  c.head_dim = 64;
  c.rope_head_dim = 16;
  c.q_lora_rank = 64;
  c.o_groups = 2;
  c.o_lora_rank = 32;
  c.window_size = 16;
  c.compress_ratios = ratios(2, 3, 3, 3);
  c.kv_source_layers = {2, 4, 5};
  c.index_source_layers = {2, 4, 5, 7};
  c.candidate_source_layer = 5;
  c.candidate_topk_blocks = 8;
  c.candidate_block_size = 4;
  c.index_n_heads = 8;
  c.index_head_dim = 32;
  c.index_topk = 16;
  c.n_routed_experts = 8;
  c.n_activated_experts = 3;
  c.moe_inter_dim = 32;
  c.swiglu_limit = 2.5;
  c.engram_layer_ids = {1, 4};
  c.engram_n_heads = 4;
  c.engram_head_dim = 32;
  c.engram_vocab_size = 600;
  c.dspark_block_size = 3;
  c.dspark_target_layer_ids = {5, 6, 7};
  c.dspark_markov_rank = 8;
  c.dspark_n_routed_experts = 4;
  c.dspark_n_activated_experts = 2;
  return c;
}

void set_engram_rows(model::ModelConfig* c) {
  c->engram_num_embeddings = engram_num_embeddings(static_cast<int>(c->engram_layer_ids.size()),
                                                   c->engram_max_ngram_size, c->engram_n_heads, c->engram_vocab_size);
}

// The preset's geometry at hidden size `dim`: attention, ranks and moe_inter keep their ratio to dim;
// head_dim grows with dim (128 / 256 / 512, the release's 512 at 4096 and up); layer layout, index
// and Engram head geometry, top-k and window stay. Experts and Engram rows are set by the caller.
model::ModelConfig geometry_at(const model::ModelConfig& base, int64_t dim) {
  model::ModelConfig c = base;
  const double r = static_cast<double>(dim) / static_cast<double>(base.dim);
  c.dim = dim;
  c.head_dim = dim >= 4096 ? 512 : (dim >= 2048 ? 256 : 128);
  c.rope_head_dim = std::min<int64_t>(base.rope_head_dim, c.head_dim / 2);
  const double attn_width = static_cast<double>(base.n_heads * base.head_dim) * r;  // n_heads * head_dim
  const int groups =
      std::max(1, static_cast<int>(std::llround(attn_width / static_cast<double>(c.head_dim) / base.o_groups)));
  c.n_heads = groups * base.o_groups;
  c.q_lora_rank = round32(static_cast<double>(base.q_lora_rank) * r);
  c.o_lora_rank = round32(static_cast<double>(base.o_lora_rank) * r);
  c.moe_inter_dim = round32(static_cast<double>(base.moe_inter_dim) * r);
  c.dspark_markov_rank = std::max<int64_t>(8, round32(static_cast<double>(base.dspark_markov_rank) * r));
  return c;
}

std::string gb(uint64_t bytes) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%.3f GB", static_cast<double>(bytes) / 1e9);
  return buf;
}

}  // namespace

std::vector<int64_t> engram_num_embeddings(int n_engram_layers, int max_ngram_size, int n_heads,
                                           int64_t engram_vocab_size) {
  std::set<int64_t> used;
  std::vector<int64_t> sums;
  for (int l = 0; l < n_engram_layers; ++l) {
    int64_t sum = 0;
    for (int order = 2; order <= max_ngram_size; ++order) {
      int64_t cur = engram_vocab_size - 1;
      for (int h = 0; h < n_heads; ++h) {
        ++cur;
        while (!model::is_prime_u64(static_cast<uint64_t>(cur)) || used.count(cur)) ++cur;
        used.insert(cur);
        sum += cur;
      }
    }
    sums.push_back(sum);
  }
  return sums;
}

// `strata probe`'s engine calibration (tools/probe_engine.cpp): the demo's layer layout at half its
// width (dim 256), so the residual it measures is not fitted on the demo checkpoint it is checked on.
model::ModelConfig probe_config() {
  model::ModelConfig c = geometry_at(demo_config(), 256);
  c.engram_vocab_size = 2000;
  return c;
}

Result<model::ModelConfig> preset_config(const std::string& preset, int64_t compressed_vocab) {
  model::ModelConfig c;
  if (preset == "tiny")
    c = tiny_config();
  else if (preset == "demo")
    c = demo_config();
  else if (preset == "probe")
    c = probe_config();
  else if (preset == "full" || preset == "scaled")
    c = full_config();
  else
    return InvalidArgument("unknown preset '" + preset + "' (expected tiny, demo, probe, scaled or full)");
  c.engram_compressed_vocab_size = compressed_vocab;
  set_engram_rows(&c);
  return c;
}

Result<model::ModelConfig> scale_to_target(const model::ModelConfig& base, double target_gb,
                                           std::vector<std::string>* notes) {
  const double target = target_gb * 1e9;
  // The preset's own split of expert vs Engram table bytes (the release: 289 : 203).
  const SizeBreakdown b0 = size_of(base);
  const double engram_share =
      b0.engram_table_bytes + b0.expert_bytes > 0
          ? static_cast<double>(b0.engram_table_bytes) / static_cast<double>(b0.engram_table_bytes + b0.expert_bytes)
          : 0.0;
  const double dspark_ratio = base.n_routed_experts > 0 ? static_cast<double>(base.dspark_n_routed_experts) /
                                                              static_cast<double>(base.n_routed_experts)
                                                        : 0.0;
  const int n_engram = static_cast<int>(base.engram_layer_ids.size());
  const int64_t min_experts = std::max(2 * base.n_activated_experts, 8);

  struct Choice {
    model::ModelConfig c;
    double rest = 0;
    int64_t n_experts = 0;
  };
  std::vector<Choice> ok;
  for (int64_t dim : {256, 384, 512, 768, 1024, 1536, 2048, 2560, 3072, 4096, 5120, 6144, 7168, 8192}) {
    model::ModelConfig c = geometry_at(base, dim);
    c.n_routed_experts = base.n_activated_experts;
    c.dspark_n_routed_experts = base.dspark_n_activated_experts;
    if (n_engram > 0) {
      c.engram_vocab_size = 97;
      set_engram_rows(&c);
    }
    const SizeBreakdown s = size_of(c);
    const double rest = static_cast<double>(s.total - s.expert_bytes - s.engram_table_bytes);
    const double budget = target - rest;
    if (budget <= 0 || rest > 0.25 * target) continue;
    const double expert_budget = budget * (1.0 - engram_share);
    const double per_expert = 3.0 * static_cast<double>(c.moe_inter_dim * c.dim) * (0.5 + 1.0 / 32.0);
    const double slots = c.n_layers + c.n_mtp_layers * dspark_ratio;
    const int64_t n = static_cast<int64_t>(std::floor(expert_budget / (per_expert * slots)));
    if (n < min_experts) continue;
    ok.push_back({c, rest, n});
  }
  if (ok.empty())
    return InvalidArgument("--target-gb " + std::to_string(target_gb) + " is too small for this preset's " +
                           std::to_string(base.n_layers) + "-layer layout (nothing but the embedding and head fits: they take " +
                           gb(static_cast<uint64_t>(2.0 * 2 * base.vocab_size * base.dim)) + " at its dim " +
                           std::to_string(base.dim) + ")");
  // Prefer the largest dim that still leaves a realistic number of experts (the release has 384);
  // without one, the smallest dim (most experts).
  const int64_t want_experts = std::min<int64_t>(base.n_routed_experts, 128);
  const Choice* pick = &ok.front();
  for (const Choice& ch : ok)
    if (ch.n_experts >= want_experts) pick = &ch;
  model::ModelConfig c = pick->c;
  c.n_routed_experts = static_cast<int>(pick->n_experts);
  c.dspark_n_routed_experts =
      std::max<int>(c.dspark_n_activated_experts + 1,
                    static_cast<int>(std::llround(static_cast<double>(pick->n_experts) * dspark_ratio)));
  if (n_engram > 0) {
    // Engram rows take what is left; two refinement passes land the total on the target.
    const int64_t row_bytes = c.engram_head_dim + c.engram_head_dim / 32;
    const int64_t per_vocab = static_cast<int64_t>(n_engram) * c.engram_n_cols() * row_bytes;
    c.engram_vocab_size = 97;
    for (int pass = 0; pass < 3; ++pass) {
      set_engram_rows(&c);
      const SizeBreakdown s = size_of(c);
      const double gap = target - static_cast<double>(s.total);
      c.engram_vocab_size =
          std::max<int64_t>(97, c.engram_vocab_size + static_cast<int64_t>(gap / static_cast<double>(per_vocab)));
    }
    set_engram_rows(&c);
  }
  if (notes) {
    char buf[256];
    if (pick->n_experts >= want_experts)
      std::snprintf(buf, sizeof(buf),
                    "target %.3f GB: dim %lld, the largest of %zu feasible sizes with >= %lld routed experts "
                    "(feasible: <= 25%% of the bytes outside experts and Engram tables)",
                    target_gb, static_cast<long long>(c.dim), ok.size(), static_cast<long long>(want_experts));
    else
      std::snprintf(buf, sizeof(buf),
                    "target %.3f GB: dim %lld, the smallest feasible size (none leaves >= %lld routed experts)",
                    target_gb, static_cast<long long>(c.dim), static_cast<long long>(want_experts));
    notes->push_back(buf);
  }
  return c;
}

}  // namespace strata::tools
