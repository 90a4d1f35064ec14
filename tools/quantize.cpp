#include "tools/quantize.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <cmath>
#include <filesystem>
#include <functional>
#include <map>
#include <set>

#include "core/thread_pool.h"
#include "io/checkpoint.h"
#include "io/ggml_mxfp4.h"
#include "io/gguf_names.h"
#include "io/gguf_split_writer.h"
#include "kernels/kquant.h"
#include "kernels/linear.h"
#include "model/config.h"
#include "model/weights.h"
#include "store/expert_catalog.h"
#include "tools/imatrix.h"

namespace strata::tools {

namespace {

io::GgmlType ggml_of(DType d) {
  switch (d) {
    case DType::kF32: return io::GgmlType::kF32;
    case DType::kF16: return io::GgmlType::kF16;
    case DType::kBF16: return io::GgmlType::kBf16;
    case DType::kQ8_0: return io::GgmlType::kQ8_0;
    case DType::kQ2_K: return io::GgmlType::kQ2_K;
    case DType::kQ3_K: return io::GgmlType::kQ3_K;
    case DType::kQ4_K: return io::GgmlType::kQ4_K;
    case DType::kQ6_K: return io::GgmlType::kQ6_K;
    case DType::kIQ4_NL: return io::GgmlType::kIq4Nl;
    default: return io::GgmlType::kI8;  // official bytes (F8_E4M3, F8_E8M0, packed E2M1, U8), listed in strata.raw_dtypes
  }
}

// One source matrix (or raw tensor) and what becomes of it.
struct Part {
  const io::TensorInfo* w = nullptr;
  const io::TensorInfo* scale = nullptr;  // FP8 / MXFP4 block scales (quantised parts only)
};

// One GGUF tensor: a single part, or n_experts parts stacked.
struct Item {
  std::string gguf;
  std::optional<DType> target;  // nullopt: the parts' bytes as they are
  DType src_dtype = DType::kF32;
  Shape shape;                  // GGUF tensor shape (strata order)
  int64_t out = 0, in = 0;      // logical matrix shape of one part (quantised items)
  std::vector<Part> parts;
  std::vector<float> importance;  // [parts, in] imatrix weights; empty = unweighted
  bool ggml_mxfp4 = false;        // kept MXFP4 experts written as ggml MXFP4 blocks (parts carry .scale)
};

// Logical [out, in] of a stored matrix: packed E2M1 (I8) holds two values per byte.
void logical_shape(const io::TensorInfo& t, int64_t* out, int64_t* in) {
  *out = t.shape.rank >= 2 ? t.shape[0] : 1;
  *in = t.shape.rank >= 2 ? t.shape[1] : t.shape[0];
  if (t.dtype == DType::kI8) *in *= 2;
}

bool fits(const std::optional<DType>& t, const io::TensorInfo& w) { return t && quant_fits(*t, w.shape, w.dtype); }

// Dequantises one part to f32 [out, in] and quantises its rows to `target`, weighted by
// `importance` [in] when given (kernels/kquant.h quantize_row_weighted).
Status convert(const io::Checkpoint& ck, const Part& p, DType target, int64_t out, int64_t in, const float* importance,
               ThreadPool* pool, std::vector<uint8_t>* dst) {
  std::vector<uint8_t> wb(p.w->nbytes), sb(p.scale ? p.scale->nbytes : 0);
  STRATA_RETURN_IF_ERROR(ck.read(*p.w, wb.data()));
  if (p.scale) STRATA_RETURN_IF_ERROR(ck.read(*p.scale, sb.data()));
  std::vector<float> f(static_cast<size_t>(out * in));
  switch (p.w->dtype) {
    case DType::kF8E4M3:
      if (!p.scale) return InvalidArgument("tensor '" + p.w->name + "': FP8 weight without a .scale");
      kernels::dequant_fp8(kernels::Fp8Weight{wb.data(), sb.data(), out, in}, f.data());
      break;
    case DType::kI8:
      if (!p.scale) return InvalidArgument("tensor '" + p.w->name + "': MXFP4 weight without a .scale");
      kernels::dequant_fp4(kernels::Fp4Weight{wb.data(), sb.data(), out, in}, f.data());
      break;
    case DType::kBF16: kernels::dequant_bf16(reinterpret_cast<const uint16_t*>(wb.data()), out * in, f.data()); break;
    case DType::kF32: std::memcpy(f.data(), wb.data(), f.size() * 4); break;
    default:
      return NotSupported("tensor '" + p.w->name + "': cannot quantise dtype " + std::string(dtype_name(p.w->dtype)));
  }
  for (size_t i = 0; i < f.size(); ++i)
    if (!std::isfinite(f[i]))
      return Corruption("tensor '" + p.w->name + "': element " + std::to_string(i) + " is not finite");
  kernels::QuantType qt;
  STRATA_CHECK(model::quant_type_of(target, &qt), "convert: not a block format");
  const int64_t rb = kernels::quant_row_bytes(qt, in);
  dst->assign(static_cast<size_t>(out * rb), 0);
  pool->parallel_for(out, [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r) {
      if (importance) kernels::quantize_row_weighted(qt, f.data() + r * in, importance, dst->data() + r * rb, in);
      else kernels::quantize_row_ref(qt, f.data() + r * in, dst->data() + r * rb, in);
    }
  });
  return Status();
}

// An Engram table (F8_E4M3 [rows, hd] + E8M0 [rows, hd/32]) -> `target` rows, written to `w` in
// chunks of rows: e4m3 * 2^k is exact in f32, so each row is quantised from the official values.
// `progress` returns false to stop (cancelled) after the chunk it was told of.
Status convert_engram(const io::Checkpoint& ck, const Part& p, DType target, ThreadPool* pool, io::GgufSplitWriter* w,
                      const std::function<bool(uint64_t)>& progress) {
  const int64_t rows = p.w->shape[0], hd = p.w->shape[1], ns = hd / 32;
  kernels::QuantType qt;
  STRATA_CHECK(model::quant_type_of(target, &qt), "convert_engram: not a block format");
  const int64_t rb = kernels::quant_row_bytes(qt, hd);
  constexpr int64_t kChunk = 1 << 15;  // rows per chunk: 8 MiB of codes at head_dim 256
  std::vector<uint8_t> codes, scales, out;
  std::vector<float> f;
  for (int64_t r0 = 0; r0 < rows; r0 += kChunk) {
    const int64_t n = std::min(kChunk, rows - r0);
    codes.resize(static_cast<size_t>(n * hd));
    scales.resize(static_cast<size_t>(n * ns));
    STRATA_RETURN_IF_ERROR(ck.read_range(*p.w, static_cast<uint64_t>(r0 * hd), codes.size(), codes.data()));
    STRATA_RETURN_IF_ERROR(ck.read_range(*p.scale, static_cast<uint64_t>(r0 * ns), scales.size(), scales.data()));
    f.resize(static_cast<size_t>(n * hd));
    out.assign(static_cast<size_t>(n * rb), 0);
    std::atomic<int64_t> bad{-1};
    pool->parallel_for(n, [&](int64_t a, int64_t b) {
      for (int64_t r = a; r < b; ++r) {
        float* fr = f.data() + r * hd;
        for (int64_t i = 0; i < hd; ++i) {
          fr[i] = e4m3_to_f32(codes[static_cast<size_t>(r * hd + i)]) * e8m0_to_f32(scales[static_cast<size_t>(r * ns + i / 32)]);
          if (!std::isfinite(fr[i])) bad.store(r0 + r);
        }
        kernels::quantize_row_ref(qt, fr, out.data() + r * rb, hd);
      }
    });
    if (bad.load() >= 0)
      return Corruption("tensor '" + p.w->name + "': row " + std::to_string(bad.load()) + " has a value that is not finite");
    STRATA_RETURN_IF_ERROR(w->write(out.data(), out.size()));
    if (!progress(static_cast<uint64_t>(n * (hd + ns)))) return Status();
  }
  return Status();
}

}  // namespace

