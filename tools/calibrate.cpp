#include "tools/calibrate.h"

#include <algorithm>
#include <map>
#include <nlohmann/json.hpp>

#include "io/file.h"
#include "model/observer.h"

namespace strata::tools {

namespace {

// Counts router picks per (layer, expert) as the forward pass reports them; linear inputs go on to
// `next` (the imatrix collector), if any.
class PickCounter final : public model::Observer {
 public:
  PickCounter(const model::ModelConfig& c, model::Observer* next) : n_layers_(c.n_layers), next_(next) {
    counts_.resize(static_cast<size_t>(c.n_layers));
    for (int l = 0; l < c.n_layers; ++l) counts_[static_cast<size_t>(l)].assign(static_cast<size_t>(c.n_experts(l)), 0);
  }
  void ids(std::string_view name, int layer, std::span<const int64_t> data, std::vector<int64_t>) override {
    if (name != "router_topk_idx" || layer < 0 || layer >= n_layers_) return;
    auto& c = counts_[static_cast<size_t>(layer)];
    for (int64_t e : data)
      if (e >= 0 && e < static_cast<int64_t>(c.size())) ++c[static_cast<size_t>(e)];
  }
  void linear_input(std::string_view weight, int layer, int expert, std::span<const float> x, int64_t cols) override {
    if (next_) next_->linear_input(weight, layer, expert, x, cols);
  }
  const std::vector<std::vector<uint64_t>>& counts() const { return counts_; }

 private:
  int n_layers_;
  model::Observer* next_;
  std::vector<std::vector<uint64_t>> counts_;
};

}  // namespace

double HotRanking::coverage(double share) const {
  if (picks == 0 || n_experts_total == 0) return 0;
  const auto top = static_cast<size_t>(share * static_cast<double>(n_experts_total) + 0.5);
  uint64_t sum = 0;
  for (size_t i = 0; i < std::min(top, experts.size()); ++i) sum += experts[i].count;
  return static_cast<double>(sum) / static_cast<double>(picks);
}

Result<HotRanking> calibrate(model::Model& m, model::Activations& act, std::span<const int32_t> ids, int64_t chunk,
                             const std::function<void(int64_t)>& progress, ImatrixCollector* imatrix,
                             const std::atomic<bool>* cancel) {
  if (ids.empty()) return InvalidArgument("calibrate: the text has no tokens");
  if (chunk <= 0) return InvalidArgument("calibrate: chunk must be positive");
  const model::ModelConfig& c = m.config();
  PickCounter counter(c, imatrix);
  model::KvCache cache = m.new_cache();
  model::LogitsRequest none;
  none.kind = model::LogitsRequest::Kind::kNone;
  size_t done = 0;
  for (size_t off = 0; off < ids.size(); off += static_cast<size_t>(chunk)) {
    if (cancel && cancel->load()) break;
    const size_t len = std::min(ids.size() - off, static_cast<size_t>(chunk));
    model::ForwardEntry e;
    e.cache = &cache;
    e.tokens = ids.subspan(off, len);
    e.logits = none;
    STRATA_RETURN_IF_ERROR(m.forward(model::ForwardRequest{std::span<model::ForwardEntry>(&e, 1), &counter}, act));
    if (imatrix) imatrix->end_chunk();
    done = off + len;
    if (progress) progress(static_cast<int64_t>(done));
  }
  HotRanking r;
  r.tokens = static_cast<int64_t>(done);
  r.n_layers = c.n_layers;
  for (int l = 0; l < c.n_layers; ++l) {
    const auto& cl = counter.counts()[static_cast<size_t>(l)];
    r.n_experts_total += static_cast<int64_t>(cl.size());
    for (size_t e = 0; e < cl.size(); ++e) {
      r.picks += cl[e];
      if (cl[e] > 0) r.experts.push_back(ExpertCount{l, static_cast<int>(e), cl[e]});
    }
  }
  std::stable_sort(r.experts.begin(), r.experts.end(),
                   [](const ExpertCount& a, const ExpertCount& b) { return a.count > b.count; });
  return r;
}

std::string hot_json(const HotRanking& r) {
  nlohmann::json j;
  j["format"] = "strata-hot-experts";
  j["version"] = 1;
  j["model"] = r.model;
  j["tokens"] = r.tokens;
  j["n_layers"] = r.n_layers;
  j["picks"] = r.picks;
  auto arr = nlohmann::json::array();
  for (const ExpertCount& e : r.experts) arr.push_back({e.layer, e.expert, e.count});
  j["experts"] = std::move(arr);
  // One entry per line keeps the file diffable and readable.
  std::string s = j.dump();
  std::string out;
  out.reserve(s.size() + r.experts.size() * 2);
  for (size_t i = 0; i < s.size(); ++i) {
    out += s[i];
    if (s[i] == ']' && i + 1 < s.size() && s[i + 1] == ',' && i > 0) out += '\n';
  }
  return out + "\n";
}

Result<std::vector<store::ExpertKey>> read_hot_file(const std::string& path) {
  STRATA_ASSIGN_OR_RETURN(std::string text, io::read_file_to_string(path, 256u << 20));
  auto j = nlohmann::json::parse(text, nullptr, false);
  if (j.is_discarded() || !j.is_object()) return InvalidArgument(path + ": not a JSON object (expected a hot file from strata calibrate)");
  auto fmt = j.find("format");
  if (fmt == j.end() || !fmt->is_string() || fmt->get<std::string>() != "strata-hot-experts")
    return InvalidArgument(path + ": field 'format' is not \"strata-hot-experts\" (expected a hot file from strata calibrate)");
  auto ex = j.find("experts");
  if (ex == j.end() || !ex->is_array()) return InvalidArgument(path + ": missing array field 'experts'");
  std::vector<store::ExpertKey> keys;
  for (size_t i = 0; i < ex->size(); ++i) {
    const auto& e = (*ex)[i];
    if (!e.is_array() || e.size() < 2 || !e[0].is_number_integer() || !e[1].is_number_integer() ||
        e[0].get<int64_t>() < 0 || e[1].get<int64_t>() < 0 || e[0].get<int64_t>() > (1 << 20) || e[1].get<int64_t>() > (1 << 20))
      return InvalidArgument(path + ": experts[" + std::to_string(i) + "] is not [layer, expert, count] with non-negative integers");
    keys.push_back(store::ExpertKey{static_cast<int>(e[0].get<int64_t>()), static_cast<int>(e[1].get<int64_t>())});
  }
  return keys;
}

}  // namespace strata::tools
