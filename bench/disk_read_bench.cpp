// disk_read_bench: the disk figures the tiering benchmark divides by (docs/performance.md), read
// from existing files (a checkpoint's shards) through strata's own io::UringReader:
//   - sequential read bandwidth: 1 MiB O_DIRECT reads at queue depth 1, 8 and 32, GB/s (1e9);
//   - 4 KiB random reads per second at queue depth 1 and 32, O_DIRECT (the device) and buffered
//     with readahead off (what the Engram row store issues);
// O_DIRECT numbers do not depend on the page cache; the buffered random-read figure is only cold if
// the files are not cached (drop caches first: echo 3 > /proc/sys/vm/drop_caches).
// Usage: disk_read_bench [--seconds S] [--json] FILE...
#include <fcntl.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "io/file.h"
#include "io/uring_reader.h"

namespace {

using strata::io::File;
using strata::io::ReadBatch;
using strata::io::UringReader;

struct Target {
  std::unique_ptr<File> file;
  strata::io::FdHandle direct;
};

double now_s() { return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count(); }

// Keeps `depth` reads of `len` bytes in flight for `seconds`; offsets from `next`. Returns reads/s.
template <typename Next>
double run(UringReader& r, std::vector<Target>& ts, bool direct, size_t len, int depth, double seconds, Next next) {
  const size_t align = strata::io::kDirectIoAlign;
  std::vector<uint8_t> raw(static_cast<size_t>(depth) * len + align);
  uint8_t* base = reinterpret_cast<uint8_t*>((reinterpret_cast<uintptr_t>(raw.data()) + align - 1) / align * align);
  std::vector<std::unique_ptr<ReadBatch>> slots(static_cast<size_t>(depth));
  uint64_t done = 0;
  const double t0 = now_s();
  auto issue = [&](int i) {
    auto& b = slots[static_cast<size_t>(i)];
    b = std::make_unique<ReadBatch>();
    auto [t, off] = next();
    b->add(*ts[t].file, off, len, base + static_cast<size_t>(i) * len, direct ? ts[t].direct.get() : -1);
    r.submit(b.get());
  };
  for (int i = 0; i < depth; ++i) issue(i);
  for (;;) {
    for (int i = 0; i < depth; ++i) {
      auto& b = slots[static_cast<size_t>(i)];
      if (!b->done()) continue;
      strata::Status s = b->wait();
      if (!s.ok()) {
        std::fprintf(stderr, "disk_read_bench: %s\n", s.to_string().c_str());
        std::exit(1);
      }
      ++done;
      if (now_s() - t0 < seconds) issue(i);
      else b.reset(new ReadBatch());
    }
    bool all_idle = true;
    for (auto& b : slots) all_idle &= !b->submitted() || b->done();
    if (now_s() - t0 >= seconds && all_idle) break;
  }
  return static_cast<double>(done) / (now_s() - t0);
}

}  // namespace

int main(int argc, char** argv) {
  double seconds = 5;
  bool json = false;
  std::vector<Target> ts;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    if (a == "--seconds" && i + 1 < argc) seconds = std::atof(argv[++i]);
    else if (a == "--json") json = true;
    else {
      auto f = strata::io::open_file(a);
      if (!f.ok()) {
        std::fprintf(stderr, "disk_read_bench: %s\n", f.error().to_string().c_str());
        return 1;
      }
      auto d = strata::io::open_direct(a);
      if (!d.ok()) {
        std::fprintf(stderr, "disk_read_bench: %s\n", d.error().to_string().c_str());
        return 1;
      }
      (void)::posix_fadvise((*f)->native_fd(), 0, 0, POSIX_FADV_RANDOM);
      ts.push_back(Target{std::move(*f), std::move(*d)});
    }
  }
  if (ts.empty()) {
    std::fprintf(stderr, "usage: disk_read_bench [--seconds S] [--json] FILE...\n");
    return 2;
  }
  strata::io::UringReaderOptions o;
  o.queue_depth = 64;
  auto reader = UringReader::create(o);
  if (!reader.ok()) {
    std::fprintf(stderr, "disk_read_bench: %s\n", reader.error().to_string().c_str());
    return 1;
  }
  std::mt19937_64 rng(1);
  const size_t mib = 1 << 20, page = 4096;
  // Sequential: walk the files in order, 1 MiB at a time.
  size_t cur_t = 0;
  uint64_t cur_off = 0;
  auto seq = [&]() {
    if (cur_off + mib > ts[cur_t].file->size()) {
      cur_t = (cur_t + 1) % ts.size();
      cur_off = 0;
    }
    auto r = std::make_pair(cur_t, cur_off);
    cur_off += mib;
    return r;
  };
  auto rnd = [&]() {
    const size_t t = rng() % ts.size();
    const uint64_t pages = ts[t].file->size() / page;
    return std::make_pair(t, (rng() % pages) * page);
  };
  const double seq1 = run(**reader, ts, true, mib, 1, seconds, seq) * mib / 1e9;
  const double seq8 = run(**reader, ts, true, mib, 8, seconds, seq) * mib / 1e9;
  const double seq32 = run(**reader, ts, true, mib, 32, seconds, seq) * mib / 1e9;
  const double r1 = run(**reader, ts, true, page, 1, seconds, rnd);
  const double r32 = run(**reader, ts, true, page, 32, seconds, rnd);
  const double b32 = run(**reader, ts, false, page, 32, seconds, rnd);
  if (json) {
    std::printf("{\"seq_gbps_qd1\": %.3f, \"seq_gbps_qd8\": %.3f, \"seq_gbps_qd32\": %.3f, \"rand4k_iops_qd1\": %.0f, "
                "\"rand4k_iops_qd32\": %.0f, \"rand4k_iops_qd32_buffered\": %.0f}\n",
                seq1, seq8, seq32, r1, r32, b32);
  } else {
    std::printf("sequential 1 MiB O_DIRECT: QD1 %.2f GB/s, QD8 %.2f GB/s, QD32 %.2f GB/s\n", seq1, seq8, seq32);
    std::printf("random 4 KiB: O_DIRECT QD1 %.0f IOPS, QD32 %.0f IOPS; buffered (readahead off) QD32 %.0f IOPS\n", r1,
                r32, b32);
  }
  return 0;
}
