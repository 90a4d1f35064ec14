#include "store/resident_tensors.h"

#include <sys/mman.h>
#include <unistd.h>

#include <cerrno>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstring>
#include <map>
#include <mutex>
#include <new>
#include <thread>

#include "io/ggml_mxfp4.h"
#include "store/expert_catalog.h"

namespace strata::store {

namespace {

constexpr uint64_t kTensorAlign = 64;
constexpr uint64_t kHugePage = kHugePageBytes;

uint64_t round_up(uint64_t n, uint64_t a) { return (n + a - 1) / a * a; }

// Bytes [offset, offset + n) of tensor t, for dst + offset.
struct Segment {
  const io::TensorInfo* t;
  uint8_t* dst;
  uint64_t offset, n;
};

// One read of read_all(): file bytes [begin, end) of one shard, holding its segments in file order.
// Buffered, each segment is read on its own; direct, the aligned range at once.
struct Piece {
  int shard;
  uint64_t begin, end;
  std::vector<Segment> segments;
  uint64_t bytes() const {
    uint64_t b = 0;
    for (const Segment& s : segments) b += s.n;
    return b;
  }
};

// Neighbouring tensors closer than this in a file share one direct read (a checkpoint has tens of
// thousands of small tensors: norms, biases, scales; one O_DIRECT read each would wait on the disk
// every time, where the page cache's readahead had covered them).
constexpr uint64_t kMaxGap = 64 * 1024;

uint64_t align_down(uint64_t n, uint64_t a) { return n / a * a; }

// The routed experts of a ggml MXFP4 GGUF arrive as the file stores them: each codes tensor and
// its scales (both read by this call, or the unpack has no input) are regrouped into the official
// layout (io/ggml_mxfp4.h), on up to `threads` threads.
Status unpack_ggml_mxfp4_placed(const std::vector<std::pair<const io::TensorInfo*, uint8_t*>>& placed, int threads) {
  std::map<std::string, std::pair<const io::TensorInfo*, uint8_t*>> scales;
  for (const auto& [t, dst] : placed)
    if (t->packing == io::TensorInfo::Packing::kGgmlMxfp4Scales) scales.emplace(t->name, std::make_pair(t, dst));
  struct Pair { const io::TensorInfo *c, *s; uint8_t *cd, *sd; };
  std::vector<Pair> pairs;
  for (const auto& [t, dst] : placed) {
    if (t->packing != io::TensorInfo::Packing::kGgmlMxfp4Codes) continue;
    const std::string sn = t->name.substr(0, t->name.rfind('.')) + ".scale";
    auto it = scales.find(sn);
    if (it == scales.end())
      return InvalidArgument("tensor '" + t->name + "' is half of a ggml MXFP4 slice: it is read only together with '" + sn + "'");
    pairs.push_back(Pair{t, it->second.first, dst, it->second.second});
    scales.erase(it);
  }
  if (!scales.empty()) {
    const std::string n = scales.begin()->first;
    return InvalidArgument("tensor '" + n + "' is half of a ggml MXFP4 slice: it is read only together with '" +
                           n.substr(0, n.rfind('.')) + ".weight'");
  }
  std::atomic<size_t> next{0};
  std::mutex mu;
  Status first;
  auto work = [&] {
    for (size_t i; (i = next.fetch_add(1)) < pairs.size();) {
      Status s = io::unpack_ggml_mxfp4(*pairs[i].c, *pairs[i].s, pairs[i].cd, pairs[i].sd);
      if (!s.ok()) {
        std::lock_guard<std::mutex> l(mu);
        if (first.ok()) first = std::move(s);
      }
    }
  };
  std::vector<std::thread> pool;
  for (int k = 1; k < std::min<int>(threads, static_cast<int>(pairs.size())); ++k) pool.emplace_back(work);
  work();
  for (std::thread& t : pool) t.join();
  return first;
}

}  // namespace

Status BulkReadOptions::validate() const {
  if (readers < 1 || readers > 64) return InvalidArgument("bulk read: readers must be in [1, 64], got " + std::to_string(readers));
  if (chunk_bytes < 4096) return InvalidArgument("bulk read: chunk_bytes must be >= 4096, got " + std::to_string(chunk_bytes));
  return Status();
}

Result<TensorView> ResidentTensors::get(const io::Checkpoint& ck, const std::string& name) {
  const io::TensorInfo* t = ck.find(name);
  if (!t) return NotFound(ck.dir() + ": tensor '" + name + "' is missing from the checkpoint");
  auto it = loaded_.find(name);
  if (it == loaded_.end()) {
    Arena a = alloc_huge_page_bytes(t->nbytes);
    STRATA_RETURN_IF_ERROR(ck.read(*t, a.get()));
    bytes_ += t->nbytes;
    it = loaded_.emplace(name, a.get()).first;
    arenas_.push_back(std::move(a));
  }
  return TensorView{it->second, t->dtype, t->shape};
}

Result<TensorView> ResidentTensors::relaid(const io::Checkpoint& ck, const std::string& name, const std::string& layout,
                                           const RelayFn& relay) {
  const io::TensorInfo* t = ck.find(name);
  if (!t) return NotFound(ck.dir() + ": tensor '" + name + "' is missing from the checkpoint");
  const std::string key = name + '\n' + layout;
  auto it = relaid_.find(key);
  if (it != relaid_.end() && !loaded_.count(name)) return TensorView{it->second, t->dtype, t->shape};
  STRATA_ASSIGN_OR_RETURN(TensorView stored, get(ck, name));  // held, or read now
  // The stored copy's whole 2 MiB chunks below byte n go back to the system. Not 4 KiB pages:
  // giving back part of a huge page splits it, and the neighbours that share it (the next layer's
  // attention weights) then stream through 4 KiB pages: with wo_a released page by page, the 8 GB
  // checkpoint's attention took 10.4 ms a step against 8.1 (batch_bench, 2 threads). The partial
  // chunks at the ends stay (under 4 MiB a tensor; tensors under 2 MiB give nothing back).
  const auto lo = reinterpret_cast<uintptr_t>(stored.data);
  const uintptr_t first = (lo + kHugePage - 1) / kHugePage * kHugePage;
  uintptr_t given = first;  // [first, given) given back
  auto give_back = [&](uint64_t n) {
    const uintptr_t upto = (lo + std::min<uint64_t>(n, t->nbytes)) / kHugePage * kHugePage;
    if (upto <= given) return;
    (void)::madvise(reinterpret_cast<void*>(given), static_cast<size_t>(upto - given), MADV_DONTNEED);
    bytes_ -= upto - given;
    given = upto;
  };
  // Unnamed before the relay gives any of it back: if the relay throws, no view of half-released
  // bytes stays (a later get() reads the tensor again).
  loaded_.erase(name);
  if (it == relaid_.end()) {
    Arena a = alloc_huge_page_bytes(t->nbytes);
    relay(static_cast<const uint8_t*>(stored.data), a.get(), give_back);
    bytes_ += t->nbytes;
    it = relaid_.emplace(key, a.get()).first;
    arenas_.push_back(std::move(a));
  }
  // The stored copy (read now, or again by a later get(): a draft sharing the tensor) goes.
  give_back(t->nbytes);
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
  Arena arena = alloc_huge_page_bytes(arena_bytes);
  std::vector<Piece> pieces;
  std::vector<std::pair<const io::TensorInfo*, uint8_t*>> placed;
  placed.reserve(todo.size());
  uint64_t at = 0;
  for (const io::TensorInfo* t : todo) {
    uint8_t* dst = arena.get() + at;
    placed.emplace_back(t, dst);
    for (uint64_t off = 0; off < t->nbytes; off += o.chunk_bytes) {
      const uint64_t n = std::min(o.chunk_bytes, t->nbytes - off), begin = t->offset + off;
      Piece* last = pieces.empty() ? nullptr : &pieces.back();
      const bool joins = last && last->shard == t->shard && begin >= last->end && begin - last->end <= kMaxGap &&
                         begin + n - last->begin <= o.chunk_bytes;
      if (!joins) pieces.push_back(Piece{t->shard, begin, begin, {}});
      pieces.back().end = begin + n;
      pieces.back().segments.push_back(Segment{t, dst, off, n});
    }
    at += round_up(std::max<uint64_t>(t->nbytes, 1), kTensorAlign);
  }

  // O_DIRECT descriptors of the shards that take it (only plain files: a wrapper's reads must go
  // through it).
  std::vector<io::FdHandle> direct(static_cast<size_t>(ck.n_shards()));
  if (o.direct != BulkReadOptions::Direct::kNever) {
    std::vector<char> used(static_cast<size_t>(ck.n_shards()), 0);
    for (const Piece& p : pieces) used[static_cast<size_t>(p.shard)] = 1;
    for (int i = 0; i < ck.n_shards(); ++i) {
      if (!used[static_cast<size_t>(i)] || ck.shard(i).native_fd() < 0) continue;
      if (o.direct == BulkReadOptions::Direct::kAuto) {
        auto cached = io::page_cache_bytes(ck.shard(i).path());
        if (cached.ok() && *cached * 2 >= ck.shard(i).size()) continue;  // warm: from the page cache
      }
      auto works = io::direct_read_works(ck.shard(i).path());
      if (!works.ok() || !*works) continue;  // refused (or odd): this shard reads buffered
      auto fd = io::open_direct(ck.shard(i).path());
      if (fd.ok()) direct[static_cast<size_t>(i)] = std::move(*fd);
    }
  }

  // One piece through the O_DIRECT descriptor: the aligned range into `staging`, then each segment
  // to its place. Errors name the file, the range and the first tensor.
  auto read_direct = [&](const Piece& p, int fd, uint8_t* staging) -> Status {
    const io::File& f = ck.shard(p.shard);
    STRATA_ASSIGN_OR_RETURN(uint64_t now, f.current_size());
    if (now != f.size())
      return Corruption(f.path() + ": shard changed size since load (" + std::to_string(f.size()) + " -> " +
                        std::to_string(now) + " bytes); reload the model");
    const uint64_t a0 = align_down(p.begin, io::kDirectIoAlign);
    const uint64_t len = round_up(p.end - a0, io::kDirectIoAlign);
    const std::string where = f.path() + ": O_DIRECT read of bytes [" + std::to_string(p.begin) + ", " +
                              std::to_string(p.end) + ") (tensor '" + p.segments.front().t->name + "')";
    uint64_t got = 0;
    while (got < p.end - a0) {
      const ssize_t r = ::pread(fd, staging + got, static_cast<size_t>(len - got), static_cast<off_t>(a0 + got));
      if (r < 0 && errno == EINTR) continue;
      if (r < 0) return IOError(where, errno);
      if (r == 0) return Corruption(where + ": the file ends at byte " + std::to_string(a0 + got));
      got += static_cast<uint64_t>(r);
      if (got % io::kDirectIoAlign != 0) break;  // a short read only at the end of the file
    }
    if (got < p.end - a0) return Corruption(where + ": the file ends at byte " + std::to_string(a0 + got));
    for (const Segment& s : p.segments)
      std::memcpy(s.dst + s.offset, staging + (s.t->offset + s.offset - a0), static_cast<size_t>(s.n));
    return Status();
  };

  std::atomic<size_t> next{0};
  std::atomic<uint64_t> done{0};
  std::atomic<bool> failed{false};
  std::mutex err_mu;
  size_t err_piece = pieces.size();
  Status err;
  auto read_pieces = [&](bool reports) {
    auto last = std::chrono::steady_clock::now();
    Arena staging;  // this reader's O_DIRECT buffer: reused, so its pages are touched once
    for (;;) {
      const size_t i = next.fetch_add(1, std::memory_order_relaxed);
      if (i >= pieces.size() || failed.load(std::memory_order_relaxed)) return;
      const Piece& p = pieces[i];
      Status s;
      const io::FdHandle& fd = direct[static_cast<size_t>(p.shard)];
      if (fd.valid()) {
        // At least a huge page, so alloc_huge_page_bytes aligns it for O_DIRECT (and beyond).
        if (!staging) staging = alloc_huge_page_bytes(std::max(round_up(o.chunk_bytes, io::kDirectIoAlign) + 2 * io::kDirectIoAlign, kHugePage));
        s = read_direct(p, fd.get(), staging.get());
      } else {
        for (const Segment& g : p.segments) {
          s = ck.read_stored_range(*g.t, g.offset, g.n, g.dst + g.offset);  // unpacked below
          if (!s.ok()) break;
        }
      }
      if (!s.ok()) {
        std::lock_guard<std::mutex> l(err_mu);
        if (i < err_piece) err_piece = i, err = std::move(s);  // the earliest in file order, whoever saw it
        failed.store(true, std::memory_order_relaxed);
        return;
      }
      const uint64_t n = p.bytes();
      const uint64_t d = done.fetch_add(n, std::memory_order_relaxed) + n;
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
  STRATA_RETURN_IF_ERROR(unpack_ggml_mxfp4_placed(placed, o.readers));
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

Status gather_engram_rows_interleaved(const std::string& table, const uint8_t* rows_base, int64_t n_rows,
                                      int64_t row_bytes, int64_t scale_bytes, std::span<const int64_t> rows,
                                      uint8_t* weight_out, uint8_t* scale_out) {
  const int64_t stride = row_bytes + scale_bytes;
  for (size_t i = 0; i < rows.size(); ++i) {
    const int64_t r = rows[i];
    if (r < 0 || r >= n_rows)
      return InvalidArgument("Engram row " + std::to_string(r) + " out of range for '" + table + "' with " +
                             std::to_string(n_rows) + " rows");
    std::memcpy(weight_out + i * row_bytes, rows_base + r * stride, static_cast<size_t>(row_bytes));
    std::memcpy(scale_out + i * scale_bytes, rows_base + r * stride + row_bytes, static_cast<size_t>(scale_bytes));
  }
  return Status();
}

}  // namespace strata::store
