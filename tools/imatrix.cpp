#include "tools/imatrix.h"

#include <cstring>
#include <filesystem>

#include "io/file.h"
#include "io/gguf.h"
#include "io/gguf_names.h"
#include "io/gguf_writer.h"

namespace strata::tools {

namespace {

constexpr const char* kSum2 = ".in_sum2";
constexpr const char* kCounts = ".counts";

// The official (safetensors) name of `weight` in `layer`, expert 0 for routed experts.
std::string official_name(std::string_view weight, int layer) {
  if (layer < 0) return std::string(weight) + ".weight";  // "head"
  std::string w(weight);
  const std::string experts = "ffn.experts.";
  if (w.starts_with(experts)) w = experts + "0." + w.substr(experts.size());
  return "layers." + std::to_string(layer) + "." + w + ".weight";
}

bool ends_with(const std::string& s, const char* suffix, std::string* stem) {
  const size_t k = std::strlen(suffix);
  if (s.size() <= k || s.compare(s.size() - k, k, suffix) != 0) return false;
  *stem = s.substr(0, s.size() - k);
  return true;
}

// Little-endian reader over a legacy .dat file's bytes; every read is bounds-checked.
class Bytes {
 public:
  Bytes(const std::string& b, const std::string& path) : b_(b), path_(path) {}
  bool at_end() const { return pos_ == b_.size(); }
  Status i32(int32_t* v, const std::string& what) { return raw(v, 4, what); }
  Status raw(void* dst, size_t n, const std::string& what) {
    if (n > b_.size() - pos_)
      return Corruption(path_ + ": legacy imatrix truncated reading " + what + " at byte " + std::to_string(pos_) +
                        " (file has " + std::to_string(b_.size()) + " bytes)");
    if (n > 0) std::memcpy(dst, b_.data() + pos_, n);
    pos_ += n;
    return Status();
  }
  size_t left() const { return b_.size() - pos_; }

