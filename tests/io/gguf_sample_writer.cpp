// Writes the GGUF files that tests/io/gguf_hf_test.mjs reads with @huggingface/gguf (issue 16): one
// file with F32, Q8_0, Q4_K and Q2_K tensors (quantised from a deterministic ramp by strata's
// ggml-exact reference quantisers), a stacked MXFP4 expert tensor as `strata quantize --experts
// mxfp4` writes it (io/ggml_mxfp4.h) and metadata of every kind, and a two-file gguf-split set (io::GgufSplitWriter).
// The names, types, shapes and values here are repeated, independently, in the .mjs script.
// Usage: gguf_sample_writer DIR   (writes DIR/sample.gguf, DIR/split-0000{1,2}-of-00002.gguf)
#include <cmath>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "io/ggml_mxfp4.h"
#include "io/gguf.h"
#include "io/gguf_split_writer.h"
#include "io/gguf_writer.h"
#include "kernels/kquant.h"

namespace {

using strata::Shape;
using strata::Status;
using strata::io::GgmlType;
using strata::io::GgufTensorDecl;
using strata::io::GgufType;
using strata::io::GgufValue;
using strata::io::GgufWriter;
using Metadata = std::vector<std::pair<std::string, GgufValue>>;

// The tensor's bytes: f32 values of a ramp, quantised to the tensor's type.
std::vector<uint8_t> tensor_data(const GgufTensorDecl& t, uint64_t nbytes) {
  const int64_t n = t.shape.numel(), row = t.shape.dims[static_cast<size_t>(t.shape.rank - 1)];
  std::vector<float> x(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) x[static_cast<size_t>(i)] = std::sin(0.37f * static_cast<float>(i)) * 2.0f;
  std::vector<uint8_t> out(nbytes);
  using strata::kernels::QuantType;
  const auto quant = [&](QuantType q) {
    const int64_t row_bytes = strata::kernels::quant_row_bytes(q, row);
    for (int64_t r = 0; r < n / row; ++r)
      strata::kernels::quantize_row_ref(q, x.data() + r * row, out.data() + r * row_bytes, row);
  };
  switch (t.type) {
    case GgmlType::kF32: std::memcpy(out.data(), x.data(), nbytes); break;
    case GgmlType::kQ8_0: quant(QuantType::kQ8_0); break;
    case GgmlType::kQ4_K: quant(QuantType::kQ4_K); break;
    case GgmlType::kQ2_K: quant(QuantType::kQ2_K); break;
    case GgmlType::kMxfp4: {  // official codes i * 7 and scales 120 + b, regrouped as ggml blocks
      const int64_t nb = n / strata::io::kMxfp4BlockValues;
      std::vector<uint8_t> codes(static_cast<size_t>(nb * 16)), scales(static_cast<size_t>(nb));
      for (size_t i = 0; i < codes.size(); ++i) codes[i] = static_cast<uint8_t>(i * 7);
      for (size_t b = 0; b < scales.size(); ++b) scales[b] = static_cast<uint8_t>(120 + b);
      strata::io::official_to_ggml_mxfp4(codes.data(), scales.data(), nb, out.data());
      break;
    }
    default: break;
  }
  return out;
}

Status write(const std::string& path, const Metadata& md, const std::vector<GgufTensorDecl>& ts) {
  STRATA_ASSIGN_OR_RETURN(auto w, GgufWriter::create(path, md, ts));
  for (size_t i = 0; i < ts.size(); ++i) {
    const auto b = tensor_data(ts[i], w->tensor_bytes(i));
    STRATA_RETURN_IF_ERROR(w->write_tensor(ts[i].name, b.data(), b.size()));
  }
  return w->finish();
}

Status write_split(const std::string& path, const Metadata& md, const std::vector<GgufTensorDecl>& ts, uint64_t max_bytes) {
  STRATA_ASSIGN_OR_RETURN(auto w, strata::io::GgufSplitWriter::create(path, md, ts, strata::io::GgufSplitOptions{max_bytes}));
  for (const GgufTensorDecl& t : ts) {
    std::vector<int64_t> ne;
    for (int d = t.shape.rank - 1; d >= 0; --d) ne.push_back(t.shape.dims[static_cast<size_t>(d)]);
    STRATA_ASSIGN_OR_RETURN(uint64_t nb, strata::io::ggml_nbytes(t.type, ne, t.name));
    const auto b = tensor_data(t, nb);
    STRATA_RETURN_IF_ERROR(w->write_tensor(t.name, b.data(), b.size()));
  }
  return w->finish();
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: gguf_sample_writer DIR\n");
    return 2;
  }
  const std::string dir = argv[1];
  Metadata md = {
      {"general.architecture", GgufValue::string("deepseek41")},
      {"general.name", GgufValue::string("strata gguf sample")},
      {"general.alignment", GgufValue::u32(64)},
      {"deepseek41.block_count", GgufValue::u32(2)},
      {"deepseek41.embedding_length", GgufValue::u64(4096)},
      {"sample.i8", GgufValue::i8(-7)},
      {"sample.u16", GgufValue::u16(65535)},
      {"sample.i32", GgufValue::i32(-123456)},
      {"sample.i64", GgufValue::i64(-9000000000)},
      {"sample.f32", GgufValue::f32(0.5f)},
      {"sample.f64", GgufValue::f64(-2.25)},
      {"sample.bool", GgufValue::boolean(true)},
      {"sample.u8", GgufValue::u8(200)},
      {"sample.i16", GgufValue::i16(-300)},
      {"sample.u64", GgufValue::u64(1ull << 40)},
      {"sample.arr_i32", GgufValue::array_of<int32_t>(GgufType::kI32, {1, -2, 3})},
      {"sample.arr_f32", GgufValue::array_of<float>(GgufType::kF32, {0.25f, 1.5f})},
      {"tokenizer.ggml.tokens", GgufValue::string_array({"<｜begin▁of▁sentence｜>", "a", "b c"})},
  };
  // A long text (as strata.tokenizer_json is, ~8 MB) in pieces, with keys after it: "a" then
  // 2,500,000 x "é" (5,000,001 bytes; the odd start makes the 1 MiB cuts land inside characters).
  std::string long_text = "a";
  for (int i = 0; i < 2500000; ++i) long_text += "\xC3\xA9";
  md.insert(md.begin() + 3, {"strata.tokenizer_json", strata::io::gguf_text_value(long_text)});
  const std::vector<GgufTensorDecl> ts = {
      {"token_embd.weight", GgmlType::kF32, Shape{3, 8}},
      {"blk.0.attn_q_a.weight", GgmlType::kQ8_0, Shape{4, 64}},
      {"blk.0.ffn_gate_exps.weight", GgmlType::kQ4_K, Shape{2, 3, 256}},
      {"blk.1.ffn_down_exps.weight", GgmlType::kQ2_K, Shape{2, 512}},
      {"output_norm.weight", GgmlType::kF32, Shape{8}},
      {"blk.1.ffn_up_exps.weight", GgmlType::kMxfp4, Shape{2, 3, 64}},
  };
  Status s = write(dir + "/sample.gguf", md, ts);
  // The split set through io::GgufSplitWriter: 400 tensor bytes per file puts token_embd (96 B)
  // and attn_q_a (272 B, 288 padded) in split 1 and ffn_down_exps (336 B) in split 2.
  if (s.ok()) s = write_split(dir + "/split.gguf", {{"general.architecture", GgufValue::string("deepseek41")}},
                              {ts[0], ts[1], ts[3]}, 400);
  if (!s.ok()) {
    std::fprintf(stderr, "gguf_sample_writer: %s\n", s.to_string().c_str());
    return 1;
  }
  return 0;
}
