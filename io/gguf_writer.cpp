#include "io/gguf_writer.h"

#include <algorithm>
#include <bit>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <set>

#include "io/file.h"
#include "io/temp_file.h"

namespace strata::io {

namespace {

constexpr size_t kBufferBytes = 4u << 20;

void put_le(std::string* out, uint64_t v, size_t n) {
  for (size_t i = 0; i < n; ++i) out->push_back(static_cast<char>((v >> (8 * i)) & 0xFF));
}
void put_string(std::string* out, const std::string& s) {
  put_le(out, s.size(), 8);
  out->append(s);
}

void put_value(std::string* out, const GgufValue& v) {
  switch (v.type()) {
    case GgufType::kString: put_string(out, *v.as_string()); return;
    case GgufType::kArray:
      put_le(out, static_cast<uint32_t>(v.elem_type()), 4);
      put_le(out, v.array_size(), 8);
      if (const auto* s = v.strings()) {
        for (const std::string& e : *s) put_string(out, e);
      } else {
        out->append(reinterpret_cast<const char*>(v.raw().data()), v.raw().size());
      }
      return;
    case GgufType::kF32: put_le(out, std::bit_cast<uint32_t>(static_cast<float>(*v.as_float())), 4); return;
    case GgufType::kF64: put_le(out, std::bit_cast<uint64_t>(*v.as_float()), 8); return;
    case GgufType::kBool: put_le(out, *v.as_bool() ? 1 : 0, 1); return;
    case GgufType::kU64: put_le(out, *v.as_uint(), 8); return;
    default: put_le(out, static_cast<uint64_t>(*v.as_int()), gguf_type_size(v.type())); return;
  }
}

uint64_t pad_to(uint64_t n, uint64_t align) { return (align - n % align) % align; }

}  // namespace

bool path_taken(const std::string& path) {
  std::error_code ec;
  // symlink_status: a dangling link is taken too (stat-based checks miss it, and rename would
  // replace the link).
  return std::filesystem::symlink_status(path, ec).type() != std::filesystem::file_type::not_found && !ec;
}

Result<uint64_t> GgufWriter::planned_bytes(const std::vector<std::pair<std::string, GgufValue>>& metadata,
                                            const std::vector<GgufTensorDecl>& tensors) {
  GgufWriter w;
  std::string header;
  STRATA_RETURN_IF_ERROR(w.plan("gguf writer", metadata, tensors, &header));
  return w.file_bytes_;
}

Result<std::unique_ptr<GgufWriter>> GgufWriter::create(const std::string& path,
                                                       std::vector<std::pair<std::string, GgufValue>> metadata,
                                                       std::vector<GgufTensorDecl> tensors, GgufWriterOptions options) {
  if (path_taken(path)) return InvalidArgument(path + ": exists; the GGUF writer refuses to replace a file");
  auto w = std::unique_ptr<GgufWriter>(new GgufWriter());
  std::string h;
  STRATA_RETURN_IF_ERROR(w->plan("gguf writer: " + path, metadata, tensors, &h));
  w->path_ = path;
  w->temp_ = temp_path_for(path);
  w->opt_ = options;
  w->env_ = env_or_default(options.env);
  w->tensors_ = std::move(tensors);
  (void)sweep_stale_temps_of(path, w->env_);  // best effort: a killed writer's PATH.tmp.<pid>
  // Refused before the first byte, not after hours of quantising (a 300 GB variant).
  if (options.check_free_space) STRATA_RETURN_IF_ERROR(check_free_space(path, w->file_bytes_, "the GGUF"));
  auto f = w->env_->new_writable_file(w->temp_);
  if (!f.ok()) return f.error();
  w->file_ = std::move(f).value();
  w->temp_exists_ = true;
  w->buf_.resize(kBufferBytes);
  STRATA_RETURN_IF_ERROR(w->buffered_write(h.data(), h.size()));
  return w;
}

Status GgufWriter::plan(const std::string& who, const std::vector<std::pair<std::string, GgufValue>>& metadata,
                        const std::vector<GgufTensorDecl>& tensors, std::string* header) {
  GgufWriter* w = this;
  std::set<std::string> keys;
  for (const auto& [k, v] : metadata) {
    if (k.empty()) return InvalidArgument(who + ": an empty metadata key");
    if (!keys.insert(k).second) return InvalidArgument(who + ": metadata key '" + k + "' given twice");
    if (v.is_array() && v.elem_type() == GgufType::kBool)
      for (uint8_t b : v.raw())
        if (b > 1) return InvalidArgument(who + ": key '" + k + "': bool array byte " + std::to_string(b) + ", expected 0 or 1");
    if (k == "general.alignment") {
      const auto a = v.as_uint();
      if (v.type() != GgufType::kU32 || !a || *a == 0 || !std::has_single_bit(*a) || *a > kMaxGgufAlignment)
        return InvalidArgument(who + ": general.alignment must be a u32 power of two <= " +
                               std::to_string(kMaxGgufAlignment) + ", got " + v.to_string() + " (" +
                               std::string(gguf_type_name(v.type())) + ")");
      w->alignment_ = static_cast<uint32_t>(*a);
    }
  }
  std::set<std::string> names;
  for (const GgufTensorDecl& t : tensors) {
    if (t.name.empty()) return InvalidArgument(who + ": a tensor has an empty name");
    if (t.name.size() >= kGgmlMaxName)
      return InvalidArgument(who + ": tensor name '" + t.name + "' has " + std::to_string(t.name.size()) +
                             " bytes; ggml reads at most " + std::to_string(kGgmlMaxName - 1));
    if (!names.insert(t.name).second) return InvalidArgument(who + ": tensor '" + t.name + "' declared twice");
    if (t.shape.rank < 1 || t.shape.rank > kMaxDims)
      return InvalidArgument(who + ": tensor '" + t.name + "': rank " + std::to_string(t.shape.rank) +
                             ", expected 1.." + std::to_string(kMaxDims));
    std::vector<int64_t> ne(static_cast<size_t>(t.shape.rank));
    for (int d = 0; d < t.shape.rank; ++d) ne[static_cast<size_t>(d)] = t.shape.dims[static_cast<size_t>(t.shape.rank - 1 - d)];
    STRATA_ASSIGN_OR_RETURN(uint64_t nb, ggml_nbytes(t.type, ne, who + ": tensor '" + t.name + "'"));
    w->nbytes_.push_back(nb);
  }

  // The header: magic, version, counts, key/values, tensor infos, padding.
  std::string h = "GGUF";
  put_le(&h, 3, 4);
  put_le(&h, tensors.size(), 8);
  put_le(&h, metadata.size(), 8);
  for (const auto& [k, v] : metadata) {
    put_string(&h, k);
    put_le(&h, static_cast<uint32_t>(v.type()), 4);
    put_value(&h, v);
  }
  uint64_t off = 0;
  for (size_t i = 0; i < tensors.size(); ++i) {
    const GgufTensorDecl& t = tensors[i];
    put_string(&h, t.name);
    put_le(&h, static_cast<uint32_t>(t.shape.rank), 4);
    for (int d = t.shape.rank - 1; d >= 0; --d) put_le(&h, static_cast<uint64_t>(t.shape.dims[static_cast<size_t>(d)]), 8);
    put_le(&h, static_cast<uint32_t>(t.type), 4);
    put_le(&h, off, 8);
    if (__builtin_add_overflow(off, w->nbytes_[i] + pad_to(w->nbytes_[i], w->alignment_), &off))
      return InvalidArgument(who + ": the tensors have more bytes than fit in 64 bits");
  }
  h.append(static_cast<size_t>(pad_to(h.size(), w->alignment_)), '\0');
  w->file_bytes_ = h.size() + off;
  *header = std::move(h);
  return Status();
}

GgufWriter::~GgufWriter() {
  if (file_) (void)file_->close();
  file_.reset();
  if (temp_exists_ && !finished_) (void)env_->remove_file(temp_);
}

Status GgufWriter::fail(Status s) {
  dead_ = true;
  if (file_) (void)file_->close();
  file_.reset();
  if (temp_exists_) (void)env_->remove_file(temp_);
  temp_exists_ = false;
  return s;
}

Status GgufWriter::raw_write(const void* data, size_t n) {
  if (Status s = file_->append(data, n); !s.ok()) return fail(s);
  return Status();
}

Status GgufWriter::flush() {
  if (buf_used_ == 0) return Status();
  const size_t n = buf_used_;
  buf_used_ = 0;
  return raw_write(buf_.data(), n);
}

Status GgufWriter::buffered_write(const void* data, size_t n) {
  written_ += n;
  if (n >= buf_.size() / 2) {
    STRATA_RETURN_IF_ERROR(flush());
    return raw_write(data, n);
  }
  if (buf_used_ + n > buf_.size()) STRATA_RETURN_IF_ERROR(flush());
  std::memcpy(buf_.data() + buf_used_, data, n);
  buf_used_ += n;
  return Status();
}

Status GgufWriter::pad_current() {
  static constexpr unsigned char kZeros[256] = {};
  uint64_t pad = pad_to(nbytes_[cur_], alignment_);
  while (pad > 0) {
    const size_t k = static_cast<size_t>(std::min<uint64_t>(pad, sizeof(kZeros)));
    STRATA_RETURN_IF_ERROR(buffered_write(kZeros, k));
    pad -= k;
  }
  ++cur_;
  cur_written_ = 0;
  return Status();
}

Status GgufWriter::write(const void* data, size_t n) {
  if (dead_) return InvalidArgument(path_ + ": gguf writer: write after an earlier error");
  if (finished_) return InvalidArgument(path_ + ": gguf writer: write after finish()");
  while (cur_ < tensors_.size() && nbytes_[cur_] == 0) STRATA_RETURN_IF_ERROR(pad_current());
  if (n == 0) return Status();
  if (cur_ >= tensors_.size())
    return fail(InvalidArgument(path_ + ": gguf writer: write of " + std::to_string(n) +
                                " bytes after every declared tensor is complete"));
  const GgufTensorDecl& t = tensors_[cur_];
  const uint64_t left = nbytes_[cur_] - cur_written_;
  if (n > left)
    return fail(InvalidArgument(path_ + ": gguf writer: tensor '" + t.name + "': write of " + std::to_string(n) +
                                " bytes, but only " + std::to_string(left) + " of its " +
                                std::to_string(nbytes_[cur_]) + " bytes remain"));
  STRATA_RETURN_IF_ERROR(buffered_write(data, n));
  cur_written_ += n;
  if (cur_written_ == nbytes_[cur_]) STRATA_RETURN_IF_ERROR(pad_current());
  return Status();
}

Status GgufWriter::write_tensor(const std::string& name, const void* data, size_t n) {
  if (dead_) return InvalidArgument(path_ + ": gguf writer: write after an earlier error");
  while (cur_ < tensors_.size() && nbytes_[cur_] == 0 && tensors_[cur_].name != name)
    STRATA_RETURN_IF_ERROR(pad_current());
  if (cur_ >= tensors_.size())
    return fail(InvalidArgument(path_ + ": gguf writer: tensor '" + name + "' written after every declared tensor"));
  if (tensors_[cur_].name != name)
    return fail(InvalidArgument(path_ + ": gguf writer: tensor '" + name + "' written out of order; the next is '" +
                                tensors_[cur_].name + "'"));
  if (cur_written_ != 0 || n != nbytes_[cur_])
    return fail(InvalidArgument(path_ + ": gguf writer: tensor '" + name + "': " + std::to_string(n) +
                                " bytes given, expected " + std::to_string(nbytes_[cur_] - cur_written_)));
  if (n == 0) return pad_current();
  return write(data, n);
}

Status GgufWriter::finish() {
  STRATA_RETURN_IF_ERROR(complete());
  return commit();
}

Status GgufWriter::complete() {
  if (dead_) return InvalidArgument(path_ + ": gguf writer: finish after an earlier error");
  if (completed_) return Status();
  while (cur_ < tensors_.size() && nbytes_[cur_] == 0) STRATA_RETURN_IF_ERROR(pad_current());
  if (cur_ < tensors_.size())
    return fail(InvalidArgument(path_ + ": gguf writer: tensor '" + tensors_[cur_].name + "' has " +
                                std::to_string(cur_written_) + " of its " + std::to_string(nbytes_[cur_]) +
                                " bytes (" + std::to_string(tensors_.size() - cur_) + " tensors incomplete)"));
  STRATA_RETURN_IF_ERROR(flush());
  if (written_ != file_bytes_)
    return fail(Internal(temp_ + ": wrote " + std::to_string(written_) + " bytes, planned " + std::to_string(file_bytes_)));
  if (opt_.fsync)
    if (Status s = file_->sync(); !s.ok()) return fail(s);
  auto on_disk = file_->size_on_disk();
  if (!on_disk.ok()) return fail(on_disk.error());
  if (*on_disk != file_bytes_)
    return fail(Corruption(temp_ + ": " + std::to_string(*on_disk) + " bytes on disk, expected " +
                           std::to_string(file_bytes_)));
  Status closed = file_->close();
  file_.reset();
  if (!closed.ok()) return fail(closed);
  std::vector<unsigned char>().swap(buf_);  // a complete file waiting for its commit holds no buffer
  completed_ = true;
  return Status();
}

Status GgufWriter::commit() {
  if (dead_) return InvalidArgument(path_ + ": gguf writer: commit after an earlier error");
  if (finished_) return Status();
  if (!completed_) return InvalidArgument(path_ + ": gguf writer: commit before complete()");
  if (path_taken(path_))
    return fail(InvalidArgument(path_ + ": appeared while the GGUF was being written; not replacing it"));
  if (Status r = env_->rename_file(temp_, path_); !r.ok()) return fail(r);
  temp_exists_ = false;
  finished_ = true;
  if (opt_.fsync) (void)env_->sync_dir(dir_of(path_));  // best effort: makes the rename durable
  return Status();
}

}  // namespace strata::io
