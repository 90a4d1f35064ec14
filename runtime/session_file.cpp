#include "runtime/session_file.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <bit>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <limits>
#include <memory>

#include "io/checkpoint.h"
#include "model/engram_hash.h"
#include "io/atomic_file.h"

namespace strata::runtime {

// ---- XXH64 (xxHash specification, 64-bit) -----------------------------------------------------------

namespace {

constexpr uint64_t kP1 = 0x9E3779B185EBCA87ull, kP2 = 0xC2B2AE3D27D4EB4Full, kP3 = 0x165667B19E3779F9ull,
                   kP4 = 0x85EBCA77C2B2AE63ull, kP5 = 0x27D4EB2F165667C5ull;

uint64_t read64(const uint8_t* p) {
  uint64_t v;
  std::memcpy(&v, p, 8);
  return v;  // little-endian host (x86-64)
}
uint32_t read32(const uint8_t* p) {
  uint32_t v;
  std::memcpy(&v, p, 4);
  return v;
}
uint64_t round64(uint64_t acc, uint64_t in) { return std::rotl(acc + in * kP2, 31) * kP1; }
uint64_t merge64(uint64_t acc, uint64_t v) { return (acc ^ round64(0, v)) * kP1 + kP4; }

uint64_t finish(uint64_t h, const uint8_t* p, size_t n) {
  for (; n >= 8; p += 8, n -= 8) h = std::rotl(h ^ round64(0, read64(p)), 27) * kP1 + kP4;
  if (n >= 4) {
    h = std::rotl(h ^ (static_cast<uint64_t>(read32(p)) * kP1), 23) * kP2 + kP3;
    p += 4;
    n -= 4;
  }
  for (; n > 0; ++p, --n) h = std::rotl(h ^ (*p * kP5), 11) * kP1;
  h ^= h >> 33;
  h *= kP2;
  h ^= h >> 29;
  h *= kP3;
  h ^= h >> 32;
  return h;
}

}  // namespace

Xxh64::Xxh64(uint64_t seed) : v_{seed + kP1 + kP2, seed + kP2, seed, seed - kP1}, seed_(seed) {}

void Xxh64::update(const void* data, size_t n) {
  if (n == 0) return;  // data may be null for an empty span; memcpy(…, nullptr, 0) is UB
  const auto* p = static_cast<const uint8_t*>(data);
  total_ += n;
  if (buf_n_ + n < 32) {
    std::memcpy(buf_ + buf_n_, p, n);
    buf_n_ += n;
    return;
  }
  if (buf_n_ > 0) {
    const size_t take = 32 - buf_n_;
    std::memcpy(buf_ + buf_n_, p, take);
    for (int i = 0; i < 4; ++i) v_[i] = round64(v_[i], read64(buf_ + 8 * i));
    p += take;
    n -= take;
    buf_n_ = 0;
  }
  for (; n >= 32; p += 32, n -= 32)
    for (int i = 0; i < 4; ++i) v_[i] = round64(v_[i], read64(p + 8 * i));
  std::memcpy(buf_, p, n);
  buf_n_ = n;
}

uint64_t Xxh64::digest() const {
  uint64_t h;
  if (total_ >= 32) {
    h = std::rotl(v_[0], 1) + std::rotl(v_[1], 7) + std::rotl(v_[2], 12) + std::rotl(v_[3], 18);
    for (int i = 0; i < 4; ++i) h = merge64(h, v_[i]);
  } else {
    h = seed_ + kP5;
  }
  h += total_;
  return finish(h, buf_, buf_n_);
}

uint64_t xxh64(const void* data, size_t n, uint64_t seed) {
  Xxh64 h(seed);
  h.update(data, n);
  return h.digest();
}

// ---- model identity -------------------------------------------------------------------------------

namespace {

std::string hex64(uint64_t v) {
  char b[17];
  std::snprintf(b, sizeof(b), "%016llx", static_cast<unsigned long long>(v));
  return b;
}

}  // namespace

std::string ModelIdentity::to_string() const { return "config " + hex64(config_hash) + ", tensors " + hex64(tensors_hash); }

Result<ModelIdentity> model_identity(const std::string& dir) {
  ModelIdentity id;
  STRATA_ASSIGN_OR_RETURN(std::string config, io::read_checkpoint_text(dir, "config.json", 64u << 20));
  id.config_hash = xxh64(config.data(), config.size());
  STRATA_ASSIGN_OR_RETURN(auto ck, io::Checkpoint::open(dir));
  Xxh64 h;
  std::vector<uint64_t> lo(static_cast<size_t>(ck->n_shards()), UINT64_MAX), hi(static_cast<size_t>(ck->n_shards()), 0);
  for (const auto& [name, t] : ck->tensors()) {  // std::map: sorted by name
    h.update(name.data(), name.size() + 1);
    const uint8_t dt = static_cast<uint8_t>(t.dtype);
    h.update(&dt, 1);
    h.update(&t.shape.rank, sizeof(t.shape.rank));
    for (int i = 0; i < t.shape.rank; ++i) h.update(&t.shape.dims[static_cast<size_t>(i)], sizeof(int64_t));
    h.update(&t.nbytes, sizeof(t.nbytes));
    lo[static_cast<size_t>(t.shard)] = std::min(lo[static_cast<size_t>(t.shard)], t.offset);
    hi[static_cast<size_t>(t.shard)] = std::max(hi[static_cast<size_t>(t.shard)], t.offset + t.nbytes);
  }
  // Two checkpoints with the same shapes but other weights (two synth seeds) differ in their bytes:
  // sample the first and last 4 KiB of every shard's tensor data.
  std::vector<uint8_t> buf(4096);
  for (int s = 0; s < ck->n_shards(); ++s) {
    const uint64_t a = lo[static_cast<size_t>(s)], b = hi[static_cast<size_t>(s)];
    if (a >= b) continue;
    const uint64_t n = std::min<uint64_t>(buf.size(), b - a);
    STRATA_RETURN_IF_ERROR(ck->shard(s).read_at(a, n, buf.data()));
    h.update(buf.data(), n);
    STRATA_RETURN_IF_ERROR(ck->shard(s).read_at(b - n, n, buf.data()));
    h.update(buf.data(), n);
  }
  id.tensors_hash = h.digest();
  return id;
}

// ---- file format ----------------------------------------------------------------------------------

namespace {

constexpr char kMagic[8] = {'S', 'T', 'R', 'A', 'T', 'A', 'S', 'S'};
constexpr uint32_t kHeaderBytes = 64;
constexpr uint64_t kFlagReplayed = 1;

enum Tag : uint32_t { kShape = 1, kTokens = 2, kLogits = 3, kEngram = 4, kLayer = 5, kEnd = 6 };

// The config fields the stored bytes depend on, one u64 each, then per layer: ratio, kv source,
// index-key owner. A file whose shape differs from the model's is rejected before anything is sized
// from it.
std::vector<uint64_t> shape_of(const model::ModelConfig& c, int engram_history) {
  std::vector<uint64_t> s = {static_cast<uint64_t>(c.n_layers),       static_cast<uint64_t>(c.window_size),
                             static_cast<uint64_t>(c.head_dim),       static_cast<uint64_t>(c.index_head_dim),
                             static_cast<uint64_t>(c.vocab_size),     static_cast<uint64_t>(engram_history)};
  for (int l = 0; l < c.n_layers; ++l) {
    s.push_back(static_cast<uint64_t>(c.compress_ratio(l)));
    s.push_back(c.is_kv_source(l) ? 1 : 0);
    s.push_back(c.owns_index_keys(l) ? 1 : 0);
  }
  return s;
}

// Buffered sequential writer that hashes what it writes. With no file it only counts and hashes
// (the first pass of save_session, which needs the payload's size and checksum for the header).
class Writer {
 public:
  explicit Writer(io::WritableFile* file) : file_(file) {
    if (file_) buf_.reserve(kBuf);
  }
  void put(const void* p, size_t n) {
    hash_.update(p, n);
    bytes_ += n;
    if (!file_) return;
    const auto* b = static_cast<const uint8_t*>(p);
    while (n > 0) {
      const size_t take = std::min(n, kBuf - buf_.size());
      buf_.insert(buf_.end(), b, b + take);
      b += take;
      n -= take;
      if (buf_.size() == kBuf && status_.ok()) status_ = flush();
    }
  }
  template <class T>
  void pod(const T& v) {
    put(&v, sizeof(T));
  }
  void record(uint32_t tag, uint64_t len) {
    pod(tag);
    pod(len);
  }
  [[nodiscard]] Status finish() {
    if (status_.ok()) status_ = flush();
    return status_;
  }
  uint64_t bytes() const { return bytes_; }
  uint64_t digest() const { return hash_.digest(); }

