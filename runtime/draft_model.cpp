#include "runtime/draft_model.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>

#include "io/checkpoint.h"
#include "store/expert_catalog.h"
#include "store/shared_store.h"

namespace strata::runtime {

namespace {

double since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

}  // namespace

Status check_draft_compatible(const model::ModelConfig& target, const std::string& target_name,
                              const model::ModelConfig& draft, const std::string& draft_name,
                              std::string_view target_tokenizer, std::string_view draft_tokenizer) {
  auto mismatch = [&](const std::string& field, const std::string& a, const std::string& b) {
    return InvalidArgument("--draft-model " + draft_name + " does not match the target " + target_name + ": " +
                           field + " " + b + " (draft) vs " + a + " (target); the draft must be a variant of the "
                           "same checkpoint (strata quantize)");
  };
  auto eq = [&](const char* field, int64_t a, int64_t b) -> Status {
    return a == b ? Status() : mismatch(field, std::to_string(a), std::to_string(b));
  };
  STRATA_RETURN_IF_ERROR(eq("vocab_size", target.vocab_size, draft.vocab_size));
  STRATA_RETURN_IF_ERROR(eq("dim", target.dim, draft.dim));
  STRATA_RETURN_IF_ERROR(eq("moe_inter_dim", target.moe_inter_dim, draft.moe_inter_dim));
  STRATA_RETURN_IF_ERROR(eq("n_layers", target.n_layers, draft.n_layers));
  STRATA_RETURN_IF_ERROR(eq("n_heads", target.n_heads, draft.n_heads));
  STRATA_RETURN_IF_ERROR(eq("head_dim", target.head_dim, draft.head_dim));
  STRATA_RETURN_IF_ERROR(eq("n_routed_experts", target.n_routed_experts, draft.n_routed_experts));
  STRATA_RETURN_IF_ERROR(eq("n_activated_experts", target.n_activated_experts, draft.n_activated_experts));
  STRATA_RETURN_IF_ERROR(eq("window_size", target.window_size, draft.window_size));
  STRATA_RETURN_IF_ERROR(eq("max_position_embeddings", target.max_position_embeddings, draft.max_position_embeddings));
  STRATA_RETURN_IF_ERROR(eq("bos_token_id", target.bos_token_id, draft.bos_token_id));
  STRATA_RETURN_IF_ERROR(eq("eos_token_id", target.eos_token_id, draft.eos_token_id));
  if (target_tokenizer != draft_tokenizer)
    return mismatch("tokenizer.json", std::to_string(target_tokenizer.size()) + " bytes",
                    std::to_string(draft_tokenizer.size()) + " bytes, other contents");
  return Status();
}

Status check_draft_checkpoint(const std::string& target, const std::string& draft) {
  auto config = [](const std::string& dir) -> Result<model::ModelConfig> {
    STRATA_ASSIGN_OR_RETURN(std::string text, io::read_checkpoint_text(dir, "config.json", 16u << 20));
    return model::ModelConfig::parse(text, (std::filesystem::path(dir) / "config.json").string());
  };
  STRATA_ASSIGN_OR_RETURN(model::ModelConfig tc, config(target));
  STRATA_ASSIGN_OR_RETURN(model::ModelConfig dc, config(draft));
  STRATA_ASSIGN_OR_RETURN(std::string tt, io::read_checkpoint_text(target, "tokenizer.json", 256u << 20));
  STRATA_ASSIGN_OR_RETURN(std::string dt, io::read_checkpoint_text(draft, "tokenizer.json", 256u << 20));
  return check_draft_compatible(tc, target, dc, draft, tt, dt);
}

Result<DraftSharing> draft_sharing(const io::Checkpoint& target, const std::string& draft_path,
                                   const io::Checkpoint& draft, int n_layers) {
  DraftSharing sh;
  auto recorded = io::read_checkpoint_text(draft_path, "source.fingerprint", 64);
  if (!io::is_gguf_path(draft_path) || !recorded.ok()) {
    sh.why_not = draft_path + " records no source checkpoint (only a GGUF written by this strata quantize does)";
    return sh;
  }
  STRATA_ASSIGN_OR_RETURN(uint64_t fp, io::checkpoint_fingerprint(target));
  char hex[17];
  std::snprintf(hex, sizeof hex, "%016llx", static_cast<unsigned long long>(fp));
  if (*recorded != hex) {
    sh.why_not = draft_path + " was quantised from another checkpoint (source fingerprint " + *recorded + ", the target's " +
                 hex + ")";
    return sh;
  }
  for (const auto& [name, t] : draft.tensors()) {
    if (store::ExpertCatalog::is_expert_tensor(name)) continue;
    const io::TensorInfo* u = target.find(name);
    if (u == nullptr || u->dtype != t.dtype || !(u->shape == t.shape) || u->nbytes != t.nbytes) continue;
    sh.tensors.insert(name);
    sh.bytes += t.nbytes;
    if (store::ExpertCatalog::is_engram_table(name)) {
      // "layers.L.engram.embed.*" or "mtp.S.engram.embed.*"
      const bool mtp = name.rfind("mtp.", 0) == 0;
      const size_t a = name.find('.') + 1;
      const int idx = std::atoi(name.c_str() + a);
      sh.engram_layers.insert(mtp ? n_layers + idx : idx);
    }
  }
  // An Engram table is shared whole (codes and scales) or not at all.
  for (auto it = sh.engram_layers.begin(); it != sh.engram_layers.end();) {
    const std::string p = store::layer_prefix(*it, n_layers) + ".engram.embed.";
    const bool all = draft.find(p + "weight") != nullptr && sh.tensors.count(p + "weight") &&
                     (draft.find(p + "scale") == nullptr || sh.tensors.count(p + "scale"));
    if (all) {
      ++it;
      continue;
    }
    for (const char* part : {"weight", "scale"})
      if (sh.tensors.erase(p + part)) sh.bytes -= draft.find(p + part)->nbytes;
    it = sh.engram_layers.erase(it);
  }
  return sh;
}

Result<std::unique_ptr<model::Model>> load_draft_model(const std::string& draft_path, const model::Model& target,
                                                       const model::CompressedVocabMap& vocab,
                                                       const model::ModelOptions& opt, DraftSharing* sharing) {
  STRATA_ASSIGN_OR_RETURN(model::OpenedCheckpoint o, model::open_checkpoint(draft_path, opt.placement));
  STRATA_ASSIGN_OR_RETURN(DraftSharing sh, draft_sharing(target.store().checkpoint(), draft_path, o.store->checkpoint(),
                                                         o.config.n_layers));
  std::unique_ptr<store::WeightStore> s = std::move(o.store);
  if (!sh.tensors.empty())
    s = std::make_unique<store::SharedStore>(std::move(s), target.store(), sh.tensors, sh.engram_layers);
  if (sharing != nullptr) *sharing = sh;
  model::ModelOptions d = opt;
  d.expert_peers = nullptr;  // the draft computes its own experts
  return model::Model::create(o.config, std::move(s), vocab, d);
}

ModelDrafter::ModelDrafter(model::Model& draft, int max_drafts, int64_t chunk)
    : m_(draft), depth_(max_drafts + 1), chunk_(std::max<int64_t>(chunk, 1)), s_(draft), act_(draft.new_activations()) {
  s_.set_undo_depth(depth_);
}

Status ModelDrafter::sync(std::span<const int32_t> history) {
  const std::vector<int32_t>& have = s_.tokens();
  const auto n_hist = static_cast<int64_t>(history.size());
  int64_t common = std::min({synced_, n_hist, static_cast<int64_t>(have.size())});
  const int64_t lim = std::min(n_hist, static_cast<int64_t>(have.size()));
  while (common < lim && have[static_cast<size_t>(common)] == history[static_cast<size_t>(common)]) ++common;
  if (common < s_.n_past()) {
    if (common >= s_.rewind_floor()) {
      STRATA_RETURN_IF_ERROR(s_.rewind(common));
    } else {  // the undo log does not reach back: start over (a long catch-up cleared it)
      s_ = Session(m_);
      s_.set_undo_depth(depth_);
      common = 0;
    }
  }
  synced_ = common;
  if (n_hist > common) {
    AppendOptions o;
    o.chunk = chunk_;
    o.activations = &act_;
    o.kind = n_hist - common == 1 ? model::RowKind::kDecode : model::RowKind::kPrompt;
    STRATA_RETURN_IF_ERROR(s_.append(history.subspan(static_cast<size_t>(common)), o));
    synced_ = n_hist;
  }
  return Status();
}

Status ModelDrafter::step(int32_t tok) {
  AppendOptions o;
  o.chunk = chunk_;
  o.activations = &act_;
  o.kind = model::RowKind::kDecode;
  return s_.append(std::span<const int32_t>(&tok, 1), o);
}

Status ModelDrafter::propose(std::span<const int32_t> history, int32_t pending, int max, float min_conf,
                             std::vector<int32_t>* out) {
  out->clear();
  const auto t0 = std::chrono::steady_clock::now();
  Status st = sync(history);
  sync_s_ = since(t0);
  STRATA_RETURN_IF_ERROR(st);
  if (static_cast<int64_t>(history.size()) + 1 + max > m_.config().max_position_embeddings) return Status();
  int32_t tok = pending;
  for (int i = 0; i < max; ++i) {
    STRATA_RETURN_IF_ERROR(step(tok));
    if (i == 0) synced_ = s_.n_past();  // the pending token is the target's too
    const std::span<const float> l = s_.last_logits();
    if (l.empty()) break;
    const auto best = std::max_element(l.begin(), l.end());
    // Probability of the argmax under softmax at T = 1: 1 / sum(exp(l - max)).
    double sum = 0;
    for (float x : l) sum += std::exp(static_cast<double>(x) - static_cast<double>(*best));
    if (!(1.0 / sum >= static_cast<double>(min_conf))) break;
    tok = static_cast<int32_t>(best - l.begin());
    out->push_back(tok);
  }
  return Status();
}

}  // namespace strata::runtime