 private:
  const std::string& b_;
  const std::string& path_;
  size_t pos_ = 0;
};

Result<Imatrix> read_legacy(const std::string& path, const std::string& bytes) {
  Imatrix m;
  m.legacy = true;
  Bytes in(bytes, path);
  int32_t n_entries = 0;
  STRATA_RETURN_IF_ERROR(in.i32(&n_entries, "the entry count"));
  if (n_entries < 1) return Corruption(path + ": legacy imatrix declares " + std::to_string(n_entries) + " entries");
  for (int32_t i = 0; i < n_entries; ++i) {
    const std::string what = "entry " + std::to_string(i);
    int32_t len = 0, ncall = 0, nval = 0;
    STRATA_RETURN_IF_ERROR(in.i32(&len, what + " name length"));
    if (len < 1 || static_cast<size_t>(len) > in.left())
      return Corruption(path + ": legacy imatrix " + what + " has name length " + std::to_string(len));
    std::string name(static_cast<size_t>(len), '\0');
    STRATA_RETURN_IF_ERROR(in.raw(name.data(), name.size(), what + " name"));
    STRATA_RETURN_IF_ERROR(in.i32(&ncall, what + " ncall"));
    STRATA_RETURN_IF_ERROR(in.i32(&nval, what + " value count"));
    if (nval < 1 || static_cast<size_t>(nval) > in.left() / 4)
      return Corruption(path + ": legacy imatrix entry '" + name + "' has " + std::to_string(nval) + " values");
    ImatrixEntry e;
    e.n_cols = nval;
    e.in_sum2.resize(static_cast<size_t>(nval));
    STRATA_RETURN_IF_ERROR(in.raw(e.in_sum2.data(), e.in_sum2.size() * 4, "entry '" + name + "' values"));
    // The stored values are mean x^2 times ncall (llama-imatrix save_imatrix_legacy); llama-quantize
    // divides by ncall.
    if (ncall > 0)
      for (float& v : e.in_sum2) v /= static_cast<float>(ncall);
    e.counts = {1.0f};
    m.entries[name] = std::move(e);
  }
  if (!in.at_end()) {
    int32_t chunks = 0, dlen = 0;
    STRATA_RETURN_IF_ERROR(in.i32(&chunks, "the chunk count"));
    STRATA_RETURN_IF_ERROR(in.i32(&dlen, "the dataset name length"));
    if (dlen < 0 || static_cast<size_t>(dlen) > in.left())
      return Corruption(path + ": legacy imatrix dataset name length " + std::to_string(dlen));
    std::string ds(static_cast<size_t>(dlen), '\0');
    STRATA_RETURN_IF_ERROR(in.raw(ds.data(), ds.size(), "the dataset name"));
    m.chunk_count = chunks > 0 ? static_cast<uint32_t>(chunks) : 0;
    m.datasets.push_back(std::move(ds));
  }
  return m;
}

Result<std::vector<float>> read_f32(const io::GgufModel& g, const io::GgufTensorInfo& t) {
  std::vector<float> v(static_cast<size_t>(t.nbytes / 4));
  STRATA_RETURN_IF_ERROR(g.read_range(t, 0, t.nbytes, v.data()));
  return v;
}

Result<Imatrix> read_gguf(const std::string& path, std::unique_ptr<io::File> file) {
  std::vector<std::unique_ptr<io::File>> files;
  files.push_back(std::move(file));
  auto g = io::GgufModel::open_files(std::move(files));
  if (!g.ok()) return g.error().with_context(path);
  Imatrix m;
  const io::GgufValue* ds = (*g)->find_key("imatrix.datasets");
  const io::GgufValue* cc = (*g)->find_key("imatrix.chunk_count");
  const io::GgufValue* cs = (*g)->find_key("imatrix.chunk_size");
  if (!ds || !ds->strings() || !cc || !cc->as_uint() || !cs || !cs->as_uint())
    return Corruption(path + ": GGUF without the imatrix keys (imatrix.datasets, imatrix.chunk_count, "
                             "imatrix.chunk_size): not an imatrix from llama-imatrix or strata calibrate");
  m.datasets = *ds->strings();
  m.chunk_count = static_cast<uint32_t>(*cc->as_uint());
  m.chunk_size = static_cast<uint32_t>(*cs->as_uint());
  std::map<std::string, std::pair<const io::GgufTensorInfo*, const io::GgufTensorInfo*>> pairs;
  for (const auto& [name, t] : (*g)->tensors()) {
    std::string stem;
    if (ends_with(name, kSum2, &stem)) pairs[stem].first = &t;
    else if (ends_with(name, kCounts, &stem)) pairs[stem].second = &t;
  }
  for (const auto& [name, p] : pairs) {
    const io::GgufTensorInfo* s = p.first;
    const io::GgufTensorInfo* c = p.second;
    if (!s || !c) return Corruption(path + ": entry '" + name + "' has " + (s ? "no .counts" : "no .in_sum2") + " tensor");
    if (s->type != io::GgmlType::kF32 || c->type != io::GgmlType::kF32 || s->ne.size() > 2 || c->ne.size() > 2)
      return Corruption(path + ": entry '" + name + "': .in_sum2 and .counts must be F32 of at most 2 dims");
    ImatrixEntry e;
    e.n_cols = s->ne[0];
    e.n_mats = s->ne.size() > 1 ? s->ne[1] : 1;
    const int64_t c_cols = c->ne[0], c_mats = c->ne.size() > 1 ? c->ne[1] : 1;
    if (c_cols != 1 || c_mats != e.n_mats)
      return Corruption(path + ": entry '" + name + "': .counts has ne [" + std::to_string(c_cols) + ", " +
                        std::to_string(c_mats) + "], expected [1, " + std::to_string(e.n_mats) + "] for .in_sum2's " +
                        std::to_string(e.n_mats) + " matrices");
    STRATA_ASSIGN_OR_RETURN(e.in_sum2, read_f32(**g, *s));
    STRATA_ASSIGN_OR_RETURN(e.counts, read_f32(**g, *c));
    for (float v : e.counts)
      if (!(v >= 0.0f)) return Corruption(path + ": entry '" + name + "' has a count " + std::to_string(v));
    m.entries[name] = std::move(e);
  }
  return m;
}

}  // namespace

void ImatrixCollector::linear_input(std::string_view weight, int layer, int expert, std::span<const float> x,
                                    int64_t cols) {
  if (cols <= 0) return;
  auto key = std::make_pair(layer, std::string(weight));
  auto it = acc_.find(key);
  if (it == acc_.end()) {
    Acc a;
    const std::string off = official_name(weight, layer);
    if (expert >= 0) {
      auto e = io::gguf_expert_tensor(off);
      STRATA_CHECK(e.has_value(), "imatrix: routed expert weight without a stacked GGUF name");
      a.gguf = e->stacked;
      a.n_mats = c_.n_experts(layer);
    } else {
      a.gguf = io::gguf_tensor_name(off);
    }
    a.n_cols = cols;
    a.sum2.assign(static_cast<size_t>(a.n_mats * cols), 0.0);
    a.counts.assign(static_cast<size_t>(a.n_mats), 0);
    it = acc_.emplace(std::move(key), std::move(a)).first;
  }
  Acc& a = it->second;
  STRATA_CHECK(a.n_cols == cols, "imatrix: a linear's input width changed between calls");
  const int64_t mat = expert >= 0 ? expert : 0;
  STRATA_CHECK(mat < a.n_mats, "imatrix: expert index out of range");
  const int64_t rows = static_cast<int64_t>(x.size()) / cols;
  double* s = a.sum2.data() + mat * cols;
  for (int64_t r = 0; r < rows; ++r) {
    const float* xr = x.data() + r * cols;
    for (int64_t j = 0; j < cols; ++j) s[j] += static_cast<double>(xr[j]) * static_cast<double>(xr[j]);
  }
  a.counts[static_cast<size_t>(mat)] += static_cast<uint64_t>(rows);
}

Imatrix ImatrixCollector::result(std::vector<std::string> datasets, uint32_t chunk_size) const {
  Imatrix m;
  m.datasets = std::move(datasets);
  m.chunk_count = chunks_;
  m.chunk_size = chunk_size;
  for (const auto& [key, a] : acc_) {
    ImatrixEntry e;
    e.n_cols = a.n_cols;
    e.n_mats = a.n_mats;
    // ROUNDING: f64 sums stored as f32, the file's type (llama-imatrix sums in f32 throughout).
    e.in_sum2.assign(a.sum2.begin(), a.sum2.end());
    e.counts.assign(a.counts.begin(), a.counts.end());
    m.entries[a.gguf] = std::move(e);
  }
  return m;
}

Status write_imatrix(const Imatrix& m, const std::string& path, io::Env* env) {
  std::vector<std::pair<std::string, io::GgufValue>> meta;
  meta.emplace_back("general.type", io::GgufValue::string("imatrix"));
  meta.emplace_back("imatrix.datasets", io::GgufValue::string_array(m.datasets));
  meta.emplace_back("imatrix.chunk_count", io::GgufValue::u32(m.chunk_count));
  meta.emplace_back("imatrix.chunk_size", io::GgufValue::u32(m.chunk_size));
  std::vector<io::GgufTensorDecl> decls;
  for (const auto& [name, e] : m.entries) {  // name order, as llama-imatrix sorts its entries
    if (e.n_cols <= 0 || e.n_mats <= 0 || e.in_sum2.size() != static_cast<size_t>(e.n_cols * e.n_mats) ||
        e.counts.size() != static_cast<size_t>(e.n_mats))
      return InvalidArgument(path + ": imatrix entry '" + name + "' sizes disagree (" + std::to_string(e.in_sum2.size()) +
                             " sums, " + std::to_string(e.counts.size()) + " counts for " + std::to_string(e.n_mats) +
                             " x " + std::to_string(e.n_cols) + ")");
    Shape s2, sc;
    s2.dims[0] = e.n_mats;
    s2.dims[1] = e.n_cols;
    s2.rank = 2;
    sc.dims[0] = e.n_mats;
    sc.dims[1] = 1;
    sc.rank = 2;
    decls.push_back(io::GgufTensorDecl{name + kSum2, io::GgmlType::kF32, s2});
    decls.push_back(io::GgufTensorDecl{name + kCounts, io::GgmlType::kF32, sc});
  }
  // llama-imatrix overwrites its output; the writer refuses an existing path, so clear it first
  // (a regular file only: never a device such as /dev/null, a FIFO or a link).
  STRATA_RETURN_IF_ERROR(io::check_replaceable(path));
  std::error_code ec;
  std::filesystem::remove(path, ec);
  io::GgufWriterOptions wo;
  wo.env = env;
  STRATA_ASSIGN_OR_RETURN(auto w, io::GgufWriter::create(path, std::move(meta), std::move(decls), wo));
  for (const auto& [name, e] : m.entries) {
    STRATA_RETURN_IF_ERROR(w->write(e.in_sum2.data(), e.in_sum2.size() * 4));
    STRATA_RETURN_IF_ERROR(w->write(e.counts.data(), e.counts.size() * 4));
  }
  return w->finish();
}

Result<Imatrix> read_imatrix(const std::string& path) {
  STRATA_ASSIGN_OR_RETURN(auto file, io::open_file(path));
  char magic[4] = {};
  if (file->size() < 4) return Corruption(path + ": " + std::to_string(file->size()) + " bytes, not an imatrix (GGUF or legacy .dat)");
  STRATA_RETURN_IF_ERROR(file->read_at(0, 4, magic));
  if (std::memcmp(magic, "GGUF", 4) == 0) return read_gguf(path, std::move(file));
  // A legacy .dat starts with an int32 entry count; text starting with '{' or '[' is JSON (a hot
  // file from `calibrate --out`, most likely), which the legacy reader would call truncated.
  size_t first = 0;  // past a UTF-8 byte order mark and white space
  if (std::memcmp(magic, "\xEF\xBB\xBF", 3) == 0) first = 3;
  while (first < 4 && (magic[first] == ' ' || magic[first] == '\n' || magic[first] == '\r' || magic[first] == '\t')) ++first;
  if (first < 4 && (magic[first] == '{' || magic[first] == '['))
    return Corruption(path + ": a JSON file, not an imatrix (GGUF or legacy .dat); `strata calibrate -m DIR -f TEXT "
                             "--imatrix F` writes one (--out writes the JSON hot file)");
  file.reset();
  STRATA_ASSIGN_OR_RETURN(std::string bytes, io::read_file_to_string(path, size_t{1} << 33));
  auto r = read_legacy(path, bytes);
  if (!r.ok())
    return Corruption(r.error().message() + " (the file does not start with \"GGUF\", so it was read as a legacy .dat imatrix)");
  return r;
}

namespace {

// Importance weights the quantisers can take: finite, >= 0, and small enough that the weighted
// searches (weights times squared values) cannot overflow f32 (a 3e38 weight crashed IQ4_NL's).
// llama-quantize refuses non-finite values too ("imatrix contains non-finite value").
constexpr float kMaxImportance = 1e24f;

Status check_weights(const std::vector<float>& w, const std::string& path, const std::string& tensor, int64_t n_cols) {
  for (size_t i = 0; i < w.size(); ++i)
    if (!(w[i] >= 0.0f && w[i] <= kMaxImportance))
      return InvalidArgument(path + ": imatrix entry '" + tensor + "', matrix " + std::to_string(i / static_cast<size_t>(n_cols)) +
                             " column " + std::to_string(i % static_cast<size_t>(n_cols)) + ": importance (in_sum2 / count) " +
                             std::to_string(w[i]) + " is not a finite number in [0, 1e24]");
  return Status();
}

}  // namespace

Result<std::vector<float>> imatrix_weights(const Imatrix& m, const std::string& path, const std::string& tensor,
                                           int64_t n_cols, int64_t n_mats) {
  auto it = m.entries.find(tensor);
  if (it == m.entries.end()) return std::vector<float>{};
  const ImatrixEntry& e = it->second;
  const int64_t total = static_cast<int64_t>(e.in_sum2.size());
  std::vector<float> w(static_cast<size_t>(n_cols * n_mats));
  if (e.n_cols == n_cols && e.n_mats == n_mats && static_cast<int64_t>(e.counts.size()) == n_mats) {
    for (int64_t k = 0; k < n_mats; ++k) {
      const float c = e.counts[static_cast<size_t>(k)];
      for (int64_t j = 0; j < n_cols; ++j)
        w[static_cast<size_t>(k * n_cols + j)] = c > 0.0f ? e.in_sum2[static_cast<size_t>(k * n_cols + j)] / c : 1.0f;
    }
    STRATA_RETURN_IF_ERROR(check_weights(w, path, tensor, n_cols));
    return w;
  }
  if (m.legacy && total == n_cols * n_mats && e.counts.size() == 1) {
    for (size_t i = 0; i < w.size(); ++i) w[i] = e.in_sum2[i] / e.counts[0];
    STRATA_RETURN_IF_ERROR(check_weights(w, path, tensor, n_cols));
    return w;
  }
  return InvalidArgument(path + ": imatrix entry '" + tensor + "' has " + std::to_string(e.n_mats) + " x " +
                         std::to_string(e.n_cols) + " values, but tensor '" + tensor + "' has " + std::to_string(n_mats) +
                         " matrices of " + std::to_string(n_cols) + " columns");
}

}  // namespace strata::tools
