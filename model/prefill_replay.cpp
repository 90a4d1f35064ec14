// CED bounded replay: the Model::forward pieces that let a prefill chunk run the decoder layers
// over its last tokens only.
//
// What each decoder layer needs from the prompt (model.py Attention / Compressor / Indexer): the
// decoder keeps no per-token state of its own except its sliding-window ring; everything global
// comes from the first decoder layer's compressor (ratio 1: one compressed KV entry and one index
// key per token), whose input is that layer's attention input — a function of the encoder output
// (the residual streams after the last encoder layer, collapsed by its FFN pre-mix and attn_norm).
// So the encoder runs every token, the boundary layer's compressor runs every token, and the
// decoder runs the last window_size tokens: that fills every decoder ring exactly as an exact
// prefill would for decode. What replay approximates is the decoder's view of those tail tokens:
// their window positions before the tail are missing (official serving: "SWA bounded replay").
// Source: ARCHITECTURE.md §Attention "CED prefill"; model.py Block.forward, Attention._compress_kv.
#include <algorithm>
#include <string>

#include "model/attention.h"
#include "model/mhc.h"
#include "model/model.h"
#include "model/ops.h"

namespace strata::model {

Result<int> ced_decoder_boundary(const ModelConfig& c) {
  int boundary = -1;
  for (int l = 0; l < c.n_layers; ++l)
    if (c.compress_ratio(l) == 1) {
      boundary = l;
      break;
    }
  if (boundary < 0) return NotSupported("replay prefill: no layer has compress ratio 1 (no CED decoder in this config)");
  for (int l : c.kv_source_layers)
    if (l > boundary && l < c.n_layers)
      return NotSupported("replay prefill: layer " + std::to_string(l) + " is a KV source after the first decoder layer " +
                          std::to_string(boundary) + " (kv_source_layers); its cache needs every token through the decoder");
  return boundary;
}

Result<int> Model::decoder_boundary() const { return ced_decoder_boundary(c_); }

void Model::replay_narrow(int layer, const BlockWeights& bw, std::vector<float>& x, std::vector<float>& pre_mix,
                          std::vector<int64_t>& engram_rows, AttentionShared& shared, int64_t tail, int64_t* start,
                          int64_t* n, KvCache& cache, Observer* obs, Activations& act) const {
  const int64_t dim = c_.dim, hc = c_.hc_mult, all = *n;
  // The boundary layer's attention input for every token, exactly as block_forward computes it:
  // collapse with the previous FFN's pre-mix, then attn_norm.
  std::vector<float> u(static_cast<size_t>(all * dim));
  hc_pre(c_, x.data(), pre_mix.data(), all, u.data());
  for (int64_t t = 0; t < all; ++t) rms_norm(u.data() + t * dim, dim, bw.attn_norm.data(), c_.norm_eps, u.data() + t * dim);
  AttentionContext actx{c_, act.rope_compressed, cache, shared, pool_.get(), obs};
  attention_compress(actx, layer, bw.attn, u.data(), all, *start);

  // Keep the last `tail` tokens of everything that is per token.
  const int64_t drop = all - tail;
  x.erase(x.begin(), x.begin() + drop * hc * dim);
  pre_mix.erase(pre_mix.begin(), pre_mix.begin() + drop * hc);
  if (!engram_rows.empty()) {
    const int64_t per_token = static_cast<int64_t>(engram_rows.size()) / all;
    engram_rows.erase(engram_rows.begin(), engram_rows.begin() + drop * per_token);
  }
  if (shared.have_topk) {
    const int64_t k = c_.index_topk;
    shared.topk.erase(shared.topk.begin(), shared.topk.begin() + drop * k);
    ++shared.topk_gen;
  }
  if (shared.have_candidates)
    shared.candidates.erase(shared.candidates.begin(), shared.candidates.begin() + drop * shared.cand_width);
  *start += drop;
  *n = tail;
}

}  // namespace strata::model
