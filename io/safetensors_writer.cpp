#include "io/safetensors_writer.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <nlohmann/json.hpp>
#include <set>

#include "io/file.h"
#include "io/temp_file.h"

namespace strata::io {

namespace {

// Coalescing buffer for small tensors (norms, biases); large chunks bypass it.
constexpr size_t kBufferBytes = 4u << 20;

std::string join_path(const std::string& dir, const std::string& name) {
  if (dir.empty()) return name;
  return dir.back() == '/' ? dir + name : dir + "/" + name;
}

std::string shard_file_name(const std::string& stem, size_t i, size_t n) {
  if (n == 1) return stem + ".safetensors";
  char buf[64];
  std::snprintf(buf, sizeof(buf), "-%05zu-of-%05zu.safetensors", i + 1, n);
  return stem + buf;
}

// The 8-byte little-endian length followed by the JSON header, padded with spaces to a multiple of 8.
std::string build_header(const std::vector<TensorDecl>& t, size_t first, size_t end) {
  nlohmann::ordered_json j;
  j["__metadata__"] = {{"format", "pt"}};
  uint64_t off = 0;
  for (size_t i = first; i < end; ++i) {
    nlohmann::ordered_json e;
    e["dtype"] = std::string(dtype_name(t[i].dtype));
    auto shape = nlohmann::ordered_json::array();
    for (int d = 0; d < t[i].shape.rank; ++d) shape.push_back(t[i].shape.dims[static_cast<size_t>(d)]);
    e["shape"] = std::move(shape);
    e["data_offsets"] = {off, off + t[i].nbytes()};
    off += t[i].nbytes();
    j[t[i].name] = std::move(e);
  }
  std::string json = j.dump();
  json.append((8 - json.size() % 8) % 8, ' ');
  std::string out(8, '\0');
  uint64_t n = json.size();
  for (int b = 0; b < 8; ++b) out[static_cast<size_t>(b)] = static_cast<char>((n >> (8 * b)) & 0xFF);
  return out + json;
}

}  // namespace

std::vector<std::pair<size_t, size_t>> SafetensorsWriter::shard_ranges(const std::vector<TensorDecl>& tensors,
                                                                       uint64_t max_shard_bytes) {
  // Greedy split in declaration order: a new shard starts when the next tensor would overflow it.
  std::vector<std::pair<size_t, size_t>> ranges;
  size_t first = 0;
  uint64_t bytes = 0;
  for (size_t i = 0; i < tensors.size(); ++i) {
    const uint64_t nb = tensors[i].nbytes();
    if (max_shard_bytes > 0 && i > first && bytes + nb > max_shard_bytes) {
      ranges.emplace_back(first, i);
      first = i;
      bytes = 0;
    }
    bytes += nb;
  }
  ranges.emplace_back(first, tensors.size());
  return ranges;
}

Result<std::unique_ptr<SafetensorsWriter>> SafetensorsWriter::create(const std::string& dir,
                                                                     std::vector<TensorDecl> tensors,
                                                                     SafetensorsWriterOptions options) {
  struct stat st;
  if (::stat(dir.c_str(), &st) != 0 || !S_ISDIR(st.st_mode))
    return NotFound(dir + ": not a directory (the safetensors writer needs an existing output directory)");
  if (options.stem.empty() || options.stem.find('/') != std::string::npos)
    return InvalidArgument("safetensors writer: file stem '" + options.stem + "' must be a plain, non-empty name");
  std::set<std::string> seen;
  for (const TensorDecl& t : tensors) {
    if (t.name.empty()) return InvalidArgument("safetensors writer: a tensor has an empty name");
    if (t.name == "__metadata__") return InvalidArgument("safetensors writer: '__metadata__' is not a tensor name");
    if (!seen.insert(t.name).second)
      return InvalidArgument("safetensors writer: tensor '" + t.name + "' declared twice");
    if (dtype_size(t.dtype) == 0) return InvalidArgument("safetensors writer: tensor '" + t.name + "': unknown dtype");
    for (int d = 0; d < t.shape.rank; ++d)
      if (t.shape.dims[static_cast<size_t>(d)] < 0)
        return InvalidArgument("safetensors writer: tensor '" + t.name + "': negative dimension in " +
                               t.shape.to_string());
  }

  auto w = std::unique_ptr<SafetensorsWriter>(new SafetensorsWriter());
  w->dir_ = dir;
  w->opt_ = options;
  w->tensors_ = std::move(tensors);

  const std::vector<std::pair<size_t, size_t>> ranges = shard_ranges(w->tensors_, options.max_shard_bytes);
  for (const TensorDecl& t : w->tensors_) w->total_data_bytes_ += t.nbytes();
  for (size_t s = 0; s < ranges.size(); ++s) {
    ShardPlan p;
    p.file_name = shard_file_name(options.stem, s, ranges.size());
    p.first_tensor = ranges[s].first;
    p.end_tensor = ranges[s].second;
    w->headers_.push_back(build_header(w->tensors_, p.first_tensor, p.end_tensor));
    p.header_bytes = w->headers_.back().size();
    for (size_t i = p.first_tensor; i < p.end_tensor; ++i) p.data_bytes += w->tensors_[i].nbytes();
    w->shards_.push_back(std::move(p));
  }
  w->temp_exists_.assign(w->shards_.size(), false);

  if (options.check_free_space)
    STRATA_RETURN_IF_ERROR(check_free_space(join_path(dir, options.stem + ".safetensors"), w->total_file_bytes(),
                                            "the checkpoint"));
  w->env_ = env_or_default(options.env);
  // Temp shards of this stem left by a killed writer (issue #13); live writers' files stay.
  const std::string stem = options.stem, index = stem + ".safetensors.index.json";
  auto swept = sweep_stale_temps(
      dir,
      [&](std::string_view t) {
        return t == index || (t.starts_with(stem) && t.ends_with(".safetensors") && t.size() > stem.size() &&
                              (t.size() == stem.size() + 12 || t[stem.size()] == '-'));
      },
      w->env_);
  if (!swept.ok()) return swept.error();
  w->buf_.resize(kBufferBytes);
  STRATA_RETURN_IF_ERROR(w->open_shard(0));
  return w;
}

SafetensorsWriter::~SafetensorsWriter() {
  if (file_) (void)file_->close();
  file_.reset();
  if (!finished_) remove_temp_files();
}

uint64_t SafetensorsWriter::total_file_bytes() const {
  uint64_t n = 0;
  for (const ShardPlan& s : shards_) n += s.file_bytes();
  return n;
}

std::string SafetensorsWriter::index_file_name() const {
  return shards_.size() > 1 ? opt_.stem + ".safetensors.index.json" : std::string();
}

std::string SafetensorsWriter::final_path(size_t s) const { return join_path(dir_, shards_[s].file_name); }

std::string SafetensorsWriter::temp_path(size_t s) const { return temp_path_for(final_path(s)); }

void SafetensorsWriter::remove_temp_files() {
  for (size_t s = 0; s < shards_.size(); ++s) {
    if (temp_exists_[s]) (void)env_->remove_file(temp_path(s));
    temp_exists_[s] = false;
  }
}

Status SafetensorsWriter::fail(Status s) {
  dead_ = true;
  if (file_) (void)file_->close();
  file_.reset();
  remove_temp_files();
  return s;
}

Status SafetensorsWriter::open_shard(size_t s) {
  auto f = env_->new_writable_file(temp_path(s));
  if (!f.ok()) return fail(f.error());
  file_ = std::move(f).value();
  temp_exists_[s] = true;
  cur_shard_ = s;
  fd_written_ = 0;
  const std::string& h = headers_[s];
  return raw_write(h.data(), h.size());
}

Status SafetensorsWriter::raw_write(const void* data, size_t n) {
  // append() loops over short writes and names the temp shard and the offset on error.
  if (Status s = file_->append(data, n); !s.ok()) return fail(s);
  fd_written_ += n;
  return Status();
}

Status SafetensorsWriter::flush_buffer() {
  if (buf_used_ == 0) return Status();
  size_t n = buf_used_;
  buf_used_ = 0;
  return raw_write(buf_.data(), n);
}

Status SafetensorsWriter::close_shard() {
  STRATA_RETURN_IF_ERROR(flush_buffer());
  const ShardPlan& p = shards_[cur_shard_];
  if (fd_written_ != p.file_bytes())
    return fail(Internal(temp_path(cur_shard_) + ": wrote " + std::to_string(fd_written_) + " bytes, planned " +
                         std::to_string(p.file_bytes())));
  if (opt_.fsync) {
    if (Status s = file_->sync(); !s.ok()) return fail(s);
  }
  auto on_disk = file_->size_on_disk();
  if (!on_disk.ok()) return fail(on_disk.error());
  if (*on_disk != p.file_bytes())
    return fail(Corruption(temp_path(cur_shard_) + ": " + std::to_string(*on_disk) + " bytes on disk, expected " +
                           std::to_string(p.file_bytes())));
  Status closed = file_->close();
  file_.reset();
  if (!closed.ok()) return fail(closed);
  return Status();
}

Status SafetensorsWriter::write(const void* data, size_t n) {
  if (dead_) return InvalidArgument("safetensors writer: write after an earlier error");
  if (finished_) return InvalidArgument("safetensors writer: write after finish()");
  // Skip zero-byte tensors so the cursor rests on one that still needs bytes.
  while (cur_tensor_ < tensors_.size() && tensors_[cur_tensor_].nbytes() == 0) ++cur_tensor_;
  if (n == 0) return Status();
  if (cur_tensor_ >= tensors_.size())
    return fail(InvalidArgument("safetensors writer: write of " + std::to_string(n) +
                                " bytes after every declared tensor is complete"));
  const TensorDecl& t = tensors_[cur_tensor_];
  const uint64_t left = t.nbytes() - cur_tensor_written_;
  if (n > left)
    return fail(InvalidArgument("safetensors writer: tensor '" + t.name + "': write of " + std::to_string(n) +
                                " bytes, but only " + std::to_string(left) + " of its " + std::to_string(t.nbytes()) +
                                " bytes remain (" + std::string(dtype_name(t.dtype)) + " " + t.shape.to_string() +
                                ")"));
  // The shard holding this tensor must be the open one (shards advance as tensors complete).
  while (cur_tensor_ >= shards_[cur_shard_].end_tensor) {
    STRATA_RETURN_IF_ERROR(close_shard());
    STRATA_RETURN_IF_ERROR(open_shard(cur_shard_ + 1));
  }
  if (n >= buf_.size() / 2) {
    STRATA_RETURN_IF_ERROR(flush_buffer());
    STRATA_RETURN_IF_ERROR(raw_write(data, n));
  } else {
    if (buf_used_ + n > buf_.size()) STRATA_RETURN_IF_ERROR(flush_buffer());
    std::memcpy(buf_.data() + buf_used_, data, n);
    buf_used_ += n;
  }
  cur_tensor_written_ += n;
  data_written_ += n;
  if (cur_tensor_written_ == t.nbytes()) {
    ++cur_tensor_;
    cur_tensor_written_ = 0;
  }
  return Status();
}

Status SafetensorsWriter::write_tensor(const std::string& name, const void* data, size_t n) {
  if (dead_) return InvalidArgument("safetensors writer: write after an earlier error");
  while (cur_tensor_ < tensors_.size() && tensors_[cur_tensor_].nbytes() == 0 && tensors_[cur_tensor_].name != name)
    ++cur_tensor_;
  if (cur_tensor_ >= tensors_.size())
    return fail(InvalidArgument("safetensors writer: tensor '" + name + "' written after every declared tensor"));
  const TensorDecl& t = tensors_[cur_tensor_];
  if (t.name != name)
    return fail(InvalidArgument("safetensors writer: tensor '" + name +
                                "' written out of order; the next declared "
                                "tensor is '" +
                                t.name + "'"));
  if (cur_tensor_written_ != 0 || n != t.nbytes())
    return fail(InvalidArgument("safetensors writer: tensor '" + name + "': " + std::to_string(n) +
                                " bytes given, expected " + std::to_string(t.nbytes() - cur_tensor_written_) + " (" +
                                std::string(dtype_name(t.dtype)) + " " + t.shape.to_string() + ")"));
  if (n == 0) {
    ++cur_tensor_;
    return Status();
  }
  return write(data, n);
}

Status SafetensorsWriter::finish() {
  if (dead_) return InvalidArgument("safetensors writer: finish after an earlier error");
  if (finished_) return Status();
  while (cur_tensor_ < tensors_.size() && tensors_[cur_tensor_].nbytes() == 0) ++cur_tensor_;
  if (cur_tensor_ < tensors_.size()) {
    const TensorDecl& t = tensors_[cur_tensor_];
    return fail(InvalidArgument("safetensors writer: tensor '" + t.name + "' has " +
                                std::to_string(cur_tensor_written_) + " of its " + std::to_string(t.nbytes()) +
                                " bytes (" + std::to_string(tensors_.size() - cur_tensor_) + " tensors incomplete)"));
  }
  // Trailing shards of only zero-byte tensors still get their (header-only) files.
  for (;;) {
    STRATA_RETURN_IF_ERROR(close_shard());
    if (cur_shard_ + 1 >= shards_.size()) break;
    STRATA_RETURN_IF_ERROR(open_shard(cur_shard_ + 1));
  }
  for (size_t s = 0; s < shards_.size(); ++s) {
    if (Status r = env_->rename_file(temp_path(s), final_path(s)); !r.ok()) return fail(r);
    temp_exists_[s] = false;
  }
  const std::string index = index_file_name();
  if (!index.empty()) {
    nlohmann::json j;
    j["metadata"] = {{"total_size", total_data_bytes_}};
    nlohmann::json wm = nlohmann::json::object();
    for (const ShardPlan& p : shards_)
      for (size_t i = p.first_tensor; i < p.end_tensor; ++i) wm[tensors_[i].name] = p.file_name;
    j["weight_map"] = std::move(wm);
    const std::string text = j.dump(2) + "\n";
    Status s = write_file_atomic(join_path(dir_, index), text.data(), text.size(), env_);
    if (!s.ok()) return fail(s);
  }
  if (opt_.fsync) (void)env_->sync_dir(dir_);  // best effort: makes the renames durable
  finished_ = true;
  return Status();
}

}  // namespace strata::io
