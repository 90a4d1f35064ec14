// Model::dspark_seed / dspark_draft: the DSpark stages run as blocks of the model (model/dspark.h).
// Source: model.py Transformer.forward_spec, DSparkBlock.forward.
#include <algorithm>
#include <chrono>

#include "model/dspark.h"
#include "model/mhc.h"
#include "model/model.h"

namespace strata::model {

Status Model::dspark_seed(DSparkState& st, const float* main_hidden, int64_t n, int64_t start, Activations& act) const {
  if (!has_dspark()) return NotSupported("DSpark: this checkpoint has no draft stages");
  if (st.stages.size() != w_.mtp.size()) return InvalidArgument("DSpark: state was not made by this model");
  // start may skip positions (a bounded-replay prefill has features of its tail only): the rings
  // keep the newest window_size positions anyway.
  if (n < 1) return InvalidArgument("DSpark: seeding needs at least one position (n = " + std::to_string(n) + ")");
  if (start < st.n_seen)
    return InvalidArgument("DSpark: seeding positions " + std::to_string(start) + ".. but the state already holds 0.." +
                           std::to_string(st.n_seen - 1));
  act.rope_window.ensure(start + n);
  ScopedNs timer(&act.profile.dspark_ns);
  std::vector<float> main_x(static_cast<size_t>(n * c_.dim));
  dspark_main_x(c_, w_.dspark, main_hidden, n, main_x.data(), pool_.get());
  // The stages' attention only stores the main model's KV here (DSparkBlock.forward, start_pos 0).
  for (size_t s = 0; s < w_.mtp.size(); ++s)
    dspark_write_ring(c_, w_.mtp[s].attn, act.rope_window, main_x.data(), n, start, st.stages[s], pool_.get());
  st.n_seen = start + n;
  return Status();
}

Result<DSparkDraft> Model::dspark_draft(DSparkState& st, int32_t token, const float* main_hidden_row, int64_t pos,
                                        Activations& act, const DSparkStop& stop) const {
  if (!has_dspark()) return NotSupported("DSpark: this checkpoint has no draft stages");
  if (st.stages.size() != w_.mtp.size()) return InvalidArgument("DSpark: state was not made by this model");
  if (st.n_seen == 0) return InvalidArgument("DSpark: a draft needs the prompt's features first (dspark_seed)");
  if (pos != st.n_seen)
    return InvalidArgument("DSpark: a draft after position " + std::to_string(pos) + " but the state holds 0.." +
                           std::to_string(st.n_seen - 1) + " (the next draft is after position " +
                           std::to_string(st.n_seen) + ")");
  if (token < 0 || token >= c_.vocab_size)
    return InvalidArgument("DSpark: token id " + std::to_string(token) + " is outside the vocabulary");
  const int64_t B = c_.dspark_block_size, dim = c_.dim;
  const int hc = c_.hc_mult;
  if (pos + 1 + B > c_.max_position_embeddings)
    return ResourceExhausted("DSpark: a draft block after position " + std::to_string(pos) +
                             " runs past max_position_embeddings " + std::to_string(c_.max_position_embeddings));
  act.rope_window.ensure(pos + 1 + B);
  // The stages run as blocks, which time their sublayers into the forward profile: the draft's
  // time goes to dspark_ns only, so the main forward's sublayer times stay its own.
  const ForwardProfile main_profile = act.profile;
  const auto t0 = std::chrono::steady_clock::now();
  auto restore_profile = [&] {
    act.profile = main_profile;
    act.profile.dspark_ns += static_cast<uint64_t>(
        std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now() - t0).count());
  };

  std::vector<float> main_x(static_cast<size_t>(dim));
  dspark_main_x(c_, w_.dspark, main_hidden_row, 1, main_x.data(), pool_.get());
  // The block: the main model's token, then noise tokens (DSparkBlock.forward_embed), one-hot pre-mix.
  std::vector<int32_t> ids(static_cast<size_t>(B), static_cast<int32_t>(c_.dspark_noise_token_id));
  ids[0] = token;
  std::vector<float> x(static_cast<size_t>(B * hc * dim));
  embed(ids, x.data());
  std::vector<float> pre_mix(static_cast<size_t>(B * hc), 0.0f);
  for (int64_t t = 0; t < B; ++t) pre_mix[static_cast<size_t>(t * hc)] = 1.0f;

  BlockScratch block;
  for (size_t s = 0; s < w_.mtp.size(); ++s) {
    const BlockWeights& bw = w_.mtp[s];
    LayerKvCache& ring = st.stages[s];
    dspark_write_ring(c_, bw.attn, act.rope_window, main_x.data(), 1, pos, ring, pool_.get());
    auto attend = [&](const float* u, float* f, RideAlong ride) {
      kernels::linear_batch(kernels::LinearBatch{{}, {}, {}, ride}, pool_.get());
      dspark_attention(c_, bw.attn, act.rope_window, u, B, pos, ring, pool_.get(), f);
    };
    const Status st_block = block_forward(c_.n_layers + static_cast<int>(s), bw, x.data(), pre_mix, Rows{B, -1}, attend,
                                          /*ahead=*/nullptr, /*obs=*/nullptr, &act.profile, block);
    if (!st_block.ok()) {
      restore_profile();
      return st_block;
    }
  }
  st.n_seen = pos + 1;

  std::vector<float> h(static_cast<size_t>(B * dim));
  hc_pre(c_, x.data(), pre_mix.data(), B, h.data());
  DSparkDraft d;
  dspark_head(c_, w_, h.data(), token, pool_.get(), &d, stop);
  restore_profile();
  return d;
}

}  // namespace strata::model