 private:
  static constexpr size_t kBuf = 1 << 20;
  Status flush() {
    if (!file_ || buf_.empty()) return Status();
    Status s = file_->append(buf_.data(), buf_.size());  // loops over short writes; names the file
    buf_.clear();
    return s;
  }
  io::WritableFile* file_;
  std::vector<uint8_t> buf_;
  Xxh64 hash_;
  uint64_t bytes_ = 0;
  Status status_;
};

// Writes the payload records of `s`.
void write_payload(const Session& s, Writer& w) {
  const model::ModelConfig& c = s.model().config();
  const model::KvCache& k = s.cache();
  const auto shape = shape_of(c, k.engram_history.size());
  w.record(kShape, shape.size() * 8);
  w.put(shape.data(), shape.size() * 8);
  w.record(kTokens, s.tokens().size() * 4);
  w.put(s.tokens().data(), s.tokens().size() * 4);
  w.record(kLogits, s.last_logits().size() * 4);
  w.put(s.last_logits().data(), s.last_logits().size() * 4);
  const auto hist = k.engram_history.ids();
  w.record(kEngram, hist.size() * 4);
  w.put(hist.data(), hist.size() * 4);
  for (int l = 0; l < c.n_layers; ++l) {
    const model::LayerKvCache& lc = k.layers[static_cast<size_t>(l)];
    const uint64_t comp_rows = static_cast<uint64_t>(lc.compressed.size());
    const uint64_t key_rows = static_cast<uint64_t>(lc.index_keys.size());
    const uint64_t len = 4 + 8 + lc.window.size() + lc.window_pos.size() * 8 + 8 +
                         (lc.kv_state.size() + lc.score_state.size()) * 4 + 8 + lc.compressed.used_bytes() + 8 +
                         lc.index_keys.used_bytes();
    w.record(kLayer, len);
    w.pod(static_cast<uint32_t>(l));
    w.pod(static_cast<uint64_t>(lc.comp_pos));
    w.put(lc.window.data(), lc.window.size());
    w.put(lc.window_pos.data(), lc.window_pos.size() * 8);
    w.pod(static_cast<uint64_t>(lc.kv_state.size()));
    w.put(lc.kv_state.data(), lc.kv_state.size() * 4);
    w.put(lc.score_state.data(), lc.score_state.size() * 4);
    for (const model::PagedRows* rows : {&lc.compressed, &lc.index_keys}) {
      w.pod(rows == &lc.compressed ? comp_rows : key_rows);
      for (int p = 0; p < rows->n_pages(); ++p)
        w.put(rows->page(p), static_cast<size_t>(rows->rows_in_page(p) * rows->row_bytes()));
    }
  }
  w.record(kEnd, 0);
}

void put_u32(uint8_t* p, uint32_t v) { std::memcpy(p, &v, 4); }
void put_u64(uint8_t* p, uint64_t v) { std::memcpy(p, &v, 8); }

}  // namespace

Status save_session(const Session& s, const ModelIdentity& id, const std::string& path, io::Env* env) {
  if (!s.valid()) return InvalidArgument("save session " + path + ": the session is unusable after a model failure");

  // Pass 1 sizes and hashes the payload, so the file is then written strictly front to back
  // (header first) through io::WritableFile, which has no positioned writes.
  Writer sizing(nullptr);
  write_payload(s, sizing);
  uint8_t header[kHeaderBytes] = {};
  std::memcpy(header, kMagic, 8);
  put_u32(header + 8, kSessionFormatVersion);
  put_u32(header + 12, kHeaderBytes);
  put_u64(header + 16, id.config_hash);
  put_u64(header + 24, id.tensors_hash);
  put_u64(header + 32, sizing.bytes());
  put_u64(header + 40, sizing.digest());
  put_u64(header + 48, s.replayed() ? kFlagReplayed : 0);
  put_u64(header + 56, xxh64(header, 56));

  // io::AtomicFile: a killed earlier save's temp file is swept, the bytes are staged beside PATH
  // and renamed over it by commit; any failure before that removes the temp file (PATH keeps its
  // previous contents), and errors name PATH, not the temp file.
  auto fail = [&](const Status& st) { return st.with_context("save session " + path); };
  auto created = io::AtomicFile::create(path, env);
  if (!created.ok()) return fail(created.error());
  std::unique_ptr<io::AtomicFile> f = std::move(created).value();
  if (Status st = f->append(header, kHeaderBytes); !st.ok()) return fail(st);
  Writer w(f.get());
  write_payload(s, w);
  if (Status st = w.finish(); !st.ok()) return fail(st);
  if (w.bytes() != sizing.bytes() || w.digest() != sizing.digest())
    return fail(Internal("the session changed while it was saved"));
  return fail(f->commit());
}

// ---- loading --------------------------------------------------------------------------------------

namespace {

// Sequential reader over an io::File's payload region with bounds checks.
class Reader {
 public:
  Reader(const io::File& f, uint64_t begin, uint64_t end) : f_(f), pos_(begin), end_(end) {}
  uint64_t left() const { return end_ - pos_; }
  [[nodiscard]] Status get(void* dst, uint64_t n, const char* what) {
    if (n > left())
      return Corruption(f_.path() + ": session file truncated inside " + std::string(what) + " (needs " +
                        std::to_string(n) + " bytes, " + std::to_string(left()) + " left)");
    auto* d = static_cast<uint8_t*>(dst);
    while (n > 0) {
      const uint64_t take = std::min<uint64_t>(n, 1u << 24);
      STRATA_RETURN_IF_ERROR(f_.read_at(pos_, take, d));
      pos_ += take;
      d += take;
      n -= take;
    }
    return Status();
  }
  template <class T>
  [[nodiscard]] Status pod(T* v, const char* what) {
    return get(v, sizeof(T), what);
  }

