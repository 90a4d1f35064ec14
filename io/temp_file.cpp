#include "io/temp_file.h"

#include <dirent.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <climits>
#include <memory>

namespace strata::io {

namespace {

constexpr std::string_view kTempInfix = ".tmp.";

// A canonical decimal pid in [1, INT_MAX]: digits only, no leading zero, at most 10 digits.
std::optional<int> parse_pid(std::string_view s) {
  if (s.empty() || s.size() > 10 || s[0] == '0') return std::nullopt;
  long long v = 0;
  for (char c : s) {
    if (c < '0' || c > '9') return std::nullopt;
    v = v * 10 + (c - '0');
  }
  if (v > INT_MAX) return std::nullopt;
  return static_cast<int>(v);
}

std::string base_name(const std::string& path) {
  const size_t slash = path.rfind('/');
  return slash == std::string::npos ? path : path.substr(slash + 1);
}

}  // namespace

std::string temp_path_for(const std::string& path) {
  return path + std::string(kTempInfix) + std::to_string(::getpid());
}

std::optional<TempName> split_temp_name(std::string_view file_name) {
  const size_t at = file_name.rfind(kTempInfix);
  if (at == std::string_view::npos || at == 0) return std::nullopt;
  auto pid = parse_pid(file_name.substr(at + kTempInfix.size()));
  if (!pid) return std::nullopt;
  return TempName{file_name.substr(0, at), *pid};
}

std::optional<int> parse_temp_pid(std::string_view file_name, std::string_view target_name) {
  auto t = split_temp_name(file_name);
  if (!t || t->target != target_name) return std::nullopt;
  return t->pid;
}

bool process_alive(int pid) {
  if (pid <= 0) return true;  // never signal a process group; treat as alive (left alone)
  return ::kill(static_cast<pid_t>(pid), 0) == 0 || errno != ESRCH;
}

Result<SweepReport> sweep_stale_temps(const std::string& dir, const std::function<bool(std::string_view)>& is_target,
                                      Env* env) {
  env = env_or_default(env);
  SweepReport rep;
  const std::string d = dir.empty() ? "." : dir;
  std::unique_ptr<DIR, int (*)(DIR*)> dp(::opendir(d.c_str()), &::closedir);
  if (!dp) {
    if (errno == ENOENT) return rep;
    return IOError(d + ": list directory to sweep stale temp files", errno);
  }
  const uid_t me = ::geteuid();
  const int self = static_cast<int>(::getpid());
  for (;;) {
    errno = 0;
    const dirent* e = ::readdir(dp.get());
    if (e == nullptr) {
      if (errno != 0) return IOError(d + ": list directory to sweep stale temp files", errno);
      break;
    }
    const std::string_view name(e->d_name);
    auto t = split_temp_name(name);
    if (!t || !is_target(t->target)) continue;
    const std::string path = (d == "/" ? "" : d) + "/" + std::string(name);
    struct stat st;
    if (::lstat(path.c_str(), &st) != 0) continue;  // gone already (a concurrent sweep)
    if (!S_ISREG(st.st_mode) || st.st_uid != me) {
      ++rep.kept_other;
      continue;
    }
    if (t->pid == self || process_alive(t->pid)) {
      ++rep.kept_live;
      continue;
    }
    Status s = env->remove_file(path);
    if (!s.ok() && s.code() != StatusCode::kNotFound) return s.with_context("sweep stale temp file");
    if (s.ok()) ++rep.removed;
  }
  return rep;
}

Result<SweepReport> sweep_stale_temps_of(const std::string& path, Env* env) {
  const std::string target = base_name(path);
  return sweep_stale_temps(
      dir_of(path), [&](std::string_view t) { return t == target; }, env);
}

}  // namespace strata::io
