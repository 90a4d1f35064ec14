#include "model/model.h"

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <optional>

#include "core/dtype.h"
#include "io/checkpoint.h"
#include "kernels/linear.h"
#include "model/attention.h"
#include "model/engram.h"
#include "model/engram_gguf_check.h"
#include "model/forward_scratch.h"
#include "model/mhc.h"
#include "model/moe.h"
#include "model/ops.h"
#include "store/open_store.h"

namespace strata::model {

namespace {

bool all_finite(const float* v, int64_t n) {
  // The largest exponent field: all ones only for an infinity or a NaN. Integer max over the bits
  // vectorizes (the isfinite loop compiled to one scalar compare per value: 0.6% of the main
  // thread's decode samples on the 8 GB scaled checkpoint, 40 layers' streams and 129,280 logits).
  uint32_t top = 0;
  for (int64_t i = 0; i < n; ++i) top = std::max(top, std::bit_cast<uint32_t>(v[i]) & 0x7F800000u);
  return top != 0x7F800000u;
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
    : c_(c), store_(std::move(s)), pool_(std::make_unique<ThreadPool>(opt.n_threads)), logger_(opt.logger),
      peers_(opt.expert_peers), layer_lo_(opt.pipeline ? opt.pipeline->layer_lo : 0),
      layer_hi_(opt.pipeline ? opt.pipeline->layer_hi : c.n_layers), next_(opt.pipeline ? opt.pipeline->next : nullptr) {}

Result<OpenedCheckpoint> open_checkpoint(const std::string& dir, const store::PlacementOptions& placement) {
  OpenedCheckpoint o;
  STRATA_ASSIGN_OR_RETURN(o.config, ModelConfig::load(dir));
  const ModelConfig& c = o.config;
  STRATA_ASSIGN_OR_RETURN(auto ck, io::Checkpoint::open(dir));
  store::StoreShape shape;
  shape.n_layers = c.n_layers;
  for (int l = 0; l < c.n_layers + c.n_mtp_layers; ++l) {
    shape.max_active = std::max(shape.max_active, c.n_active(l));
    if (l < c.n_layers) shape.active_per_token += c.n_active(l);
  }
  STRATA_ASSIGN_OR_RETURN(o.store, store::open_store(std::move(ck), shape, placement));
  return o;
}

Result<std::unique_ptr<Model>> Model::load(const std::string& dir, const CompressedVocabMap& vocab,
                                           const ModelOptions& opt) {
  STRATA_ASSIGN_OR_RETURN(OpenedCheckpoint o, open_checkpoint(dir, opt.placement));
  return create(o.config, std::move(o.store), vocab, opt);
}

Result<std::unique_ptr<Model>> Model::create(const ModelConfig& c, std::unique_ptr<store::WeightStore> s,
                                             const CompressedVocabMap& vocab, const ModelOptions& opt) {
  auto m = std::unique_ptr<Model>(new Model(c, std::move(s), opt));
  Status st = c.validate();
  if (!st.ok()) return st;
  if (m->layer_lo_ < 0 || m->layer_lo_ >= m->layer_hi_ || m->layer_hi_ > c.n_layers)
    return InvalidArgument("pipeline part: layers [" + std::to_string(m->layer_lo_) + ", " + std::to_string(m->layer_hi_) +
                           ") are not a range of the " + std::to_string(c.n_layers) + " layers");
  STRATA_ASSIGN_OR_RETURN(m->w_, bind_weights(c, *m->store_, opt.progress, opt.expert_peers, opt.pipeline));
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
    // A GGUF from ds4 / ik_llama.cpp ships these tables: checked, never used.
    STRATA_RETURN_IF_ERROR(check_gguf_engram_tables(m->store_->checkpoint().dir(), h, vocab.map, m->pad_class_));
    m->hasher_ = std::make_unique<EngramHasher>(std::move(h));
  }
  return m;
}

KvCache Model::new_cache() const {
  KvCache k(c_);
  if (hasher_) k.engram_history = hasher_->new_history();
  return k;
}

EngramHistory Model::engram_history_of(std::span<const int32_t> tokens) const {
  if (!hasher_) return EngramHistory{0, 0};
  EngramHistory h = hasher_->new_history();
  const size_t keep = std::min(tokens.size(), static_cast<size_t>(h.size()));
  std::vector<uint32_t> classes(keep);
  for (size_t i = 0; i < keep; ++i) {
    const auto t = static_cast<size_t>(tokens[tokens.size() - keep + i]);
    classes[i] = t < class_of_token_.size() ? class_of_token_[t] : pad_class_;  // as engram_rows
  }
  h.append(classes);
  return h;
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

Status Model::block_forward(int layer, const BlockWeights& bw, float* x, std::vector<float>& pre_mix, Rows rows,
                            AttendFn attend, MoeLookahead* ahead, Observer* obs, ForwardProfile* prof,
                            BlockScratch& s) const {
  const int64_t dim = c_.dim, n = rows.n;
  const int hc = c_.hc_mult;
  s.u.resize(static_cast<size_t>(n * dim));
  s.f.resize(static_cast<size_t>(n * dim));
  float* u = s.u.data();
  float* f = s.f.data();

  // Attention sublayer: collapse with the previous sublayer's pre-mix, norm, attend, expand.
  // A decode-only batch runs the bit-exact mHC projections in the matvec (faster at these sizes).
  const kernels::RowPath bitexact = !rows.by_size() && rows.n_decode == n ? kernels::RowPath::kDecode : kernels::RowPath::kAuto;
  // The sublayer's input needs the previous sublayer's pre-mix only; this sublayer's mixes are
  // needed after it (hc_post) and by the next sublayer (its pre), so their projection of x runs in
  // the sublayer's first pass over the pool (mhc.h hc_mixes_job) and is finished after.
  const kernels::LinearJob<kernels::F32Weight> attn_mix_job = hc_mixes_job(c_, bw.hc_attn, x, n, &s.attn_mix, bitexact);
  hc_pre(c_, x, pre_mix.data(), n, u, pool_.get());
  for (int64_t t = 0; t < n; ++t) rms_norm(u + t * dim, dim, bw.attn_norm.data(), c_.norm_eps, u + t * dim);
  {
    ScopedNs timer(prof ? &prof->attention_ns : nullptr);
    attend(u, f, RideAlong(&attn_mix_job, 1));
  }
  hc_mixes_finish(c_, bw.hc_attn, n, &s.attn_mix, pool_.get());
  if (obs) obs->tensor("attn_out", layer, std::span<const float>(f, static_cast<size_t>(n * dim)), {n, dim});
  hc_post(c_, f, s.attn_mix, n, x, pool_.get());

  // FFN sublayer: uses this attention's pre-mix (single-pass mHC).
  const kernels::LinearJob<kernels::F32Weight> ffn_mix_job = hc_mixes_job(c_, bw.hc_ffn, x, n, &s.ffn_mix, bitexact);
  hc_pre(c_, x, s.attn_mix.pre.data(), n, u, pool_.get());
  for (int64_t t = 0; t < n; ++t) rms_norm(u + t * dim, dim, bw.ffn_norm.data(), c_.norm_eps, u + t * dim);
  STRATA_RETURN_IF_ERROR(moe_forward(c_, bw.ffn, *store_, u, rows, f, pool_.get(), obs, ahead, prof, &s.moe,
                                     layer < c_.n_layers ? peers_ : nullptr, RideAlong(&ffn_mix_job, 1)));
  hc_mixes_finish(c_, bw.hc_ffn, n, &s.ffn_mix, pool_.get());
  hc_post(c_, f, s.ffn_mix, n, x, pool_.get());
  std::swap(pre_mix, s.ffn_mix.pre);  // the next sublayer's pre-mix; the old buffer is reused
  if (obs) {
    obs->tensor("ffn_pre_mix", layer, std::span<const float>(pre_mix.data(), static_cast<size_t>(n * hc)), {n, hc});
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

Status Model::check_entry(const ForwardEntry& e, size_t index, bool single) const {
  const std::string who = single ? std::string("forward") : "forward entry " + std::to_string(index);
  if (e.cache == nullptr) return InvalidArgument(who + ": no KvCache");
  if (static_cast<int64_t>(e.cache->layers.size()) != c_.n_layers)
    return InvalidArgument(who + ": KvCache was not made by this model");
  const int64_t n = static_cast<int64_t>(e.tokens.size());
  const int64_t start = e.cache->n_past;
  if (n == 0) return InvalidArgument(who + ": no tokens");
  for (int64_t i = 0; i < n; ++i)
    if (e.tokens[static_cast<size_t>(i)] < 0 || e.tokens[static_cast<size_t>(i)] >= c_.vocab_size)
      return InvalidArgument("token id " + std::to_string(e.tokens[static_cast<size_t>(i)]) + " at position " +
                             std::to_string(start + i) + " is outside the vocabulary [0, " +
                             std::to_string(c_.vocab_size) + ")");
  if (start + n > c_.max_position_embeddings)
    return ResourceExhausted("context of " + std::to_string(start + n) + " tokens exceeds max_position_embeddings " +
                             std::to_string(c_.max_position_embeddings));
  for (int64_t r : e.logits.rows)
    if (r < 0 || r >= n) return InvalidArgument("logits row " + std::to_string(r) + " outside the chunk of " + std::to_string(n));
  if (e.logits.count(n) > 0 && e.logits_out == nullptr) return InvalidArgument(who + ": logits requested but no buffer");
  if (e.dspark_features && !has_dspark())
    return NotSupported("forward: DSpark features asked of a checkpoint without DSpark stages");
  const bool replay = e.decoder_tail >= 0 && e.decoder_tail < n;
  const bool part = layer_lo_ > 0 || layer_hi_ < c_.n_layers;
  if (part && (replay || e.dspark_features))
    return NotSupported(who + ": a pipeline part (layers " + std::to_string(layer_lo_) + "-" + std::to_string(layer_hi_ - 1) +
                        ") runs neither bounded replay nor DSpark features");
  if (replay) {
    if (!single) return InvalidArgument("forward: bounded replay (decoder_tail) needs a request of one entry");
    STRATA_RETURN_IF_ERROR(decoder_boundary().status());
    const int64_t first_row = n - e.decoder_tail;
    if (e.logits.kind == LogitsRequest::Kind::kAll || (e.logits.kind == LogitsRequest::Kind::kLast && e.decoder_tail == 0))
      return InvalidArgument("replay prefill computes logits only for the last " + std::to_string(e.decoder_tail) +
                             " tokens of the chunk");
    for (int64_t r : e.logits.rows)
      if (r < first_row)
        return InvalidArgument("logits row " + std::to_string(r) + " is before the replayed tail (rows " +
                               std::to_string(first_row) + ".." + std::to_string(n - 1) + ")");
  }
  return Status();
}

Status Model::forward(const ForwardRequest& r, Activations& act) const {
  // ---- every check before anything changes --------------------------------------------------
  const size_t n_entries = r.entries.size();
  if (n_entries == 0) return InvalidArgument("forward: no entries");
  if (n_entries > 1 && r.obs) return InvalidArgument("forward: an observer needs a request of one entry");
  for (size_t i = 0; i < n_entries; ++i) {
    STRATA_RETURN_IF_ERROR(check_entry(r.entries[i], i, n_entries == 1));
    for (size_t j = 0; j < i; ++j) {
      if (r.entries[j].cache == r.entries[i].cache)
        return InvalidArgument("forward: entries " + std::to_string(j) + " and " + std::to_string(i) + " share a KvCache");
      // Entries' logits are written side by side (over the pool): one buffer for two would race.
      const auto wants = [](const ForwardEntry& e) { return e.logits.kind != LogitsRequest::Kind::kNone; };
      if (wants(r.entries[j]) && wants(r.entries[i]) && r.entries[j].logits_out == r.entries[i].logits_out)
        return InvalidArgument("forward: entries " + std::to_string(j) + " and " + std::to_string(i) +
                               " share a logits buffer");
    }
  }
  if (layer_lo_ > 0) {  // a pipeline stage after the first: the streams entering its first layer
    int64_t n_all = 0;
    for (const ForwardEntry& e : r.entries) n_all += static_cast<int64_t>(e.tokens.size());
    if (static_cast<int64_t>(r.x_in.size()) != n_all * c_.hc_mult * c_.dim ||
        static_cast<int64_t>(r.pre_mix_in.size()) != n_all * c_.hc_mult)
      return InvalidArgument("forward: pipeline stage input of " + std::to_string(r.x_in.size()) + " + " +
                             std::to_string(r.pre_mix_in.size()) + " floats for " + std::to_string(n_all) + " tokens");
  }
  Observer* obs = r.obs;
  for (size_t i = 0; i < n_entries; ++i)
    if (ForwardEntry& e = r.entries[i]; e.undo) e.undo->record(c_, *e.cache, static_cast<int64_t>(e.tokens.size()));
  const int64_t dim = c_.dim;
  const int hc = c_.hc_mult;

  // ---- the batch's rows: decode entries first, each entry's rows contiguous --------------------
  using Span = ForwardScratch::Span;
  ForwardScratch& fs = *act.fwd;
  std::vector<Span>& spans = fs.spans;
  spans.clear();
  int64_t N = 0, n_decode = 0, max_end = 0;
  for (int pass = 0; pass < 2; ++pass)
    for (ForwardEntry& e : r.entries) {
      if ((e.kind == RowKind::kDecode) != (pass == 0)) continue;
      const int64_t n = static_cast<int64_t>(e.tokens.size());
      spans.push_back({&e, N, n, e.cache->n_past});
      N += n;
      if (pass == 0) n_decode += n;
      max_end = std::max(max_end, e.cache->n_past + n);
    }
  act.rope_window.ensure(max_end);
  act.rope_compressed.ensure(max_end);

  ForwardProfile& profile = act.profile;
  ScopedNs forward_timer(&profile.forward_ns);
  ++profile.forwards;
  profile.tokens += static_cast<uint64_t>(N);
  act.lookahead.begin(std::span<const BlockWeights>(w_.layers).first(static_cast<size_t>(layer_hi_)));

  // Engram row ids of every row, computed from token ids before any layer runs (they depend only on
  // the tokens); every Engram layer's reads for the whole batch start now as one sorted,
  // deduplicated set (the store's) and overlap the layers before their use. In decode this is the
  // moment the sampled tokens are known.
  std::vector<int64_t>& erows = fs.erows;
  std::vector<std::vector<uint32_t>>& classes = fs.classes;
  if (classes.size() < spans.size()) classes.resize(spans.size());
  std::vector<std::unique_ptr<store::EngramFetch>>& efetch = fs.efetch;
  efetch.clear();
  // The fetches end with this call, as the store's reads do (an abandoned one, after an error,
  // waits for its reads and reports to its store in its destructor); the vector keeps its room.
  struct EndFetches {
    std::vector<std::unique_ptr<store::EngramFetch>>& f;
    ~EndFetches() { f.clear(); }
  } end_fetches{efetch};
  if (hasher_) {
    const int64_t per_row = static_cast<int64_t>(hasher_->n_layers()) * hasher_->n_cols();
    erows.resize(static_cast<size_t>(N * per_row));
    std::vector<int64_t>& part = fs.erows_part;
    for (size_t i = 0; i < spans.size(); ++i) {
      engram_rows(spans[i].e->cache->engram_history, spans[i].e->tokens, &part, &classes[i]);
      std::copy(part.begin(), part.end(), erows.begin() + spans[i].row0 * per_row);
    }
    if (obs) obs->ids("engram_row_ids", -1, erows, {N, hasher_->n_layers(), hasher_->n_cols()});
    STRATA_RETURN_IF_ERROR(engram_start(c_, w_.layers, *store_, erows, N, &efetch, &fs.engram_layer_rows));
  }

  // Embedding, copied into hc_mult streams; the first pre-mix is one-hot on stream 0.
  std::vector<float>& x = act.x;
  std::vector<float>& pre_mix = act.pre_mix;
  // A pipeline stage after the first starts from the streams the stage before it sent.
  if (layer_lo_ > 0) {
    x.assign(r.x_in.begin(), r.x_in.end());
    pre_mix.assign(r.pre_mix_in.begin(), r.pre_mix_in.end());
  } else {
    x.resize(static_cast<size_t>(N * hc * dim));
    for (const Span& sp : spans) embed(sp.e->tokens, x.data() + sp.row0 * hc * dim);
    pre_mix.assign(static_cast<size_t>(N * hc), 0.0f);
    for (int64_t t = 0; t < N; ++t) pre_mix[static_cast<size_t>(t * hc)] = 1.0f;
  }

  std::vector<std::optional<DSparkFeatures>> features;  // main_hidden for the DSpark draft (none: empty)
  for (size_t i = 0; i < spans.size(); ++i)
    if (spans[i].e->dspark_features) {
      if (features.empty()) features.resize(spans.size());
      features[i].emplace(c_);
    }

  std::vector<AttentionShared>& shared = fs.shared;
  if (shared.size() < spans.size()) shared.resize(spans.size());
  for (AttentionShared& sh : shared) {  // their buffers are kept
    sh.have_topk = sh.have_candidates = false;
    ++sh.topk_gen;
  }
  std::vector<AttentionEntry>& aentries = fs.aentries;
  aentries.resize(spans.size());
  // CED bounded replay (a request of one entry): the decoder runs only the last `tail` rows.
  const int64_t tail = spans.size() == 1 ? spans[0].e->decoder_tail : -1;
  const bool replay = tail >= 0 && tail < N;
  int boundary = -1;
  if (replay) {
    STRATA_ASSIGN_OR_RETURN(boundary, decoder_boundary());
  }
  Rows rows{N, n_decode};
  std::vector<int>& first_nonfinite = fs.first_nonfinite;
  first_nonfinite.assign(spans.size(), -1);  // the first layer after which an entry's last row held NaN/Inf
  for (int l = layer_lo_; l < layer_hi_; ++l) {
    const BlockWeights& bw = w_.layers[static_cast<size_t>(l)];
    if (bw.has_engram) {
      STRATA_RETURN_IF_ERROR(engram_forward(c_, bw.engram, l, *efetch[static_cast<size_t>(bw.engram.index)], N, rows,
                                            x.data(), pool_.get(), obs, &profile, act.engram.get()));
      if (obs) obs->tensor("after_engram", l, x, {rows.n, hc, dim});
    }
    if (l == boundary) {
      int64_t n_run = rows.n, start_run = spans[0].start;
      replay_narrow(l, bw, x, pre_mix, erows, shared[0], tail, &start_run, &n_run, *spans[0].e->cache, obs, act);
      spans[0].n = n_run;
      spans[0].start = start_run;
      rows = Rows{n_run, n_decode > 0 ? n_run : 0};
      if (n_run == 0) break;
    }
    for (size_t i = 0; i < features.size(); ++i)
      if (features[i]) features[i]->capture(l, x.data() + spans[i].row0 * hc * dim, spans[i].n);
    const RopeTable& rope = c_.compress_ratio(l) > 0 ? act.rope_compressed : act.rope_window;
    for (size_t i = 0; i < spans.size(); ++i)
      aentries[i] = AttentionEntry{spans[i].e->cache, &shared[i], spans[i].row0, spans[i].n, spans[i].start,
                                   spans[i].e->kind == RowKind::kDecode ? kernels::RowPath::kDecode : kernels::RowPath::kPrompt,
                                   spans[i].e->undo};
    AttentionBatch ab{c_, rope, aentries, rows, pool_.get(), obs, *act.attn};
    auto attend = [&](const float* u, float* f, RideAlong ride) { attention_forward(ab, l, bw.attn, u, f, ride); };
    STRATA_RETURN_IF_ERROR(block_forward(l, bw, x.data(), pre_mix, rows, attend, &act.lookahead, obs, &profile, act.block));
    // Only each entry's last row's streams (hc * dim floats, nothing beside the layer's work):
    // enough to name where a corrupt weight or input turned the state non-finite (issue 13 item 7).
    for (size_t i = 0; i < spans.size(); ++i)
      if (first_nonfinite[i] < 0 && !all_finite(x.data() + (spans[i].row0 + spans[i].n - 1) * hc * dim, hc * dim))
        first_nonfinite[i] = l;
  }
  for (size_t i = 0; i < features.size(); ++i)
    if (features[i]) {
      std::vector<float>* out = spans[i].e->dspark_features;
      STRATA_RETURN_IF_ERROR(features[i]->assemble(spans[i].n, out));
      if (obs) obs->tensor("main_hidden", -1, *out, {spans[i].n, dim * static_cast<int64_t>(c_.dspark_target_layer_ids.size())});
    }

  // Head: collapse with the last FFN pre-mix, final norm, logits for the requested rows (rows of
  // each entry; after bounded replay x holds only the last spans[0].n of them). One pass over the
  // head for every entry's rows, decode rows in the decode regime. A pipeline's first part hands
  // its streams to the stages after it, which send the logits back; a middle part leaves them in act.
  if (layer_hi_ < c_.n_layers) {
    if (next_) {
      std::vector<const ForwardEntry*> order(spans.size());
      for (size_t i = 0; i < spans.size(); ++i) order[i] = spans[i].e;
      STRATA_RETURN_IF_ERROR(next_->forward_rest(order, x, pre_mix));
    }
  } else if (rows.n > 0) {
    ScopedNs head_timer(&profile.head_ns);
    std::vector<int64_t>& want = fs.want;  // batch rows, entry by entry
    std::vector<int64_t>& first_want = fs.first_want;
    want.clear();
    first_want.assign(spans.size() + 1, 0);
    int64_t m_decode = 0;
    for (size_t i = 0; i < spans.size(); ++i) {
      const ForwardEntry& e = *spans[i].e;
      const int64_t n_all = static_cast<int64_t>(e.tokens.size()), skipped = n_all - spans[i].n;
      first_want[i] = static_cast<int64_t>(want.size());
      switch (e.logits.kind) {
        case LogitsRequest::Kind::kNone: break;
        case LogitsRequest::Kind::kLast: want.push_back(spans[i].row0 + spans[i].n - 1); break;
        case LogitsRequest::Kind::kAll:
          for (int64_t t = 0; t < spans[i].n; ++t) want.push_back(spans[i].row0 + t);
          break;
        case LogitsRequest::Kind::kRows:
          for (int64_t rr : e.logits.rows) want.push_back(spans[i].row0 + rr - skipped);
          break;
      }
      if (e.kind == RowKind::kDecode) m_decode = static_cast<int64_t>(want.size());
    }
    first_want[spans.size()] = static_cast<int64_t>(want.size());
    if (obs) {
      // The observer sees the final-norm output at every position (a request of one entry).
      std::vector<float> h(static_cast<size_t>(rows.n * dim));
      hc_pre(c_, x.data(), pre_mix.data(), rows.n, h.data());
      for (int64_t t = 0; t < rows.n; ++t) rms_norm(h.data() + t * dim, dim, w_.norm.data(), c_.norm_eps, h.data() + t * dim);
      obs->tensor("final_norm_out", -1, h, {rows.n, dim});
      obs->linear_input("head", -1, -1, h, dim);
    }
    const int64_t m = static_cast<int64_t>(want.size());
    if (m > 0) {
      act.head_x.resize(static_cast<size_t>(m * hc * dim));
      act.head_pm.resize(static_cast<size_t>(m * hc));
      act.h.resize(static_cast<size_t>(m * dim));
      for (int64_t i = 0; i < m; ++i) {
        const int64_t t = want[static_cast<size_t>(i)];
        std::copy_n(x.data() + t * hc * dim, hc * dim, act.head_x.data() + i * hc * dim);
        std::copy_n(pre_mix.data() + t * hc, hc, act.head_pm.data() + i * hc);
      }
      float* h = act.h.data();
      hc_pre(c_, act.head_x.data(), act.head_pm.data(), m, h);
      for (int64_t i = 0; i < m; ++i) rms_norm(h + i * dim, dim, w_.norm.data(), c_.norm_eps, h + i * dim);
      // One entry with logits writes straight into its buffer; several share a scratch block, except
      // the leading `direct` rows (decode rows), which a blocked BF16 head writes straight into their
      // entries' buffers (kernels::linear_bf16_any_order_rows): copying them out of the block cost
      // 0.5 MB per row and step, 0.2-0.3 ms of an 8-row demo step.
      int wanting = 0;
      for (size_t i = 0; i < spans.size(); ++i) wanting += first_want[i + 1] > first_want[i];
      const int64_t V = c_.vocab_size;
      const Rows head_rows{m, rows.by_size() ? -1 : m_decode};
      const bool bf16_head = w_.head.kind == Linear::Kind::kBf16;
      const int64_t lead = head_rows.by_size() ? m : head_rows.n_decode;
      const kernels::RowPath lead_path = head_rows.by_size() ? kernels::RowPath::kAuto : kernels::RowPath::kDecode;
      const int64_t direct =
          wanting > 1 && bf16_head && lead > 0 && kernels::any_order_writes_rows(w_.head.bf16, lead, lead_path) ? lead : 0;
      std::vector<float*>& out_rows = fs.want_out;
      out_rows.resize(static_cast<size_t>(direct));
      for (size_t i = 0; i < spans.size(); ++i)
        for (int64_t j = first_want[i]; j < std::min(first_want[i + 1], direct); ++j)
          out_rows[static_cast<size_t>(j)] = spans[i].e->logits_out + (j - first_want[i]) * V;
      float* logits = nullptr;  // rows [direct, m) of the head, at their place in an [m, V] block
      if (wanting == 1) {
        for (size_t i = 0; i < spans.size(); ++i)
          if (first_want[i + 1] > first_want[i]) logits = spans[i].e->logits_out;
      } else if (direct < m) {
        act.logits.resize(static_cast<size_t>(m * V));
        logits = act.logits.data();
      }
      // DECISION: the logits feed no rounding point (only the sampler), so a BF16 head runs decode
      // rows in free summation order: kernels::linear_bf16_any_order streams it at about twice the
      // rate of the bit-exact order (docs/performance.md, "CPU kernels"); prompt rows take the
      // bit-exact order (its GEMM is compute-efficient). The fixture logits stay within tolerance.
      if (direct > 0)
        kernels::linear_bf16_any_order_rows(h, direct, w_.head.bf16, out_rows.data(), pool_.get(), lead_path);
      if (w_.head.kind == Linear::Kind::kBf16 && head_rows.by_size()) {
        if (direct == 0) kernels::linear_bf16_any_order(h, m, w_.head.bf16, logits, pool_.get(), kernels::RowPath::kAuto);
      } else if (w_.head.kind == Linear::Kind::kBf16) {
        if (head_rows.n_decode > 0 && direct == 0)
          kernels::linear_bf16_any_order(h, head_rows.n_decode, w_.head.bf16, logits, pool_.get(), kernels::RowPath::kDecode);
        if (head_rows.n_prompt() > 0)
          kernels::linear_bf16_any_order(h + head_rows.n_decode * dim, head_rows.n_prompt(), w_.head.bf16,
                                         logits + head_rows.n_decode * V, pool_.get(), kernels::RowPath::kPrompt);
      } else {
        w_.head.apply(h, head_rows, logits, pool_.get());
      }
      // Each entry's rows out of the shared block and checked, entries over the pool: at V = 129280
      // a row is 0.5 MB to copy and scan, 8 decode rows ~1 ms of one thread per step.
      std::vector<char>& finite = fs.finite;
      finite.assign(spans.size(), 1);
      auto hand_out = [&](int64_t i0, int64_t i1) {
        for (int64_t i = i0; i < i1; ++i) {
          const int64_t lo = first_want[static_cast<size_t>(i)], hi = first_want[static_cast<size_t>(i) + 1];
          if (hi == lo) continue;
          float* out = spans[static_cast<size_t>(i)].e->logits_out;
          const int64_t from = std::max(lo, direct);  // rows before it are in place already
          if (wanting != 1 && from < hi) std::copy_n(logits + from * V, (hi - from) * V, out + (from - lo) * V);
          finite[static_cast<size_t>(i)] = all_finite(out, (hi - lo) * V);
        }
      };
      if (wanting > 1 && pool_) pool_->parallel_for(static_cast<int64_t>(spans.size()), hand_out);
      else hand_out(0, static_cast<int64_t>(spans.size()));
      for (size_t i = 0; i < spans.size(); ++i) {
        // NaN/Inf logits would be sampled as garbage, or as token 0, and exit 0: refuse them.
        if (!finite[i])
          return Corruption(
              "the logits are not finite (NaN/Inf): " +
              (first_nonfinite[i] >= 0
                   ? "the hidden state first became non-finite in layer " + std::to_string(first_nonfinite[i])
                   : std::string("the last position's hidden state stayed finite through every layer, so the head or an "
                                 "earlier position produced them")) +
              "; the checkpoint's weights (or the input) are corrupt");
      }
    }
  }

  for (size_t i = 0; i < spans.size(); ++i) {
    KvCache& cache = *spans[i].e->cache;
    cache.n_past += static_cast<int64_t>(spans[i].e->tokens.size());
    if (hasher_) cache.engram_history.append(classes[i]);
  }
  return Status();
}

}  // namespace strata::model
