// strata bench helpers: the page cache of a checkpoint (residency, eviction, an uncached copy) and
// the checkpoint's identity hash.
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <vector>

#include "core/aligned_buffer.h"
#include "io/checkpoint.h"
#include "io/file.h"
#include "io/gguf.h"
#include "tools/bench.h"

namespace strata::tools {

namespace {

namespace fs = std::filesystem;

Result<std::vector<fs::path>> regular_files(const std::string& dir) {
  std::error_code ec;
  if (fs::is_regular_file(dir, ec)) {  // a GGUF model file, or every file of its gguf-split set
    const auto split = io::parse_gguf_split_path(dir);
    if (!split) return std::vector<fs::path>{fs::path(dir)};
    std::vector<fs::path> set;
    for (int n = 1; n <= split->count; ++n) set.emplace_back(io::gguf_split_path(split->prefix, n, split->count));
    return set;
  }
  if (!fs::is_directory(dir, ec)) return NotFound(dir + ": not a directory");
  std::vector<fs::path> out;
  for (fs::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec))
    if (it->is_regular_file(ec)) out.push_back(it->path());
  if (ec) return IOError(dir + ": list directory: " + ec.message());
  std::sort(out.begin(), out.end());
  return out;
}

class Fd {
 public:
  explicit Fd(int fd) : fd_(fd) {}
  ~Fd() {
    if (fd_ >= 0) ::close(fd_);
  }
  Fd(const Fd&) = delete;
  Fd& operator=(const Fd&) = delete;
  int get() const { return fd_; }

 private:
  int fd_;
};

// FNV-1a 64.
struct Fnv {
  uint64_t h = 0xcbf29ce484222325ull;
  void add(const void* p, size_t n) {
    const auto* b = static_cast<const unsigned char*>(p);
    for (size_t i = 0; i < n; ++i) {
      h ^= b[i];
      h *= 0x100000001b3ull;
    }
  }
  void add(const std::string& s) {
    add(s.data(), s.size());
    add("\0", 1);
  }
  void add_u64(uint64_t v) { add(&v, sizeof v); }
};

}  // namespace

Result<double> page_cache_fraction(const std::string& dir) {
  STRATA_ASSIGN_OR_RETURN(std::vector<fs::path> files, regular_files(dir));
  uint64_t total = 0, resident = 0;
  for (const fs::path& p : files) {
    STRATA_ASSIGN_OR_RETURN(uint64_t cached, io::page_cache_bytes(p.string()));
    std::error_code ec;
    const uintmax_t size = fs::file_size(p, ec);
    if (ec) return IOError(p.string() + ": stat", ec.value());
    resident += cached;
    total += size;
  }
  return total > 0 ? static_cast<double>(resident) / static_cast<double>(total) : 0.0;
}

Status evict_page_cache(const std::string& dir) {
  STRATA_ASSIGN_OR_RETURN(std::vector<fs::path> files, regular_files(dir));
  for (const fs::path& p : files) {
    Fd fd(::open(p.c_str(), O_RDONLY | O_CLOEXEC));
    if (fd.get() < 0) return IOError(p.string() + ": open", errno);
    // Clean pages leave the cache (dirty ones are written back first); pages another process has
    // mapped may stay.
    ::fdatasync(fd.get());
    const int rc = ::posix_fadvise(fd.get(), 0, 0, POSIX_FADV_DONTNEED);
    if (rc != 0) return IOError(p.string() + ": posix_fadvise(DONTNEED)", rc);
  }
  return Status();
}

Status drop_all_page_caches() {
  ::sync();
  const int fd = ::open("/proc/sys/vm/drop_caches", O_WRONLY | O_CLOEXEC);
  if (fd < 0) return IOError("/proc/sys/vm/drop_caches: open (needs root)", errno);
  Fd guard(fd);
  if (::write(fd, "1\n", 2) != 2) return IOError("/proc/sys/vm/drop_caches: write", errno);
  return Status();
}

