#include "model/weights.h"

#include <cmath>
#include <cstdio>
#include <cstdlib>

#include <functional>
#include <initializer_list>

#include "core/dtype.h"
#include "kernels/quant.h"
#include "model/pipeline_part.h"
#include "store/engram_layout.h"
#include "store/expert_catalog.h"

namespace strata::model {

void Linear::apply(const float* x, int64_t n, float* y, ThreadPool* pool, kernels::RowPath path) const {
  switch (kind) {
    case Kind::kFp8: kernels::linear_fp8(x, n, fp8, y, pool, path); return;
    case Kind::kBf16: kernels::linear_bf16(x, n, bf16, y, pool, path); return;
    case Kind::kF32:
      if (act_fp8) {  // an F16 copy of an FP8 weight: keep the official activation rounding
        std::vector<float> xq(x, x + n * in);
        for (int64_t r = 0; r < n; ++r) kernels::act_quant_fp8_inplace(xq.data() + r * in, in);  // ROUNDING: model.py linear()
        kernels::linear_f32(xq.data(), n, f32, y, pool, path);
        return;
      }
      kernels::linear_f32(x, n, f32, y, pool, path);
      return;
    case Kind::kQuant:  // one regime: rows are computed independently
      if (act_fp8) return apply_quant_fp8_act(x, n, quant, y, pool);
      kernels::linear_quant(x, n, quant, y, pool);
      return;
    case Kind::kNone: break;
  }
  STRATA_CHECK(false, "apply() on an unbound Linear");
}

void Linear::apply(const float* x, Rows r, float* y, ThreadPool* pool) const {
  if (r.by_size()) return apply(x, r.n, y, pool, kernels::RowPath::kAuto);
  if (r.n_decode > 0) apply(x, r.n_decode, y, pool, kernels::RowPath::kDecode);
  if (r.n_prompt() > 0) apply(x + r.n_decode * in, r.n_prompt(), y + r.n_decode * out, pool, kernels::RowPath::kPrompt);
}

bool Linear::add_jobs(LinearJobs* jobs, const float* x, Rows r, float* y) const {
  switch (kind) {
    case Kind::kFp8: add_linear_jobs(&jobs->fp8, x, r, fp8, y); return true;
    case Kind::kBf16: add_linear_jobs(&jobs->bf16, x, r, bf16, y); return true;
    case Kind::kF32:
      if (act_fp8) return false;  // apply() rounds x to E4M3 first
      add_linear_jobs(&jobs->f32, x, r, f32, y);
      return true;
    case Kind::kQuant:
    case Kind::kNone: break;
  }
  return false;
}

uint64_t Linear::weight_bytes() const {
  switch (kind) {
    case Kind::kFp8: return static_cast<uint64_t>(out * in) + ((out + 31) / 32) * ((in + 31) / 32);
    case Kind::kBf16:
      return static_cast<uint64_t>(out * bf16.row_bytes()) + (bf16.e4m3 ? ((out + 31) / 32) * ((in + 31) / 32) : 0);
    case Kind::kF32: return static_cast<uint64_t>(out * in) * 4;
    case Kind::kQuant: return static_cast<uint64_t>(out * kernels::quant_row_bytes(quant.type, in));
    case Kind::kNone: break;
  }
  return 0;
}

void Linear::apply_quant_fp8_act(const float* x, int64_t n, const kernels::QuantWeight& w, float* y, ThreadPool* pool) {
  std::vector<float> xq(x, x + n * w.in);
  for (int64_t r = 0; r < n; ++r) kernels::act_quant_fp8_inplace(xq.data() + r * w.in, w.in);  // ROUNDING: model.py linear()
  kernels::linear_quant(xq.data(), n, w, y, pool);
}

bool quant_type_of(DType d, kernels::QuantType* out) {
  switch (d) {
    case DType::kQ8_0: *out = kernels::QuantType::kQ8_0; return true;
    case DType::kQ2_K: *out = kernels::QuantType::kQ2_K; return true;
    case DType::kQ3_K: *out = kernels::QuantType::kQ3_K; return true;
    case DType::kQ4_K: *out = kernels::QuantType::kQ4_K; return true;
    case DType::kQ6_K: *out = kernels::QuantType::kQ6_K; return true;
    case DType::kIQ4_NL: *out = kernels::QuantType::kIq4Nl; return true;
    default: return false;
  }
}

namespace {

std::string dtype_list(std::initializer_list<DType> ds) {
  std::string s;
  for (DType d : ds) {
    if (!s.empty()) s += " or ";
    s += dtype_name(d);
  }
  return s;
}

// Binds tensors by name, checking each against what the config implies.
class Binder {
 public:
  Binder(const ModelConfig& c, store::WeightStore& s, const ExpertPeers* peers = nullptr,
         std::vector<std::vector<float>>* widened = nullptr)
      : c_(c), s_(s), peers_(peers), widened_(widened) {}

  uint64_t bytes() const { return bytes_; }
  store::WeightStore& store() { return s_; }

