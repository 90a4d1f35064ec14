// The SVG of a `strata bench` report: prefill tok/s and decode tok/s against context length, two
// panels side by side (log2 x axis at the measured prompt lengths, linear y from 0). Warm medians
// are solid lines with min-max bars, cold runs hollow markers, and `strata plan`'s predictions (when
// given) dashed grey lines, so predicted vs measured reads at a glance. Self-contained SVG 1.1, no
// scripts or external fonts.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "tools/bench.h"

namespace strata::tools {

// A predicted point (from tools/plan.h SpeedPrediction).
struct PredictedSpeed {
  int64_t prompt = 0;
  double prefill_tok_s = 0;
  double decode_tok_s = 0;
};

std::string bench_svg(const BenchReport& r, const std::vector<PredictedSpeed>& predicted = {});

}  // namespace strata::tools
