#include "io/gguf_split_writer.h"

#include <limits>

#include "io/file.h"
#include "io/temp_file.h"

namespace strata::io {

namespace {

constexpr uint64_t kSplitPad = 32;  // gguf-split pads each tensor's bytes to GGUF_DEFAULT_ALIGNMENT when it sizes a split

uint64_t padded(uint64_t n) { return (n + kSplitPad - 1) / kSplitPad * kSplitPad; }

}  // namespace

Result<std::unique_ptr<GgufSplitWriter>> GgufSplitWriter::create(const std::string& path,
                                                                 std::vector<std::pair<std::string, GgufValue>> metadata,
                                                                 std::vector<GgufTensorDecl> tensors, GgufSplitOptions split,
                                                                 GgufWriterOptions options) {
  auto w = std::unique_ptr<GgufSplitWriter>(new GgufSplitWriter());
  w->env_ = env_or_default(options.env);
  // Sizes of the tensors (GgufWriter::create checks names, ranks and blocks again, per file).
  for (const GgufTensorDecl& t : tensors) {
    std::vector<int64_t> ne(static_cast<size_t>(std::max(t.shape.rank, 0)));
    for (int d = 0; d < t.shape.rank && d <= kMaxDims; ++d)
      ne[static_cast<size_t>(d)] = t.shape.dims[static_cast<size_t>(t.shape.rank - 1 - d)];
    STRATA_ASSIGN_OR_RETURN(uint64_t nb, ggml_nbytes(t.type, ne, "gguf writer: " + path + ": tensor '" + t.name + "'"));
    w->nbytes_.push_back(nb);
    w->names_.push_back(t.name);
  }
  if (split.max_bytes == 0) {
    w->paths_ = {path};
    w->file_of_.assign(tensors.size(), 0);
    STRATA_ASSIGN_OR_RETURN(auto f, GgufWriter::create(path, std::move(metadata), std::move(tensors), options));
    w->files_.push_back(std::move(f));
    w->file_bytes_.push_back(w->files_[0]->file_bytes());
    return w;
  }

  // Which file each tensor goes to.
  size_t n_files = 1;
  uint64_t in_file = 0;
  for (size_t i = 0; i < tensors.size(); ++i) {
    const uint64_t b = padded(w->nbytes_[i]);
    if (in_file > 0 && in_file + b > split.max_bytes) {
      ++n_files;
      in_file = 0;
    }
    in_file += b;
    w->file_of_.push_back(n_files - 1);
  }
  if (n_files > std::numeric_limits<uint16_t>::max())
    return InvalidArgument(path + ": " + std::to_string(n_files) + " split files; gguf-split numbers at most 65535");
  if (path.size() <= 5 || path.compare(path.size() - 5, 5, ".gguf") != 0)
    return InvalidArgument(path + ": a split GGUF's name must end in .gguf (its files are PREFIX-0000N-of-0000M.gguf)");
  const std::string prefix = path.substr(0, path.size() - 5);
  const int count = static_cast<int>(n_files);
  for (int k = 0; k < count; ++k) {
    w->paths_.push_back(gguf_split_path(prefix, k + 1, count));
    if (path_taken(w->paths_.back()))
      return InvalidArgument(w->paths_.back() + ": exists; the GGUF writer refuses to replace a file");
  }

  // The files: split keys first (as gguf-split writes them), the model's keys in split 1 only.
  const GgufValue* alignment = nullptr;
  for (const auto& [k, v] : metadata)
    if (k == "general.alignment") alignment = &v;
  std::vector<std::pair<std::string, GgufValue>> rest_alignment;
  if (alignment) rest_alignment.emplace_back("general.alignment", *alignment);
  w->decls_.resize(n_files);
  for (size_t i = 0; i < tensors.size(); ++i) w->decls_[w->file_of_[i]].push_back(std::move(tensors[i]));
  w->metas_.resize(n_files);
  uint64_t total = 0;
  for (int k = 0; k < count; ++k) {
    auto& m = w->metas_[static_cast<size_t>(k)];
    m.emplace_back("split.no", GgufValue::u16(static_cast<uint16_t>(k)));
    m.emplace_back("split.count", GgufValue::u16(static_cast<uint16_t>(count)));
    m.emplace_back("split.tensors.count", GgufValue::i32(static_cast<int32_t>(w->nbytes_.size())));
    const auto& own = k == 0 ? metadata : rest_alignment;
    m.insert(m.end(), own.begin(), own.end());
    STRATA_ASSIGN_OR_RETURN(uint64_t b, GgufWriter::planned_bytes(m, w->decls_[static_cast<size_t>(k)]));
    w->file_bytes_.push_back(b);
    total += b;
  }
  // Before any file is created: the whole set must fit. A killed split run's temp files
  // (PREFIX-0000K-of-0000M.gguf.tmp.<pid>) would be swept as each file opens, after this check,
  // which counted their bytes as taken: sweep them first (best effort, as GgufWriter does).
  for (const std::string& p : w->paths_) (void)sweep_stale_temps_of(p, w->env_);
  if (options.check_free_space) STRATA_RETURN_IF_ERROR(check_free_space(path, total, "the split GGUF"));
  w->options_ = options;
  w->options_.check_free_space = false;  // checked above for the whole set
  w->files_.resize(n_files);
  return w;
}

Status GgufSplitWriter::open_file(size_t k) {
  if (files_[k]) return Status();
  STRATA_ASSIGN_OR_RETURN(files_[k], GgufWriter::create(paths_[k], std::move(metas_[k]), std::move(decls_[k]), options_));
  return Status();
}

Status GgufSplitWriter::close_before(size_t k) {
  for (size_t j = 0; j < k; ++j) {
    STRATA_RETURN_IF_ERROR(open_file(j));  // a file of empty tensors only is written whole here
    STRATA_RETURN_IF_ERROR(files_[j]->complete());
  }
  return Status();
}

GgufSplitWriter::~GgufSplitWriter() = default;  // each GgufWriter removes its temp file unless committed

uint64_t GgufSplitWriter::file_bytes() const {
  uint64_t n = 0;
  for (uint64_t b : file_bytes_) n += b;
  return n;
}

Status GgufSplitWriter::fail(Status s) {
  dead_ = true;
  files_.clear();  // every temp file goes
  return s;
}

Status GgufSplitWriter::write(const void* data, size_t n) {
  if (dead_) return InvalidArgument(paths_.front() + ": gguf writer: write after an earlier error");
  while (cur_ < nbytes_.size() && nbytes_[cur_] == 0) ++cur_;  // each file pads its own empty tensors
  // Past the last tensor the last file reports the error.
  const size_t k = cur_ < nbytes_.size() ? file_of_[cur_] : files_.size() - 1;
  if (Status s = close_before(k); !s.ok()) return fail(s);
  if (Status s = open_file(k); !s.ok()) return fail(s);
  if (Status s = files_[k]->write(data, n); !s.ok()) return fail(s);
  if (n == 0) return Status();
  cur_written_ += n;
  if (cur_written_ == nbytes_[cur_]) {
    ++cur_;
    cur_written_ = 0;
  }
  return Status();
}

Status GgufSplitWriter::write_tensor(const std::string& name, const void* data, size_t n) {
  if (dead_) return InvalidArgument(paths_.front() + ": gguf writer: write after an earlier error");
  while (cur_ < nbytes_.size() && nbytes_[cur_] == 0 && names_[cur_] != name) ++cur_;
  const size_t k = cur_ < nbytes_.size() ? file_of_[cur_] : files_.size() - 1;
  if (Status s = close_before(k); !s.ok()) return fail(s);
  if (Status s = open_file(k); !s.ok()) return fail(s);
  if (Status s = files_[k]->write_tensor(name, data, n); !s.ok()) return fail(s);
  ++cur_;  // write_tensor wrote all of the current tensor (or refused)
  cur_written_ = 0;
  return Status();
}

Status GgufSplitWriter::finish() {
  if (dead_) return InvalidArgument(paths_.front() + ": gguf writer: finish after an earlier error");
  if (finished_) return Status();
  if (Status s = close_before(files_.size()); !s.ok()) return fail(s);
  for (size_t k = 0; k < files_.size(); ++k)
    if (Status s = files_[k]->commit(); !s.ok()) {
      for (size_t j = 0; j < k; ++j) (void)env_->remove_file(paths_[j]);  // the set appears whole or not at all
      return fail(s);
    }
  finished_ = true;
  return Status();
}

}  // namespace strata::io
