#include "io/gguf_names.h"

#include <cstdlib>
#include <utility>

namespace strata::io {

namespace {

// strata suffix (after "layers.L.") -> GGUF suffix (after "blk.L."). Source: docs/gguf.md table.
constexpr std::pair<const char*, const char*> kSuffixes[] = {
    {"attn_norm.weight", "attn_norm.weight"},
    {"ffn_norm.weight", "ffn_norm.weight"},
    {"hc_attn_fn", "hc_attn_fn.weight"},
    {"hc_attn_base", "hc_attn_base.weight"},
    {"hc_attn_scale", "hc_attn_scale.weight"},
    {"hc_ffn_fn", "hc_ffn_fn.weight"},
    {"hc_ffn_base", "hc_ffn_base.weight"},
    {"hc_ffn_scale", "hc_ffn_scale.weight"},
    {"attn.attn_sink", "attn_sinks.weight"},
    {"attn.wq_a.weight", "attn_q_a.weight"},
    {"attn.wq_a.scale", "attn_q_a.scale"},
    {"attn.q_norm.weight", "attn_q_a_norm.weight"},
    {"attn.wq_b.weight", "attn_q_b.weight"},
    {"attn.wq_b.scale", "attn_q_b.scale"},
    {"attn.wkv.weight", "attn_kv.weight"},
    {"attn.wkv.scale", "attn_kv.scale"},
    {"attn.kv_norm.weight", "attn_kv_a_norm.weight"},
    {"attn.wo_a.weight", "attn_output_a.weight"},
    {"attn.wo_a.scale", "attn_output_a.scale"},
    {"attn.wo_b.weight", "attn_output_b.weight"},
    {"attn.wo_b.scale", "attn_output_b.scale"},
    {"attn.compressor.wkv.weight", "attn_compressor_kv.weight"},
    {"attn.compressor.wgate.weight", "attn_compressor_gate.weight"},
    {"attn.compressor.norm.weight", "attn_compressor_norm.weight"},
    {"attn.indexer.wk.weight", "indexer.attn_k.weight"},
    {"attn.indexer.k_norm.weight", "indexer.k_norm.weight"},
    {"attn.indexer.wq_b.weight", "indexer.attn_q_b.weight"},
    {"attn.indexer.wq_b.scale", "indexer.attn_q_b.scale"},
    {"attn.indexer.weights_proj.weight", "indexer.proj.weight"},
    {"ffn.gate.weight", "ffn_gate_inp.weight"},
    {"ffn.gate.bias", "exp_probs_b.bias"},
    {"ffn.shared_experts.w1.weight", "ffn_gate_shexp.weight"},
    {"ffn.shared_experts.w1.scale", "ffn_gate_shexp.scale"},
    {"ffn.shared_experts.w3.weight", "ffn_up_shexp.weight"},
    {"ffn.shared_experts.w3.scale", "ffn_up_shexp.scale"},
    {"ffn.shared_experts.w2.weight", "ffn_down_shexp.weight"},
    {"ffn.shared_experts.w2.scale", "ffn_down_shexp.scale"},
    {"engram.embed.weight", "engram_embd.weight"},
    {"engram.embed.scale", "engram_embd.scale"},
    {"engram.q_weight", "engram_q_norm.weight"},
    {"engram.k_weight", "engram_k_norm.weight"},
    {"engram.wkv.weight", "engram_kv.weight"},
    {"engram.wkv.scale", "engram_kv.scale"},
};
constexpr std::pair<const char*, const char*> kTop[] = {
    {"embed.weight", "token_embd.weight"}, {"norm.weight", "output_norm.weight"}, {"head.weight", "output.weight"}};
// Routed expert parts: strata "wN.{weight,scale}" -> GGUF "ffn_X_exps.{weight,scale}".
constexpr std::pair<const char*, const char*> kExpertParts[] = {
    {"w1.weight", "ffn_gate_exps.weight"}, {"w1.scale", "ffn_gate_exps.scale"}, {"w3.weight", "ffn_up_exps.weight"},
    {"w3.scale", "ffn_up_exps.scale"},     {"w2.weight", "ffn_down_exps.weight"}, {"w2.scale", "ffn_down_exps.scale"}};

// Splits "<head>.<N>.<rest>" for head "layers"/"blk"/"mtp": the number's text and rest.
bool split_layer(const std::string& name, const std::string& head, std::string* num, std::string* rest) {
  if (name.rfind(head + ".", 0) != 0) return false;
  const size_t a = head.size() + 1;
  const size_t dot = name.find('.', a);
  if (dot == std::string::npos || dot == a) return false;
  for (size_t i = a; i < dot; ++i)
    if (name[i] < '0' || name[i] > '9') return false;
  *num = name.substr(a, dot - a);
  *rest = name.substr(dot + 1);
  return true;
}

std::string map_suffix(const std::string& s) {
  for (const auto& [a, b] : kSuffixes)
    if (s == a) return b;
  return s;
}
std::string unmap_suffix(const std::string& s) {
  for (const auto& [a, b] : kSuffixes)
    if (s == b) return a;
  return s;
}

}  // namespace

std::optional<ExpertTensorName> gguf_expert_tensor(const std::string& n) {
  std::string num, rest, head;
  if (split_layer(n, "layers", &num, &rest)) head = "blk." + num + ".";
  else if (split_layer(n, "mtp", &num, &rest)) head = "mtp." + num + ".";
  else return std::nullopt;
  static const std::string kMid = "ffn.experts.";
  if (rest.rfind(kMid, 0) != 0) return std::nullopt;
  const std::string tail = rest.substr(kMid.size());
  const size_t dot = tail.find('.');
  if (dot == std::string::npos || dot == 0 || dot > 6) return std::nullopt;
  for (size_t i = 0; i < dot; ++i)
    if (tail[i] < '0' || tail[i] > '9') return std::nullopt;
  const std::string part = tail.substr(dot + 1);
  for (const auto& [a, b] : kExpertParts)
    if (part == a) return ExpertTensorName{head + b, std::atoi(tail.substr(0, dot).c_str())};
  return std::nullopt;
}

std::string gguf_tensor_name(const std::string& n) {
  for (const auto& [a, b] : kTop)
    if (n == a) return b;
  if (auto e = gguf_expert_tensor(n)) return e->stacked;
  std::string num, rest;
  if (split_layer(n, "layers", &num, &rest)) return "blk." + num + "." + map_suffix(rest);
  if (split_layer(n, "mtp", &num, &rest)) return "mtp." + num + "." + map_suffix(rest);
  return n;
}

std::string strata_tensor_name(const std::string& g) {
  for (const auto& [a, b] : kTop)
    if (g == b) return a;
  std::string num, rest;
  if (split_layer(g, "blk", &num, &rest)) return "layers." + num + "." + unmap_suffix(rest);
  if (split_layer(g, "mtp", &num, &rest)) return "mtp." + num + "." + unmap_suffix(rest);
  return g;
}

std::optional<std::string> strata_expert_name(const std::string& g, int e) {
  std::string num, rest, head;
  if (split_layer(g, "blk", &num, &rest)) head = "layers." + num + ".";
  else if (split_layer(g, "mtp", &num, &rest)) head = "mtp." + num + ".";
  else return std::nullopt;
  for (const auto& [a, b] : kExpertParts)
    if (rest == b) return head + "ffn.experts." + std::to_string(e) + "." + a;
  return std::nullopt;
}

}  // namespace strata::io
