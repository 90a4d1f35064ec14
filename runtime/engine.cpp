#include "runtime/engine.h"

#include <algorithm>
#include <cmath>

namespace strata::runtime {

namespace {

double seconds(std::chrono::steady_clock::duration d) { return std::chrono::duration<double>(d).count(); }

}  // namespace

Status EngineOptions::validate() const {
  if (prefill_chunk < 1) return InvalidArgument("prefill chunk: must be >= 1, got " + std::to_string(prefill_chunk));
  if (batch_tokens < 1) return InvalidArgument("--batch-tokens: must be >= 1, got " + std::to_string(batch_tokens));
  if (max_context < 0) return InvalidArgument("context limit: must be >= 0 (0 = the model's)");
  return Status();
}

Status SequenceOptions::validate() const {
  if (max_new_tokens < 0) return InvalidArgument("max new tokens (-n) must be >= 0");
  if (max_context < 0) return InvalidArgument("context limit: must be >= 0 (0 = the engine's)");
  if (!(std::isfinite(presence_penalty) && presence_penalty >= -2 && presence_penalty <= 2))
    return InvalidArgument("presence_penalty " + std::to_string(presence_penalty) + " must be in [-2, 2]");
  if (!(std::isfinite(frequency_penalty) && frequency_penalty >= -2 && frequency_penalty <= 2))
    return InvalidArgument("frequency_penalty " + std::to_string(frequency_penalty) + " must be in [-2, 2]");
  for (const auto& [id, bias] : logit_bias)
    if (id < 0 || !(std::isfinite(bias) && bias >= -100 && bias <= 100))
      return InvalidArgument("logit_bias: id " + std::to_string(id) + " bias " + std::to_string(bias) +
                             " (ids >= 0, biases in [-100, 100])");
  for (const std::string& s : stop_strings)
    if (!s.empty() && !token_text) return InvalidArgument("stop strings need a token_text hook");
  if (logprobs < -1 || logprobs > kMaxTopLogprobs)
    return InvalidArgument("top logprobs " + std::to_string(logprobs) + " must be in 0.." +
                           std::to_string(kMaxTopLogprobs) + " (-1 = off)");
  STRATA_RETURN_IF_ERROR(spec.validate());
  return sampler.validate();
}

Engine::Engine(model::Model& m, const EngineOptions& o) : m_(m), o_(o), act_(m.new_activations()) {
  const int64_t max_pos = m.config().max_position_embeddings;
  ctx_ = o.max_context > 0 ? std::min(o.max_context, max_pos) : max_pos;
}

Status Engine::set_options(const EngineOptions& o) {
  STRATA_RETURN_IF_ERROR(o.validate());
  if (!seqs_.empty()) return InvalidArgument("engine: options change while sequences run");
  o_ = o;
  const int64_t max_pos = m_.config().max_position_embeddings;
  ctx_ = o.max_context > 0 ? std::min(o.max_context, max_pos) : max_pos;
  return Status();
}

Result<Engine::SequenceId> Engine::add(Session* session, std::vector<int32_t> prompt, SequenceOptions o,
                                       SequenceCallbacks cb) {
  STRATA_RETURN_IF_ERROR(o_.validate());
  STRATA_RETURN_IF_ERROR(o.validate());
  if (session == nullptr) return InvalidArgument("engine: no session");
  if (&session->model() != &m_) return InvalidArgument("engine: the session belongs to another model");
  for (const Seq& s : seqs_)
    if (s.session == session) return InvalidArgument("engine: the session already runs a sequence");
  if (!session->valid()) return InvalidArgument("session is unusable after an earlier model failure");
  if (prompt.empty() && session->last_logits().empty()) return InvalidArgument("empty prompt: nothing to run");
  const int64_t limit = o.max_context > 0 ? std::min(o.max_context, ctx_) : ctx_;
  const int64_t need = session->n_past() + static_cast<int64_t>(prompt.size());
  if (need > limit)
    return ResourceExhausted("prompt of " + std::to_string(prompt.size()) + " tokens (context " + std::to_string(need) +
                             ") exceeds the context limit of " + std::to_string(limit) + " tokens");
  if (!prompt.empty()) STRATA_RETURN_IF_ERROR(session->check_append(prompt, limit));
  if (o.spec.mode == SpecMode::kDSpark && !m_.has_dspark() && !o.spec.test_drafts)
    return NotSupported("--spec dspark: this checkpoint has no DSpark draft stages");
  if (o.spec.mode == SpecMode::kDraft && !o.spec.test_drafts) {
    if (o.spec.draft_model == nullptr) return InvalidArgument("--spec draft: no draft model (--draft-model)");
    STRATA_RETURN_IF_ERROR(check_draft_compatible(m_.config(), "model", o.spec.draft_model->config(), "draft"));
  }

  Seq s;
  s.id = next_id_++;
  s.session = session;
  s.prompt = std::move(prompt);
  s.prompt_start = session->n_past();
  s.limit = limit;
  s.o = std::move(o);
  s.cb = std::move(cb);
  s.state = s.prompt.empty() ? State::kSample : State::kPrefill;
  s.sampler.emplace(s.o.sampler);
  if (!s.o.stop_strings.empty()) s.stops.emplace(s.o.stop_strings, s.o.token_text);
  std::sort(s.o.snapshot_at.begin(), s.o.snapshot_at.end());
  s.stats.prompt_tokens = static_cast<int64_t>(s.prompt.size());
  if (s.o.spec.mode == SpecMode::kDSpark) {
    s.spec_on = true;
    s.stats.spec.active = true;
    s.guard.emplace(s.o.spec.guard);
    s.drafter.emplace(m_);
    // The depth a sequence needs: the larger of what verification rewinds and what the session's
    // owner keeps (a server slot's undo log for reuse by rewind), restored at the end.
    s.undo_before = session->undo_depth();
    session->set_undo_depth(
        std::max(s.undo_before, std::min<int64_t>(s.o.spec.max_drafts, m_.config().dspark_block_size) + 1));
  } else if (s.o.spec.mode == SpecMode::kDraft) {
    s.spec_on = true;
    s.stats.spec.active = true;
    s.guard.emplace(s.o.spec.guard);
    if (s.o.spec.draft_model != nullptr && !s.o.spec.test_drafts)
      s.model_drafter = std::make_unique<ModelDrafter>(*s.o.spec.draft_model, s.o.spec.max_drafts, o_.prefill_chunk);
    s.undo_before = session->undo_depth();
    session->set_undo_depth(std::max<int64_t>(s.undo_before, s.o.spec.max_drafts + 1));
  }
  s.t_add = clock::now();
  seqs_.push_back(std::move(s));
  return seqs_.back().id;
}

int64_t Engine::chunk_end(const Seq& s) const {
  const int64_t pos = s.prompt_start + s.done, end = s.prompt_start + static_cast<int64_t>(s.prompt.size());
  int64_t e = prefill_chunk_end(pos, s.prompt_start, end, o_.prefill_chunk, s.o.prefill_mode, m_.config().window_size);
  if (s.o.prefill_mode == PrefillMode::kExact) {
    for (int64_t at : s.o.snapshot_at)
      if (at > pos && at < e) {
        e = at;
        break;
      }
    // A session keeping undo records (a server slot reused by rewind, speculation) must be able to
    // rewind into this prompt's last `depth` positions; a forward longer than the window leaves no
    // records (model/kv_undo.h), so those positions run in forwards of at most window_size tokens.
    // Exact prefill: chunk cuts do not change a prompt row's bits (model/forward_request.h).
    const int64_t depth = s.session->undo_depth(), win = m_.config().window_size;
    const int64_t zone = std::max(pos, end - depth);
    if (depth > 0 && e > zone && e - pos > win) e = pos < zone ? zone : pos + win;
  }
  return e;
}

Engine::SeqIt Engine::finish(SeqIt it, FinishReason r, const Status& st) {
  Seq& s = *it;
  s.stats.reason = r;
  if (s.spec_on) {
    s.stats.spec.pauses = s.guard->pauses();
    s.stats.spec.probes = s.guard->probes();
    s.session->set_undo_depth(s.undo_before);
  }
  s.stats.prefilled_tokens = s.done;
  s.stats.generated_tokens = static_cast<int64_t>(s.generated.size());
  if (!s.generated.empty()) s.stats.decode_s = seconds(clock::now() - s.t_first);
  auto cb = std::move(s.cb.on_finish);
  const SequenceStats stats = s.stats;
  it = seqs_.erase(it);
  if (cb) cb(r, st, stats);
  return it;
}

void Engine::cancel_all(const Status& why) {
  for (auto it = seqs_.begin(); it != seqs_.end();) it = finish(it, FinishReason::kCancelled, why);
}

Engine::Handout Engine::hand_out(Seq& s, std::span<const float> logits, int64_t n_past, int32_t draft) {
  Handout h;
  std::span<const float> dist = logits;  // what the sampler draws from
  const bool penalized = s.o.presence_penalty != 0 || s.o.frequency_penalty != 0;
  if (penalized && (!s.o.use_script || s.o.logprobs >= 0)) {
    apply_penalties(dist, s.generated, s.o.presence_penalty, s.o.frequency_penalty, &penalized_);
    dist = penalized_;
  }
  if (!s.o.logit_bias.empty() && !s.o.use_script) {
    biased_.assign(dist.begin(), dist.end());
    for (const auto& [id, bias] : s.o.logit_bias)
      if (static_cast<size_t>(id) < biased_.size()) biased_[static_cast<size_t>(id)] += bias;
    dist = biased_;
  }
  const bool constrained = s.o.constraint && !s.o.use_script;
  if (constrained) {
    masked_.assign(dist.begin(), dist.end());
    if (s.o.constraint->apply(masked_) > 0) dist = masked_;
  }
  if (s.o.use_script) {  // TEST ONLY
    const size_t i = s.generated.size();
    h.tok = i < s.o.scripted.size() ? s.o.scripted[i] : s.o.script_end_id;
  } else if (draft >= 0) {
    // A draft to verify: the rejection rule (Sampler::sample_against), distributed as sample().
    h.tok = s.sampler->sample_against(dist, draft);
  } else {
    h.tok = s.sampler->sample(dist);
  }
  const int32_t tok = h.tok;
  s.generated.push_back(tok);
  if (constrained) s.o.constraint->accept(tok);
  if (s.o.logprobs >= 0 && s.cb.on_logprob && tok >= 0 && static_cast<size_t>(tok) < dist.size()) {
    token_logprob(dist, s.o.sampler.temperature, tok, s.o.logprobs, &logprob_);
    s.cb.on_logprob(logprob_);
  }
  if (s.generated.size() == 1) {
    s.t_first = clock::now();
    s.stats.ttft_s = seconds(s.t_first - s.t_add);
  }
  const auto n = static_cast<int64_t>(s.generated.size());
  const bool is_stop = std::find(s.o.stop_ids.begin(), s.o.stop_ids.end(), tok) != s.o.stop_ids.end();
  // The cancel flag is read before the token is handed out: the token just emitted is the last one.
  const bool cancelled = s.o.cancel != nullptr && s.o.cancel->load();
  const bool go_on = (!s.cb.on_token || s.cb.on_token(tok)) && !cancelled;
  const bool stop_string = s.stops && s.stops->push(tok);
  h.at_limit = n_past + 1 > s.limit;
  h.go_on = go_on && !is_stop && !stop_string && n < s.o.max_new_tokens && !h.at_limit;
  if (h.go_on) return h;
  h.reason = FinishReason::kLength;
  if (cancelled) {
    h.reason = FinishReason::kCancelled;
  } else if (is_stop) {
    h.reason = FinishReason::kStopId;
  } else if (!go_on || stop_string) {
    h.reason = FinishReason::kStopped;
  } else if (h.at_limit && n < s.o.max_new_tokens) {
    h.reason = FinishReason::kContext;
  }
  return h;
}

void Engine::conclude(SeqIt it, const Handout& h) {
  Seq& s = *it;
  if (h.go_on) {
    s.pending = h.tok;
    s.state = State::kDecode;
    return;
  }
  if (s.o.consume_last && !h.at_limit) {
    s.pending = h.tok;
    s.end_reason = h.reason;
    s.state = State::kConsume;
    return;
  }
  finish(it, h.reason, Status());
}

void Engine::emit(SeqIt it) {
  Seq& s = *it;
  conclude(it, hand_out(s, s.session->last_logits(), s.session->n_past()));
}

void Engine::accept(SeqIt it) {
  Seq& s = *it;
  const auto n = static_cast<int64_t>(s.verify.size());
  const int64_t V = m_.config().vocab_size, p = s.session->n_past() - n;  // p: position of the pending token
  auto row = [&](int64_t i) {
    return std::span<const float>(s.rows).subspan(static_cast<size_t>(i * V), static_cast<size_t>(V));
  };
  // Row i holds the logits after position p + i: pick from it as a plain step would (greedy: the
  // argmax; T > 0: the rejection rule against the draft, Sampler::sample_against); the draft
  // verify[i + 1] is accepted when the pick equals it.
  int64_t i = 0;
  Handout h;
  for (;; ++i) {
    h = hand_out(s, row(i), p + i + 1, i + 1 < n ? s.verify[static_cast<size_t>(i + 1)] : -1);
    if (!h.go_on || i + 1 >= n || h.tok != s.verify[static_cast<size_t>(i + 1)]) break;
  }
  const bool next_ran = i + 1 < n && h.tok == s.verify[static_cast<size_t>(i + 1)];  // the pick's position already ran
  SpecStats& sp = s.stats.spec;
  ++sp.cycles;
  sp.drafted += n - 1;
  sp.accepted += i + (next_ran ? 1 : 0);
  sp.cycle_tokens += i + 1;
  s.guard->cycle(s.draft_s + s.verify_s, i + 1);  // a verification runs only alone (draft())
  // The session keeps p .. p + i (the pending token and the accepted drafts); when the sequence ends
  // with consume_last and its last token already ran, that position too (what the consume step
  // would compute: decode rows equal one-token steps).
  const bool consumed = !h.go_on && s.o.consume_last && !h.at_limit && next_ran;
  const int64_t keep = p + i + 1 + (consumed ? 1 : 0);
  Status st = s.session->rewind(keep, row(keep - p - 1));
  if (st.ok() && s.drafter && !s.feats.empty()) s.drafter->add(s.feats.data(), keep - p, keep);
  if (!st.ok()) {
    finish(it, FinishReason::kError, st);
    return;
  }
  if (consumed) {
    finish(it, h.reason, Status());
    return;
  }
  conclude(it, h);
}

void Engine::add_features(Seq& s) {
  if (!s.drafter) return;  // not DSpark
  const int64_t w = s.drafter->row_floats();
  if (w > 0 && !s.feats.empty())
    s.drafter->add(s.feats.data(), static_cast<int64_t>(s.feats.size()) / w, s.session->n_past());
}

void Engine::draft(Seq& s) {
  s.verify.clear();
  s.drafted = false;
  s.draft_s = 0;
  // Alone in the engine (a batch decodes plainly), greedy, and the guard agrees.
  if (!s.spec_on || s.state != State::kDecode || seqs_.size() != 1 || !s.guard->want_draft()) return;
  const int64_t n_past = s.session->n_past();
  // Every row hands out at most one token: no more drafts than the tokens left after the pending
  // one, nor positions past the context limit.
  const int64_t room = std::min<int64_t>(s.limit - n_past - 1,
                                         s.o.max_new_tokens - static_cast<int64_t>(s.generated.size()) - 1);
  const int max = static_cast<int>(std::min<int64_t>(s.o.spec.max_drafts, room));
  if (max < 1) return;
  const bool test = static_cast<bool>(s.o.spec.test_drafts);
  if (!test && s.drafter && s.drafter->last() != n_past - 1) return;  // no features of the last position yet
  const auto t0 = clock::now();
  Status ds;
  std::vector<int32_t>* d = &s.drafts;
  if (test) {
    s.drafts = s.o.spec.test_drafts(s.generated, max);
  } else if (s.model_drafter) {
    ds = s.model_drafter->propose(s.session->tokens(), s.pending, max, s.o.spec.min_conf, &s.drafts);
  } else {
    Result<std::vector<int32_t>> r = s.drafter->propose(s.pending, max, s.o.spec.min_conf, act_);
    if (r.ok()) s.drafts = std::move(*r);
    else ds = r.status();
  }
  if (static_cast<int>(d->size()) > max) d->resize(static_cast<size_t>(max));
  const double all_s = seconds(clock::now() - t0);
  // The guard judges drafting, not a draft model's catch-up after a pause (a prefill of the tokens
  // it missed, which grows with the pause): that is in the statistics' draft_s only.
  s.draft_s = s.model_drafter ? std::max(0.0, all_s - s.model_drafter->last_sync_s()) : all_s;
  s.drafted = true;
  s.stats.spec.draft_s += all_s;
  if (!ds.ok()) {  // a store failure in a drafter: decode plainly from now on (the forward reports its own)
    s.spec_on = false;
    s.session->set_undo_depth(s.undo_before);
    return;
  }
  if (d->empty()) {
    ++s.stats.spec.empty_drafts;
    return;
  }
  s.verify.reserve(d->size() + 1);
  s.verify.push_back(s.pending);
  s.verify.insert(s.verify.end(), d->begin(), d->end());
  s.rows.resize(s.verify.size() * static_cast<size_t>(m_.config().vocab_size));
}

void Engine::sample_ready() {
  for (auto it = seqs_.begin(); it != seqs_.end();) {
    auto next = std::next(it);
    if (it->state == State::kSample) {
      if (it->o.max_new_tokens == 0) {
        finish(it, FinishReason::kLength, Status());
      } else {
        emit(it);  // may erase `it`
      }
    } else if (it->state == State::kVerify) {
      accept(it);  // may erase `it`
    }
    it = next;
  }
}

void Engine::drop_left() {
  for (auto it = seqs_.begin(); it != seqs_.end();) {
    if (it->cb.gone && it->cb.gone()) {
      it = finish(it, FinishReason::kCancelled, Cancelled("the client went away"));
    } else if (it->state == State::kPrefill && it->o.cancel && it->o.cancel->load()) {
      it = finish(it, FinishReason::kCancelled,
                  Cancelled("cancelled after " + std::to_string(it->done) + " prompt tokens"));
    } else {
      ++it;
    }
  }
}

void Engine::gather(Batch* b, StepStats* st) {
  // A replay prompt needs a request of one entry: the oldest prompt, if it replays, runs alone.
  Seq* oldest_prompt = nullptr;
  for (Seq& s : seqs_)
    if (s.state == State::kPrefill) {
      oldest_prompt = &s;
      break;
    }
  const bool replay_alone = oldest_prompt && oldest_prompt->o.prefill_mode == PrefillMode::kReplay;
  auto join = [&](Seq& s, model::ForwardEntry e, int64_t len) {
    b->entries.push_back(e);
    b->members.push_back(&s);
    b->lens.push_back(len);
    st->tokens += len;
  };
  // Every decode token first: decoding streams never wait for a prompt.
  if (!replay_alone)
    for (Seq& s : seqs_)
      if (s.state == State::kDecode || s.state == State::kConsume) {
        draft(s);
        if (!s.verify.empty()) {
          std::vector<float>* feats = s.drafter && m_.has_dspark() ? &s.feats : nullptr;
          join(s, s.session->begin_verify(s.verify, s.rows.data(), feats), static_cast<int64_t>(s.verify.size()));
        } else {
          model::ForwardEntry e =
              s.session->begin_forward(std::span<const int32_t>(&s.pending, 1), model::RowKind::kDecode, true);
          // Keeps the DSpark drafter's features current.
          if (s.spec_on && s.drafter && m_.has_dspark()) e.dspark_features = &s.feats;
          join(s, e, 1);
        }
        ++st->decode_entries;
      }
  // Then prompt chunks, the prompt with the fewest tokens left first (a short request is not kept
  // waiting behind a long prompt's whole prefill), each cut to what is left of the budget; the
  // first always joins whole. Cutting is exact: a prompt row's bits do not depend on its chunk
  // (model/forward_request.h); later chunks still end at absolute multiples of the prefill chunk,
  // where snapshots are taken.
  const int64_t window = m_.config().window_size;
  std::vector<Seq*> prompts;
  for (Seq& s : seqs_)
    if (s.state == State::kPrefill) prompts.push_back(&s);
  std::stable_sort(prompts.begin(), prompts.end(), [](const Seq* a, const Seq* b) {
    return static_cast<int64_t>(a->prompt.size()) - a->done < static_cast<int64_t>(b->prompt.size()) - b->done;
  });
  if (replay_alone) prompts = {oldest_prompt};
  bool first_chunk = true;
  for (Seq* sp : prompts) {
    Seq& s = *sp;
    const bool replay = s.o.prefill_mode == PrefillMode::kReplay;
    if (replay && &s != oldest_prompt) continue;
    const int64_t pos = s.prompt_start + s.done, end = s.prompt_start + static_cast<int64_t>(s.prompt.size());
    int64_t e = chunk_end(s);
    if (!first_chunk && !replay) e = std::min(e, pos + (o_.batch_tokens - st->tokens));
    const int64_t len = e - pos;
    if (len <= 0) continue;
    const bool last = e == end;
    // Replay: non-final chunks stop after the first decoder layer's compressor; the last chunk runs
    // the decoder over its last window_size tokens (runtime/session.h).
    const int64_t tail = replay ? (last ? std::min(len, window) : 0) : -1;
    const auto chunk =
        std::span<const int32_t>(s.prompt).subspan(static_cast<size_t>(s.done), static_cast<size_t>(len));
    model::ForwardEntry entry = s.session->begin_forward(chunk, model::RowKind::kPrompt, last, tail);
    if (s.spec_on && s.drafter && m_.has_dspark()) entry.dspark_features = &s.feats;
    join(s, entry, len);
    st->prompt_tokens += len;
    first_chunk = false;
    if (replay) break;
  }
  st->entries = static_cast<int>(b->entries.size());
}

void Engine::settle(const Batch& b, const StepStats& st) {
  for (Seq* s : b.members) s->session->end_forward(st.status);
  // By id: finish() erases list nodes (and its callback may end nothing else, but stay safe).
  std::vector<SequenceId> ids;
  for (Seq* s : b.members) ids.push_back(s->id);
  for (size_t i = 0; i < ids.size(); ++i) {
    auto it = std::find_if(seqs_.begin(), seqs_.end(), [&](const Seq& x) { return x.id == ids[i]; });
    if (it == seqs_.end()) continue;
    Seq& s = *it;
    if (!st.status.ok()) {
      finish(it, FinishReason::kError, st.status);
    } else if (s.state == State::kPrefill) {
      s.done += b.lens[i];
      s.stats.prefill_s += st.forward_s;
      const int64_t total = static_cast<int64_t>(s.prompt.size());
      const bool last = s.done == total;
      report_progress(s.o.prefill_progress, ProgressEvent{"prefill", "tokens", static_cast<uint64_t>(s.done),
                                                          static_cast<uint64_t>(total), "", last});
      const int64_t pos = s.session->n_past();
      const bool at_snapshot = std::binary_search(s.o.snapshot_at.begin(), s.o.snapshot_at.end(), pos);
      if (s.cb.on_snapshot && (last || at_snapshot || pos % o_.prefill_chunk == 0)) s.cb.on_snapshot(*s.session);
      if (s.spec_on) add_features(s);
      if (last && s.spec_on && s.model_drafter) {
        // The draft model prefills the prompt now (timed as prefill), not in the first cycle.
        const auto t0 = clock::now();
        const Status ds = s.model_drafter->sync(s.session->tokens());
        s.stats.prefill_s += seconds(clock::now() - t0);
        if (!ds.ok()) {  // decode plainly (a draft store failure)
          s.spec_on = false;
          s.session->set_undo_depth(s.undo_before);
        }
      }
      if (last) s.state = State::kSample;
    } else if (s.state == State::kConsume) {
      finish(it, s.end_reason, Status());
    } else if (!s.verify.empty()) {
      s.stats.spec.verify_s += st.forward_s;
      s.verify_s = st.forward_s;
      s.state = State::kVerify;
    } else {
      if (s.spec_on) {
        add_features(s);
        ++s.stats.spec.plain_steps;
        s.stats.spec.plain_s += st.forward_s;
        // Timed only alone: in a batch the forward's time is the batch's.
        if (b.members.size() == 1) {
          if (s.drafted) s.guard->cycle(s.draft_s + st.forward_s, 1);  // drafted nothing: its time was spent
          else s.guard->plain_step(st.forward_s);
        }
      }
      s.state = State::kSample;
    }
  }
}

StepStats Engine::step() {
  StepStats st;
  drop_left();
  sample_ready();  // sequences added with logits (a restored session)
  Batch b;
  gather(&b, &st);
  if (b.entries.empty()) return st;
  const auto t0 = clock::now();
  st.status = m_.forward(model::ForwardRequest{std::span<model::ForwardEntry>(b.entries)}, act_);
  st.forward_s = seconds(clock::now() - t0);
  settle(b, st);
  sample_ready();
  return st;
}

}  // namespace strata::runtime
