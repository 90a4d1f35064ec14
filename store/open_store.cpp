#include "store/open_store.h"

#include <algorithm>
#include <set>

#include "io/file.h"
#include "store/engram_rows.h"
#include "store/expert_catalog.h"
#include "store/mmap_store.h"
#include "store/resident_store.h"
#include "store/system_memory.h"
#include "store/tiered_store.h"

namespace strata::store {

namespace {

uint64_t engram_table_bytes(const io::Checkpoint& ck) {
  uint64_t n = 0;
  for (const auto& [name, t] : ck.tensors())
    if (ExpertCatalog::is_engram_table(name)) n += t.nbytes;
  return n;
}

// Resolves ExpertIo::kAuto: O_DIRECT only when every shard takes it (one shard on a file system
// without it would fail every read of its experts).
// kDirect checks the same up front, so a file system that takes the O_DIRECT open but refuses the
// read fails at load with its name rather than at the first expert read.
Result<bool> use_direct_io(const io::Checkpoint& ck, ExpertIo mode) {
  if (mode == ExpertIo::kBuffered) return false;
  for (int i = 0; i < ck.n_shards(); ++i) {
    const std::string& path = ck.shard(i).path();
    STRATA_ASSIGN_OR_RETURN(bool ok, io::direct_read_works(path));
    if (!ok && mode == ExpertIo::kDirect)
      return NotSupported(path + ": the file system refuses O_DIRECT reads (--direct-io); use --buffered-io");
    if (!ok) return false;
  }
  return true;
}

}  // namespace

Result<std::unique_ptr<WeightStore>> open_store(std::unique_ptr<io::Checkpoint> ck, const StoreShape& shape,
                                                const PlacementOptions& o) {
  STRATA_RETURN_IF_ERROR(o.validate());
  // The budget: explicit, or measured.
  uint64_t budget = o.ram_budget_bytes;
  std::string note = " (--ram-budget)";
  if (budget == 0) {
    STRATA_ASSIGN_OR_RETURN(uint64_t avail, available_memory_bytes());
    const uint64_t margin = std::max<uint64_t>(o.margin_min_bytes, static_cast<uint64_t>(o.margin_fraction * double(avail)));
    budget = avail > margin ? avail - margin : 0;
    note = " (available " + format_bytes(avail) + " - margin " + format_bytes(margin) + ")";
  }
  const uint64_t total = ck->total_bytes();
  LoadMode mode = o.mode;
  if (mode == LoadMode::kAuto) mode = total <= budget ? LoadMode::kResident : LoadMode::kStream;

  if (mode == LoadMode::kResident) {
    if (total > budget)
      return ResourceExhausted(ck->dir() + ": the checkpoint holds " + format_bytes(total) +
                               " of tensors, more than the RAM budget of " + format_bytes(budget) + note +
                               "; run it with --load-mode stream");
    return std::unique_ptr<WeightStore>(new ResidentStore(std::move(ck), shape.n_layers));
  }
  if (mode == LoadMode::kMmap) {
    STRATA_ASSIGN_OR_RETURN(auto s, MmapStore::open(std::move(ck), shape.n_layers));
    return std::unique_ptr<WeightStore>(std::move(s));
  }

  // Stream: size the tiers.
  STRATA_ASSIGN_OR_RETURN(const bool direct_io, use_direct_io(*ck, o.expert_io));
  STRATA_ASSIGN_OR_RETURN(ExpertCatalog cat, ExpertCatalog::build(*ck, shape.n_layers, direct_io));
  const uint64_t resident = total - cat.total_tensor_bytes() - engram_table_bytes(*ck);
  const uint64_t scales = EngramRowStore::scale_bytes(*ck);
  const bool scales_resident =
      o.engram_scales == EngramScales::kResident || (o.engram_scales == EngramScales::kAuto && scales * 16 <= budget);
  const uint64_t row_bytes = EngramRowStore::row_bytes(*ck);
  const uint64_t engram_ram = (scales_resident ? scales : 0) +
                              (row_bytes > 0 ? static_cast<uint64_t>(o.engram_cache_rows) * (row_bytes + 16) : 0);
  const uint64_t slot = std::max<uint64_t>(cat.slot_bytes(), 1);

  // Pinned layers.
  std::vector<int> pinned;
  std::set<int> pinned_set;
  if (o.pin_first >= 0) {
    if (o.pin_last >= shape.n_layers)
      return InvalidArgument("--pin-layers " + std::to_string(o.pin_first) + "-" + std::to_string(o.pin_last) +
                             ": the model has " + std::to_string(shape.n_layers) + " layers (0-" +
                             std::to_string(shape.n_layers - 1) + ")");
    for (int l = o.pin_first; l <= o.pin_last; ++l)
      for (int e = 0; e < cat.n_experts(l); ++e)
        if (pinned_set.insert(cat.id(l, e)).second) pinned.push_back(cat.id(l, e));
  }
  const int64_t working = std::max(shape.max_active, 1);
  const uint64_t fixed = resident + engram_ram;
  const uint64_t expert_budget = budget > fixed ? budget - fixed : 0;
  const int64_t n_slots = std::min<int64_t>(static_cast<int64_t>(expert_budget / slot), std::max(cat.size(), 1));
  const int64_t need = static_cast<int64_t>(pinned.size()) + working;
  if (n_slots < need && n_slots < cat.size()) {
    // The smallest budget that works; with kAuto the scales' placement itself depends on the budget.
    const uint64_t cache_ram = engram_ram - (scales_resident ? scales : 0);
    const uint64_t with_disk_scales = resident + cache_ram + static_cast<uint64_t>(need) * slot;
    uint64_t minimum = with_disk_scales + (scales_resident ? scales : 0);
    if (o.engram_scales == EngramScales::kAuto)
      minimum = with_disk_scales < scales * 16 ? with_disk_scales : with_disk_scales + scales;
    std::string what = "resident tensors " + format_bytes(resident) + " + Engram " + format_bytes(engram_ram) + " + " +
                       std::to_string(working) + " routed experts of one layer";
    if (!pinned.empty()) what += " + " + std::to_string(pinned.size()) + " pinned experts (--pin-layers)";
    return ResourceExhausted("RAM budget " + format_bytes(budget) + note + " is below one token's working set: " + what +
                             " x " + format_bytes(slot) + " = " + format_bytes(minimum) + "; the minimum --ram-budget is " +
                             std::to_string(minimum) + " bytes (" + format_bytes(minimum) + ")");
  }
  // The hot set: best first, up to hot_share of the slots, always leaving the working set free.
  const int64_t hot_cap = std::min<int64_t>(static_cast<int64_t>(o.hot_share * double(n_slots)),
                                            n_slots - working - static_cast<int64_t>(pinned.size()));
  int64_t n_hot = 0;
  for (const ExpertKey& k : o.hot) {
    if (n_hot >= hot_cap) break;
    const int id = cat.id(k.layer, k.expert);
    if (id < 0)
      return InvalidArgument("hot set entry (layer " + std::to_string(k.layer) + ", expert " + std::to_string(k.expert) +
                             ") is not a routed expert of this checkpoint (was the hot file made for another model?)");
    if (pinned_set.insert(id).second) {
      pinned.push_back(id);
      ++n_hot;
    }
  }

  TieredConfig cfg;
  cfg.n_layers = shape.n_layers;
  cfg.direct_io = direct_io;
  cfg.queue_depth = o.queue_depth;
  cfg.prefetch = o.prefetch;
  cfg.cache.n_slots = n_slots;
  cfg.cache.policy = o.policy;
  cfg.cache.halflife_acquires = o.lfu_halflife_tokens * std::max(shape.active_per_token, 1);
  cfg.cache.read_chunk_bytes = o.read_chunk_bytes;
  cfg.engram.cache_rows = o.engram_cache_rows;
  cfg.engram.scales_resident = scales_resident;
  cfg.pinned_ids = std::move(pinned);
  cfg.budget_bytes = budget;
  cfg.budget_note = note;
  STRATA_ASSIGN_OR_RETURN(auto s, TieredStore::open(std::move(ck), std::move(cat), cfg));
  return std::unique_ptr<WeightStore>(std::move(s));
}

}  // namespace strata::store
