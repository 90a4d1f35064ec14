// strata quantize -m SRC_DIR --out DST.gguf [--experts T] [--dense T] [--head T] [--engram T] [-t N]:
// re-quantises an official-format checkpoint into one GGUF (tools/quantize.h). T is one of keep
// (the official bits, unchanged), q8_0, q6_k, q4_k, q3_k, q2_k, iq4_nl. Progress goes to stderr
// when it is a terminal; the summary (and every matrix kept because of its shape, and the Engram
// row bytes and bytes read per token of the tables as written) to stdout.
// The GGUF runs with `-m DST.gguf` on run/serve/bench/logits (docs/gguf.md).
#include <CLI/CLI.hpp>
#include <cstdio>
#include <memory>
#include <string>

#include "cli/commands.h"
#include "cli/common.h"
#include "cli/progress_bar.h"
#include "tools/quantize.h"

namespace strata::cli {

namespace {
struct QuantizeCliOptions {
  std::string src, out;
  std::string experts = "q4_k", dense = "keep", head = "keep", engram = "keep";
  int threads = 0;
};
}  // namespace

Command register_quantize(CLI::App& app) {
  auto o = std::make_shared<QuantizeCliOptions>();
  const auto types = CLI::IsMember({"keep", "q8_0", "q6_k", "q4_k", "q3_k", "q2_k", "iq4_nl"});
  app.add_option("-m,--model", o->src, "official-format checkpoint directory (config.json, *.safetensors, tokenizer.json)")
      ->required();
  app.add_option("--out", o->out, "GGUF file to write (must not exist; written atomically)")->required();
  app.add_option("--experts", o->experts, "routed experts (MXFP4 in the release): keep or a block format")
      ->check(types)
      ->capture_default_str();
  app.add_option("--dense", o->dense, "the other FP8 linears (attention, shared experts, Engram wkv): keep or a block format")
      ->check(types)
      ->capture_default_str();
  app.add_option("--head", o->head, "the LM head (BF16): keep or a block format")->check(types)->capture_default_str();
  app.add_option("--engram", o->engram,
                 "the Engram tables (FP8 + scales in the release): keep or a block format whose block divides head_dim")
      ->check(types)
      ->capture_default_str();
  app.add_option("-t,--threads", o->threads, "quantiser threads (0 = one per core)")->capture_default_str();
  return [o]() -> int {
    if (Status s = check_checkpoint_dir(o->src); !s.ok()) return fail(s);
    tools::QuantizeOptions q;
    q.src_dir = o->src;
    q.out_path = o->out;
    q.n_threads = o->threads;
    auto e = tools::parse_quant_choice(o->experts);
    auto d = tools::parse_quant_choice(o->dense);
    auto h = tools::parse_quant_choice(o->head);
    if (!e.ok()) return fail_usage(e.error());
    if (!d.ok()) return fail_usage(d.error());
    if (!h.ok()) return fail_usage(h.error());
    auto g = tools::parse_quant_choice(o->engram);
    if (!g.ok()) return fail_usage(g.error());
    q.engram = *g;
    q.experts = *e;
    q.dense = *d;
    q.head = *h;
    ProgressBar bar;
    auto rep = tools::quantize_checkpoint(q, bar.fn());
    if (!rep.ok()) return fail(rep.error());
    for (const std::string& n : rep->notes) std::printf("note: %s\n", n.c_str());
    std::printf("strata quantize: %s -> %s (experts %s, dense %s, head %s, engram %s)\n", o->src.c_str(),
                o->out.c_str(), o->experts.c_str(), o->dense.c_str(), o->head.c_str(), o->engram.c_str());
    if (rep->engram_row_bytes > 0)
      std::printf("Engram (%s): %d rows x %llu B = %llu B read per token; tables %llu bytes\n", o->engram.c_str(),
                  rep->engram_rows_per_token, static_cast<unsigned long long>(rep->engram_row_bytes),
                  static_cast<unsigned long long>(rep->engram_bytes_per_token()),
                  static_cast<unsigned long long>(rep->engram_table_bytes));
    std::printf("wrote %llu tensors (%llu re-quantised), %llu bytes from %llu source bytes, %.1f s\n",
                static_cast<unsigned long long>(rep->n_tensors), static_cast<unsigned long long>(rep->n_quantized),
                static_cast<unsigned long long>(rep->file_bytes), static_cast<unsigned long long>(rep->src_bytes),
                rep->seconds);
    return 0;
  };
}

}  // namespace strata::cli