  // Checks name/dtype/shape from the checkpoint index without reading bytes.
  Status check(const std::string& name, std::initializer_list<DType> dtypes, const Shape& shape,
               const std::string& why) const {
    const io::TensorInfo* t = s_.checkpoint().find(name);
    if (!t)
      return NotFound("tensor '" + name + "' is missing from the checkpoint (expected " + dtype_list(dtypes) + " " +
                      shape.to_string() + ": " + why + ")");
    bool ok = false;
    for (DType d : dtypes) ok |= (t->dtype == d);
    if (!ok)
      return InvalidArgument("tensor '" + name + "': dtype " + std::string(dtype_name(t->dtype)) + ", expected " +
                             dtype_list(dtypes) + " (" + why + ")");
    if (!(t->shape == shape))
      return InvalidArgument("tensor '" + name + "': shape " + t->shape.to_string() + ", expected " +
                             shape.to_string() + " (" + why + ")");
    return Status();
  }

  Result<TensorView> get(const std::string& name, std::initializer_list<DType> dtypes, const Shape& shape,
                         const std::string& why) {
    STRATA_RETURN_IF_ERROR(check(name, dtypes, shape, why));
    STRATA_ASSIGN_OR_RETURN(TensorView v, s_.resident(name));
    bytes_ += v.nbytes();
    return v;
  }

  // WeightStore::resident_relaid after the same checks as get(), so a tensor a draft shares with
  // its target (store/shared_store.h) comes as the target's copy without reading the stored bytes
  // again. kNotSupported passes through (the store keeps tensors only as stored).
  Result<TensorView> relaid(const std::string& name, std::initializer_list<DType> dtypes, const Shape& shape,
                            const std::string& why, const std::string& layout, const store::WeightStore::RelayFn& relay) {
    STRATA_RETURN_IF_ERROR(check(name, dtypes, shape, why));
    STRATA_ASSIGN_OR_RETURN(TensorView v, s_.resident_relaid(name, layout, relay));
    bytes_ += v.nbytes();
    return v;
  }

  // An F16 tensor (GGUFs from ds4 / ik_llama.cpp) as an f32 view over a copy the weights own;
  // exact: every f16 value is an f32 value. Other dtypes pass through.
  TensorView widen_f16(TensorView v) {
    if (v.dtype != DType::kF16 || widened_ == nullptr) return v;
    std::vector<float> f(static_cast<size_t>(v.numel()));
    for (size_t i = 0; i < f.size(); ++i) f[i] = f16_to_f32(v.as<uint16_t>()[i]);
    widened_->push_back(std::move(f));
    return TensorView{widened_->back().data(), DType::kF32, v.shape};
  }

  // A small BF16/F32 (or F16) parameter widened to f32.
  Result<std::vector<float>> floats(const std::string& name, const Shape& shape, const std::string& why) {
    STRATA_ASSIGN_OR_RETURN(TensorView v, get(name, {DType::kBF16, DType::kF32, DType::kF16}, shape, why));
    std::vector<float> out(static_cast<size_t>(v.numel()));
    if (v.dtype == DType::kF32) {
      for (size_t i = 0; i < out.size(); ++i) out[i] = v.as<float>()[i];
    } else if (v.dtype == DType::kF16) {
      for (size_t i = 0; i < out.size(); ++i) out[i] = f16_to_f32(v.as<uint16_t>()[i]);
    } else {
      for (size_t i = 0; i < out.size(); ++i) out[i] = bf16_to_f32(v.as<uint16_t>()[i]);
    }
    // Norm weights, biases, mHC and sink parameters are few bytes: a NaN/Inf among them is corrupt
    // bytes, and after a norm or an FP8 quantization it would come out as finite but wrong values.
    for (size_t i = 0; i < out.size(); ++i)
      if (!std::isfinite(out[i]))
        return Corruption("tensor '" + name + "': element " + std::to_string(i) + " is " +
                          (std::isnan(out[i]) ? "NaN" : "infinite") + "; the checkpoint's bytes are corrupt");
    return out;
  }