Status copy_uncached(const std::string& src, const std::string& dst, const std::atomic<bool>* cancel) {
  STRATA_ASSIGN_OR_RETURN(std::vector<fs::path> files, regular_files(src));
  std::error_code ec;
  if (!fs::create_directory(dst, ec)) return IOError(dst + ": create directory: " + (ec ? ec.message() : "exists"));
  constexpr size_t kBlock = 8u << 20;
  AlignedBytes raw(kBlock + 4096);
  auto* buf = reinterpret_cast<unsigned char*>((reinterpret_cast<uintptr_t>(raw.data()) + 4095) / 4096 * 4096);
  for (const fs::path& p : files) {
    Fd in(::open(p.c_str(), O_RDONLY | O_CLOEXEC));
    if (in.get() < 0) return IOError(p.string() + ": open", errno);
    const std::string out_path = (fs::path(dst) / p.filename()).string();
    int ofd = ::open(out_path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC | O_DIRECT, 0644);
    bool direct = ofd >= 0;
    if (ofd < 0 && errno == EINVAL) ofd = ::open(out_path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
    if (ofd < 0) return IOError(out_path + ": create", errno);
    Fd out(ofd);
    uint64_t off = 0;
    for (;;) {
      if (cancel != nullptr && cancel->load()) return Cancelled("bench: interrupted while copying " + src);
      ssize_t n = ::pread(in.get(), buf, kBlock, static_cast<off_t>(off));
      if (n < 0) {
        if (errno == EINTR) continue;
        return IOError(p.string() + ": read", errno);
      }
      if (n == 0) break;
      size_t len = static_cast<size_t>(n);
      if (direct && len % 4096 != 0) {
        // O_DIRECT writes whole blocks: finish the tail through the page cache.
        const size_t head = len / 4096 * 4096;
        if (head > 0 && ::pwrite(out.get(), buf, head, static_cast<off_t>(off)) != static_cast<ssize_t>(head))
          return IOError(out_path + ": write", errno);
        if (::fcntl(out.get(), F_SETFL, ::fcntl(out.get(), F_GETFL) & ~O_DIRECT) != 0)
          return IOError(out_path + ": clear O_DIRECT", errno);
        direct = false;
        if (::pwrite(out.get(), buf + head, len - head, static_cast<off_t>(off + head)) != static_cast<ssize_t>(len - head))
          return IOError(out_path + ": write", errno);
      } else if (::pwrite(out.get(), buf, len, static_cast<off_t>(off)) != static_cast<ssize_t>(len)) {
        return IOError(out_path + ": write", errno);
      }
      off += len;
    }
    if (::fdatasync(out.get()) != 0) return IOError(out_path + ": fdatasync", errno);
    ::posix_fadvise(out.get(), 0, 0, POSIX_FADV_DONTNEED);
  }
  return Status();
}

Result<CheckpointId> checkpoint_identity(const std::string& dir) {
  CheckpointId id;
  id.dir = dir;
  STRATA_ASSIGN_OR_RETURN(std::string config, io::read_checkpoint_text(dir, "config.json", 16u << 20));
  STRATA_ASSIGN_OR_RETURN(auto ck, io::Checkpoint::open(dir));
  Fnv h;
  h.add(config);
  for (const auto& [name, t] : ck->tensors()) {  // std::map: sorted by name
    h.add(name);
    h.add(std::string(dtype_name(t.dtype)));
    for (int i = 0; i < t.shape.rank; ++i) h.add_u64(static_cast<uint64_t>(t.shape[i]));
    h.add_u64(t.nbytes);
  }
  char hex[17];
  std::snprintf(hex, sizeof hex, "%016llx", static_cast<unsigned long long>(h.h));
  id.hash = hex;
  id.tensor_bytes = ck->total_bytes();
  id.n_tensors = ck->tensors().size();
  id.n_shards = ck->n_shards();
  for (int i = 0; i < ck->n_shards(); ++i) id.file_bytes += ck->shard(i).size();
  return id;
}

}  // namespace strata::tools
