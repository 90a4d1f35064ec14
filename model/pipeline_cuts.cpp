#include "model/pipeline_cuts.h"

#include <limits>
#include <string>

#include "model/model.h"

namespace strata::model {

namespace {

// What a layer at or after a cut reads from before it.
struct Crossing {
  int layer = -1;    // the reading layer (-1: none, the cut is clean)
  int source = -1;   // the layer it reads from
  const char* what = "";
};

// The first layer at or after `cut` that reads a layer's state before it (the sources of
// ModelConfig, as model/attention.cpp reads them, and the candidate source's blocks).
Crossing first_crossing(const ModelConfig& c, int cut) {
  for (int l = cut; l < c.n_layers; ++l) {
    if (c.compress_ratio(l) <= 0) continue;  // window only: its own ring
    const Crossing reads[] = {{l, c.kv_source_of(l), "the compressed KV"},
                              {l, c.index_source_of(l), "the top-k selection"},
                              {l, c.is_index_source(l) ? c.key_owner_of(l) : cut, "the index keys"},
                              {l, c.uses_candidates(l) ? c.candidate_source_layer : cut, "the candidate blocks"}};
    for (const Crossing& r : reads)
      if (r.source < cut) return r;
  }
  return Crossing{};
}

std::string cut_text(const std::vector<int>& cuts) {
  std::string s;
  for (int l : cuts) s += (s.empty() ? "" : ",") + std::to_string(l);
  return s.empty() ? "none" : s;
}

}  // namespace

Status check_clean_cut(const ModelConfig& c, int cut) {
  const std::string at = "the cut at " + std::to_string(cut);
  if (cut <= 0 || cut >= c.n_layers)
    return InvalidArgument(at + " is not inside the backbone: cuts lie in [1, " + std::to_string(c.n_layers - 1) + "]");
  const Crossing x = first_crossing(c, cut);
  if (x.layer < 0) return Status();
  return InvalidArgument("layer " + std::to_string(x.layer) + " reads " + x.what + " of layer " + std::to_string(x.source) +
                         ", before " + at + " (clean cuts of this config: " + cut_text(clean_cuts(c)) + ")");
}

std::vector<int> clean_cuts(const ModelConfig& c) {
  std::vector<int> out;
  for (int l = 1; l < c.n_layers; ++l)
    if (first_crossing(c, l).layer < 0) out.push_back(l);
  return out;
}

Status check_cuts(const ModelConfig& c, int n_ranks, std::span<const int> cuts) {
  if (static_cast<int>(cuts.size()) != n_ranks - 1)
    return InvalidArgument(std::to_string(cuts.size()) + (cuts.size() == 1 ? " cut" : " cuts") + " for " +
                           std::to_string(n_ranks) + " ranks: expected " + std::to_string(n_ranks - 1) +
                           " (one fewer than the ranks)");
  for (size_t i = 0; i < cuts.size(); ++i) {
    if (i > 0 && cuts[i] <= cuts[i - 1])
      return InvalidArgument("cuts must be strictly increasing (" + std::to_string(cuts[i - 1]) + " then " +
                             std::to_string(cuts[i]) + ")");
    STRATA_RETURN_IF_ERROR(check_clean_cut(c, cuts[i]));
  }
  return Status();
}

Result<std::vector<int>> default_cuts(const ModelConfig& c, int n_ranks, std::span<const uint64_t> layer_bytes) {
  if (n_ranks < 2) return InvalidArgument("a pipeline needs at least 2 ranks, got " + std::to_string(n_ranks));
  if (static_cast<int>(layer_bytes.size()) != c.n_layers)
    return InvalidArgument("pipeline cuts: " + std::to_string(layer_bytes.size()) + " layer sizes for " +
                           std::to_string(c.n_layers) + " layers");
  const std::vector<int> clean = clean_cuts(c);
  const int m = n_ranks - 1;
  if (static_cast<int>(clean.size()) < m)
    return InvalidArgument(std::to_string(n_ranks) + " pipeline ranks need " + std::to_string(m) + " clean cuts; this config has " +
                           std::to_string(clean.size()) + " (" + cut_text(clean) + ")");
  if (n_ranks == 2)
    if (auto b = ced_decoder_boundary(c); b.ok() && check_clean_cut(c, *b).ok()) return std::vector<int>{*b};
  // Weight bytes of the layers [a, b).
  std::vector<uint64_t> prefix(layer_bytes.size() + 1, 0);
  for (size_t l = 0; l < layer_bytes.size(); ++l) prefix[l + 1] = prefix[l] + layer_bytes[l];
  auto bytes = [&](int a, int b) { return prefix[static_cast<size_t>(b)] - prefix[static_cast<size_t>(a)]; };
  // best[j][i]: the smallest largest range over [0, clean[i]) cut j + 1 times, the last cut at
  // clean[i]; from[j][i] the cut before it. Strict < keeps the earliest cuts on ties.
  const size_t k = clean.size();
  constexpr uint64_t kNone = std::numeric_limits<uint64_t>::max();
  std::vector<std::vector<uint64_t>> best(static_cast<size_t>(m), std::vector<uint64_t>(k, kNone));
  std::vector<std::vector<int>> from(static_cast<size_t>(m), std::vector<int>(k, -1));
  for (size_t i = 0; i < k; ++i) best[0][i] = bytes(0, clean[i]);
  for (size_t j = 1; j < static_cast<size_t>(m); ++j)
    for (size_t i = j; i < k; ++i)
      for (size_t p = j - 1; p < i; ++p) {
        if (best[j - 1][p] == kNone) continue;
        const uint64_t v = std::max(best[j - 1][p], bytes(clean[p], clean[i]));
        if (v < best[j][i]) {
          best[j][i] = v;
          from[j][i] = static_cast<int>(p);
        }
      }
  uint64_t top = kNone;
  int last = -1;
  for (size_t i = static_cast<size_t>(m - 1); i < k; ++i) {
    if (best[static_cast<size_t>(m - 1)][i] == kNone) continue;
    const uint64_t v = std::max(best[static_cast<size_t>(m - 1)][i], bytes(clean[i], c.n_layers));
    if (v < top) {
      top = v;
      last = static_cast<int>(i);
    }
  }
  std::vector<int> cuts(static_cast<size_t>(m));
  for (int j = m - 1; j >= 0; --j) {
    cuts[static_cast<size_t>(j)] = clean[static_cast<size_t>(last)];
    last = from[static_cast<size_t>(j)][static_cast<size_t>(last)];
  }
  return cuts;
}

}  // namespace strata::model
