#include "model/kv_undo.h"

#include <algorithm>
#include <string>

namespace strata::model {

void KvUndoLog::set_depth(int64_t depth) {
  depth_ = depth;
  if (depth_ <= 0) records_.clear();
}

void KvUndoLog::record(const ModelConfig& c, const KvCache& cache, int64_t n) {
  if (depth_ <= 0) return;
  const int64_t win = c.window_size, s = cache.n_past;
  if (n > win) {  // the ring inside this forward cannot be restored: nothing before its end is reachable
    records_.clear();
    return;
  }
  const int64_t D = c.head_dim, wrow = window_row_bytes(D);
  Record r;
  r.start = s;
  r.n = r.stride = n;
  const auto L = static_cast<int64_t>(cache.layers.size());
  r.ring.resize(static_cast<size_t>(L * n * wrow));
  r.ring_pos.resize(static_cast<size_t>(L * n));
  for (int64_t l = 0; l < L; ++l) {
    const LayerKvCache& lc = cache.layers[static_cast<size_t>(l)];
    for (int64_t t = 0; t < n; ++t) {
      const int64_t slot = (s + t) % win;
      std::copy_n(lc.window.begin() + slot * wrow, wrow, r.ring.begin() + (l * n + t) * wrow);
      r.ring_pos[static_cast<size_t>(l * n + t)] = lc.window_pos[static_cast<size_t>(slot)];
    }
  }
  if (comp_index_.empty()) {
    head_dim_ = D;
    comp_index_.assign(static_cast<size_t>(c.n_layers), -1);
    for (int l = 0; l < c.n_layers; ++l)
      if (c.compress_ratio(l) > 1 && c.is_kv_source(l)) {
        comp_index_[static_cast<size_t>(l)] = static_cast<int>(comp_layers_.size());
        comp_layers_.push_back(l);
        comp_ratio_.push_back(c.compress_ratio(l));
      }
  }
  // Filled by save_compressor as the forward overwrites each slot.
  r.kv_state.resize(comp_layers_.size() * static_cast<size_t>(n * D));
  r.score_state.resize(r.kv_state.size());
  records_.push_back(std::move(r));
  // Keep the newest records that still reach `depth` positions back from this forward's end.
  const int64_t end = s + n;
  while (records_.size() > 1 && end - records_[1].start >= depth_) records_.pop_front();
}

void KvUndoLog::save_compressor(int layer, int64_t pos, const LayerKvCache& lc) {
  if (records_.empty() || layer < 0 || layer >= static_cast<int>(comp_index_.size())) return;
  Record& r = records_.back();
  const int i = comp_index_[static_cast<size_t>(layer)];
  if (i < 0 || pos < r.start || pos >= r.start + r.n || lc.kv_state.empty()) return;
  const int64_t D = head_dim_, slot = pos % comp_ratio_[static_cast<size_t>(i)];
  const size_t dst = (static_cast<size_t>(i) * static_cast<size_t>(r.stride) + static_cast<size_t>(pos - r.start)) *
                     static_cast<size_t>(D);
  std::copy_n(lc.kv_state.begin() + slot * D, D, r.kv_state.begin() + static_cast<std::ptrdiff_t>(dst));
  std::copy_n(lc.score_state.begin() + slot * D, D, r.score_state.begin() + static_cast<std::ptrdiff_t>(dst));
}

Status KvUndoLog::rewind(const ModelConfig& c, KvCache& cache, int64_t m) {
  if (m < 0 || m > cache.n_past)
    return InvalidArgument("rewind to " + std::to_string(m) + " tokens: the cache holds " +
                           std::to_string(cache.n_past));
  if (m == cache.n_past) return Status();
  if (m < floor(cache.n_past))
    return NotSupported("rewind to " + std::to_string(m) + " tokens: the undo log reaches back to " +
                        std::to_string(floor(cache.n_past)) + " only (the ring rows before are overwritten)");
  const int64_t win = c.window_size, D = c.head_dim, wrow = window_row_bytes(D);
  // Newest record first; inside one, newest position first: each slot ends with the bytes it held
  // before its first write at a position >= m.
  while (!records_.empty() && records_.back().start + records_.back().n > m) {
    Record& r = records_.back();
    const int64_t first = std::max<int64_t>(m, r.start) - r.start;  // first undone row of the record
    for (size_t l = 0; l < cache.layers.size(); ++l) {
      LayerKvCache& lc = cache.layers[l];
      const auto li = static_cast<int64_t>(l);
      for (int64_t t = r.n - 1; t >= first; --t) {
        const int64_t slot = (r.start + t) % win;
        std::copy_n(r.ring.begin() + (li * r.stride + t) * wrow, wrow, lc.window.begin() + slot * wrow);
        lc.window_pos[static_cast<size_t>(slot)] = r.ring_pos[static_cast<size_t>(li * r.stride + t)];
      }
    }
    for (size_t i = 0; i < comp_layers_.size(); ++i) {
      LayerKvCache& lc = cache.layers[static_cast<size_t>(comp_layers_[i])];
      if (lc.kv_state.empty()) continue;
      const int ratio = comp_ratio_[i];
      for (int64_t t = r.n - 1; t >= first; --t) {
        const int64_t slot = (r.start + t) % ratio;
        const size_t src = (i * static_cast<size_t>(r.stride) + static_cast<size_t>(t)) * static_cast<size_t>(D);
        std::copy_n(r.kv_state.begin() + static_cast<std::ptrdiff_t>(src), D, lc.kv_state.begin() + slot * D);
        std::copy_n(r.score_state.begin() + static_cast<std::ptrdiff_t>(src), D, lc.score_state.begin() + slot * D);
      }
    }
    if (first == 0) {
      records_.pop_back();
    } else {  // the record's rows before m stay undoable
      r.n = first;
      break;
    }
  }
  // The grown parts: rows of the groups complete at m, the compressor frontier, the position.
  for (int l = 0; l < c.n_layers; ++l) {
    LayerKvCache& lc = cache.layers[static_cast<size_t>(l)];
    const int ratio = c.compress_ratio(l);
    if (ratio <= 0 || !c.is_kv_source(l)) continue;
    const int64_t groups = m / ratio;
    if (lc.compressed.size() > groups) lc.compressed.truncate(groups);
    if (lc.index_keys.size() > groups) lc.index_keys.truncate(groups);
    if (lc.comp_pos > m) lc.comp_pos = m;
  }
  cache.n_past = m;
  return Status();
}

}  // namespace strata::model