  // A linear layer `prefix`.weight [out, in]. `quantized` says the release stores it FP8 (+ .scale);
  // a BF16/F32 weight is accepted there too (exact, just larger). Non-quantised ones are BF16/F32.
  Result<Linear> linear(const std::string& prefix, int64_t out, int64_t in, bool quantized, const std::string& why) {
    const std::string wname = prefix + ".weight";
    const io::TensorInfo* t = s_.checkpoint().find(wname);
    Linear l;
    l.out = out;
    l.in = in;
    kernels::QuantType qt;
    if (t && quant_type_of(t->dtype, &qt)) {
      // A ggml block format from a quantised GGUF (`strata quantize`): any linear may be one.
      if (in % dtype_block(t->dtype).elems != 0)
        return InvalidArgument("tensor '" + wname + "': " + std::string(dtype_name(t->dtype)) + " needs in (" +
                               std::to_string(in) + ") to be a multiple of " + std::to_string(dtype_block(t->dtype).elems));
      STRATA_ASSIGN_OR_RETURN(TensorView w, get(wname, {t->dtype}, Shape{out, in}, why));
      l.kind = Linear::Kind::kQuant;
      l.quant = kernels::QuantWeight{qt, w.data, out, in};
      l.act_fp8 = quantized;  // the release stores it FP8: keep its activation rounding
      return l;
    }
    if (quantized && (!t || t->dtype == DType::kF8E4M3)) {
      STRATA_ASSIGN_OR_RETURN(TensorView w, get(wname, {DType::kF8E4M3}, Shape{out, in}, why));
      STRATA_ASSIGN_OR_RETURN(TensorView s, get(prefix + ".scale", {DType::kF8E8M0},
                                                Shape{(out + 31) / 32, (in + 31) / 32},
                                                "UE8M0 scale per [32, 32] block of " + wname));
      l.kind = Linear::Kind::kFp8;
      // The scale range once here, not on every call (kernels::with_scale_range).
      l.fp8 = kernels::with_scale_range(kernels::Fp8Weight{w.as<uint8_t>(), s.as<uint8_t>(), out, in});
      return l;
    }
    STRATA_ASSIGN_OR_RETURN(TensorView w0, get(wname,
                                               quantized ? std::initializer_list<DType>{DType::kF8E4M3, DType::kBF16,
                                                                                        DType::kF32, DType::kF16}
                                                         : std::initializer_list<DType>{DType::kBF16, DType::kF32,
                                                                                        DType::kF16},
                                               Shape{out, in}, why));
    // An F16 weight (ds4 / ik_llama.cpp GGUFs) is widened to f32 exactly and runs the f32 linear; the
    // rounding, if any, was the converter's BF16 -> F16 (docs/gguf.md).
    const TensorView w = widen_f16(w0);
    l.act_fp8 = quantized && w0.dtype == DType::kF16;  // the release's FP8 linear rounds x to E4M3
    if (w.dtype == DType::kBF16) {
      l.kind = Linear::Kind::kBf16;
      l.bf16 = kernels::Bf16Weight{w.as<uint16_t>(), out, in};
    } else {
      l.kind = Linear::Kind::kF32;
      l.f32 = kernels::F32Weight{w.as<float>(), out, in};
    }
    return l;
  }

  const ModelConfig& c_;
  store::WeightStore& s_;
  const ExpertPeers* peers_ = nullptr;  // expert parallelism: experts owned elsewhere are not preloaded
  std::vector<std::vector<float>>* widened_ = nullptr;  // owner of widened F16 tensors (ModelWeights::widened)