Result<QuantizeReport> quantize_checkpoint(const QuantizeOptions& o, const ProgressFn& progress) {
  const auto t0 = std::chrono::steady_clock::now();
  QuantizeReport rep;
  std::error_code ec;
  if (o.split_max_bytes == 0 && std::filesystem::exists(o.out_path, ec))  // a split set is checked name by name
    return InvalidArgument(o.out_path + ": exists (strata quantize never overwrites; remove it or pick another name)");
  STRATA_ASSIGN_OR_RETURN(auto ck, io::Checkpoint::open(o.src_dir));
  STRATA_ASSIGN_OR_RETURN(std::string config, io::read_file_to_string(o.src_dir + "/config.json", 16u << 20));
  std::optional<std::string> tok;
  if (io::file_exists(o.src_dir + "/tokenizer.json")) {
    STRATA_ASSIGN_OR_RETURN(std::string t, io::read_file_to_string(o.src_dir + "/tokenizer.json", 1ull << 30));
    tok = std::move(t);
  }
  std::optional<Imatrix> imatrix;
  if (!o.imatrix.empty()) {
    STRATA_ASSIGN_OR_RETURN(Imatrix m, read_imatrix(o.imatrix));
    imatrix = std::move(m);
  }
  const auto& all = ck->tensors();
  auto note = [&](std::string n) {
    if (o.on_note) o.on_note(n);
    rep.notes.push_back(std::move(n));
  };
  auto cancelled = [&] { return o.cancel != nullptr && o.cancel->load(std::memory_order_relaxed); };
  auto find = [&](const std::string& n) { return ck->find(n); };
  auto sibling = [](const std::string& n, const char* from, const char* to) {
    const size_t k = std::string(from).size();
    return n.size() > k && n.compare(n.size() - k, k, from) == 0 ? n.substr(0, n.size() - k) + to : std::string();
  };

  // Routed experts: each stacked matrix (layer, w1/w2/w3) takes expert_quant_type (the chosen type,
  // or llama.cpp's fallback where its rows are not whole blocks: tools/quant_choice.h); one that
  // fits neither keeps every expert official.
  std::optional<DType> experts = o.experts;
  std::map<std::string, std::optional<DType>> expert_kind;  // stacked GGUF weight name -> its type
  std::set<int64_t> noted;
  if (experts) {
    for (const auto& [n, t] : all) {
      auto e = io::gguf_expert_tensor(n);
      if (!e || !n.ends_with(".weight")) continue;
      const std::string& kind = e->stacked;
      if (expert_kind.count(kind)) continue;
      const std::optional<DType> pick = expert_quant_type(*experts, t.shape, t.dtype);
      if (pick == experts) {
        expert_kind[kind] = pick;
        continue;
      }
      if (!pick) {
        note(expert_note(*experts, std::nullopt, n, t.shape, t.dtype));
        experts.reset();
        expert_kind.clear();
        break;
      }
      if (noted.insert(quant_row_values(t.shape, t.dtype)).second)  // once per row length, not once per layer
        note(expert_note(*experts, pick, n, t.shape, t.dtype));
      expert_kind[kind] = pick;
    }
  }
  auto expert_target = [&](const std::string& n) -> std::optional<DType> {
    if (!experts) return std::nullopt;
    auto e = io::gguf_expert_tensor(n.ends_with(".scale") ? sibling(n, ".scale", ".weight") : n);
    auto it = e ? expert_kind.find(e->stacked) : expert_kind.end();
    return it == expert_kind.end() ? std::nullopt : it->second;
  };
  // The quantised FP8 weights (their .scale is consumed, not written).
  std::map<std::string, std::optional<DType>> target;  // strata weight name -> block format
  for (const auto& [n, t] : all) {
    // The dials' rules are shared with `strata plan --quant` (tools/quant_choice.h).
    const QuantDial dial = quant_dial_of(n, t.dtype, find(sibling(n, ".weight", ".scale")) != nullptr);
    std::optional<DType> want;
    if (dial == QuantDial::kHead) want = o.head;
    else if (dial == QuantDial::kDense) want = o.dense;
    else continue;
    if (!want) continue;
    if (!fits(want, t)) {
      int64_t out, in;
      logical_shape(t, &out, &in);
      note("'" + n + "' kept: rows of " + std::to_string(in) + " values are not a multiple of " +
                          quant_choice_name(want) + "'s block of " + std::to_string(dtype_block(*want).elems));
      continue;
    }
    target[n] = want;
  }
  // Engram tables (--engram T): one block-format tensor each, every row whole blocks, or refused.
  if (o.engram) {
    const std::string tn = quant_choice_name(o.engram);
    for (const auto& [n, t] : all) {
      if (!store::ExpertCatalog::is_engram_table(n) || !n.ends_with(".weight")) continue;
      if (t.dtype != DType::kF8E4M3 || t.shape.rank != 2 || !find(sibling(n, ".weight", ".scale")))
        return InvalidArgument("--engram " + tn + ": Engram table '" + n + "' is " + std::string(dtype_name(t.dtype)) +
                               " " + t.shape.to_string() + ", expected F8_E4M3 [rows, head_dim] with its .scale");
      STRATA_RETURN_IF_ERROR(check_engram_quant(*o.engram, t.shape[1], "--engram " + tn + ": Engram table '" + n + "'"));
      target[n] = o.engram;
    }
  }

  // The GGUF tensors in source (name) order, stacked experts at their first expert, Engram tables last.
  std::vector<Item> items, tables;
  std::map<std::string, size_t> stacked;  // GGUF name -> index in items
  std::vector<std::string> raw_names, raw_dtypes;
  for (const auto& [n, t] : all) {
    if (auto e = io::gguf_expert_tensor(n)) {
      const bool scale = n.ends_with(".scale");
      const std::optional<DType> tgt = expert_target(n);
      if (tgt && scale) continue;
      // --experts mxfp4: the codes and their .scale become one ggml MXFP4 tensor, written at the codes.
      const bool mx = !tgt && o.experts_ggml_mxfp4;
      if (mx && !scale && t.dtype != DType::kI8)
        return InvalidArgument("--experts mxfp4: routed expert '" + n + "' is " + std::string(dtype_name(t.dtype)) +
                               ", not the release's MXFP4 (I8 packed E2M1 + .scale)");
      if (mx && scale) continue;
      auto it = stacked.find(e->stacked);
      if (it == stacked.end()) {
        Item item;
        item.gguf = e->stacked;
        item.src_dtype = t.dtype;
        if (tgt) {
          item.target = tgt;
          logical_shape(t, &item.out, &item.in);
        }
        if (mx) {
          item.ggml_mxfp4 = true;
          logical_shape(t, &item.out, &item.in);
        }
        it = stacked.emplace(e->stacked, items.size()).first;
        items.push_back(std::move(item));
      }
      Item& item = items[it->second];
      if (static_cast<int>(item.parts.size()) <= e->expert) item.parts.resize(static_cast<size_t>(e->expert) + 1);
      item.parts[static_cast<size_t>(e->expert)].w = &t;
      if (tgt || mx) item.parts[static_cast<size_t>(e->expert)].scale = find(sibling(n, ".weight", ".scale"));
      continue;
    }
    if (n.ends_with(".scale") && target.count(sibling(n, ".scale", ".weight"))) continue;
    Item item;
    item.gguf = io::gguf_tensor_name(n);
    item.src_dtype = t.dtype;
    item.parts.push_back(Part{&t, nullptr});
    if (auto tg = target.find(n); tg != target.end()) {
      item.target = tg->second;
      item.parts[0].scale = find(sibling(n, ".weight", ".scale"));
      logical_shape(t, &item.out, &item.in);
    }
    (store::ExpertCatalog::is_engram_table(n) ? tables : items).push_back(std::move(item));
  }
  for (Item& t : tables) items.push_back(std::move(t));

  std::vector<io::GgufTensorDecl> decls;
  bool any_weightable = false;  // a matrix the imatrix can weigh (K-quant or IQ4_NL target)
  std::string first_unmatched;  // the first such matrix the imatrix has no entry for
  for (Item& item : items) {
    const bool stack = stacked.count(item.gguf) > 0;
    for (size_t e = 0; e < item.parts.size(); ++e)
      if (!item.parts[e].w) return NotFound(o.src_dir + ": routed expert " + std::to_string(e) + " of '" + item.gguf + "' is missing");
    const io::TensorInfo& first = *item.parts[0].w;
    for (const Part& p : item.parts)
      if (p.w->dtype != first.dtype || !(p.w->shape == first.shape))
        return InvalidArgument("tensor '" + p.w->name + "': dtype/shape differ from '" + first.name + "' (experts stack)");
    Shape s;
    if (stack) s.dims[s.rank++] = static_cast<int64_t>(item.parts.size());
    if (item.target) {
      s.dims[s.rank++] = item.out;
      s.dims[s.rank++] = item.in;
      ++rep.n_quantized;
    } else {
      for (int i = 0; i < first.shape.rank; ++i) s.dims[s.rank++] = first.shape[i];
      if (s.rank > 4) return NotSupported("tensor '" + first.name + "': rank " + std::to_string(s.rank) + " does not fit GGUF");
    }
    if (item.ggml_mxfp4) {
      // ggml ne [in, out, n_experts] (ik_llama.cpp / ds4 "blk.L.ffn_*_exps.weight"); rows whole blocks of 32.
      for (const Part& p : item.parts)
        if (!p.scale || p.scale->dtype != DType::kF8E8M0 || item.in % io::kMxfp4BlockValues != 0 ||
            p.scale->nbytes * 16 != p.w->nbytes)
          return InvalidArgument("--experts mxfp4: routed expert '" + p.w->name + "' " + p.w->shape.to_string() +
                                 " needs its F8_E8M0 .scale [out, in/32] and rows of a multiple of 32 values");
      s = Shape{};
      s.dims[s.rank++] = static_cast<int64_t>(item.parts.size());
      s.dims[s.rank++] = item.out;
      s.dims[s.rank++] = item.in;
    }
    item.shape = s;
    // The imatrix weighs the K-quants and IQ4_NL (ggml's quantize_q8_0 ignores it); not the
    // Engram tables, which are embeddings, not linears.
    if (imatrix && item.target && *item.target != DType::kQ8_0 && !store::ExpertCatalog::is_engram_table(first.name)) {
      any_weightable = true;
      const int64_t n_mats = stack ? static_cast<int64_t>(item.parts.size()) : 1;
      STRATA_ASSIGN_OR_RETURN(item.importance, imatrix_weights(*imatrix, o.imatrix, item.gguf, item.in, n_mats));
      if (item.importance.empty()) {
        note("'" + item.gguf + "' has no entry in " + o.imatrix + ": quantised without importance weights");
        if (first_unmatched.empty()) first_unmatched = item.gguf;
      } else {
        ++rep.n_weighted;
      }
    }
    const DType stored = item.target ? *item.target : item.src_dtype;
    const io::GgmlType gt = item.ggml_mxfp4 ? io::GgmlType::kMxfp4 : ggml_of(stored);
    if (gt == io::GgmlType::kI8) {
      raw_names.push_back(item.gguf);
      raw_dtypes.emplace_back(dtype_name(stored));
    }
    decls.push_back(io::GgufTensorDecl{item.gguf, gt, s});
    for (const Part& p : item.parts) rep.src_bytes += p.w->nbytes + (p.scale ? p.scale->nbytes : 0);
  }

  // An imatrix that matches none of the matrices it could weigh is one of another model (or of
  // another tool's tensor names): refused before anything is written, not a silent unweighted file.
  if (imatrix && any_weightable && rep.n_weighted == 0)
    return InvalidArgument("--imatrix " + o.imatrix + ": none of its " + std::to_string(imatrix->entries.size()) +
                           " entries names a matrix quantised here to a weighted type (Q2_K, Q3_K, Q4_K, Q6_K, IQ4_NL): e.g. '" +
                           first_unmatched + "' has none" +
                           (imatrix->entries.empty() ? std::string() : ", and its first entry is '" + imatrix->entries.begin()->first + "'") +
                           "; an importance matrix of another model? (strata calibrate -m " + o.src_dir + " --imatrix F makes one)");
  if (imatrix && !any_weightable)
    note("--imatrix " + o.imatrix + " has no effect: no matrix goes to Q2_K, Q3_K, Q4_K, Q6_K or IQ4_NL (Q8_0 ignores it)");
  std::vector<std::pair<std::string, io::GgufValue>> meta;
  meta.emplace_back("general.architecture", io::GgufValue::string("deepseek41"));
  meta.emplace_back("general.name", io::GgufValue::string(std::filesystem::path(o.src_dir).filename().string()));
  // What the expert tensors carry, not what was asked: the distinct types written, the asked one
  // first ("q2_k,iq4_nl" where llama.cpp's fallback took some matrices; "iq4_nl" where it took all).
  std::string experts_written = experts && std::any_of(expert_kind.begin(), expert_kind.end(),
                                                       [&](const auto& kv) { return kv.second == experts; })
                                    ? quant_choice_name(experts)
                                    : std::string();
  for (const auto& [kind, t] : expert_kind)
    if (t != experts && experts_written.find(quant_choice_name(t)) == std::string::npos) {
      if (!experts_written.empty()) experts_written += ',';
      experts_written += quant_choice_name(t);
    }
  if (experts_written.empty()) experts_written = o.experts_ggml_mxfp4 && !experts ? "mxfp4" : quant_choice_name(experts);
  meta.emplace_back("strata.quantize.experts", io::GgufValue::string(experts_written));
  meta.emplace_back("strata.quantize.dense", io::GgufValue::string(quant_choice_name(o.dense)));
  meta.emplace_back("strata.quantize.head", io::GgufValue::string(quant_choice_name(o.head)));
  meta.emplace_back("strata.quantize.engram", io::GgufValue::string(quant_choice_name(o.engram)));
  {
    // What the kept tensors are identical to: a draft made from this file shares them with its
    // source (runtime/draft_model.h).
    STRATA_ASSIGN_OR_RETURN(uint64_t fp, io::checkpoint_fingerprint(*ck));
    char hex[17];
    std::snprintf(hex, sizeof hex, "%016llx", static_cast<unsigned long long>(fp));
    meta.emplace_back(io::gguf_text_key("source.fingerprint"), io::GgufValue::string(hex));
  }
  meta.emplace_back(io::gguf_text_key("config.json"), io::gguf_text_value(config));
  if (tok) meta.emplace_back(io::gguf_text_key("tokenizer.json"), io::gguf_text_value(*tok));
  if (imatrix && rep.n_weighted > 0) {  // only when it weighed something
    // llama-quantize's keys (tools/quantize/quantize.cpp; integers as u32, llama.cpp PR 14182).
    meta.emplace_back("quantize.imatrix.file", io::GgufValue::string(o.imatrix));
    if (!imatrix->datasets.empty())
      meta.emplace_back("quantize.imatrix.dataset", io::GgufValue::string(imatrix->datasets.front()));
    meta.emplace_back("quantize.imatrix.entries_count", io::GgufValue::u32(static_cast<uint32_t>(imatrix->entries.size())));
    if (imatrix->chunk_count > 0)
      meta.emplace_back("quantize.imatrix.chunks_count", io::GgufValue::u32(imatrix->chunk_count));
  }
  meta.emplace_back("strata.raw_tensors", io::GgufValue::string_array(raw_names));
  meta.emplace_back("strata.raw_dtypes", io::GgufValue::string_array(raw_dtypes));

  io::GgufWriterOptions wo;
  wo.fsync = o.fsync;
  wo.env = o.env;
  STRATA_ASSIGN_OR_RETURN(auto w, io::GgufSplitWriter::create(o.out_path, std::move(meta), decls,
                                                              io::GgufSplitOptions{o.split_max_bytes}, wo));
  ThreadPool pool(o.n_threads);
  uint64_t done = 0;
  std::vector<uint8_t> buf;
  const Status interrupted = Cancelled(o.out_path + ": interrupted; the partial file(s) were removed");
  for (const Item& item : items) {
    if (item.target && store::ExpertCatalog::is_engram_table(item.parts[0].w->name)) {
      STRATA_RETURN_IF_ERROR(convert_engram(*ck, item.parts[0], *item.target, &pool, w.get(), [&](uint64_t n) -> bool {
        done += n;
        report_progress(progress, ProgressEvent{"quantize", "bytes", done, rep.src_bytes, "", false});
        return !cancelled();
      }));
      if (cancelled()) return interrupted;
      continue;
    }
    for (size_t pi = 0; pi < item.parts.size(); ++pi) {
      const Part& p = item.parts[pi];
      if (cancelled()) return interrupted;
      if (item.target) {
        const float* qw = item.importance.empty() ? nullptr : item.importance.data() + static_cast<int64_t>(pi) * item.in;
        STRATA_RETURN_IF_ERROR(convert(*ck, p, *item.target, item.out, item.in, qw, &pool, &buf));
      } else if (item.ggml_mxfp4) {
        std::vector<uint8_t> codes(p.w->nbytes), scales(p.scale->nbytes);
        STRATA_RETURN_IF_ERROR(ck->read(*p.w, codes.data()));
        STRATA_RETURN_IF_ERROR(ck->read(*p.scale, scales.data()));
        buf.resize(static_cast<size_t>(p.scale->nbytes * io::kMxfp4BlockBytes));
        io::official_to_ggml_mxfp4(codes.data(), scales.data(), static_cast<int64_t>(p.scale->nbytes), buf.data());
      } else {
        buf.resize(p.w->nbytes);
        STRATA_RETURN_IF_ERROR(ck->read(*p.w, buf.data()));
      }
      STRATA_RETURN_IF_ERROR(w->write(buf.data(), buf.size()));
      done += p.w->nbytes + (p.scale ? p.scale->nbytes : 0);
      report_progress(progress, ProgressEvent{"quantize", "bytes", done, rep.src_bytes, "", false});
    }
  }
  STRATA_RETURN_IF_ERROR(w->finish());
  rep.files = w->paths();
  report_progress(progress, ProgressEvent{"quantize", "bytes", rep.src_bytes, rep.src_bytes, "", true});
  rep.n_tensors = decls.size();
  // Engram sizes as written (docs/performance.md "The Engram dial").
  for (const Item& item : items) {
    const io::TensorInfo& t = *item.parts[0].w;
    if (!store::ExpertCatalog::is_engram_table(t.name)) continue;
    rep.engram_table_bytes += item.target ? dtype_nbytes(*item.target, item.out * item.in) : t.nbytes;
    if (!t.name.ends_with(".weight") || t.shape.rank != 2) continue;
    const int64_t hd = t.shape[1];
    const uint64_t rb = item.target ? dtype_nbytes(*item.target, hd) : static_cast<uint64_t>(hd + hd / 32);
    rep.engram_row_bytes = std::max(rep.engram_row_bytes, rb);
  }
  if (auto mc = model::ModelConfig::parse(config, o.src_dir + "/config.json"); mc.ok() && rep.engram_row_bytes > 0)
    rep.engram_rows_per_token = static_cast<int>(mc->engram_layer_ids.size()) * mc->engram_n_cols();
  rep.file_bytes = w->file_bytes();
  rep.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return rep;
}

}  // namespace strata::tools
