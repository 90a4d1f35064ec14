// tests/model/foreign_gguf_writer.h
#include "tests/model/foreign_gguf_writer.h"

#include <cstring>
#include <map>
#include <nlohmann/json.hpp>
#include <set>

#include "core/dtype.h"
#include "io/gguf_writer.h"
#include "kernels/kquant.h"
#include "kernels/linear.h"
#include "model/engram_hash.h"
#include "tokenizer/compressed_vocab.h"
#include "tokenizer/tokenizer.h"

namespace strata::test {

namespace {

using json = nlohmann::json;
using Meta = std::vector<std::pair<std::string, io::GgufValue>>;

bool ends_with(const std::string& s, const std::string& t) {
  return s.size() >= t.size() && s.compare(s.size() - t.size(), t.size(), t) == 0;
}

// config.json engram_* name -> ds4's engram.* key.
const std::map<std::string, std::string> kEngramKeys = {
    {"engram_layer_ids", "engram.layer_ids"},
    {"engram_num_embeddings", "engram.rows"},
    {"engram_max_ngram_size", "engram.max_ngram_size"},
    {"engram_n_heads", "engram.n_heads"},
    {"engram_head_dim", "engram.head_dim"},
    {"engram_vocab_size", "engram.vocab_size"},
    {"engram_compressed_vocab_size", "engram.compressed_vocab_size"},
    {"engram_pad_token_id", "engram.pad_token_id"}};

void put(Meta* m, const std::string& key, const json& v) {
  const std::string k = "deepseek41." + key;
  if (v.is_boolean())
    m->emplace_back(k, io::GgufValue::boolean(v.get<bool>()));
  else if (v.is_number_integer())
    m->emplace_back(k, io::GgufValue::i32(v.get<int32_t>()));
  else if (v.is_number())
    m->emplace_back(k, io::GgufValue::f32(v.get<float>()));  // as the converters write them
  else if (v.is_string())
    m->emplace_back(k, io::GgufValue::string(v.get<std::string>()));
  else if (v.is_array()) {
    std::vector<int32_t> a;
    for (const auto& x : v) a.push_back(x.get<int32_t>());
    m->emplace_back(k, io::GgufValue::array_of(io::GgufType::kI32, a));
  }
}

}  // namespace

Status write_foreign_gguf(const std::string& strata_gguf, const std::string& out, const ForeignGgufOptions& o) {
  STRATA_ASSIGN_OR_RETURN(auto g, io::GgufModel::open(strata_gguf));
  const json cfg_root = json::parse(*io::gguf_text_of(*g->find_key("strata.config_json")));
  const json& cfg = cfg_root.contains("text_config") ? cfg_root["text_config"] : cfg_root;
  const std::string tok_text = *io::gguf_text_of(*g->find_key("strata.tokenizer_json"));
  STRATA_ASSIGN_OR_RETURN(tokenizer::Tokenizer tok, tokenizer::Tokenizer::from_json(tok_text, "tokenizer.json"));

  Meta meta;
  meta.emplace_back("general.architecture", io::GgufValue::string("deepseek41"));
  for (auto it = cfg.begin(); it != cfg.end(); ++it) {
    if (it.key() == "rope_scaling") {
      for (auto r = it->begin(); r != it->end(); ++r)
        if (r->is_number()) put(&meta, "rope_scaling." + r.key(), *r);
    } else if (auto e = kEngramKeys.find(it.key()); e != kEngramKeys.end()) {
      put(&meta, e->second, *it);
    } else if (!it->is_object()) {
      put(&meta, it.key(), *it);
    }
  }
  // ds4's Engram hash tables, from strata's own computation (the loader checks them).
  STRATA_ASSIGN_OR_RETURN(tokenizer::CompressedVocab cv, tokenizer::build_compressed_vocab(tok));
  if (cfg.contains("engram_layer_ids") && !cfg["engram_layer_ids"].empty()) {
    model::EngramHashParams p;
    p.layer_ids = cfg["engram_layer_ids"].get<std::vector<int>>();
    p.num_embeddings = cfg["engram_num_embeddings"].get<std::vector<int64_t>>();
    p.max_ngram_size = cfg["engram_max_ngram_size"];
    p.n_heads = cfg["engram_n_heads"];
    p.engram_vocab_size = cfg["engram_vocab_size"];
    p.compressed_vocab_size = cfg["engram_compressed_vocab_size"];
    p.pad_class = cv.map[cfg.value("engram_pad_token_id", 2)];
    STRATA_ASSIGN_OR_RETURN(model::EngramHasher h, model::EngramHasher::create(p));
    std::vector<int32_t> primes;
    std::vector<uint64_t> mult64;
    for (int l = 0; l < h.n_layers(); ++l) {
      for (int64_t x : h.primes(l)) primes.push_back(static_cast<int32_t>(x));
      for (int64_t x : h.multipliers(l)) mult64.push_back(static_cast<uint64_t>(x));
    }
    meta.emplace_back("deepseek41.engram.encoding", io::GgufValue::string("e4m3_e8m0_32_row264"));
    meta.emplace_back("deepseek41.engram.primes", io::GgufValue::array_of(io::GgufType::kI32, primes));
    meta.emplace_back("deepseek41.engram.multipliers", io::GgufValue::array_of(io::GgufType::kU64, mult64));
    meta.emplace_back("deepseek41.engram.token_map", io::GgufValue::array_of(io::GgufType::kU32, cv.map));
    meta.emplace_back("deepseek41.engram.pad_id", io::GgufValue::u32(p.pad_class));
  }
  // The vocabulary, as llama.cpp's converter writes a gpt2 BPE vocab.
  const int64_t n_vocab = std::max<int64_t>(cfg["vocab_size"].get<int64_t>(), tok.vocab_size());
  std::vector<std::string> tokens;
  std::vector<int32_t> types;
  for (int64_t i = 0; i < n_vocab; ++i) {
    const int32_t id = static_cast<int32_t>(i);
    if (i >= tok.vocab_size()) {
      tokens.push_back("[PAD" + std::to_string(i) + "]");
      types.push_back(5);
    } else {
      tokens.emplace_back(tok.id_to_token(id));
      types.push_back(tok.is_added(id) ? (tok.is_special(id) ? 3 : 4) : 1);
    }
  }
  const json tj = json::parse(tok_text);
  std::vector<std::string> merges;
  for (const auto& m : tj["model"]["merges"])
    merges.push_back(m.is_string() ? m.get<std::string>() : m[0].get<std::string>() + " " + m[1].get<std::string>());
  meta.emplace_back("tokenizer.ggml.model", io::GgufValue::string("gpt2"));
  meta.emplace_back("tokenizer.ggml.pre", io::GgufValue::string("deepseek-v3"));
  meta.emplace_back("tokenizer.ggml.tokens", io::GgufValue::string_array(tokens));
  meta.emplace_back("tokenizer.ggml.token_type", io::GgufValue::array_of(io::GgufType::kI32, types));
  meta.emplace_back("tokenizer.ggml.merges", io::GgufValue::string_array(merges));
  meta.emplace_back("tokenizer.ggml.bos_token_id", io::GgufValue::u32(cfg_root.value("bos_token_id", 0u)));
  meta.emplace_back("tokenizer.ggml.eos_token_id", io::GgufValue::u32(cfg_root.value("eos_token_id", 1u)));

  // Raw (official-bits) tensors of the input: name -> safetensors dtype name.
  std::map<std::string, std::string> raw;
  if (const io::GgufValue* rn = g->find_key("strata.raw_tensors"))
    for (size_t i = 0; i < rn->strings()->size(); ++i)
      raw[(*rn->strings())[i]] = (*g->find_key("strata.raw_dtypes")->strings())[i];

  auto read = [&](const io::GgufTensorInfo& t) {
    std::vector<uint8_t> b(t.nbytes);
    Status s = g->read_range(t, 0, t.nbytes, b.data());
    STRATA_CHECK(s.ok(), s.to_string());
    return b;
  };
  auto to_f32 = [&](const io::GgufTensorInfo& t) {
    std::vector<float> f(static_cast<size_t>(t.shape.numel()));
    const std::vector<uint8_t> b = read(t);
    if (raw.count(t.name)) {  // FP8 + [32, 32] E8M0
      const std::vector<uint8_t> s = read(*g->find(t.name.substr(0, t.name.size() - 7) + ".scale"));
      kernels::dequant_fp8(kernels::Fp8Weight{b.data(), s.data(), t.shape[0], t.shape[1]}, f.data());
    } else if (t.type == io::GgmlType::kBf16) {
      for (size_t i = 0; i < f.size(); ++i) f[i] = bf16_to_f32(reinterpret_cast<const uint16_t*>(b.data())[i]);
    } else {
      STRATA_CHECK(t.type == io::GgmlType::kF32, "to_f32: " + t.name);
      std::memcpy(f.data(), b.data(), b.size());
    }
    return f;
  };
  const std::vector<std::string> kF16 = {
      "token_embd.weight",         "hc_attn_fn.weight",           "hc_ffn_fn.weight",
      "attn_compressor_kv.weight", "attn_compressor_gate.weight", "indexer.attn_k.weight",
      "indexer.proj.weight",       "indexer.attn_q_b.weight",     "engram_kv.weight"};
  auto in_f16_set = [&](const std::string& n) {
    for (const auto& s : kF16)
      if (n == s || ends_with(n, "." + s)) return true;
    return false;
  };

  std::vector<io::GgufTensorDecl> decls;
  std::vector<std::vector<uint8_t>> data;
  std::vector<std::string> out_raw, out_raw_dtypes;
  for (const auto& [name, t] : g->tensors()) {
    if (name.rfind("mtp.", 0) == 0 || ends_with(name, "engram_embd.scale")) continue;
    if (ends_with(name, "engram_embd.weight")) {  // interleave codes and scales
      const auto& st = *g->find(name.substr(0, name.size() - 7) + ".scale");
      const int64_t rows = t.shape[0], hd = t.shape[1], ns = st.shape[1], w = hd + ns + o.engram_row_pad;
      const std::vector<uint8_t> wb = read(t), sb = read(st);
      std::vector<uint8_t> b(static_cast<size_t>(rows * w), 0);
      for (int64_t r = 0; r < rows; ++r) {
        std::memcpy(b.data() + r * w, wb.data() + r * hd, static_cast<size_t>(hd));
        std::memcpy(b.data() + r * w + hd, sb.data() + r * ns, static_cast<size_t>(ns));
      }
      decls.push_back({name, io::GgmlType::kI8, Shape{rows, w}});
      data.push_back(std::move(b));
      continue;
    }
    const bool is_raw = raw.count(name) > 0;
    const bool fp8_weight = is_raw && raw[name] == "F8_E4M3" && ends_with(name, ".weight");
    const bool fp8_scale = is_raw && raw[name] == "F8_E8M0" && !name.ends_with("_exps.scale") &&
                           raw.count(name.substr(0, name.size() - 6) + ".weight") &&
                           raw[name.substr(0, name.size() - 6) + ".weight"] == "F8_E4M3";
    if (o.lossy && fp8_scale) continue;
    if (o.lossy && (fp8_weight || name == "output.weight" || (in_f16_set(name) && !is_raw))) {
      const std::vector<float> f = to_f32(t);
      if (in_f16_set(name)) {  // ROUNDING: the converter's F16
        std::vector<uint8_t> b(f.size() * 2);
        for (size_t i = 0; i < f.size(); ++i) {
          const uint16_t h = f32_to_f16(f[i]);
          std::memcpy(b.data() + 2 * i, &h, 2);
        }
        decls.push_back({name, io::GgmlType::kF16, t.shape});
        data.push_back(std::move(b));
      } else {  // ROUNDING: Q8_0 of the exact values, ds4's recipe for FP8 linears and the head
        const int64_t rows = t.shape[0], in = t.shape[1];
        const int64_t rb = kernels::quant_row_bytes(kernels::QuantType::kQ8_0, in);
        std::vector<uint8_t> b(static_cast<size_t>(rows * rb));
        for (int64_t r = 0; r < rows; ++r)
          kernels::quantize_row_ref(kernels::QuantType::kQ8_0, f.data() + r * in, b.data() + r * rb, in);
        decls.push_back({name, io::GgmlType::kQ8_0, t.shape});
        data.push_back(std::move(b));
      }
      continue;
    }
    if (is_raw) {
      out_raw.push_back(name);
      out_raw_dtypes.push_back(raw[name]);
    }
    decls.push_back({name, t.type, t.shape});
    data.push_back(read(t));
    if (ends_with(name, ".exp_probs_b.bias")) {  // ik_llama's vision router bias: present, to be ignored
      decls.push_back({name.substr(0, name.size() - 5) + "_vl.bias", t.type, t.shape});
      data.push_back(read(t));
    }
  }
  if (!out_raw.empty()) {
    meta.emplace_back("strata.raw_tensors", io::GgufValue::string_array(out_raw));
    meta.emplace_back("strata.raw_dtypes", io::GgufValue::string_array(out_raw_dtypes));
  }
  if (o.edit_metadata) o.edit_metadata(&meta);
  io::GgufWriterOptions wo;
  wo.fsync = false;
  STRATA_ASSIGN_OR_RETURN(auto w, io::GgufWriter::create(out, std::move(meta), decls, wo));
  for (size_t i = 0; i < decls.size(); ++i)
    STRATA_RETURN_IF_ERROR(w->write_tensor(decls[i].name, data[i].data(), data[i].size()));
  return w->finish();
}

}  // namespace strata::test
