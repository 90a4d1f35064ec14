#include "cli/output_files.h"

#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <set>
#include <vector>

#include "cli/common.h"
#include "io/file.h"

namespace strata::cli {

namespace {

constexpr const char* kEmptyPath = "empty path (give a file name)";

// The directory an output is created in ("." for a bare file name).
std::string dir_of_output(const std::string& path) {
  std::string dir = std::filesystem::path(path).parent_path().string();
  return dir.empty() ? "." : dir;
}

// `p` resolved as far as it exists (weakly_canonical), or lexically normalised where that fails.
std::filesystem::path resolved(const std::string& p) {
  std::error_code ec;
  std::filesystem::path c = std::filesystem::weakly_canonical(p, ec);
  if (!ec) return c;
  c = std::filesystem::absolute(p, ec);
  return (ec ? std::filesystem::path(p) : c).lexically_normal();
}

}  // namespace

CLI::Option* add_output_option(CLI::App& app, const std::string& name, std::string* path, const std::string& help) {
  return app.add_option(name, *path, help)
      ->check(CLI::Validator([](std::string& v) { return v.empty() ? std::string(kEmptyPath) : std::string(); }, ""));
}

Status check_output_file(const std::string& flag, const std::string& path, bool creates_dir) {
  if (path.empty()) return InvalidArgument(flag + ": " + kEmptyPath);
  const std::string what = flag + " " + path + ": ";
  std::string dir = dir_of_output(path);
  struct stat st;
  if (creates_dir)  // the first missing directory is created in the nearest existing one
    while (::stat(dir.c_str(), &st) != 0 && errno == ENOENT) {
      const std::string up = std::filesystem::path(dir).parent_path().string();
      if (up == dir) break;
      dir = up.empty() ? "." : up;
    }
  if (::stat(dir.c_str(), &st) != 0) {
    if (errno == ENOENT) return InvalidArgument(what + "directory " + dir + " does not exist");
    if (errno == ENOTDIR) return InvalidArgument(what + "a parent of " + dir + " is not a directory");
    return InvalidArgument(what + "directory " + dir + ": " + std::strerror(errno));
  }
  if (!S_ISDIR(st.st_mode)) return InvalidArgument(what + dir + " is not a directory");
  // W_OK | X_OK: creating the temp file and renaming it need both (io::AtomicFile).
  if (::access(dir.c_str(), W_OK | X_OK) != 0)
    return InvalidArgument(what + "directory " + dir + " is not writable (" + std::strerror(errno) + ")");
  if (Status s = io::check_replaceable(path); !s.ok()) return InvalidArgument(flag + " " + s.message());
  return Status();
}

bool same_file(const std::string& a, const std::string& b) {
  if (resolved(a) == resolved(b)) return true;
  struct stat sa, sb;
  return ::stat(a.c_str(), &sa) == 0 && ::stat(b.c_str(), &sb) == 0 && sa.st_dev == sb.st_dev &&
         sa.st_ino == sb.st_ino;
}

Status check_output_files(std::initializer_list<FlagPath> outputs, std::initializer_list<FlagPath> inputs) {
  std::vector<const FlagPath*> given;
  for (const FlagPath& o : outputs) {
    if (o.path.empty()) continue;
    STRATA_RETURN_IF_ERROR(check_output_file(o.flag, o.path, o.creates_dir));
    for (const FlagPath& in : inputs)
      if (!in.path.empty() && in.path != "-" && same_file(o.path, in.path))
        return InvalidArgument(o.flag + " " + o.path + " is the input " + in.flag +
                               " (writing it would destroy what is read; give another path)");
    for (const FlagPath* earlier : given)
      if (same_file(o.path, earlier->path))
        return InvalidArgument(earlier->flag + " and " + o.flag + " name the same file " + o.path +
                               " (one write would replace the other; give two paths)");
    given.push_back(&o);
  }
  // A directory that can be written but not read: the write works but its entry cannot be fsynced
  // (io::Env::sync_dir counts that as success; library floors do not write to stderr, so the
  // warning is given here, once per directory, before the work).
  std::set<std::string> warned;
  const Logger log = stderr_logger(LogLevel::kWarn);
  for (const FlagPath* o : given) {
    const std::string dir = dir_of_output(o->path);
    if (::access(dir.c_str(), R_OK) == 0 || errno != EACCES || !warned.insert(resolved(dir).string()).second)
      continue;
    log.warn(o->flag + " " + o->path + ": directory " + dir +
             " is not readable, so after the file is written its directory entry cannot be fsynced "
             "(a crash soon after could lose the new file)");
  }
  return Status();
}

}  // namespace strata::cli