 private:
  uint64_t bytes_ = 0;
};

std::string sh(int64_t a, const char* an, int64_t b, const char* bn) {
  return std::string(an) + "=" + std::to_string(a) + ", " + bn + "=" + std::to_string(b);
}

Status bind_hc(Binder& b, const std::string& p, const std::string& site, HcWeights* hc) {
  const ModelConfig& c = b.c_;
  const int64_t mix = static_cast<int64_t>(2 + c.hc_mult) * c.hc_mult;
  const std::string why = "mHC, (2 + hc_mult) * hc_mult = " + std::to_string(mix);
  STRATA_ASSIGN_OR_RETURN(hc->fn, b.floats(p + ".hc_" + site + "_fn", Shape{mix, c.hc_mult * c.dim},
                                           why + ", hc_mult * dim = " + std::to_string(c.hc_mult * c.dim)));
  STRATA_ASSIGN_OR_RETURN(hc->base, b.floats(p + ".hc_" + site + "_base", Shape{mix}, why));
  STRATA_ASSIGN_OR_RETURN(hc->scale, b.floats(p + ".hc_" + site + "_scale", Shape{3}, "mHC pre/post/comb scales"));
  return Status();
}

Status bind_attention(Binder& b, int layer, const std::string& p, AttentionWeights* a) {
  const ModelConfig& c = b.c_;
  const int64_t hd = c.head_dim, qr = c.q_lora_rank, dim = c.dim;
  const int64_t group_in = c.n_heads * hd / c.o_groups, o_out = c.o_groups * c.o_lora_rank;
  STRATA_ASSIGN_OR_RETURN(a->attn_sink, b.floats(p + ".attn_sink", Shape{c.n_heads}, "n_heads"));
  STRATA_ASSIGN_OR_RETURN(a->wq_a, b.linear(p + ".wq_a", qr, dim, true, sh(qr, "q_lora_rank", dim, "dim")));
  STRATA_ASSIGN_OR_RETURN(a->q_norm, b.floats(p + ".q_norm.weight", Shape{qr}, "q_lora_rank"));
  STRATA_ASSIGN_OR_RETURN(a->wq_b, b.linear(p + ".wq_b", c.n_heads * hd, qr, true,
                                            sh(c.n_heads * hd, "n_heads*head_dim", qr, "q_lora_rank")));
  STRATA_ASSIGN_OR_RETURN(a->wkv, b.linear(p + ".wkv", hd, dim, true, sh(hd, "head_dim", dim, "dim")));
  STRATA_ASSIGN_OR_RETURN(a->kv_norm, b.floats(p + ".kv_norm.weight", Shape{hd}, "head_dim"));
  // wo_a: the release stores FP8; the official convert.py dequantises it to bf16 (exact) and the
  // model uses it without activation quantisation (an einsum), so strata does the same: a BF16 linear
  // in the bit-exact order. Its values e4m3 * 2^k are bf16 values, so an FP8 wo_a keeps its codes (1
  // byte a weight, blocked) and the kernels widen them exactly: the same bits as the widened copy at
  // half the bytes (the release: 1.34 GB less per decode token and in RAM than the bf16 copy). The
  // widened copy remains for what the codes cannot carry exactly: a NaN code, a scale outside
  // 2^-60 .. 2^60 (values could leave the normal range), groups not whole 32-row scale blocks, and
  // block formats (GGUF).
  STRATA_ASSIGN_OR_RETURN(Linear wo_a, b.linear(p + ".wo_a", o_out, group_in, true,
                                                sh(o_out, "o_groups*o_lora_rank", group_in, "n_heads*head_dim/o_groups")));
  // Blocked layout (16 rows k-major) when every output group is whole blocks: the bit-exact
  // matvec then needs no transposes (kernels/linear.h Bf16Weight::blocked; decode 2-3x faster).
  const bool blocked = c.o_lora_rank % kernels::kBf16BlockRows == 0;
  const int64_t n_scales = ((o_out + 31) / 32) * ((group_in + 31) / 32);
  auto codes_exact = [&](const kernels::Fp8Weight& f) {
    if (c.o_lora_rank % 32 != 0) return false;
    for (int64_t i = 0; i < o_out * group_in; ++i)
      if ((f.w[i] & 0x7F) == 0x7F) return false;
    // The scale range was found when b.linear bound wo_a (kernels::with_scale_range); an unknown
    // range (lo > hi) fails the test and keeps the widened copy.
    return f.scale_lo >= 127 - 60 && f.scale_hi <= 127 + 60;
  };
  if (wo_a.kind == Linear::Kind::kFp8 && blocked && codes_exact(wo_a.fp8)) {
    // The blocked codes in place of the stored ones (the store gives their pages back), or, where
    // the store keeps tensors only as stored, a copy of our own.
    Result<TensorView> relaid = b.store().resident_relaid(
        p + ".wo_a.weight", "e4m3-blocked16",
        [o_out, group_in](const uint8_t* src, uint8_t* dst, const std::function<void(uint64_t)>&) {
          kernels::block_e4m3_rows(src, o_out, group_in, dst);
        });
    const uint8_t* codes = nullptr;
    if (relaid.ok()) {
      codes = relaid->as<uint8_t>();
    } else if (relaid.status().code() == StatusCode::kNotSupported) {
      a->wo_a_e4m3.resize(static_cast<size_t>(o_out * group_in));
      kernels::block_e4m3_rows(wo_a.fp8.w, o_out, group_in, a->wo_a_e4m3.data());
      codes = a->wo_a_e4m3.data();
    } else {
      return relaid.status();
    }
    a->wo_a_scale.assign(wo_a.fp8.scale, wo_a.fp8.scale + n_scales);
    a->wo_a.kind = Linear::Kind::kBf16;
    a->wo_a.out = o_out;
    a->wo_a.in = group_in;
    a->wo_a.bf16 = kernels::Bf16Weight{nullptr, o_out, group_in, true, codes, a->wo_a_scale.data()};
  } else if (wo_a.kind == Linear::Kind::kFp8 || wo_a.kind == Linear::Kind::kQuant) {
    std::vector<float> tmp(static_cast<size_t>(o_out * group_in));
    if (wo_a.kind == Linear::Kind::kFp8) {
      kernels::dequant_fp8(wo_a.fp8, tmp.data());
    } else {
      for (int64_t r = 0; r < o_out; ++r)
        kernels::dequantize_row(wo_a.quant.type, kernels::quant_weight_row(wo_a.quant, r), tmp.data() + r * group_in, group_in);
    }
    std::vector<uint16_t> rows(tmp.size());
    // FP8: exact (e4m3 * 2^k fits bf16). ROUNDING for a block format: its dequantised f32 values are
    // rounded to bf16, so the grouped bit-exact bf16 path runs unchanged (docs/gguf.md).
    for (size_t i = 0; i < tmp.size(); ++i) rows[i] = f32_to_bf16(tmp[i]);
    if (blocked) {
      a->wo_a_bf16.resize(rows.size());
      kernels::block_bf16_rows(rows.data(), o_out, group_in, a->wo_a_bf16.data());
    } else {
      a->wo_a_bf16 = std::move(rows);
    }
    a->wo_a.kind = Linear::Kind::kBf16;
    a->wo_a.out = o_out;
    a->wo_a.in = group_in;
    a->wo_a.bf16 = kernels::Bf16Weight{a->wo_a_bf16.data(), o_out, group_in, blocked};
  } else {
    a->wo_a = wo_a;
  }
  STRATA_ASSIGN_OR_RETURN(a->wo_b, b.linear(p + ".wo_b", dim, o_out, true, sh(dim, "dim", o_out, "o_groups*o_lora_rank")));

  if (c.is_kv_source(layer)) {
    const std::string cp = p + ".compressor";
    STRATA_ASSIGN_OR_RETURN(a->comp_wkv, b.linear(cp + ".wkv", hd, dim, false, sh(hd, "head_dim", dim, "dim")));
    if (c.compress_ratio(layer) > 1) {
      STRATA_ASSIGN_OR_RETURN(a->comp_wgate, b.linear(cp + ".wgate", hd, dim, false, sh(hd, "head_dim", dim, "dim")));
    }
    STRATA_ASSIGN_OR_RETURN(a->comp_norm, b.floats(cp + ".norm.weight", Shape{hd}, "head_dim"));
  }
  if (c.is_index_source(layer)) {
    const std::string ip = p + ".indexer";
    const int64_t ih = c.index_n_heads, id = c.index_head_dim;
    STRATA_ASSIGN_OR_RETURN(a->idx_wq_b, b.linear(ip + ".wq_b", ih * id, qr, true,
                                                  sh(ih * id, "index_n_heads*index_head_dim", qr, "q_lora_rank")));
    STRATA_ASSIGN_OR_RETURN(a->idx_weights_proj,
                            b.linear(ip + ".weights_proj", ih, dim, false, sh(ih, "index_n_heads", dim, "dim")));
    if (c.is_kv_source(layer)) {
      STRATA_ASSIGN_OR_RETURN(a->idx_wk, b.linear(ip + ".wk", id, hd, false, sh(id, "index_head_dim", hd, "head_dim")));
      STRATA_ASSIGN_OR_RETURN(a->idx_k_norm, b.floats(ip + ".k_norm.weight", Shape{id}, "index_head_dim"));
    }
  }
  return Status();
}

Status check_experts(const Binder& b, int layer, const std::string& p, int n_experts) {
  const ModelConfig& c = b.c_;
  const int64_t dim = c.dim, inter = c.moe_inter_dim;
  for (int e = 0; e < n_experts; ++e) {
    const std::string ep = p + ".ffn.experts." + std::to_string(e);
    const std::string why_in = "MXFP4 routed expert, moe_inter_dim=" + std::to_string(inter) + ", dim=" + std::to_string(dim);
    const io::TensorInfo* t1 = b.s_.checkpoint().find(ep + ".w1.weight");
    if (t1 && dtype_is_block_quant(t1->dtype)) {
      // A block-quantised expert (quantised GGUF): [out, in] blocks, scales inside; the GGUF view
      // gives it empty U8 [0] .scale tensors (io/checkpoint.h open_gguf).
      const std::string why_q = std::string(dtype_name(t1->dtype)) + " routed expert, moe_inter_dim=" +
                                std::to_string(inter) + ", dim=" + std::to_string(dim);
      for (const char* w : {".w1", ".w3", ".w2"}) {
        const bool down = std::string(w) == ".w2";
        const int64_t out = down ? dim : inter, in = down ? inter : dim;
        const io::TensorInfo* tw = b.s_.checkpoint().find(ep + w + ".weight");
        const DType d = tw ? tw->dtype : t1->dtype;
        if (!dtype_is_block_quant(d) || in % dtype_block(d).elems != 0)
          return InvalidArgument("tensor '" + ep + w + ".weight': dtype " + std::string(dtype_name(d)) +
                                 ", expected a block format whose block divides " + std::to_string(in) + " (" + why_q + ")");
        STRATA_RETURN_IF_ERROR(b.check(ep + w + ".weight", {d}, Shape{out, in}, why_q));
        STRATA_RETURN_IF_ERROR(b.check(ep + w + ".scale", {DType::kU8}, Shape{0}, why_q + ": no separate scales"));
      }
      continue;
    }
    for (const char* w : {".w1", ".w3"}) {
      STRATA_RETURN_IF_ERROR(b.check(ep + w + ".weight", {DType::kI8}, Shape{inter, dim / 2}, why_in + ", packed e2m1 [inter, dim/2]"));
      STRATA_RETURN_IF_ERROR(b.check(ep + w + ".scale", {DType::kF8E8M0}, Shape{inter, dim / 32}, why_in + ", e8m0 per 32"));
    }
    STRATA_RETURN_IF_ERROR(b.check(ep + ".w2.weight", {DType::kI8}, Shape{dim, inter / 2}, why_in + ", packed e2m1 [dim, inter/2]"));
    STRATA_RETURN_IF_ERROR(b.check(ep + ".w2.scale", {DType::kF8E8M0}, Shape{dim, inter / 32}, why_in + ", e8m0 per 32"));
  }
  (void)layer;
  return Status();
}

Status bind_block(Binder& b, int layer, BlockWeights* blk) {
  const ModelConfig& c = b.c_;
  const std::string p = store::layer_prefix(layer, c.n_layers);
  blk->layer = layer;
  STRATA_RETURN_IF_ERROR(bind_hc(b, p, "attn", &blk->hc_attn));
  STRATA_RETURN_IF_ERROR(bind_hc(b, p, "ffn", &blk->hc_ffn));
  STRATA_ASSIGN_OR_RETURN(blk->attn_norm, b.floats(p + ".attn_norm.weight", Shape{c.dim}, "dim"));
  STRATA_ASSIGN_OR_RETURN(blk->ffn_norm, b.floats(p + ".ffn_norm.weight", Shape{c.dim}, "dim"));
  STRATA_RETURN_IF_ERROR(bind_attention(b, layer, p + ".attn", &blk->attn));

  MoeWeights& m = blk->ffn;
  m.layer = layer;
  m.n_experts = c.n_experts(layer);
  m.n_active = c.n_active(layer);
  const std::string fp = p + ".ffn";
  STRATA_ASSIGN_OR_RETURN(m.gate, b.linear(fp + ".gate", m.n_experts, c.dim, false,
                                           sh(m.n_experts, "n_routed_experts", c.dim, "dim")));
  STRATA_ASSIGN_OR_RETURN(m.gate_bias, b.floats(fp + ".gate.bias", Shape{m.n_experts}, "n_routed_experts"));
  const int64_t inter = c.moe_inter_dim;
  STRATA_ASSIGN_OR_RETURN(m.shared_w1, b.linear(fp + ".shared_experts.w1", inter, c.dim, true, sh(inter, "moe_inter_dim", c.dim, "dim")));
  STRATA_ASSIGN_OR_RETURN(m.shared_w2, b.linear(fp + ".shared_experts.w2", c.dim, inter, true, sh(c.dim, "dim", inter, "moe_inter_dim")));
  STRATA_ASSIGN_OR_RETURN(m.shared_w3, b.linear(fp + ".shared_experts.w3", inter, c.dim, true, sh(inter, "moe_inter_dim", c.dim, "dim")));
  STRATA_RETURN_IF_ERROR(check_experts(b, layer, p, m.n_experts));

  const int ei = c.engram_index(layer);
  if (layer < c.n_layers && ei >= 0) {
    blk->has_engram = true;
    EngramWeights& e = blk->engram;
    e.index = ei;
    e.n_rows = c.engram_num_embeddings[static_cast<size_t>(ei)];
    const std::string ep = p + ".engram";
    const int64_t hd = c.engram_head_dim, cols = c.engram_n_cols();
    const std::string rows_why = "engram_num_embeddings[" + std::to_string(ei) + "]=" + std::to_string(e.n_rows) +
                                 ", engram_head_dim=" + std::to_string(hd);
    // The official F8_E4M3 table + E8M0 scales, one ggml block-format tensor (`strata quantize
    // --engram T`, whose rows are whole blocks) with no scale tensor, or ds4 / ik_llama.cpp's
    // interleaved U8 rows.
    const io::TensorInfo* table = b.s_.checkpoint().find(ep + ".embed.weight");
    int64_t ihd = 0, ins = 0;
    if (table && table->dtype == DType::kU8) {
      // ds4 / ik_llama.cpp: one U8 [rows, head_dim + head_dim / 32] tensor, each row the E4M3 bytes then
      // the E8M0 scales (store/engram_layout.h); the stores split the rows, the math is the official one.
      STRATA_RETURN_IF_ERROR(b.check(ep + ".embed.weight", {DType::kU8}, Shape{e.n_rows, hd + hd / 32},
                                     rows_why + ", interleaved rows: head_dim E4M3 bytes then head_dim/32 E8M0 scales"));
      if (!store::engram_interleaved(*table, &ihd, &ins) || ihd != hd)
        return InvalidArgument("tensor '" + ep + ".embed.weight': rows of " + std::to_string(table->shape[1]) +
                               " bytes, expected " + std::to_string(hd + hd / 32) + " (" + rows_why + ")");
      e.table_dtype = DType::kF8E4M3;
      e.row_bytes = hd;
      e.scale_bytes = hd / 32;
    } else {
      STRATA_RETURN_IF_ERROR(b.check(ep + ".embed.weight",
                                     {DType::kF8E4M3, DType::kQ8_0, DType::kQ6_K, DType::kQ4_K, DType::kIQ4_NL,
                                      DType::kQ3_K, DType::kQ2_K},
                                     Shape{e.n_rows, hd}, rows_why));
      e.table_dtype = table->dtype;
      if (dtype_is_block_quant(e.table_dtype)) {
        const int64_t be = dtype_block(e.table_dtype).elems;
        if (hd % be != 0)
          return InvalidArgument("tensor '" + ep + ".embed.weight': " + std::string(dtype_name(e.table_dtype)) +
                                 " rows need a multiple of " + std::to_string(be) + " values, engram_head_dim=" +
                                 std::to_string(hd));
        e.row_bytes = static_cast<int64_t>(dtype_nbytes(e.table_dtype, hd));
        e.scale_bytes = 0;
      } else {
        STRATA_RETURN_IF_ERROR(b.check(ep + ".embed.scale", {DType::kF8E8M0}, Shape{e.n_rows, hd / 32},
                                       rows_why + ", e8m0 per 32"));
        e.row_bytes = hd;
        e.scale_bytes = hd / 32;
      }
    }
    STRATA_ASSIGN_OR_RETURN(e.wkv, b.linear(ep + ".wkv", c.dim * (c.hc_mult + 1), cols * hd, true,
                                            sh(c.dim * (c.hc_mult + 1), "dim*(hc_mult+1)", cols * hd,
                                               "(engram_max_ngram_size-1)*engram_n_heads*engram_head_dim")));
    STRATA_ASSIGN_OR_RETURN(auto q, b.floats(ep + ".q_weight", Shape{c.hc_mult, c.dim}, "hc_mult, dim"));
    STRATA_ASSIGN_OR_RETURN(auto k, b.floats(ep + ".k_weight", Shape{c.hc_mult, c.dim}, "hc_mult, dim"));
    e.qk_weight.resize(q.size());
    // ROUNDING: f32 product of the two weights, as model.py Engram.forward forms it once.
    for (size_t i = 0; i < q.size(); ++i) e.qk_weight[i] = q[i] * k[i];
  }
  // Validated: a store that keeps experts and Engram tables in RAM reads them now, so no token waits
  // for a first use. DSpark stages (layer >= n_layers) are not run yet (no speculative decoding), so
  // their routed experts stay on disk (6.3 GiB of MXFP4 on the release).
  if (layer >= c.n_layers) return Status();
  if (b.peers_ == nullptr) return b.s_.preload_layer(layer, m.n_experts);
  return b.s_.preload_layer(layer, m.n_experts, [&](int e) { return b.peers_->owner(layer, e) == 0; });
}

// The tensors binding will ask the store for: the backbone's layers [lo, hi) (all of them without a
// pipeline part), the embedding when lo is 0, head and norm when hi is n_layers, and the DSpark
// stages when the config runs them and the part is the whole model, but not their routed experts
// (read on first use: DSpark stages are not run by generation yet).
bool binds(const ModelConfig& c, const std::string& name, const PipelinePart* part) {
  const int lo = part ? part->layer_lo : 0, hi = part ? part->layer_hi : c.n_layers;
  if (name.rfind("layers.", 0) == 0) {
    char* end = nullptr;
    const long l = std::strtol(name.c_str() + 7, &end, 10);
    return end != name.c_str() + 7 && *end == '.' && l >= lo && l < hi;
  }
  if (name.rfind("mtp.", 0) == 0)
    return c.dspark_block_size > 0 && lo == 0 && hi == c.n_layers && !store::ExpertCatalog::is_expert_tensor(name);
  if (name.rfind("embed.", 0) == 0) return lo == 0;
  if (name.rfind("head.", 0) == 0 || name.rfind("norm.", 0) == 0) return hi == c.n_layers;
  return true;
}

}  // namespace

// "layers.L.ffn.experts.E.*" of a main layer L whose expert E another process owns.
static bool peers_expert(const ModelConfig& c, const ExpertPeers* peers, const std::string& name) {
  int l = -1, e = -1;
  if (peers == nullptr || !routed_expert_tensor(name, &l, &e)) return false;
  return l < c.n_layers && e < c.n_routed_experts && peers->owner(l, e) != 0;
}

Result<ModelWeights> bind_weights(const ModelConfig& c, store::WeightStore& store, const ProgressFn& progress,
                                  const ExpertPeers* peers, const PipelinePart* part) {
  // Every tensor kept in RAM is read first, in one parallel pass over the shards (issue 15 item 2);
  // binding then checks and wraps them layer by layer.
  STRATA_RETURN_IF_ERROR(store.load_resident(
      [&c, peers, part](const io::TensorInfo& t) { return binds(c, t.name, part) && !peers_expert(c, peers, t.name); },
      progress));
  const int lo = part ? part->layer_lo : 0, hi = part ? part->layer_hi : c.n_layers;
  ModelWeights w;
  Binder b(c, store, peers, &w.widened);
  const uint64_t n_blocks = static_cast<uint64_t>(c.n_layers + (c.dspark_block_size > 0 ? c.n_mtp_layers : 0));
  auto bound = [&](uint64_t done) { report_progress(progress, ProgressEvent{"load", "layers", done, n_blocks, "", false}); };
  if (lo == 0) {
    STRATA_ASSIGN_OR_RETURN(TensorView embed, b.get("embed.weight", {DType::kBF16, DType::kF32, DType::kF16},
                                                    Shape{c.vocab_size, c.dim}, sh(c.vocab_size, "vocab_size", c.dim, "dim")));
    w.embed = b.widen_f16(embed);
  }
  if (hi == c.n_layers) {
    // The LM head in the blocked layout (16 rows k-major), in place of the stored rows: decode rows
    // then run one fused chain per output with no horizontal sums (kernels::linear_bf16_any_order;
    // at 4 rows the release's head 61-71 -> 23-28 ms on 2 Zen 5 cores, docs/performance.md "The LM
    // head in blocks"). Bound through the store's relay before anything reads the stored rows, so a
    // draft sharing the head gets the target's copy. Not where AMX tiles run the head (they read
    // the stored rows) or no vector level runs (kernels::any_order_prefers_blocked), nor where the
    // store keeps tensors only as stored: then the stored rows.
    const int64_t V = c.vocab_size, dim = c.dim;
    const std::string head_why = sh(V, "vocab_size", dim, "dim");
    const io::TensorInfo* ht = store.checkpoint().find("head.weight");
    bool head_bound = false;
    if (ht != nullptr && ht->dtype == DType::kBF16 && kernels::any_order_prefers_blocked(V)) {
      auto relay = [V, dim](const uint8_t* src, uint8_t* dst, const std::function<void(uint64_t)>& done) {
        // 1024 rows at a time (whole blocks: a row range's blocked layout is that range of the
        // whole's), handing the stored rows behind back as it goes: the release's 1.3 GB head
        // never exists twice.
        constexpr int64_t kRows = 64 * kernels::kBf16BlockRows;
        const auto* s = reinterpret_cast<const uint16_t*>(src);
        auto* d = reinterpret_cast<uint16_t*>(dst);
        for (int64_t r0 = 0; r0 < V; r0 += kRows) {
          const int64_t n = std::min(kRows, V - r0);
          kernels::block_bf16_rows(s + r0 * dim, n, dim, d + r0 * dim);
          done(static_cast<uint64_t>((r0 + n) * dim) * 2);
        }
      };
      Result<TensorView> blocked = b.relaid("head.weight", {DType::kBF16}, Shape{V, dim}, head_why, "bf16-blocked16", relay);
      if (blocked.ok()) {
        w.head.kind = Linear::Kind::kBf16;
        w.head.out = V;
        w.head.in = dim;
        w.head.bf16 = kernels::Bf16Weight{blocked->as<uint16_t>(), V, dim, true};
        head_bound = true;
      } else if (blocked.status().code() != StatusCode::kNotSupported) {
        return blocked.status();
      }
    }
    if (!head_bound) {
      STRATA_ASSIGN_OR_RETURN(w.head, b.linear("head", V, dim, false, head_why));
    }
    STRATA_ASSIGN_OR_RETURN(w.norm, b.floats("norm.weight", Shape{c.dim}, "dim"));
  }
  w.layers.resize(static_cast<size_t>(c.n_layers));  // the layers outside [lo, hi) stay unbound
  for (int l = lo; l < hi; ++l) {
    Status s = bind_block(b, l, &w.layers[static_cast<size_t>(l)]);
    if (!s.ok()) return s.with_context("layer " + std::to_string(l));
    bound(static_cast<uint64_t>(l + 1));
  }
  if (c.dspark_block_size > 0 && lo == 0 && hi == c.n_layers) {
    w.mtp.resize(static_cast<size_t>(c.n_mtp_layers));
    for (int s = 0; s < c.n_mtp_layers; ++s) {
      Status st = bind_block(b, c.n_layers + s, &w.mtp[static_cast<size_t>(s)]);
      if (!st.ok()) return st.with_context("DSpark stage " + std::to_string(s));
      bound(static_cast<uint64_t>(c.n_layers + s + 1));
    }
    if (c.n_mtp_layers > 0) {
      const int64_t nt = static_cast<int64_t>(c.dspark_target_layer_ids.size());
      const int64_t r = c.dspark_markov_rank;
      const std::string last = "mtp." + std::to_string(c.n_mtp_layers - 1);
      STRATA_ASSIGN_OR_RETURN(w.dspark.main_proj, b.linear("mtp.0.main_proj", c.dim, c.dim * nt, true,
                                                           sh(c.dim, "dim", c.dim * nt, "dim*len(dspark_target_layer_ids)")));
      STRATA_ASSIGN_OR_RETURN(w.dspark.main_norm, b.floats("mtp.0.main_norm.weight", Shape{c.dim}, "dim"));
      STRATA_ASSIGN_OR_RETURN(w.dspark.norm, b.floats(last + ".norm.weight", Shape{c.dim}, "dim"));
      STRATA_ASSIGN_OR_RETURN(w.dspark.markov_embed, b.get(last + ".markov_head.embed.weight", {DType::kBF16, DType::kF32},
                                                           Shape{c.vocab_size, r}, sh(c.vocab_size, "vocab_size", r, "dspark_markov_rank")));
      STRATA_ASSIGN_OR_RETURN(w.dspark.markov_head, b.linear(last + ".markov_head.head", c.vocab_size, r, false,
                                                             sh(c.vocab_size, "vocab_size", r, "dspark_markov_rank")));
      STRATA_ASSIGN_OR_RETURN(w.dspark.confidence_proj, b.floats(last + ".confidence_head.proj.weight", Shape{1, c.dim + r},
                                                                 "1, dim + dspark_markov_rank"));
    }
  }
  w.resident_bytes = b.bytes();
  report_progress(progress, ProgressEvent{"load", "layers", n_blocks, n_blocks, "", true});
  return w;
}

}  // namespace strata::model
