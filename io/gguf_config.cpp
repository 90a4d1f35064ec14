// deepseek41.* metadata -> config.json (io/gguf_config.h).
#include "io/gguf_config.h"

#include <algorithm>
#include <climits>
#include <cstdio>
#include <cstdlib>
#include <nlohmann/json.hpp>

#include "io/json_limits.h"

namespace strata::io {

namespace {

using json = nlohmann::json;

enum class Kind { kInt, kFloat, kBool, kString, kIntList };
enum Need { kOptional, kRequired, kEngram };  // kEngram: required when engram.layer_ids is not empty

// One config field: where it is in the GGUF (after "deepseek41."), where it goes in config.json
// (a dotted path; the HF names model/config.cpp reads), its type and whether it must be there.
// Source: docs/gguf.md "Metadata keys"; ik_llama.cpp's deepseek41 key list and ds4's Engram keys
// (engram.rows = engram_num_embeddings).
struct Field {
  const char* key;
  const char* alias;  // another spelling seen in the wild, or nullptr
  const char* path;
  Kind kind;
  Need need;
};
constexpr Field kFields[] = {
    {"vocab_size", nullptr, "vocab_size", Kind::kInt, kRequired},
    {"hidden_size", nullptr, "hidden_size", Kind::kInt, kRequired},
    {"moe_intermediate_size", nullptr, "moe_intermediate_size", Kind::kInt, kRequired},
    {"num_hidden_layers", nullptr, "num_hidden_layers", Kind::kInt, kRequired},
    {"num_attention_heads", nullptr, "num_attention_heads", Kind::kInt, kRequired},
    {"num_key_value_heads", nullptr, "num_key_value_heads", Kind::kInt, kOptional},
    {"head_dim", nullptr, "head_dim", Kind::kInt, kRequired},
    {"qk_rope_head_dim", nullptr, "qk_rope_head_dim", Kind::kInt, kRequired},
    {"q_lora_rank", nullptr, "q_lora_rank", Kind::kInt, kRequired},
    {"o_lora_rank", nullptr, "o_lora_rank", Kind::kInt, kRequired},
    {"o_groups", nullptr, "o_groups", Kind::kInt, kRequired},
    {"n_routed_experts", nullptr, "n_routed_experts", Kind::kInt, kRequired},
    {"n_shared_experts", nullptr, "n_shared_experts", Kind::kInt, kOptional},
    {"num_experts_per_tok", nullptr, "num_experts_per_tok", Kind::kInt, kRequired},
    {"max_position_embeddings", nullptr, "max_position_embeddings", Kind::kInt, kOptional},
    {"sliding_window", nullptr, "sliding_window", Kind::kInt, kRequired},
    {"index_n_heads", nullptr, "index_n_heads", Kind::kInt, kRequired},
    {"index_head_dim", nullptr, "index_head_dim", Kind::kInt, kRequired},
    {"index_topk", nullptr, "index_topk", Kind::kInt, kRequired},
    {"candidate_source_layer_id", nullptr, "candidate_source_layer_id", Kind::kInt, kOptional},
    {"candidate_topk_blocks", nullptr, "candidate_topk_blocks", Kind::kInt, kOptional},
    {"candidate_block_size", nullptr, "candidate_block_size", Kind::kInt, kOptional},
    {"hc_mult", nullptr, "hc_mult", Kind::kInt, kRequired},
    {"hc_sinkhorn_iters", nullptr, "hc_sinkhorn_iters", Kind::kInt, kRequired},
    {"rope_theta", nullptr, "rope_theta", Kind::kFloat, kOptional},
    {"compress_rope_theta", nullptr, "compress_rope_theta", Kind::kFloat, kOptional},
    {"rms_norm_eps", nullptr, "rms_norm_eps", Kind::kFloat, kRequired},
    {"hc_eps", nullptr, "hc_eps", Kind::kFloat, kRequired},
    {"swiglu_limit", nullptr, "swiglu_limit", Kind::kFloat, kOptional},
    {"routed_scaling_factor", nullptr, "routed_scaling_factor", Kind::kFloat, kOptional},
    {"scoring_func", nullptr, "scoring_func", Kind::kString, kOptional},
    {"hidden_act", nullptr, "hidden_act", Kind::kString, kOptional},
    {"topk_method", nullptr, "topk_method", Kind::kString, kOptional},
    {"norm_topk_prob", nullptr, "norm_topk_prob", Kind::kBool, kOptional},
    {"compress_ratios", nullptr, "compress_ratios", Kind::kIntList, kRequired},
    {"kv_source_layer_ids", nullptr, "kv_source_layer_ids", Kind::kIntList, kRequired},
    {"index_source_layer_ids", nullptr, "index_source_layer_ids", Kind::kIntList, kRequired},
    {"rope_scaling.factor", nullptr, "rope_scaling.factor", Kind::kFloat, kOptional},
    {"rope_scaling.beta_fast", nullptr, "rope_scaling.beta_fast", Kind::kFloat, kOptional},
    {"rope_scaling.beta_slow", nullptr, "rope_scaling.beta_slow", Kind::kFloat, kOptional},
    {"rope_scaling.original_max_position_embeddings", nullptr, "rope_scaling.original_max_position_embeddings",
     Kind::kInt, kOptional},
    {"engram.layer_ids", nullptr, "engram_layer_ids", Kind::kIntList, kOptional},
    {"engram.rows", "engram.num_embeddings", "engram_num_embeddings", Kind::kIntList, kEngram},
    {"engram.max_ngram_size", nullptr, "engram_max_ngram_size", Kind::kInt, kEngram},
    {"engram.n_heads", "engram.head_count", "engram_n_heads", Kind::kInt, kEngram},
    {"engram.head_dim", "engram.key_length", "engram_head_dim", Kind::kInt, kEngram},
    {"engram.vocab_size", nullptr, "engram_vocab_size", Kind::kInt, kEngram},
    {"engram.compressed_vocab_size", nullptr, "engram_compressed_vocab_size", Kind::kInt, kEngram},
    {"engram.pad_token_id", nullptr, "engram_pad_token_id", Kind::kInt, kOptional},
    {"num_nextn_predict_layers", nullptr, "num_nextn_predict_layers", Kind::kInt, kOptional},
    {"dspark_block_size", nullptr, "dspark_block_size", Kind::kInt, kOptional},
    {"dspark_noise_token_id", nullptr, "dspark_noise_token_id", Kind::kInt, kOptional},
    {"dspark_target_layer_ids", nullptr, "dspark_target_layer_ids", Kind::kIntList, kOptional},
    {"dspark_markov_rank", nullptr, "dspark_markov_rank", Kind::kInt, kOptional},
    {"dspark_n_routed_experts", nullptr, "dspark_n_routed_experts", Kind::kInt, kOptional},
    {"dspark_num_experts_per_tok", nullptr, "dspark_num_experts_per_tok", Kind::kInt, kOptional},
};

// The shortest decimal that reads back as the same f32: what the converter wrote it from.
double f32_decimal(float f) {
  char buf[64];
  for (int p = 1; p <= 9; ++p) {
    std::snprintf(buf, sizeof buf, "%.*g", p, static_cast<double>(f));
    if (std::strtof(buf, nullptr) == f) return std::strtod(buf, nullptr);
  }
  return static_cast<double>(f);
}

bool is_float_type(GgufType t) { return t == GgufType::kF32 || t == GgufType::kF64; }

Result<json> to_json(const GgufValue& v, Kind kind, const std::string& key, const std::string& path) {
  auto wrong = [&](const char* expected) {
    return InvalidArgument(path + ": metadata key '" + key + "' is " + std::string(gguf_type_name(v.type())) +
                           (v.is_array() ? " of " + std::string(gguf_type_name(v.elem_type())) : std::string()) +
                           ", expected " + expected);
  };
  switch (kind) {
    case Kind::kInt: {
      if (is_float_type(v.type()) || v.is_array()) return wrong("an integer");
      if (auto i = v.as_int()) return json(*i);
      if (auto u = v.as_uint()) return json(*u);
      return wrong("an integer");
    }
    case Kind::kFloat: {
      if (v.type() == GgufType::kF32) return json(f32_decimal(static_cast<float>(*v.as_float())));
      if (auto f = v.as_float()) return json(*f);
      if (v.is_array() || v.as_string() || v.as_bool().has_value()) return wrong("a number");
      if (auto i = v.as_int()) return json(*i);  // an integral value (rope_theta 10000) is a number too
      if (auto u = v.as_uint()) return json(*u);
      return wrong("a number");
    }
    case Kind::kBool:
      if (auto b = v.as_bool()) return json(*b);
      return wrong("a bool");
    case Kind::kString:
      if (v.as_string()) return json(*v.as_string());
      return wrong("a string");
    case Kind::kIntList: {
      if (!v.is_array() || is_float_type(v.elem_type()) || v.strings()) return wrong("an array of integers");
      json a = json::array();
      for (uint64_t i = 0; i < v.array_size(); ++i) {
        if (auto x = v.int_at(i))
          a.push_back(*x);
        else if (auto u = v.uint_at(i))
          a.push_back(*u);
        else
          return wrong("an array of integers");
      }
      return a;
    }
  }
  return wrong("?");
}

void set_path(json* root, const std::string& dotted, json value) {
  json* j = root;
  size_t start = 0;
  for (size_t dot; (dot = dotted.find('.', start)) != std::string::npos; start = dot + 1)
    j = &(*j)[dotted.substr(start, dot - start)];
  (*j)[dotted.substr(start)] = std::move(value);
}

// ik_llama.cpp's key list has no engram.max_ngram_size / n_heads / head_dim / vocab_size (they are
// in its config blob). Without the blob they follow from what the file does carry:
//   max_ngram_size = |multipliers| / n_layers, n_heads = |primes| / n_layers / (max_ngram_size - 1),
//   head_dim from the first table's row width (264 -> 256 for interleaved I8 rows),
//   vocab_size = the smallest prime: engram.py's search takes the smallest unused prime above
//   engram_vocab_size - 1, so every value in (previous prime, smallest prime] gives the same primes,
//   and model/engram_gguf_check.h then compares all of them with the file's.
// Returns false (nothing set) when the inputs are missing or inconsistent.
bool derive_engram_field(const GgufModel& g, const std::string& pre, const std::string& field, const json& layer_ids,
                         json* out) {
  const size_t n_layers = layer_ids.size();
  const GgufValue* mult = g.find_key(pre + "engram.multipliers");
  const GgufValue* primes = g.find_key(pre + "engram.primes");
  if (n_layers == 0) return false;
  if (field == "engram.max_ngram_size" || field == "engram.n_heads") {
    if (!mult || !mult->is_array() || mult->array_size() % n_layers != 0) return false;
    const uint64_t max_ngram = mult->array_size() / n_layers;
    if (field == "engram.max_ngram_size") {
      *out = max_ngram;
      return max_ngram >= 2;
    }
    if (!primes || !primes->is_array() || max_ngram < 2 || primes->array_size() % (n_layers * (max_ngram - 1)) != 0)
      return false;
    *out = primes->array_size() / n_layers / (max_ngram - 1);
    return true;
  }
  if (field == "engram.vocab_size") {
    if (!primes || !primes->is_array() || primes->array_size() == 0 || primes->strings()) return false;
    int64_t lo = INT64_MAX;
    for (uint64_t i = 0; i < primes->array_size(); ++i) {
      auto v = primes->int_at(i);
      if (!v) return false;
      lo = std::min(lo, *v);
    }
    *out = lo;
    return true;
  }
  if (field == "engram.head_dim") {
    const GgufTensorInfo* t = g.find("blk." + layer_ids[0].dump() + ".engram_embd.weight");
    if (!t || t->ne.empty()) return false;
    if (t->type == GgmlType::kI8) {
      if (t->ne[0] % 33 != 0) return false;
      *out = t->ne[0] / 33 * 32;
    } else {
      *out = t->ne[0];
    }
    return true;
  }
  return false;
}

bool has_mtp_tensors(const GgufModel& g) {
  auto it = g.tensors().lower_bound("mtp.");
  return it != g.tensors().end() && it->first.rfind("mtp.", 0) == 0;
}

}  // namespace

bool is_foreign_gguf(const GgufModel& g) {
  const GgufValue* a = g.find_key("general.architecture");
  return a && a->as_string() && *a->as_string() == kForeignGgufArch && !g.find_key("strata.config_json");
}

Result<std::string> foreign_gguf_config_json(const GgufModel& g, const std::string& path) {
  const std::string pre = std::string(kForeignGgufArch) + ".";
  json root;
  json* text = &root;  // where the model fields live (text_config in the HF layout)
  if (const GgufValue* blob = g.find_key(pre + "config"); blob && blob->as_string()) {
    STRATA_RETURN_IF_ERROR(check_json_nesting(*blob->as_string(), 16, path + ": '" + pre + "config'"));
    root = json::parse(*blob->as_string(), nullptr, false);
    if (root.is_discarded() || !root.is_object())
      return InvalidArgument(path + ": metadata key '" + pre +
                             "config' is not a JSON object (the embedded config.json)");
    if (auto tc = root.find("text_config"); tc != root.end() && tc->is_object()) text = &*tc;
  } else {
    root = json::object();
    const GgufValue* layers = g.find_key(pre + "engram.layer_ids");
    const bool engram = layers && layers->is_array() && layers->array_size() > 0;
    json layer_ids = json::array();
    if (engram) {
      STRATA_ASSIGN_OR_RETURN(layer_ids, to_json(*layers, Kind::kIntList, pre + "engram.layer_ids", path));
    }
    for (const Field& f : kFields) {
      std::string key = pre + f.key;
      const GgufValue* v = g.find_key(key);
      if (!v && f.alias) {
        const std::string alt = pre + f.alias;
        if ((v = g.find_key(alt))) key = alt;
      }
      if (!v) {
        json derived;
        if (f.need == kEngram && engram && derive_engram_field(g, pre, f.key, layer_ids, &derived)) {
          set_path(&root, f.path, std::move(derived));
          continue;
        }
        if (f.need == kRequired || (f.need == kEngram && engram))
          return InvalidArgument(path + ": missing metadata key '" + key + "' (config.json " + f.path + ")");
        continue;
      }
      STRATA_ASSIGN_OR_RETURN(json j, to_json(*v, f.kind, key, path));
      set_path(&root, f.path, std::move(j));
    }
    for (const char* k : {"bos_token_id", "eos_token_id"})
      if (const GgufValue* v = g.find_key(std::string("tokenizer.ggml.") + k))
        if (auto u = v->as_uint()) root[k] = *u;
  }
  // DECISION: docs/gguf.md "GGUFs from ik_llama.cpp and ds4": neither layout carries the DSpark
  // stages; without mtp.* tensors the model loads as the backbone alone (--spec dspark then says so).
  if (!has_mtp_tensors(g)) {
    const int64_t n_layers = text->value("num_hidden_layers", int64_t{0});
    if (auto r = text->find("compress_ratios");
        r != text->end() && r->is_array() && n_layers > 0 && static_cast<int64_t>(r->size()) > n_layers)
      r->erase(r->begin() + n_layers, r->end());
    (*text)["num_nextn_predict_layers"] = 0;
    text->erase("dspark_block_size");
  }
  return root.dump();
}

}  // namespace strata::io
