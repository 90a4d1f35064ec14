// Checkpoint::open_gguf and the text files of a GGUF model (io/checkpoint.h, docs/gguf.md).
#include <filesystem>
#include <functional>

#include "io/checkpoint.h"
#include "io/gguf.h"
#include "io/gguf_config.h"
#include "io/ggml_mxfp4.h"
#include "io/gguf_names.h"
#include "io/gguf_vocab.h"

namespace strata::io {

namespace fs = std::filesystem;

bool is_gguf_path(const std::string& path) {
  std::error_code ec;
  return path.size() > 5 && path.compare(path.size() - 5, 5, ".gguf") == 0 && fs::is_regular_file(path, ec);
}

std::string gguf_text_key(const std::string& name) {
  std::string k = "strata." + name;
  for (size_t i = 7; i < k.size(); ++i)
    if (k[i] == '.') k[i] = '_';
  return k;
}

Result<std::string> read_checkpoint_text(const std::string& model, const std::string& name, size_t max_bytes) {
  if (!is_gguf_path(model)) return read_file_to_string((fs::path(model) / name).string(), max_bytes);
  STRATA_ASSIGN_OR_RETURN(auto g, GgufModel::open(model));
  const std::string key = gguf_text_key(name);
  const GgufValue* v = g->find_key(key);
  std::optional<std::string> text_value = v ? gguf_text_of(*v) : std::nullopt;
  if (!text_value && is_foreign_gguf(*g)) {  // ik_llama.cpp / ds4: rebuilt from metadata
    Result<std::string> text = name == "config.json"      ? foreign_gguf_config_json(*g, model)
                               : name == "tokenizer.json" ? foreign_gguf_tokenizer_json(*g, model)
                                                          : Result<std::string>(NotFound(model + ": no " + name));
    if (text.has_value() && text.value().size() > max_bytes)
      return ResourceExhausted(model + ": the " + name + " rebuilt from its metadata is " +
                               std::to_string(text.value().size()) + " bytes, more than " + std::to_string(max_bytes));
    return text;
  }
  if (!text_value)
    return NotFound(model + ": no string key '" + key + "' (the " + name + " of the checkpoint it was made from; " +
                    "GGUFs not written by `strata quantize` lack it)");
  if (text_value->size() > max_bytes)
    return ResourceExhausted(model + ": '" + key + "' is " + std::to_string(text_value->size()) +
                             " bytes, more than " + std::to_string(max_bytes));
  return std::move(*text_value);
}

namespace {

Result<DType> dtype_of(const GgufTensorInfo& t, const std::map<std::string, DType>& raw, const std::string& path) {
  switch (t.type) {
    case GgmlType::kF32: return DType::kF32;
    case GgmlType::kF16: return DType::kF16;
    case GgmlType::kBf16: return DType::kBF16;
    case GgmlType::kQ8_0: return DType::kQ8_0;
    case GgmlType::kQ2_K: return DType::kQ2_K;
    case GgmlType::kQ3_K: return DType::kQ3_K;
    case GgmlType::kQ4_K: return DType::kQ4_K;
    case GgmlType::kQ6_K: return DType::kQ6_K;
    case GgmlType::kIq4Nl: return DType::kIQ4_NL;
    case GgmlType::kI8: {
      auto it = raw.find(t.name);
      // ds4 / ik_llama.cpp Engram table: I8 ne = [head_dim + head_dim / 32, rows], each row the E4M3
      // bytes then the E8M0 scales (store/engram_layout.h); strata sees it as U8 [rows, 264].
      static const std::string kEngram = "engram_embd.weight";
      if (it == raw.end() && t.name.size() > kEngram.size() &&
          t.name.compare(t.name.size() - kEngram.size(), kEngram.size(), kEngram) == 0 && t.ne.size() == 2) {
        if (t.ne[0] == 0 || t.ne[0] % 33 != 0)
          return InvalidArgument(path + ": tensor '" + t.name + "': i8 rows of " + std::to_string(t.ne[0]) +
                                 " bytes, expected head_dim + head_dim / 32 (264 at head_dim 256: E4M3 bytes then "
                                 "E8M0 scales per 32)");
        return DType::kU8;
      }
      if (it == raw.end())
        return NotSupported(path + ": tensor '" + t.name + "' is ggml i8 with no entry in strata.raw_dtypes " +
                            "(strata reads i8 only as the official bytes `strata quantize` keeps)");
      return it->second;
    }
    case GgmlType::kMxfp4: break;
  }
  return NotSupported(path + ": tensor '" + t.name + "': ggml type " + std::string(ggml_type_info(static_cast<uint32_t>(t.type))->name) +
                      " is read only for routed experts (stacked \"blk.L.ffn_{gate,up,down}_exps.weight\"), where it "
                      "is the official MXFP4 regrouped");
}

// A stacked ggml MXFP4 expert tensor (ggml ne [in, out, n], strata shape [n, out, in]): per expert
// the official codes I8 [out, in/2] then scales F8_E8M0 [out, in/32], whose ranges tile the
// expert's out * in / 32 blocks of 17 bytes (io/ggml_mxfp4.h); the stores unpack after reading.
Status bind_mxfp4_experts(const GgufTensorInfo& t, const std::string& gname, const std::string& path,
                          const std::function<Status(TensorInfo)>& add) {
  const std::string what = path + ": tensor '" + gname + "' (ggml mxfp4 " + t.shape.to_string() + ")";
  if (!gname.ends_with(".weight") || t.shape.rank != 3 || t.shape[0] <= 0 || t.shape[1] <= 0 || t.shape[2] <= 0)
    return InvalidArgument(what + ": expected a stacked routed-expert weight [n_experts, out, in]");
  const int64_t n = t.shape[0], out = t.shape[1], in = t.shape[2];
  if (in % kMxfp4BlockValues != 0)
    return InvalidArgument(what + ": rows of " + std::to_string(in) + " values are not whole MXFP4 blocks of 32");
  const uint64_t blocks = static_cast<uint64_t>(out) * static_cast<uint64_t>(in / kMxfp4BlockValues);
  const uint64_t stride = blocks * kMxfp4BlockBytes;
  if (t.nbytes != stride * static_cast<uint64_t>(n))
    return InvalidArgument(what + ": " + std::to_string(t.nbytes) + " bytes, expected " +
                           std::to_string(stride * static_cast<uint64_t>(n)) + " (n * out * in / 32 blocks of 17 bytes)");
  for (int64_t e = 0; e < n; ++e) {
    const std::string w = *strata_expert_name(gname, static_cast<int>(e));
    const uint64_t off = t.offset + static_cast<uint64_t>(e) * stride;
    TensorInfo codes{w, DType::kI8, Shape{out, in / 2}, t.file, off, blocks * 16};
    codes.packing = TensorInfo::Packing::kGgmlMxfp4Codes;
    TensorInfo scales{w.substr(0, w.size() - 7) + ".scale", DType::kF8E8M0, Shape{out, in / kMxfp4BlockValues}, t.file,
                      off + blocks * 16, blocks};
    scales.packing = TensorInfo::Packing::kGgmlMxfp4Scales;
    STRATA_RETURN_IF_ERROR(add(std::move(codes)));
    STRATA_RETURN_IF_ERROR(add(std::move(scales)));
  }
  return Status();
}

}  // namespace

Result<std::unique_ptr<Checkpoint>> Checkpoint::open_gguf(const std::string& path) {
  STRATA_ASSIGN_OR_RETURN(auto g, GgufModel::open(path));
  // ds4 names its Engram row encoding; strata binds the lossless one (store/engram_layout.h).
  if (const GgufValue* enc = g->find_key(std::string(kForeignGgufArch) + ".engram.encoding"))
    if (!enc->as_string() || *enc->as_string() != "e4m3_e8m0_32_row264")
      return NotSupported(path + ": metadata key '" + kForeignGgufArch + ".engram.encoding' is " + enc->to_string() +
                          "; strata reads \"e4m3_e8m0_32_row264\" (E4M3 bytes then E8M0 scales per 32)");
  auto ck = std::unique_ptr<Checkpoint>(new Checkpoint());
  ck->dir_ = path;
  for (const GgufFile& f : g->files()) {
    STRATA_ASSIGN_OR_RETURN(auto file, open_file(f.path));
    ck->shards_.push_back(std::move(file));
  }
  // strata.raw_tensors[i] (a GGUF name) holds official bytes of dtype strata.raw_dtypes[i].
  std::map<std::string, DType> raw;
  const GgufValue* rn = g->find_key("strata.raw_tensors");
  const GgufValue* rd = g->find_key("strata.raw_dtypes");
  if (rn || rd) {
    if (!rn || !rd || !rn->strings() || !rd->strings() || rn->strings()->size() != rd->strings()->size())
      return Corruption(path + ": strata.raw_tensors and strata.raw_dtypes must be string arrays of one length");
    for (size_t i = 0; i < rn->strings()->size(); ++i) {
      auto d = dtype_from_name((*rd->strings())[i]);
      if (!d) return Corruption(path + ": strata.raw_dtypes[" + std::to_string(i) + "] = '" + (*rd->strings())[i] +
                                "' is not a safetensors dtype");
      raw[(*rn->strings())[i]] = *d;
    }
  }
  auto add = [&](TensorInfo t) -> Status {
    if (!ck->tensors_.emplace(t.name, t).second)
      return Corruption(path + ": two GGUF tensors map to strata tensor '" + t.name + "'");
    return Status();
  };
  for (const auto& [gname, t] : g->tensors()) {
    if (t.type == GgmlType::kMxfp4 && strata_expert_name(gname, 0)) {
      STRATA_RETURN_IF_ERROR(bind_mxfp4_experts(t, gname, path, add));
      continue;
    }
    STRATA_ASSIGN_OR_RETURN(DType dt, dtype_of(t, raw, path));
    if (strata_expert_name(gname, 0)) {
      if (t.shape.rank < 2 || t.shape[0] <= 0 || t.nbytes % static_cast<uint64_t>(t.shape[0]) != 0)
        return Corruption(path + ": stacked expert tensor '" + gname + "' has shape " + t.shape.to_string() +
                          " (expected [n_experts, out, in])");
      const int n = static_cast<int>(t.shape[0]);
      const uint64_t stride = t.nbytes / static_cast<uint64_t>(n);
      Shape sub;
      for (int i = 1; i < t.shape.rank; ++i) sub.dims[sub.rank++] = t.shape[i];
      const bool scaleless = dtype_is_block_quant(dt) && gname.size() > 7 &&
                             gname.compare(gname.size() - 7, 7, ".weight") == 0 &&
                             !g->find(gname.substr(0, gname.size() - 7) + ".scale");
      for (int e = 0; e < n; ++e) {
        const std::string name = *strata_expert_name(gname, e);
        const uint64_t off = t.offset + static_cast<uint64_t>(e) * stride;
        STRATA_RETURN_IF_ERROR(add(TensorInfo{name, dt, sub, t.file, off, stride}));
        if (scaleless)  // block formats carry their scales inside the blocks
          STRATA_RETURN_IF_ERROR(add(TensorInfo{name.substr(0, name.size() - 7) + ".scale", DType::kU8, Shape{0},
                                                t.file, off + stride, 0}));
      }
      continue;
    }
    STRATA_RETURN_IF_ERROR(add(TensorInfo{strata_tensor_name(gname), dt, t.shape, t.file, t.offset, t.nbytes}));
  }
  return ck;
}

}  // namespace strata::io
