#include "store/resident_tensors.h"

#include <sys/mman.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstring>
#include <mutex>
#include <new>
#include <thread>

#include "store/expert_catalog.h"

namespace strata::store {

namespace {

constexpr uint64_t kTensorAlign = 64;
constexpr uint64_t kHugePage = 2ull << 20;

uint64_t round_up(uint64_t n, uint64_t a) { return (n + a - 1) / a * a; }

// One read of read_all(): bytes [offset, offset + n) of tensor t into dst + offset.
struct Piece {
  const io::TensorInfo* t;
  uint8_t* dst;
  uint64_t offset, n;
};

}  // namespace

Status BulkReadOptions::validate() const {
  if (readers < 1 || readers > 64) return InvalidArgument("bulk read: readers must be in [1, 64], got " + std::to_string(readers));
  if (chunk_bytes < 4096) return InvalidArgument("bulk read: chunk_bytes must be >= 4096, got " + std::to_string(chunk_bytes));
  return Status();
}

ResidentTensors::Arena ResidentTensors::new_arena(uint64_t bytes) {
  const uint64_t align = bytes >= kHugePage ? kHugePage : kTensorAlign;
  const uint64_t size = round_up(std::max<uint64_t>(bytes, 1), align);
  auto* p = static_cast<uint8_t*>(std::aligned_alloc(static_cast<size_t>(align), static_cast<size_t>(size)));
  if (!p) throw std::bad_alloc();
  // Advice only: where transparent huge pages are off the arena stays on 4 KiB pages.
  if (align == kHugePage) (void)::madvise(p, static_cast<size_t>(size), MADV_HUGEPAGE);
  return Arena(p);
}

Result<TensorView> ResidentTensors::get(const io::Checkpoint& ck, const std::string& name) {
  const io::TensorInfo* t = ck.find(name);
  if (!t) return NotFound(ck.dir() + ": tensor '" + name + "' is missing from the checkpoint");
  auto it = loaded_.find(name);
  if (it == loaded_.end()) {
    Arena a = new_arena(t->nbytes);
    STRATA_RETURN_IF_ERROR(ck.read(*t, a.get()));
    bytes_ += t->nbytes;
    it = loaded_.emplace(name, a.get()).first;
    arenas_.push_back(std::move(a));
  }
  return TensorView{it->second, t->dtype, t->shape};
}

Status ResidentTensors::read_all(const io::Checkpoint& ck, std::span<const io::TensorInfo* const> list,
                                 const BulkReadOptions& o, const ProgressFn& progress) {
  STRATA_RETURN_IF_ERROR(o.validate());
  // What this call reads, in file order: readers then walk each shard front to back, so the disk
  // sees a few sequential streams rather than one tensor at a time.
  std::vector<const io::TensorInfo*> todo;
  todo.reserve(list.size());
  for (const io::TensorInfo* t : list)
    if (t && !loaded_.count(t->name)) todo.push_back(t);
  std::sort(todo.begin(), todo.end(), [](const io::TensorInfo* a, const io::TensorInfo* b) {
    return a->shard != b->shard ? a->shard < b->shard : a->offset < b->offset;
  });
  todo.erase(std::unique(todo.begin(), todo.end()), todo.end());
  if (todo.empty()) return Status();

  uint64_t arena_bytes = 0, total = 0;
  for (const io::TensorInfo* t : todo) {
    arena_bytes += round_up(std::max<uint64_t>(t->nbytes, 1), kTensorAlign);
    total += t->nbytes;
  }
  Arena arena = new_arena(arena_bytes);
  std::vector<Piece> pieces;
  std::vector<std::pair<const io::TensorInfo*, uint8_t*>> placed;
  placed.reserve(todo.size());
  uint64_t at = 0;
  for (const io::TensorInfo* t : todo) {
    uint8_t* dst = arena.get() + at;
    placed.emplace_back(t, dst);
    for (uint64_t off = 0; off < t->nbytes; off += o.chunk_bytes)
      pieces.push_back(Piece{t, dst, off, std::min(o.chunk_bytes, t->nbytes - off)});
    at += round_up(std::max<uint64_t>(t->nbytes, 1), kTensorAlign);
  }

  std::atomic<size_t> next{0};
  std::atomic<uint64_t> done{0};
  std::atomic<bool> failed{false};
  std::mutex err_mu;
  size_t err_piece = pieces.size();
  Status err;
  auto read_pieces = [&](bool reports) {
    auto last = std::chrono::steady_clock::now();
    for (;;) {
      const size_t i = next.fetch_add(1, std::memory_order_relaxed);
      if (i >= pieces.size() || failed.load(std::memory_order_relaxed)) return;
      const Piece& p = pieces[i];
      Status s = ck.read_range(*p.t, p.offset, p.n, p.dst + p.offset);
      if (!s.ok()) {
        std::lock_guard<std::mutex> l(err_mu);
        if (i < err_piece) err_piece = i, err = std::move(s);  // the earliest in file order, whoever saw it
        failed.store(true, std::memory_order_relaxed);
        return;
      }
      const uint64_t d = done.fetch_add(p.n, std::memory_order_relaxed) + p.n;
      const auto now = std::chrono::steady_clock::now();
      if (reports && now - last >= std::chrono::milliseconds(100)) {
        last = now;
        report_progress(progress, ProgressEvent{"load", "bytes", d, total, "weights", false});
      }
    }
  };
  std::vector<std::thread> readers;
  const int extra = static_cast<int>(std::min<size_t>(static_cast<size_t>(o.readers), pieces.size())) - 1;
  for (int r = 0; r < extra; ++r) readers.emplace_back(read_pieces, false);
  read_pieces(true);
  for (std::thread& r : readers) r.join();
  if (failed.load()) return err;
  report_progress(progress, ProgressEvent{"load", "bytes", total, total, "weights", true});

  for (const auto& [t, dst] : placed) loaded_.emplace(t->name, dst);
  arenas_.push_back(std::move(arena));
  bytes_ += total;
  return Status();
}

std::vector<const io::TensorInfo*> select_tensors(const io::Checkpoint& ck,
                                                  const std::function<bool(const io::TensorInfo&)>& wanted,
                                                  bool experts_and_engram) {
  std::vector<const io::TensorInfo*> list;
  for (const auto& [name, t] : ck.tensors()) {
    if (!experts_and_engram && (ExpertCatalog::is_expert_tensor(name) || ExpertCatalog::is_engram_table(name))) continue;
    if (wanted(t)) list.push_back(&t);
  }
  return list;
}

Status gather_engram_rows(const std::string& table, const uint8_t* weights, const uint8_t* scales, int64_t n_rows,
                          int64_t row_bytes, int64_t scale_bytes, std::span<const int64_t> rows, uint8_t* weight_out,
                          uint8_t* scale_out) {
  for (size_t i = 0; i < rows.size(); ++i) {
    const int64_t r = rows[i];
    if (r < 0 || r >= n_rows)
      return InvalidArgument("Engram row " + std::to_string(r) + " out of range for '" + table + "' with " +
                             std::to_string(n_rows) + " rows");
    std::memcpy(weight_out + i * row_bytes, weights + r * row_bytes, static_cast<size_t>(row_bytes));
    if (scale_bytes > 0) std::memcpy(scale_out + i * scale_bytes, scales + r * scale_bytes, static_cast<size_t>(scale_bytes));
  }
  return Status();
}

}  // namespace strata::store
