#include "tools/scoped_dir.h"

#include <signal.h>
#include <stdlib.h>
#include <unistd.h>

#include <cerrno>
#include <charconv>
#include <chrono>
#include <filesystem>
#include <system_error>

namespace strata::tools {

namespace {

namespace fs = std::filesystem;

// The process id in a name `<prefix>-<pid>-XXXXXX`, or 0 when the name has another shape.
pid_t pid_in_name(const std::string& name, const std::string& prefix) {
  if (name.size() <= prefix.size() + 1 || name.compare(0, prefix.size(), prefix) != 0 || name[prefix.size()] != '-')
    return 0;
  const char* first = name.data() + prefix.size() + 1;
  const char* last = name.data() + name.size();
  long pid = 0;
  auto [end, ec] = std::from_chars(first, last, pid);
  if (ec != std::errc() || end == first || end == last || *end != '-' || pid <= 0) return 0;
  return static_cast<pid_t>(pid);
}

// Removes `<prefix>-<pid>-*` directories in `parent` of processes that are gone (kill(pid, 0)
// says ESRCH) and untouched for `stale_after_s`. Best effort: an unreadable parent is left alone.
void remove_stale(const std::string& parent, const std::string& prefix, double stale_after_s) {
  std::error_code ec;
  fs::directory_iterator it(parent, ec), end;
  const auto now = fs::file_time_type::clock::now();
  for (; !ec && it != end; it.increment(ec)) {
    const pid_t pid = pid_in_name(it->path().filename().string(), prefix);
    if (pid == 0 || pid == ::getpid()) continue;
    if (::kill(pid, 0) == 0 || errno != ESRCH) continue;  // running, or not ours to judge (EPERM)
    std::error_code e2;
    if (!it->is_directory(e2)) continue;
    const auto mtime = fs::last_write_time(it->path(), e2);
    if (e2 || std::chrono::duration<double>(now - mtime).count() < stale_after_s) continue;
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
