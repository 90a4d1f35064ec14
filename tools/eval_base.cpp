#include "tools/eval_base.h"

#include <cmath>
#include <cstring>


namespace strata::tools {

namespace {

// Limits checked before anything read from a file is allocated (STYLE.md §3.1).
constexpr uint64_t kMaxVocab = 1u << 24;
constexpr uint64_t kMaxTokens = 1ull << 32;

template <typename T>
void put(std::vector<uint8_t>& b, size_t off, T v) {
  std::memcpy(b.data() + off, &v, sizeof(T));
}
template <typename T>
T get(const uint8_t* p) {
  T v;
  std::memcpy(&v, p, sizeof(T));
  return v;
}

std::string u(uint64_t v) { return std::to_string(v); }

}  // namespace

Result<std::unique_ptr<EvalBaseWriter>> EvalBaseWriter::create(const std::string& path, const EvalBaseHeader& h,
                                                               std::span<const int32_t> tokens, io::Env* env) {
  if (tokens.size() != h.n_tokens)
    return Internal("eval base " + path + ": " + u(tokens.size()) + " tokens, header says " + u(h.n_tokens));
  std::unique_ptr<EvalBaseWriter> w(new EvalBaseWriter());
  w->path_ = path;
  w->h_ = h;
  STRATA_ASSIGN_OR_RETURN(w->file_, io::AtomicFile::create(path, env));
  std::vector<uint8_t> b(kEvalBaseHeaderBytes, 0);
  std::memcpy(b.data(), kEvalBaseMagic, 8);
  put<uint32_t>(b, 8, kEvalBaseVersion);
  put<uint32_t>(b, 12, kEvalBaseEncodingU16);
  put<uint32_t>(b, 16, h.vocab_size);
  put<uint64_t>(b, 24, h.n_tokens);
  put<uint64_t>(b, 32, h.ctx);
  put<uint64_t>(b, 40, h.stride);
  put<uint64_t>(b, 48, h.n_windows);
  put<uint64_t>(b, 56, h.n_scored);
  STRATA_RETURN_IF_ERROR(w->file_->append(b.data(), b.size()));
  STRATA_RETURN_IF_ERROR(w->file_->append(tokens.data(), tokens.size_bytes()));
  return w;
}

EvalBaseWriter::~EvalBaseWriter() = default;  // an uncommitted AtomicFile removes its temp file

Status EvalBaseWriter::append(const EvalBaseRecord& rec) {
  if (rec.row.codes.size() != h_.vocab_size)
    return Internal("eval base " + path_ + ": a record of " + u(rec.row.codes.size()) + " codes, vocab_size " +
                    u(h_.vocab_size));
  buf_.resize(h_.record_bytes());
  put<double>(buf_, 0, rec.nll);
  put<int32_t>(buf_, 8, rec.argmax);
  put<float>(buf_, 12, rec.row.scale);
  put<float>(buf_, 16, rec.row.min_logp);
  std::memcpy(buf_.data() + 20, rec.row.codes.data(), rec.row.codes.size() * sizeof(uint16_t));
  STRATA_RETURN_IF_ERROR(file_->append(buf_.data(), buf_.size()));
  ++n_appended_;
  return Status();
}

Status EvalBaseWriter::finish() {
  if (n_appended_ != h_.n_scored)
    return Internal("eval base " + path_ + ": " + u(n_appended_) + " records written, header says " + u(h_.n_scored));
  return file_->commit();
}

Result<std::unique_ptr<EvalBaseReader>> EvalBaseReader::open(const std::string& path) {
  STRATA_ASSIGN_OR_RETURN(std::unique_ptr<io::File> f, io::open_file(path));
  const std::string what = path + ": ";
  const uint64_t size = f->size();
  if (size < kEvalBaseHeaderBytes)
    return Corruption(what + "not a strata eval base file (" + u(size) + " bytes, shorter than the " +
                      u(kEvalBaseHeaderBytes) + "-byte header)");
  uint8_t b[kEvalBaseHeaderBytes];
  STRATA_RETURN_IF_ERROR(f->read_at(0, sizeof(b), b));
  if (std::memcmp(b, kEvalBaseMagic, 8) != 0)
    return Corruption(what +
                      "field 'magic' is not \"STRTEVAL\": not a strata eval base file (write one with strata "
                      "eval --save-base)");
  const uint32_t version = get<uint32_t>(b + 8), encoding = get<uint32_t>(b + 12);
  if (version != kEvalBaseVersion)
    return NotSupported(what + "field 'version' is " + u(version) + ", this strata reads version " +
                        u(kEvalBaseVersion));
  if (encoding != kEvalBaseEncodingU16)
    return Corruption(what + "field 'encoding' is " + u(encoding) + ", expected " + u(kEvalBaseEncodingU16) +
                      " (u16 log-prob grid)");
  std::unique_ptr<EvalBaseReader> r(new EvalBaseReader());
  EvalBaseHeader& h = r->h_;
  h.vocab_size = get<uint32_t>(b + 16);
  h.n_tokens = get<uint64_t>(b + 24);
  h.ctx = get<uint64_t>(b + 32);
  h.stride = get<uint64_t>(b + 40);
  h.n_windows = get<uint64_t>(b + 48);
  h.n_scored = get<uint64_t>(b + 56);
  if (h.vocab_size == 0 || h.vocab_size > kMaxVocab)
    return Corruption(what + "field 'vocab_size' is " + u(h.vocab_size) + ", expected 1.." + u(kMaxVocab));
  if (h.n_tokens < 2 || h.n_tokens > kMaxTokens)
    return Corruption(what + "field 'n_tokens' is " + u(h.n_tokens) + ", expected 2.." + u(kMaxTokens));
  if (h.ctx < 2 || h.ctx > h.n_tokens)
    return Corruption(what + "field 'ctx' is " + u(h.ctx) + ", expected 2..n_tokens (" + u(h.n_tokens) + ")");
  if (h.stride < 1 || h.stride >= h.ctx)
    return Corruption(what + "field 'stride' is " + u(h.stride) + ", expected 1..ctx-1 (ctx " + u(h.ctx) + ")");
  const uint64_t windows = (h.n_tokens - h.ctx) / h.stride + 1;
  if (h.n_windows != windows)
    return Corruption(what + "field 'n_windows' is " + u(h.n_windows) + ", expected " + u(windows) +
                      " from n_tokens, ctx and stride");
  if (h.n_scored != windows * h.stride)
    return Corruption(what + "field 'n_scored' is " + u(h.n_scored) +
                      ", expected n_windows * stride = " + u(windows * h.stride));
  // n_scored <= 2^32 and record_bytes <= 2^25 + 20: the product fits in 64 bits.
  const uint64_t expect = kEvalBaseHeaderBytes + 4 * h.n_tokens + h.n_scored * h.record_bytes();
  if (size != expect)
    return Corruption(what + "size " + u(size) + " bytes, expected " + u(expect) + " from the header (n_tokens " +
                      u(h.n_tokens) + ", n_scored " + u(h.n_scored) + ", vocab_size " + u(h.vocab_size) +
                      "): truncated or not a complete eval base file");
  r->tokens_.resize(h.n_tokens);
  STRATA_RETURN_IF_ERROR(f->read_at(kEvalBaseHeaderBytes, 4 * h.n_tokens, r->tokens_.data()));
  r->path_ = path;
  r->file_ = std::move(f);
  return r;
}

Status EvalBaseReader::read(uint64_t i, EvalBaseRecord* rec) const {
  if (i >= h_.n_scored)
    return InvalidArgument(path_ + ": record " + u(i) + " out of range (n_scored " + u(h_.n_scored) + ")");
  const uint64_t off = kEvalBaseHeaderBytes + 4 * h_.n_tokens + i * h_.record_bytes();
  buf_.resize(h_.record_bytes());
  STRATA_RETURN_IF_ERROR(file_->read_at(off, buf_.size(), buf_.data()));
  rec->nll = get<double>(buf_.data());
  rec->argmax = get<int32_t>(buf_.data() + 8);
  rec->row.scale = get<float>(buf_.data() + 12);
  rec->row.min_logp = get<float>(buf_.data() + 16);
  if (!std::isfinite(rec->nll) || !std::isfinite(rec->row.scale) || !std::isfinite(rec->row.min_logp) ||
      rec->row.scale < 0 || rec->argmax < 0 || static_cast<uint64_t>(rec->argmax) >= h_.vocab_size)
    return Corruption(path_ + ": record " + u(i) + " (offset " + u(off) +
                      "): nll, scale or min_logp not finite, or argmax out of range");
  rec->row.codes.resize(h_.vocab_size);
  std::memcpy(rec->row.codes.data(), buf_.data() + 20, rec->row.codes.size() * sizeof(uint16_t));
  return Status();
}

Status check_base_matches(const EvalBaseReader& base, const EvalBaseHeader& run, std::span<const int32_t> tokens) {
  const EvalBaseHeader& h = base.header();
  const std::string what = "eval base " + base.path() + ": ";
  if (h.vocab_size != run.vocab_size)
    return InvalidArgument(what + "vocab_size " + u(h.vocab_size) + ", this model's is " + u(run.vocab_size) +
                           " (a base from another model family)");
  if (h.n_tokens != tokens.size())
    return InvalidArgument(what + "the text has " + u(h.n_tokens) + " tokens, this run's has " + u(tokens.size()) +
                           " (a different text or tokenizer)");
  for (size_t i = 0; i < tokens.size(); ++i)
    if (base.tokens()[i] != tokens[i])
      return InvalidArgument(what + "token " + u(i) + " is " + std::to_string(base.tokens()[i]) + ", this run's is " +
                             std::to_string(tokens[i]) + " (a different text or tokenizer)");
  if (h.ctx != run.ctx)
    return InvalidArgument(what + "ctx " + u(h.ctx) + ", this run's is " + u(run.ctx) + " (pass --ctx " + u(h.ctx) +
                           ")");
  if (h.stride != run.stride)
    return InvalidArgument(what + "stride " + u(h.stride) + ", this run's is " + u(run.stride) + " (pass --stride " +
                           u(h.stride) + ")");
  return Status();
}

}  // namespace strata::tools
