#include "tools/scoped_dir.h"

#include <signal.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <charconv>
#include <chrono>
#include <filesystem>
#include <limits>
#include <optional>
#include <system_error>

namespace strata::tools {

namespace {

namespace fs = std::filesystem;

// The process id in a name `<prefix>-<pid>-XXXXXX`, or 0 when the name has another shape (a pid
// with a leading zero, or past what a pid_t holds, is another shape).
pid_t pid_in_name(const std::string& name, const std::string& prefix) {
  if (name.size() <= prefix.size() + 1 || name.compare(0, prefix.size(), prefix) != 0 || name[prefix.size()] != '-')
    return 0;
  const char* first = name.data() + prefix.size() + 1;
  const char* last = name.data() + name.size();
  int64_t pid = 0;
  auto [end, ec] = std::from_chars(first, last, pid);
  if (ec != std::errc() || end == first || end == last || *end != '-' || *first == '0') return 0;
  if (pid <= 0 || pid > std::numeric_limits<pid_t>::max()) return 0;
  return static_cast<pid_t>(pid);
}

// The newest modification time of `dir` and everything under it (symbolic links not followed),
// looking at no more than `max_entries` entries; nullopt when something cannot be read.
std::optional<fs::file_time_type> newest_mtime(const fs::path& dir, int max_entries) {
  std::error_code ec;
  fs::file_time_type newest = fs::last_write_time(dir, ec);
  if (ec) return std::nullopt;
  fs::recursive_directory_iterator it(dir, fs::directory_options::none, ec), end;
  for (int seen = 0; !ec && it != end; it.increment(ec)) {
    if (++seen > max_entries) return std::nullopt;
    if (it->is_symlink(ec) || ec) continue;  // last_write_time would follow it out of the directory
    const fs::file_time_type t = fs::last_write_time(it->path(), ec);
    if (ec) return std::nullopt;
    newest = std::max(newest, t);
  }
  if (ec) return std::nullopt;
  return newest;
}

// Removes `<prefix>-<pid>-*` directories in `parent` that this user owns (not symbolic links),
// whose process is gone (kill(pid, 0) says ESRCH) and in which nothing changed for
// `stale_after_s`. Best effort: anything that cannot be read or judged is left alone.
void remove_stale(const std::string& parent, const std::string& prefix, double stale_after_s) {
  std::error_code ec;
  fs::directory_iterator it(parent, ec), end;
  const auto now = fs::file_time_type::clock::now();
  for (; !ec && it != end; it.increment(ec)) {
    const pid_t pid = pid_in_name(it->path().filename().string(), prefix);
    if (pid == 0 || pid == ::getpid()) continue;
    struct stat st;
    if (::lstat(it->path().c_str(), &st) != 0 || !S_ISDIR(st.st_mode) || st.st_uid != ::geteuid()) continue;
    if (::kill(pid, 0) == 0 || errno != ESRCH) continue;  // running, or not ours to judge (EPERM)
    const std::optional<fs::file_time_type> mtime = newest_mtime(it->path(), 100000);
    if (!mtime || std::chrono::duration<double>(now - *mtime).count() < stale_after_s) continue;
    std::error_code e2;
    fs::remove_all(it->path(), e2);
  }
}

}  // namespace

Result<ScopedDir> ScopedDir::make_temp(const std::string& parent, const std::string& prefix, double stale_after_s) {
  remove_stale(parent, prefix, stale_after_s);
  std::string tmpl = (fs::path(parent) / (prefix + "-" + std::to_string(::getpid()) + "-XXXXXX")).string();
  if (::mkdtemp(tmpl.data()) == nullptr)
    return IOError(parent + ": cannot create a temporary directory " + prefix + "-*", errno);
  return ScopedDir(std::move(tmpl));
}

ScopedDir& ScopedDir::operator=(ScopedDir&& o) noexcept {
  if (this != &o) {
    remove();
    path_ = std::move(o.path_);
    o.path_.clear();
  }
  return *this;
}

void ScopedDir::remove() {
  if (path_.empty()) return;
  std::error_code ec;
  fs::remove_all(path_, ec);
  path_.clear();
}

}  // namespace strata::tools
