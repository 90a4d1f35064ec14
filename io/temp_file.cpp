#include "io/temp_file.h"

#include <dirent.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <climits>
#include <cstdint>
#include <memory>

#include "io/file.h"

namespace strata::io {

namespace {

constexpr std::string_view kTempInfix = ".tmp.";
constexpr std::string_view kShortPrefix = ".strata-tmp.";
constexpr size_t kHashDigits = 16;

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

// 64-bit FNV-1a of a file name, as 16 lower-case hex digits: the short temp name's target.
std::string name_hash(std::string_view name) {
  uint64_t h = 0xcbf29ce484222325ull;
  for (unsigned char c : name) h = (h ^ c) * 0x100000001b3ull;
  static constexpr char kHex[] = "0123456789abcdef";
  std::string out(kHashDigits, '0');
  for (size_t i = 0; i < kHashDigits; ++i) out[kHashDigits - 1 - i] = kHex[(h >> (4 * i)) & 0xf];
  return out;
}

// The pid of a short temp name ".strata-tmp." PID "." HASH whose HASH is `hash`, or nullopt.
std::optional<int> parse_short_temp_pid(std::string_view file_name, std::string_view hash) {
  if (file_name.substr(0, kShortPrefix.size()) != kShortPrefix) return std::nullopt;
  file_name.remove_prefix(kShortPrefix.size());
  const size_t dot = file_name.find('.');
  if (dot == std::string_view::npos || file_name.substr(dot + 1) != hash) return std::nullopt;
  return parse_pid(file_name.substr(0, dot));
}

// Sweeps the entries of `dir` for which `match` gives the pid of a temp file (see the file comment).
Result<SweepReport> sweep_matching(const std::string& dir,
                                   const std::function<std::optional<int>(std::string_view)>& match, Env* env) {
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
    const std::optional<int> pid = match(name);
    if (!pid) continue;
    const std::string path = (d == "/" ? "" : d) + "/" + std::string(name);
    struct stat st;
    if (::lstat(path.c_str(), &st) != 0) continue;  // gone already (a concurrent sweep)
    if (!S_ISREG(st.st_mode) || st.st_uid != me) {
      ++rep.kept_other;
      continue;
    }
    if (*pid == self || process_alive(*pid)) {
      ++rep.kept_live;
      continue;
    }
    Status s = env->remove_file(path);
    if (!s.ok() && s.code() != StatusCode::kNotFound) return s.with_context("sweep stale temp file");
    if (s.ok()) ++rep.removed;
  }
  return rep;
}

}  // namespace

std::string temp_path_for(const std::string& path) {
  const std::string pid = std::to_string(::getpid());
  const std::string name = base_name(path);
  if (name.size() + kTempInfix.size() + pid.size() <= max_name_bytes(dir_of(path)))
    return path + std::string(kTempInfix) + pid;
  const std::string short_name = std::string(kShortPrefix) + pid + "." + name_hash(name);
  return path.size() == name.size() ? short_name : path.substr(0, path.size() - name.size()) + short_name;
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
  return sweep_matching(
      dir,
      [&](std::string_view name) -> std::optional<int> {
        auto t = split_temp_name(name);
        if (!t || !is_target(t->target)) return std::nullopt;
        return t->pid;
      },
      env);
}

Result<SweepReport> sweep_stale_temps_of(const std::string& path, Env* env) {
  const std::string target = base_name(path);
  const std::string hash = name_hash(target);
  return sweep_matching(
      dir_of(path),
      [&](std::string_view name) {
        if (auto pid = parse_temp_pid(name, target)) return pid;
        return parse_short_temp_pid(name, hash);
      },
      env);
}

Result<SweepReport> sweep_stale_short_temps(const std::string& dir, Env* env) {
  return sweep_matching(
      dir,
      [](std::string_view name) -> std::optional<int> {
        if (name.substr(0, kShortPrefix.size()) != kShortPrefix) return std::nullopt;
        name.remove_prefix(kShortPrefix.size());
        const size_t dot = name.find('.');
        if (dot == std::string_view::npos || name.size() - dot - 1 != kHashDigits) return std::nullopt;
        for (char c : name.substr(dot + 1))
          if (!((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'))) return std::nullopt;
        return parse_pid(name.substr(0, dot));
      },
      env);
}

}  // namespace strata::io