 private:
  const io::File& f_;
  uint64_t pos_, end_;
};

uint64_t get_u64(const uint8_t* p) { return read64(p); }

Status bad(const io::File& f, const std::string& what) { return Corruption(f.path() + ": session file " + what); }

}  // namespace

Result<Session> load_session(model::Model& m, const ModelIdentity& id, const std::string& path) {
  if (!io::file_exists(path)) return NotFound(path + ": no such session file");
  STRATA_ASSIGN_OR_RETURN(auto f, io::open_file(path));
  return load_session(m, id, *f);
}

Result<Session> load_session(model::Model& m, const ModelIdentity& id, const io::File& f) {
  const model::ModelConfig& c = m.config();
  const uint64_t size = f.size();
  if (size < kHeaderBytes)
    return bad(f, "truncated: " + std::to_string(size) + " bytes, shorter than its " + std::to_string(kHeaderBytes) +
                      "-byte header");
  uint8_t h[kHeaderBytes];
  STRATA_RETURN_IF_ERROR(f.read_at(0, kHeaderBytes, h));
  if (std::memcmp(h, kMagic, 8) != 0) return bad(f, "has no STRATASS magic: not a strata session file");
  if (get_u64(h + 56) != xxh64(h, 56)) return bad(f, "header checksum mismatch (the header is damaged)");
  uint32_t version, header_bytes;
  std::memcpy(&version, h + 8, 4);
  std::memcpy(&header_bytes, h + 12, 4);
  if (version != kSessionFormatVersion)
    return InvalidArgument(f.path() + ": session format version " + std::to_string(version) + ", this strata reads " +
                           std::to_string(kSessionFormatVersion));
  if (header_bytes != kHeaderBytes) return bad(f, "header size " + std::to_string(header_bytes) + " is not 64");
  const ModelIdentity file_id{get_u64(h + 16), get_u64(h + 24)};
  if (!(file_id == id)) {
    const char* part = file_id.config_hash != id.config_hash ? "config.json differs" : "the tensors differ";
    return InvalidArgument(f.path() + ": session was saved from another model (" + part + ": file has " +
                           file_id.to_string() + ", loaded model is " + id.to_string() + ")");
  }
  const uint64_t payload = get_u64(h + 32), checksum = get_u64(h + 40), flags = get_u64(h + 48);
  if (payload != size - kHeaderBytes)
    return bad(f, (payload > size - kHeaderBytes ? "truncated: " : "has trailing bytes: ") + std::string("header says ") +
                      std::to_string(payload) + " payload bytes, the file holds " + std::to_string(size - kHeaderBytes));
  {
    // Pass 1: the checksum over the whole payload, before anything is parsed or sized from it.
    Xxh64 hh;
    std::vector<uint8_t> buf(1 << 20);
    for (uint64_t off = kHeaderBytes; off < size;) {
      const uint64_t n = std::min<uint64_t>(buf.size(), size - off);
      STRATA_RETURN_IF_ERROR(f.read_at(off, n, buf.data()));
      hh.update(buf.data(), n);
      off += n;
    }
    if (hh.digest() != checksum) return bad(f, "payload checksum mismatch (the file is corrupted)");
  }

  // Pass 2: parse. Every size read from the file is checked against the model's shape first.
  Reader r(f, kHeaderBytes, size);
  auto expect_record = [&](uint32_t tag, uint64_t* len, const char* what) -> Status {
    uint32_t t = 0;
    STRATA_RETURN_IF_ERROR(r.pod(&t, what));
    STRATA_RETURN_IF_ERROR(r.pod(len, what));
    if (t != tag) return bad(f, "record " + std::to_string(t) + " where " + what + " (" + std::to_string(tag) + ") belongs");
    if (*len > r.left()) return bad(f, std::string("record ") + what + " runs past the end of the file");
    return Status();
  };
  uint64_t len = 0;
  model::KvCache k = m.new_cache();
  const auto shape = shape_of(c, k.engram_history.size());
  STRATA_RETURN_IF_ERROR(expect_record(kShape, &len, "shape"));
  if (len != shape.size() * 8) return InvalidArgument(f.path() + ": session cache shape does not match the loaded model");
  std::vector<uint64_t> fshape(shape.size());
  STRATA_RETURN_IF_ERROR(r.get(fshape.data(), len, "shape"));
  if (fshape != shape) return InvalidArgument(f.path() + ": session cache shape does not match the loaded model");

  STRATA_RETURN_IF_ERROR(expect_record(kTokens, &len, "tokens"));
  if (len % 4 != 0 || len / 4 > static_cast<uint64_t>(c.max_position_embeddings))
    return bad(f, "token record of " + std::to_string(len) + " bytes");
  std::vector<int32_t> tokens(len / 4);
  STRATA_RETURN_IF_ERROR(r.get(tokens.data(), len, "tokens"));
  for (size_t i = 0; i < tokens.size(); ++i)
    if (tokens[i] < 0 || tokens[i] >= c.vocab_size) return bad(f, "token " + std::to_string(i) + " out of the vocabulary");
  const int64_t n_past = static_cast<int64_t>(tokens.size());

  STRATA_RETURN_IF_ERROR(expect_record(kLogits, &len, "logits"));
  if (len != 0 && len != static_cast<uint64_t>(c.vocab_size) * 4) return bad(f, "logits record of " + std::to_string(len) + " bytes");
  std::vector<float> logits(len / 4);
  STRATA_RETURN_IF_ERROR(r.get(logits.data(), len, "logits"));

  STRATA_RETURN_IF_ERROR(expect_record(kEngram, &len, "Engram history"));
  if (len != static_cast<uint64_t>(k.engram_history.size()) * 4) return bad(f, "Engram history of the wrong size");
  std::vector<uint32_t> hist(len / 4);
  STRATA_RETURN_IF_ERROR(r.get(hist.data(), len, "Engram history"));
  // Compressed ids feed the Engram hash as they are: one at or past engram_compressed_vocab_size
  // (other than the dead-token marker) would break its overflow bound and abort the next decode
  // (found by fuzz/session_fuzz).
  for (size_t i = 0; i < hist.size(); ++i)
    if (hist[i] != model::EngramHasher::kDeadClass && hist[i] >= static_cast<uint64_t>(c.engram_compressed_vocab_size))
      return bad(f, "Engram history entry " + std::to_string(i) + " holds class " + std::to_string(hist[i]) +
                        ", outside the compressed vocabulary of " + std::to_string(c.engram_compressed_vocab_size));
  k.engram_history.append(hist);  // shifts all size() ids in: the history becomes exactly `hist`

  for (int l = 0; l < c.n_layers; ++l) {
    model::LayerKvCache& lc = k.layers[static_cast<size_t>(l)];
    const std::string where = "layer " + std::to_string(l);
    STRATA_RETURN_IF_ERROR(expect_record(kLayer, &len, "layer"));
    uint32_t layer = 0;
    uint64_t comp_pos = 0, state_n = 0, rows = 0;
    STRATA_RETURN_IF_ERROR(r.pod(&layer, "layer"));
    if (layer != static_cast<uint32_t>(l)) return bad(f, "layer record " + std::to_string(layer) + " where " + where + " belongs");
    STRATA_RETURN_IF_ERROR(r.pod(&comp_pos, "layer"));
    STRATA_RETURN_IF_ERROR(r.get(lc.window.data(), lc.window.size(), "window ring"));
    STRATA_RETURN_IF_ERROR(r.get(lc.window_pos.data(), lc.window_pos.size() * 8, "window ring"));
    for (size_t slot = 0; slot < lc.window_pos.size(); ++slot) {
      const int64_t p = lc.window_pos[slot];
      if (p != -1 && (p < 0 || p >= n_past || p % c.window_size != static_cast<int64_t>(slot)))
        return bad(f, where + ": window slot " + std::to_string(slot) + " holds position " + std::to_string(p));
    }
    STRATA_RETURN_IF_ERROR(r.pod(&state_n, "compressor state"));
    if (state_n != lc.kv_state.size()) return bad(f, where + ": compressor state of the wrong size");
    STRATA_RETURN_IF_ERROR(r.get(lc.kv_state.data(), state_n * 4, "compressor state"));
    STRATA_RETURN_IF_ERROR(r.get(lc.score_state.data(), state_n * 4, "compressor state"));
    const int ratio = c.compress_ratio(l);
    const bool source = ratio > 0 && c.is_kv_source(l);
    if (source ? static_cast<int64_t>(comp_pos) != n_past : comp_pos != 0)
      return bad(f, where + ": compressor frontier " + std::to_string(comp_pos) + " with " + std::to_string(n_past) + " tokens");
    lc.comp_pos = static_cast<int64_t>(comp_pos);
    const uint64_t groups = source ? static_cast<uint64_t>(n_past / ratio) : 0;
    for (model::PagedRows* store : {&lc.compressed, &lc.index_keys}) {
      const char* what = store == &lc.compressed ? "compressed KV" : "index keys";
      STRATA_RETURN_IF_ERROR(r.pod(&rows, what));
      const uint64_t want = store->row_bytes() > 0 ? groups : 0;
      if (rows != want)
        return bad(f, where + ": " + what + " has " + std::to_string(rows) + " rows, expected " + std::to_string(want));
      if (rows == 0) continue;
      const uint64_t rb = static_cast<uint64_t>(store->row_bytes());
      if (rows * rb > r.left()) return bad(f, where + ": " + what + " runs past the end of the file");
      std::vector<uint8_t> buf(static_cast<size_t>(std::min<uint64_t>(rows, 4096) * rb));
      for (uint64_t done = 0; done < rows;) {
        const uint64_t n = std::min<uint64_t>(rows - done, 4096);
        STRATA_RETURN_IF_ERROR(r.get(buf.data(), n * rb, what));
        store->append_rows(buf.data(), static_cast<int64_t>(n));
        done += n;
      }
    }
  }
  STRATA_RETURN_IF_ERROR(expect_record(kEnd, &len, "end"));
  if (len != 0 || r.left() != 0) return bad(f, "has bytes after its end record");
  k.n_past = n_past;
  return Session(m, std::move(tokens), std::move(k), std::move(logits), (flags & kFlagReplayed) != 0);
}

}  // namespace strata::runtime
