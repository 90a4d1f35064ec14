#include "store/expert_catalog.h"

#include <algorithm>
#include <cstdlib>
#include <map>

#include "io/file.h"
#include "io/ggml_mxfp4.h"

namespace strata::store {

namespace {

// Parts in ExpertView order, as name suffixes after "experts.<e>.".
constexpr const char* kPartNames[kExpertParts] = {"w1.weight", "w1.scale", "w2.weight",
                                                  "w2.scale",  "w3.weight", "w3.scale"};

// Reading a gap of up to this many bytes beats issuing a second request: one O_DIRECT block, the
// read granularity anyway (the official layout's parts are back to back: gap 0). A larger gap
// would land in every slot of the cache.
constexpr uint64_t kMergeGap = 4 << 10;

uint64_t align_down(uint64_t v, uint64_t a) { return v / a * a; }
uint64_t align_up(uint64_t v, uint64_t a) { return (v + a - 1) / a * a; }

// Parses a non-negative decimal at s[pos..] up to `stop`; advances pos. -1 on failure.
int parse_int(const std::string& s, size_t* pos, char stop) {
  size_t p = *pos;
  if (p >= s.size() || s[p] < '0' || s[p] > '9') return -1;
  long v = 0;
  while (p < s.size() && s[p] >= '0' && s[p] <= '9') {
    v = v * 10 + (s[p] - '0');
    if (v > 1 << 24) return -1;
    ++p;
  }
  if (p >= s.size() || s[p] != stop) return -1;
  *pos = p + 1;
  return static_cast<int>(v);
}

// "layers.L." / "mtp.S." -> model layer id; pos after the prefix. -1 when neither.
int parse_layer(const std::string& s, int n_layers, size_t* pos) {
  if (s.rfind("layers.", 0) == 0) {
    *pos = 7;
    return parse_int(s, pos, '.');
  }
  if (s.rfind("mtp.", 0) == 0) {
    *pos = 4;
    const int st = parse_int(s, pos, '.');
    return st < 0 ? -1 : n_layers + st;
  }
  return -1;
}

struct ParsedExpert {
  int layer = -1, expert = -1, part = -1;
};

ParsedExpert parse_expert(const std::string& name, int n_layers) {
  ParsedExpert r;
  size_t pos = 0;
  const int layer = parse_layer(name, n_layers, &pos);
  if (layer < 0) return r;
  static const std::string kMid = "ffn.experts.";
  if (name.compare(pos, kMid.size(), kMid) != 0) return r;
  pos += kMid.size();
  const int e = parse_int(name, &pos, '.');
  if (e < 0) return r;
  const std::string rest = name.substr(pos);
  for (int p = 0; p < kExpertParts; ++p)
    if (rest == kPartNames[p]) r = ParsedExpert{layer, e, p};
  return r;
}

}  // namespace

Status unpack_expert_slot(const ExpertPlan& plan, uint8_t* slot) {
  if (!plan.ggml_mxfp4) return Status();
  for (size_t p = 0; p < kExpertParts; p += 2) {
    const io::TensorInfo* w = plan.tensors[p];
    if (w->packing != io::TensorInfo::Packing::kGgmlMxfp4Codes) continue;
    STRATA_RETURN_IF_ERROR(io::unpack_ggml_mxfp4(*w, *plan.tensors[p + 1], slot + plan.slot_offset[p], slot + plan.slot_offset[p + 1]));
  }
  return Status();
}

bool ExpertCatalog::is_expert_tensor(const std::string& name) { return parse_expert(name, 1 << 20).part >= 0; }

bool ExpertCatalog::is_engram_table(const std::string& name) {
  size_t pos = 0;
  if (parse_layer(name, 1 << 20, &pos) < 0) return false;
  const std::string rest = name.substr(pos);
  return rest == "engram.embed.weight" || rest == "engram.embed.scale";
}

int ExpertCatalog::id(int layer, int expert) const {
  if (layer < 0 || layer >= static_cast<int>(first_id_.size()) || first_id_[static_cast<size_t>(layer)] < 0) return -1;
  if (expert < 0 || expert >= n_experts_[static_cast<size_t>(layer)]) return -1;
  return first_id_[static_cast<size_t>(layer)] + expert;
}

int ExpertCatalog::n_experts(int layer) const {
  if (layer < 0 || layer >= static_cast<int>(n_experts_.size())) return 0;
  return n_experts_[static_cast<size_t>(layer)];
}

Result<ExpertCatalog> ExpertCatalog::build(const io::Checkpoint& ck, int n_layers, bool direct_io) {
  // (layer, expert) -> six tensors.
  std::map<std::pair<int, int>, std::array<const io::TensorInfo*, kExpertParts>> found;
  for (const auto& [name, t] : ck.tensors()) {
    const ParsedExpert p = parse_expert(name, n_layers);
    if (p.part < 0) continue;
    found[{p.layer, p.expert}][static_cast<size_t>(p.part)] = &t;
  }
  ExpertCatalog cat;
  std::map<int, int> count;  // layer -> max expert + 1
  for (const auto& [k, parts] : found) count[k.first] = std::max(count[k.first], k.second + 1);
  const int max_layer = count.empty() ? -1 : count.rbegin()->first;
  cat.first_id_.assign(static_cast<size_t>(max_layer + 1), -1);
  cat.n_experts_.assign(static_cast<size_t>(max_layer + 1), 0);
  const uint64_t align = direct_io ? io::kDirectIoAlign : 64;
  for (const auto& [layer, n] : count) {
    cat.layers_.push_back(layer);
    cat.first_id_[static_cast<size_t>(layer)] = static_cast<int>(cat.plans_.size());
    cat.n_experts_[static_cast<size_t>(layer)] = n;
    const std::string prefix = layer < n_layers ? "layers." + std::to_string(layer) : "mtp." + std::to_string(layer - n_layers);
    for (int e = 0; e < n; ++e) {
      ExpertPlan plan;
      plan.key = ExpertKey{layer, e};
      auto it = found.find({layer, e});
      for (int p = 0; p < kExpertParts; ++p) {
        const io::TensorInfo* t = it == found.end() ? nullptr : it->second[static_cast<size_t>(p)];
        if (!t)
          return NotFound("tensor '" + prefix + ".ffn.experts." + std::to_string(e) + "." + kPartNames[p] +
                          "' is missing from the checkpoint (layer has " + std::to_string(n) + " routed experts)");
        plan.tensors[static_cast<size_t>(p)] = t;
        plan.tensor_bytes += t->nbytes;
        if (t->packing != io::TensorInfo::Packing::kPlain) plan.ggml_mxfp4 = true;
      }
      // A ggml MXFP4 matrix is unpacked from both its halves: each weight must come with its scale.
      for (int p = 0; plan.ggml_mxfp4 && p < kExpertParts; p += 2) {
        const io::TensorInfo* w = plan.tensors[static_cast<size_t>(p)];
        const io::TensorInfo* sc = plan.tensors[static_cast<size_t>(p) + 1];
        if ((w->packing == io::TensorInfo::Packing::kGgmlMxfp4Codes) != (sc->packing == io::TensorInfo::Packing::kGgmlMxfp4Scales) ||
            (w->packing != io::TensorInfo::Packing::kPlain && w->packing != io::TensorInfo::Packing::kGgmlMxfp4Codes))
          return InvalidArgument("tensors '" + w->name + "' and '" + sc->name +
                                 "': one is half of a ggml MXFP4 slice and the other is not");
      }
      // Merge the parts into spans, in file order.
      std::array<int, kExpertParts> order{0, 1, 2, 3, 4, 5};
      std::sort(order.begin(), order.end(), [&](int a, int b) {
        const auto* x = plan.tensors[static_cast<size_t>(a)];
        const auto* y = plan.tensors[static_cast<size_t>(b)];
        return x->shard != y->shard ? x->shard < y->shard : x->offset < y->offset;
      });
      struct Raw { int shard; uint64_t begin, end; std::vector<int> parts; };
      std::vector<Raw> raw;
      for (int p : order) {
        const io::TensorInfo* t = plan.tensors[static_cast<size_t>(p)];
        // An empty part (a GGUF block-format expert's placeholder .scale, io/gguf_checkpoint.cpp)
        // has nothing to read: no span, and its slot offset stays 0 (a zero-byte view).
        if (t->nbytes == 0) continue;
        // A GGUF's stacked parts of one expert are separated by the other experts' bytes: merged
        // only where that gap is small.
        if (!raw.empty() && raw.back().shard == t->shard && t->offset >= raw.back().begin &&
            t->offset <= raw.back().end + kMergeGap) {
          raw.back().end = std::max(raw.back().end, t->offset + t->nbytes);
          raw.back().parts.push_back(p);
        } else {
          raw.push_back(Raw{t->shard, t->offset, t->offset + t->nbytes, {p}});
        }
      }
      uint64_t slot_pos = 0;
      for (const Raw& r : raw) {
        ExpertSpan s;
        s.shard = r.shard;
        s.file_offset = direct_io ? align_down(r.begin, io::kDirectIoAlign) : r.begin;
        const uint64_t end = direct_io ? align_up(r.end, io::kDirectIoAlign) : r.end;
        s.length = end - s.file_offset;
        s.needed = r.end - s.file_offset;
        s.slot_offset = align_up(slot_pos, align);
        for (int p : r.parts)
          plan.slot_offset[static_cast<size_t>(p)] = s.slot_offset + (plan.tensors[static_cast<size_t>(p)]->offset - s.file_offset);
        slot_pos = s.slot_offset + s.length;
        plan.read_bytes += s.length;
        plan.spans.push_back(s);
      }
      plan.slot_bytes = slot_pos;
      cat.slot_bytes_ = std::max(cat.slot_bytes_, align_up(slot_pos, io::kDirectIoAlign));
      cat.total_tensor_bytes_ += plan.tensor_bytes;
      cat.plans_.push_back(std::move(plan));
    }
  }
  return cat;
}

}  // namespace strata::store
