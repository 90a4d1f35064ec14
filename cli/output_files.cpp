#include "cli/output_files.h"

#include <linux/magic.h>
#include <sys/stat.h>
#include <sys/vfs.h>
#include <unistd.h>

#include <cerrno>
#include <climits>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <set>
#include <vector>

#include "cli/common.h"
#include "io/file.h"
#include "io/gguf.h"

namespace strata::cli {

namespace {

constexpr const char* kEmptyPath = "empty path (give a file name)";

// What is wrong with an output's name as given, "" when nothing: an empty path would read as "not
// given" and write nothing; "-" would write a file literally named "-" where the user meant stdout.
std::string output_name_error(const std::string& path) {
  if (path.empty()) return kEmptyPath;
  if (path == "-") return "writing to stdout is not supported; give a file name (./- for a file named -)";
  return "";
}

// The directory an output is created in ("." for a bare file name).
std::string dir_of_output(const std::string& path) {
  std::string dir = std::filesystem::path(path).parent_path().string();
  return dir.empty() ? "." : dir;
}

// realpath(3) of `p`, "" when it fails (`p` or a parent missing, a loop, no permission).
std::string real_path(const std::string& p) {
  char buf[PATH_MAX];
  return ::realpath(p.c_str(), buf) ? std::string(buf) : std::string();
}

// The file `p` names, as the kernel resolves it: realpath(p) where it exists; for a file not yet
// created, realpath of its directory plus its last component, so that "x", "./x", "/abs/x" and
// "d/../x" are one file (d/.. follows a symlinked d as the kernel does, which a lexical
// normalisation would not); `p` made absolute and lexically normalised where neither resolves.
std::string resolved(const std::string& p) {
  if (std::string r = real_path(p); !r.empty()) return r;
  const std::filesystem::path fp(p);
  const std::filesystem::path name = fp.filename();
  if (!name.empty() && name != "." && name != "..")
    if (std::string dir = real_path(dir_of_output(p)); !dir.empty())
      return (std::filesystem::path(dir) / name).string();
  std::error_code ec;
  const std::filesystem::path a = std::filesystem::absolute(fp, ec);
  return (ec ? fp : a).lexically_normal().string();
}

// How output `out` is the model `model`, "" when it is not: " is the model " (the GGUF file
// itself), " is the model directory " (an output directory: logits --dump), " is inside the model
// directory " (a checkpoint directory: the loader reads files there by pattern, *.safetensors,
// tokenizer*.json, ..., so any name inside it may be read) or " is split N of M of the model " (a
// gguf-split set: io::GgufModel::open reads every file of the set from the name of any one, so the
// set's names are listed as it lists them).
std::string model_clash(const std::string& out, const std::string& model) {
  struct stat st;
  const bool dir = ::stat(model.c_str(), &st) == 0 && S_ISDIR(st.st_mode);
  if (same_file(out, model)) return dir ? " is the model directory " : " is the model ";
  const std::string m = resolved(model), o = resolved(out);
  if (o.size() > m.size() && o.compare(0, m.size(), m) == 0 && (m.back() == '/' || o[m.size()] == '/'))
    return dir ? " is inside the model directory " : " is the model ";
  if (const auto split = io::parse_gguf_split_path(model))
    for (int n = 1; n <= split->count; ++n)
      if (same_file(out, io::gguf_split_path(split->prefix, n, split->count)))
        return " is split " + std::to_string(n) + " of " + std::to_string(split->count) + " of the model ";
  return "";
}

// The first existing directory at or above `dir` (itself when it exists; "." above a relative
// path's top): where a writer that creates missing directories makes the first one.
std::string nearest_existing(std::string dir) {
  struct stat st;
  while (::stat(dir.c_str(), &st) != 0 && errno == ENOENT) {
    const std::string up = std::filesystem::path(dir).parent_path().string();
    if (up == dir) break;
    dir = up.empty() ? "." : up;
  }
  return dir;
}

// The name of the kernel file system `dir` is on when it is one where no regular file can be
// created (proc, sysfs, cgroup, ...), else null (a statfs failure included: the create reports it).
const char* pseudo_file_system(const std::string& dir) {
  struct statfs f;
  if (::statfs(dir.c_str(), &f) != 0) return nullptr;
  switch (static_cast<unsigned long>(f.f_type)) {
    case PROC_SUPER_MAGIC: return "proc";
    case SYSFS_MAGIC: return "sysfs";
    case CGROUP_SUPER_MAGIC: return "cgroup";
    case CGROUP2_SUPER_MAGIC: return "cgroup2";
    case DEVPTS_SUPER_MAGIC: return "devpts";
    case DEBUGFS_MAGIC: return "debugfs";
    case TRACEFS_MAGIC: return "tracefs";
    case SECURITYFS_MAGIC: return "securityfs";
    case BPF_FS_MAGIC: return "bpf";
    default: return nullptr;
  }
}

// OK when `dir` exists, is a directory, and may be written and searched (creating a file there and
// renaming it need both); else kInvalidArgument, `what` ("--flag PATH: ") then what is wrong.
Status check_writable_dir(const std::string& what, const std::string& dir) {
  struct stat st;
  if (::stat(dir.c_str(), &st) != 0) {
    if (errno == ENOENT) return InvalidArgument(what + "directory " + dir + " does not exist");
    if (errno == ENOTDIR) return InvalidArgument(what + "a parent of " + dir + " is not a directory");
    return InvalidArgument(what + "directory " + dir + ": " + std::strerror(errno));
  }
  if (!S_ISDIR(st.st_mode)) return InvalidArgument(what + dir + " is not a directory");
  // W_OK | X_OK: creating the temp file and renaming it need both (io::AtomicFile).
  if (::access(dir.c_str(), W_OK | X_OK) != 0)
    return InvalidArgument(what + "directory " + dir + " is not writable (" + std::strerror(errno) + ")");
  // access() grants root everything, but no one creates a file in the kernel's own file systems: as
  // root `plan --probe /proc/x.json` passed here and failed after minutes of measuring.
  if (const char* fs = pseudo_file_system(dir))
    return InvalidArgument(what + "directory " + dir + " is on " + fs + ", where files cannot be created");
  return Status();
}

}  // namespace

CLI::Option* add_output_option(CLI::App& app, const std::string& name, std::string* path, const std::string& help) {
  return app.add_option(name, *path, help)
      ->check(CLI::Validator([](std::string& v) { return output_name_error(v); }, ""));
}

Status check_output_dir(const std::string& flag, const std::string& dir, bool creates_dir) {
  if (dir.empty()) return InvalidArgument(flag + ": " + kEmptyPath);
  return check_writable_dir(flag + " " + dir + ": ", creates_dir ? nearest_existing(dir) : dir);
}

Status check_output_file(const std::string& flag, const std::string& path, bool creates_dir) {
  if (std::string e = output_name_error(path); !e.empty()) return InvalidArgument(flag + ": " + e);
  const std::string what = flag + " " + path + ": ";
  // With creates_dir the first missing directory is created in the nearest existing one.
  const std::string dir = creates_dir ? nearest_existing(dir_of_output(path)) : dir_of_output(path);
  STRATA_RETURN_IF_ERROR(check_writable_dir(what, dir));
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
    STRATA_RETURN_IF_ERROR(o.dir ? check_output_dir(o.flag, o.path, /*creates_dir=*/true)
                                 : check_output_file(o.flag, o.path, o.creates_dir));
    if (o.fresh && ::access(o.path.c_str(), F_OK) == 0)
      return InvalidArgument(o.flag + " " + o.path + ": exists (give a new name; it is never replaced)");
    for (const FlagPath& in : inputs) {
      if (in.path.empty()) continue;
      if (const std::string clash = in.model ? model_clash(o.path, in.path) : ""; !clash.empty())
        return InvalidArgument(o.flag + " " + o.path + clash + in.flag + " " + in.path +
                               " (writing it would destroy the model; give another path)");
      // An input "-" is a path like any other: strata does not read stdin for it.
      if (same_file(o.path, in.path))
        return InvalidArgument(o.flag + " " + o.path + " is the input " + in.flag +
                               " (writing it would destroy what is read; give another path)");
    }
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
    if (o->dir) continue;  // its files are not fsynced
    const std::string dir = dir_of_output(o->path);
    if (::access(dir.c_str(), R_OK) == 0 || errno != EACCES || !warned.insert(resolved(dir)).second)
      continue;
    log.warn(o->flag + " " + o->path + ": directory " + dir +
             " is not readable, so after the file is written its directory entry cannot be fsynced "
             "(a crash soon after could lose the new file)");
  }
  return Status();
}

}  // namespace strata::cli
