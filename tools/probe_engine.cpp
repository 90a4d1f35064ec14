// The probe's engine calibration: what strata's forward pass costs beyond the terms `strata plan`
// models from kernel rates (tools/plan_cost.h). The plan adds it back as "engine glue", per token
// and layer (tools/probe.h, ThreadRates::glue_us_prefill / glue_us_decode).
//
// Why a measurement and not more terms: on small models a prefill token spends a good part of its
// time in many small pieces (routing and expert-row gathers, norms, RoPE, query quantisation,
// copies, kernels slower in the forward pass than in isolation because the data between them is
// cold). They are measured together on a synthetic checkpoint of a shape the plan is not checked on
// (synth preset "probe": the demo's layout at dim 256). Both are charged per token and layer; why,
// with the residuals measured from dim 256 to 1024, is at ThreadRates::glue_us_prefill (tools/probe.h).
#include <algorithm>
#include <cerrno>
#include <chrono>
#include <filesystem>
#include <memory>
#include <vector>

#include "model/config.h"
#include "model/model.h"
#include "tools/bench.h"
#include "tools/plan_cost.h"
#include "tools/plan_sizes.h"
#include "tools/probe.h"
#include "tools/scoped_dir.h"
#include "tools/synth.h"

namespace strata::tools {

namespace {

namespace fs = std::filesystem;

// A prediction's compute seconds less its LM head term.
double without_head(const Cost& c) {
  double s = c.compute_s;
  for (const CostTerm& t : c.terms)
    if (t.name == "LM head") s -= t.seconds;
  return s;
}

}  // namespace

Status measure_engine_glue(MachineProfile* m, const std::string& dir, int64_t prompt, int64_t gen, int reps) {
  if (prompt < 1 || gen < 2 || reps < 1)
    return InvalidArgument("engine probe: prompt >= 1, gen >= 2 and reps >= 1 expected");
  std::string parent = dir;
  if (parent.empty()) {
    std::error_code ec;
    parent = fs::temp_directory_path(ec).string();
    if (ec)
      return IOError("engine probe: no usable temporary directory (TMPDIR, else /tmp): " + ec.message() +
                     " (give strata probe --engine-dir DIR)");
  }
  // The checkpoint lives only for this measurement; an engine probe killed midway leaves its
  // directory to the next probe, which removes it (ScopedDir::make_temp).
  auto made = ScopedDir::make_temp(parent, "strata-probe-engine");
  if (!made.ok()) return IOError("engine probe: " + made.error().message() + " (give strata probe --engine-dir DIR)");
  ScopedDir tmp = std::move(*made);
  SynthOptions so;
  so.preset = "probe";
  so.out_dir = tmp.path();
  so.seed = 1;
  so.max_shard_bytes = 0;
  so.fsync = false;
  STRATA_ASSIGN_OR_RETURN(SynthReport report, synth_checkpoint(so));
  const model::ModelConfig& c = report.plan.config;
  STRATA_ASSIGN_OR_RETURN(ModelFootprint f, model_footprint(c));

  // No tokenizer is written: any map onto the config's class count exercises the same Engram work.
  model::CompressedVocabMap vocab;
  vocab.n_classes = static_cast<uint32_t>(c.engram_compressed_vocab_size);
  vocab.map.resize(static_cast<size_t>(c.vocab_size));
  for (size_t i = 0; i < vocab.map.size(); ++i) vocab.map[i] = static_cast<uint32_t>(i % vocab.n_classes);
  const std::vector<int32_t> ids = bench_prompt({}, prompt, 1, static_cast<int32_t>(c.vocab_size));

  for (ThreadRates& r : m->threads) {
    // The prediction the glue completes: every other term, without glue.
    r.glue_us_prefill = r.glue_us_decode = 0;
    model::ModelOptions mo;
    mo.n_threads = r.threads;
    mo.placement.mode = store::LoadMode::kResident;
    STRATA_ASSIGN_OR_RETURN(std::unique_ptr<model::Model> model, model::Model::load(tmp.path(), vocab, mo));
    STRATA_RETURN_IF_ERROR(run_once(*model, ids, gen, prompt).status());  // warm-up
    // The LM head runs once per prompt / token, not per layer: its measured and predicted times are
    // left out on both sides, so an error in the head's term does not land in the per-layer glue.
    std::vector<double> prefill_s, decode_s;
    for (int i = 0; i < reps; ++i) {
      STRATA_ASSIGN_OR_RETURN(BenchRun run, run_once(*model, ids, gen, prompt));
      prefill_s.push_back(run.prefill_s - run.prefill_head_s);
      decode_s.push_back((run.decode_s - run.decode_head_s) / static_cast<double>(gen - 1));
    }
    const IoModel resident;
    const Cost pre = prefill_cost(c, f, *m, r.threads, prompt, prompt, false, resident);
    const Cost dec = decode_token_cost(c, f, *m, r.threads, prompt + gen / 2, resident);
    r.glue_us_prefill = std::max(0.0, spread_of(prefill_s).median - without_head(pre)) * 1e6 /
                        (static_cast<double>(prompt) * static_cast<double>(c.n_layers));
    r.glue_us_decode = std::max(0.0, spread_of(decode_s).median - without_head(dec)) * 1e6 / static_cast<double>(c.n_layers);
  }
  return Status();
}

}  // namespace strata::tools
