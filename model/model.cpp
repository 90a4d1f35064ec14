#include "model/model.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <optional>

#include "core/dtype.h"
#include "io/checkpoint.h"
#include "kernels/linear.h"
#include "model/attention.h"
#include "model/engram.h"
#include "model/mhc.h"
#include "model/moe.h"
#include "model/ops.h"
#include "store/open_store.h"

namespace strata::model {

namespace {

bool all_finite(const float* v, int64_t n) {
  bool ok = true;
  for (int64_t i = 0; i < n; ++i) ok &= std::isfinite(v[i]);  // no early exit: vectorizes
  return ok;
}

}  // namespace

int64_t LogitsRequest::count(int64_t n_tokens) const {
  switch (kind) {
    case Kind::kNone: return 0;
    case Kind::kLast: return n_tokens > 0 ? 1 : 0;
    case Kind::kAll: return n_tokens;
    case Kind::kRows: return static_cast<int64_t>(rows.size());
  }
  return 0;
}

Model::Model(const ModelConfig& c, std::unique_ptr<store::WeightStore> s, const ModelOptions& opt)
    : c_(c), store_(std::move(s)), pool_(std::make_unique<ThreadPool>(opt.n_threads)), logger_(opt.logger) {}

Result<std::unique_ptr<Model>> Model::load(const std::string& dir, const CompressedVocabMap& vocab,
                                           const ModelOptions& opt) {
  STRATA_ASSIGN_OR_RETURN(ModelConfig c, ModelConfig::load(dir));
  STRATA_ASSIGN_OR_RETURN(auto ck, io::Checkpoint::open(dir));
  store::StoreShape shape;
  shape.n_layers = c.n_layers;
  for (int l = 0; l < c.n_layers + c.n_mtp_layers; ++l) {
    shape.max_active = std::max(shape.max_active, c.n_active(l));
    if (l < c.n_layers) shape.active_per_token += c.n_active(l);
  }
  STRATA_ASSIGN_OR_RETURN(auto store, store::open_store(std::move(ck), shape, opt.placement));
  return create(c, std::move(store), vocab, opt);
}

Result<std::unique_ptr<Model>> Model::create(const ModelConfig& c, std::unique_ptr<store::WeightStore> s,
                                             const CompressedVocabMap& vocab, const ModelOptions& opt) {
  auto m = std::unique_ptr<Model>(new Model(c, std::move(s), opt));
  Status st = c.validate();
  if (!st.ok()) return st;
  STRATA_ASSIGN_OR_RETURN(m->w_, bind_weights(c, *m->store_, opt.progress));
  if (!c.engram_layer_ids.empty()) {
    if (static_cast<int64_t>(vocab.n_classes) != c.engram_compressed_vocab_size)
      return InvalidArgument("tokenizer.json yields " + std::to_string(vocab.n_classes) +
                             " Engram compressed-vocab classes but config.json says engram_compressed_vocab_size = " +
                             std::to_string(c.engram_compressed_vocab_size) + " (tokenizer and checkpoint do not match)");
    if (c.engram_pad_id < 0 || c.engram_pad_id >= static_cast<int64_t>(vocab.map.size()))
      return InvalidArgument("engram_pad_token_id " + std::to_string(c.engram_pad_id) + " is outside the tokenizer");
    m->class_of_token_ = vocab.map;
    m->pad_class_ = vocab.map[static_cast<size_t>(c.engram_pad_id)];
    EngramHashParams p;
    p.layer_ids = c.engram_layer_ids;
    p.num_embeddings = c.engram_num_embeddings;
    p.max_ngram_size = c.engram_max_ngram_size;
    p.n_heads = c.engram_n_heads;
    p.engram_vocab_size = c.engram_vocab_size;
    p.compressed_vocab_size = c.engram_compressed_vocab_size;
    p.pad_class = m->pad_class_;
    STRATA_ASSIGN_OR_RETURN(EngramHasher h, EngramHasher::create(p));
    m->hasher_ = std::make_unique<EngramHasher>(std::move(h));
  }
  return m;
}

KvCache Model::new_cache() const {
  KvCache k(c_);
  if (hasher_) k.engram_history = hasher_->new_history();
  return k;
}

void Model::engram_rows(const EngramHistory& history, std::span<const int32_t> tokens, std::vector<int64_t>* rows,
                        std::vector<uint32_t>* classes) const {
  classes->resize(tokens.size());
  for (size_t i = 0; i < tokens.size(); ++i) {
    const auto t = static_cast<size_t>(tokens[i]);
    // DECISION: a token id beyond the tokenizer's table (the model vocab is padded past it) hashes
    // as the pad class; the official code would fail to index its map there.
    (*classes)[i] = t < class_of_token_.size() ? class_of_token_[t] : pad_class_;
  }
  rows->resize(tokens.size() * static_cast<size_t>(hasher_->n_layers() * hasher_->n_cols()));
  hasher_->hash_rows(history, *classes, *rows);
}

Status Model::block_forward(int layer, const BlockWeights& bw, float* x, std::vector<float>& pre_mix, int64_t n,
                            const AttendFn& attend, MoeLookahead* ahead, Observer* obs, ForwardProfile* prof) const {
  const int64_t dim = c_.dim;
  const int hc = c_.hc_mult;
  std::vector<float> u(static_cast<size_t>(n * dim)), f(static_cast<size_t>(n * dim));

  // Attention sublayer: collapse with the previous sublayer's pre-mix, norm, attend, expand.
  HcMix attn_mix;
  hc_mixes(c_, bw.hc_attn, x, n, &attn_mix, pool_.get());
  hc_pre(c_, x, pre_mix.data(), n, u.data());
  for (int64_t t = 0; t < n; ++t) rms_norm(u.data() + t * dim, dim, bw.attn_norm.data(), c_.norm_eps, u.data() + t * dim);
  {
    ScopedNs timer(prof ? &prof->attention_ns : nullptr);
    attend(u.data(), f.data());
  }
  if (obs) obs->tensor("attn_out", layer, f, {n, dim});
  hc_post(c_, f.data(), attn_mix, n, x);

  // FFN sublayer: uses this attention's pre-mix (single-pass mHC).
  HcMix ffn_mix;
  hc_mixes(c_, bw.hc_ffn, x, n, &ffn_mix, pool_.get());
  hc_pre(c_, x, attn_mix.pre.data(), n, u.data());
  for (int64_t t = 0; t < n; ++t) rms_norm(u.data() + t * dim, dim, bw.ffn_norm.data(), c_.norm_eps, u.data() + t * dim);
  STRATA_RETURN_IF_ERROR(moe_forward(c_, bw.ffn, *store_, u.data(), n, f.data(), pool_.get(), obs, ahead, prof));
  hc_post(c_, f.data(), ffn_mix, n, x);
  pre_mix = std::move(ffn_mix.pre);
  if (obs) {
    obs->tensor("ffn_pre_mix", layer, pre_mix, {n, hc});
    obs->tensor("block_out", layer, std::span<const float>(x, static_cast<size_t>(n * hc * dim)), {n, hc, dim});
  }
  return Status();
}

void Model::embed(std::span<const int32_t> tokens, float* x) const {
  const int64_t dim = c_.dim;
  const int hc = c_.hc_mult;
  for (size_t t = 0; t < tokens.size(); ++t) {
    const int64_t id = tokens[t];
    float* xt = x + static_cast<int64_t>(t) * hc * dim;
    if (w_.embed.dtype == DType::kBF16) {
      const uint16_t* row = w_.embed.as<uint16_t>() + id * dim;
      for (int64_t i = 0; i < dim; ++i) xt[i] = bf16_to_f32(row[i]);
    } else {
      std::memcpy(xt, w_.embed.as<float>() + id * dim, static_cast<size_t>(dim) * sizeof(float));
    }
    for (int k = 1; k < hc; ++k) std::memcpy(xt + k * dim, xt, static_cast<size_t>(dim) * sizeof(float));
  }
}

Status Model::forward(const ForwardRequest& r, Activations& act) const {
  if (r.entries.empty()) return InvalidArgument("forward: no entries");
  if (r.entries.size() > 1 && r.obs) return InvalidArgument("forward: an observer needs a request of one entry");
  for (size_t i = 0; i < r.entries.size(); ++i) {
    const ForwardEntry& e = r.entries[i];
    if (e.cache == nullptr) return InvalidArgument("forward: entry " + std::to_string(i) + " has no KvCache");
    if (r.entries.size() > 1 && e.decoder_tail >= 0)
      return InvalidArgument("forward: bounded replay (decoder_tail) needs a request of one entry");
    for (size_t j = 0; j < i; ++j)
      if (r.entries[j].cache == e.cache)
        return InvalidArgument("forward: entries " + std::to_string(j) + " and " + std::to_string(i) + " share a KvCache");
  }
  for (ForwardEntry& e : r.entries) STRATA_RETURN_IF_ERROR(forward_entry(e, r.obs, act));
  return Status();
}

Status Model::forward_entry(ForwardEntry& e, Observer* obs, Activations& act) const {
  KvCache& cache = *e.cache;
  const std::span<const int32_t> tokens = e.tokens;
  const LogitsRequest& req = e.logits;
  float* logits = e.logits_out;
  const int64_t decoder_tail = e.decoder_tail;
  std::vector<float>* main_hidden = e.dspark_features;
  const int64_t n = static_cast<int64_t>(tokens.size());
  const int64_t start = cache.n_past;
  const int64_t dim = c_.dim;
  const int hc = c_.hc_mult;
  if (n == 0) return InvalidArgument("forward: no tokens");
  for (int64_t i = 0; i < n; ++i)
    if (tokens[static_cast<size_t>(i)] < 0 || tokens[static_cast<size_t>(i)] >= c_.vocab_size)
      return InvalidArgument("token id " + std::to_string(tokens[static_cast<size_t>(i)]) + " at position " +
                             std::to_string(start + i) + " is outside the vocabulary [0, " +
                             std::to_string(c_.vocab_size) + ")");
  if (start + n > c_.max_position_embeddings)
    return ResourceExhausted("context of " + std::to_string(start + n) + " tokens exceeds max_position_embeddings " +
                             std::to_string(c_.max_position_embeddings));
  for (int64_t r : req.rows)
    if (r < 0 || r >= n) return InvalidArgument("logits row " + std::to_string(r) + " outside the chunk of " + std::to_string(n));
  // CED bounded replay: the decoder runs only the last `tail` tokens of this chunk.
  const bool replay = decoder_tail >= 0 && decoder_tail < n;
  int boundary = -1;
  if (replay) {
    STRATA_ASSIGN_OR_RETURN(boundary, decoder_boundary());
    const int64_t first_row = n - decoder_tail;
    if (req.kind == LogitsRequest::Kind::kAll || (req.kind == LogitsRequest::Kind::kLast && decoder_tail == 0))
      return InvalidArgument("replay prefill computes logits only for the last " + std::to_string(decoder_tail) +
                             " tokens of the chunk");
    for (int64_t r : req.rows)
      if (r < first_row)
        return InvalidArgument("logits row " + std::to_string(r) + " is before the replayed tail (rows " +
                               std::to_string(first_row) + ".." + std::to_string(n - 1) + ")");
  }
  if (static_cast<int64_t>(cache.layers.size()) != c_.n_layers) return InvalidArgument("KvCache was not made by this model");
  if (main_hidden && !has_dspark()) return NotSupported("forward: DSpark features asked of a checkpoint without DSpark stages");
  act.rope_window.ensure(start + n);
  act.rope_compressed.ensure(start + n);

  ForwardProfile& profile = act.profile;
  ScopedNs forward_timer(&profile.forward_ns);
  ++profile.forwards;
  profile.tokens += static_cast<uint64_t>(n);
  act.lookahead.begin(w_.layers);

  // Engram row ids for the whole chunk, computed from token ids before any layer runs (they depend
  // only on the tokens); every Engram layer's reads start now (sorted and deduplicated by the
  // store) and overlap the layers before their use. In decode this is the moment the sampled token
  // is known.
  std::vector<int64_t> erows;
  std::vector<uint32_t> classes;
  std::vector<std::unique_ptr<store::EngramFetch>> efetch;
  if (hasher_) {
    engram_rows(cache.engram_history, tokens, &erows, &classes);
    if (obs) obs->ids("engram_row_ids", -1, erows, {n, hasher_->n_layers(), hasher_->n_cols()});
    STRATA_RETURN_IF_ERROR(engram_start(c_, w_.layers, *store_, erows, n, &efetch));
  }

  // Embedding, copied into hc_mult streams; the first pre-mix is one-hot on stream 0.
  std::vector<float> x(static_cast<size_t>(n * hc * dim));
  embed(tokens, x.data());
  std::vector<float> pre_mix(static_cast<size_t>(n * hc), 0.0f);
  for (int64_t t = 0; t < n; ++t) pre_mix[static_cast<size_t>(t * hc)] = 1.0f;

  std::optional<DSparkFeatures> features;  // main_hidden for the DSpark draft
  if (main_hidden) features.emplace(c_);

  AttentionShared shared;
  int64_t n_run = n, start_run = start;  // the tokens the layers run (bounded replay narrows them)
  int first_nonfinite = -1;  // the first layer after which the last position held NaN/Inf
  for (int l = 0; l < c_.n_layers; ++l) {
    const BlockWeights& bw = w_.layers[static_cast<size_t>(l)];
    if (bw.has_engram) {
      STRATA_RETURN_IF_ERROR(engram_forward(c_, bw.engram, l, *efetch[static_cast<size_t>(bw.engram.index)], n, n_run,
                                            x.data(), pool_.get(), obs, &profile));
      if (obs) obs->tensor("after_engram", l, x, {n_run, hc, dim});
    }
    if (l == boundary) {
      replay_narrow(l, bw, x, pre_mix, erows, shared, decoder_tail, &start_run, &n_run, cache, obs, act);
      if (n_run == 0) break;
    }
    if (features) features->capture(l, x.data(), n_run);
    const RopeTable& rope = c_.compress_ratio(l) > 0 ? act.rope_compressed : act.rope_window;
    AttentionContext actx{c_, rope, cache, shared, pool_.get(), obs};
    auto attend = [&](const float* u, float* f) { attention_forward(actx, l, bw.attn, u, n_run, start_run, f); };
    STRATA_RETURN_IF_ERROR(block_forward(l, bw, x.data(), pre_mix, n_run, attend, &act.lookahead, obs, &profile));
    // Only the last position's streams (hc * dim floats, nothing beside the layer's work): enough
    // to name where a corrupt weight or input turned the state non-finite (issue 13 item 7).
    if (first_nonfinite < 0 && !all_finite(x.data() + (n_run - 1) * hc * dim, hc * dim)) first_nonfinite = l;
  }
  if (features) {
    STRATA_RETURN_IF_ERROR(features->assemble(n_run, main_hidden));
    if (obs) obs->tensor("main_hidden", -1, *main_hidden, {n_run, dim * static_cast<int64_t>(c_.dspark_target_layer_ids.size())});
  }

  // Head: collapse with the last FFN pre-mix, final norm, logits for the requested rows (rows of
  // the chunk; after bounded replay x holds only the last n_run of them).
  const int64_t n_out = req.count(n);
  const int64_t skipped = n - n_run;
  if (n_run > 0 && (n_out > 0 || obs)) {
    ScopedNs head_timer(&profile.head_ns);
    std::vector<int64_t> rows;
    if (req.kind == LogitsRequest::Kind::kLast) rows = {n_run - 1};
    else if (req.kind == LogitsRequest::Kind::kAll || obs) {
      rows.resize(static_cast<size_t>(n_run));
      for (int64_t t = 0; t < n_run; ++t) rows[static_cast<size_t>(t)] = t;
    }
    if (req.kind == LogitsRequest::Kind::kRows) {
      rows = req.rows;
      for (auto& r : rows) r -= skipped;
    }
    if (obs && req.kind != LogitsRequest::Kind::kAll) {
      // The observer sees the final-norm output at every position.
      std::vector<float> h(static_cast<size_t>(n_run * dim));
      hc_pre(c_, x.data(), pre_mix.data(), n_run, h.data());
      for (int64_t t = 0; t < n_run; ++t) rms_norm(h.data() + t * dim, dim, w_.norm.data(), c_.norm_eps, h.data() + t * dim);
      obs->tensor("final_norm_out", -1, h, {n_run, dim});
    }
    const int64_t m = static_cast<int64_t>(rows.size());
    std::vector<float> h(static_cast<size_t>(m * dim));
    std::vector<float> pm(static_cast<size_t>(m * hc));
    std::vector<float> xs(static_cast<size_t>(m * hc * dim));
    for (int64_t i = 0; i < m; ++i) {
      const int64_t t = rows[static_cast<size_t>(i)];
      std::copy_n(x.data() + t * hc * dim, hc * dim, xs.data() + i * hc * dim);
      std::copy_n(pre_mix.data() + t * hc, hc, pm.data() + i * hc);
    }
    hc_pre(c_, xs.data(), pm.data(), m, h.data());
    for (int64_t i = 0; i < m; ++i) rms_norm(h.data() + i * dim, dim, w_.norm.data(), c_.norm_eps, h.data() + i * dim);
    if (obs && req.kind == LogitsRequest::Kind::kAll) obs->tensor("final_norm_out", -1, h, {m, dim});
    if (n_out > 0 && logits) {
      // DECISION: the logits feed no rounding point (only the sampler), so a BF16 head runs in free
      // summation order: kernels::linear_bf16_any_order streams it at about twice the rate of the
      // bit-exact order (docs/performance.md, "CPU kernels"); the fixture logits stay within tolerance.
      if (w_.head.kind == Linear::Kind::kBf16) {
        kernels::linear_bf16_any_order(h.data(), m, w_.head.bf16, logits, pool_.get());
      } else {
        w_.head.apply(h.data(), m, logits, pool_.get());
      }
      // NaN/Inf logits would be sampled as garbage, or as token 0, and exit 0: refuse them.
      if (!all_finite(logits, n_out * c_.vocab_size))
        return Corruption("the logits are not finite (NaN/Inf): " +
                          (first_nonfinite >= 0 ? "the hidden state first became non-finite in layer " +
                                                      std::to_string(first_nonfinite)
                                                : std::string("the last position's hidden state stayed finite through every "
                                                              "layer, so the head or an earlier position produced them")) +
                          "; the checkpoint's weights (or the input) are corrupt");
    }
  }

  cache.n_past += n;
  if (hasher_) cache.engram_history.append(classes);
  return Status();
}

}  // namespace strata::model
