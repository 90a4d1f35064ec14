#include "io/gguf.h"

#include <algorithm>
#include <bit>
#include <cstdio>
#include <set>

namespace strata::io {

// ---- ggml types -----------------------------------------------------------------------------------

const std::vector<GgmlTypeInfo>& ggml_supported_types() {
  // Block sizes: ggml/src/ggml.c type_traits (blck_size, type_size); ggml-common.h block_* structs.
  static const std::vector<GgmlTypeInfo> kTypes = {
      {GgmlType::kF32, "f32", 1, 4},         {GgmlType::kF16, "f16", 1, 2},
      {GgmlType::kQ8_0, "q8_0", 32, 34},     {GgmlType::kQ2_K, "q2_K", 256, 84},
      {GgmlType::kQ3_K, "q3_K", 256, 110},   {GgmlType::kQ4_K, "q4_K", 256, 144},
      {GgmlType::kQ6_K, "q6_K", 256, 210},   {GgmlType::kIq4Nl, "iq4_nl", 32, 18},
      {GgmlType::kI8, "i8", 1, 1},
      {GgmlType::kBf16, "bf16", 1, 2},       {GgmlType::kMxfp4, "mxfp4", 32, 17},
  };
  return kTypes;
}

std::optional<GgmlTypeInfo> ggml_type_info(uint32_t id) {
  for (const GgmlTypeInfo& t : ggml_supported_types())
    if (static_cast<uint32_t>(t.type) == id) return t;
  return std::nullopt;
}

std::optional<std::string_view> ggml_type_name_any(uint32_t id) {
  // ggml.h enum ggml_type; "" marks ids removed from GGUF (31-33, 36-38).
  static constexpr std::string_view kNames[] = {
      "f32",     "f16",    "q4_0",   "q4_1",   "",       "",      "q5_0",  "q5_1",   "q8_0",   "q8_1",  "q2_K",
      "q3_K",    "q4_K",   "q5_K",   "q6_K",   "q8_K",   "iq2_xxs", "iq2_xs", "iq3_xxs", "iq1_s", "iq4_nl", "iq3_s",
      "iq2_s",   "iq4_xs", "i8",     "i16",    "i32",    "i64",   "f64",   "iq1_m",  "bf16",   "",      "",
      "",        "tq1_0",  "tq2_0",  "",       "",       "",      "mxfp4", "nvfp4",  "q1_0",   "q2_0"};
  if (id >= std::size(kNames) || kNames[id].empty()) return std::nullopt;
  return kNames[id];
}

Result<uint64_t> ggml_nbytes(GgmlType t, const std::vector<int64_t>& ne, const std::string& what) {
  auto info = ggml_type_info(static_cast<uint32_t>(t));
  if (!info) return InvalidArgument(what + ": ggml type " + std::to_string(static_cast<uint32_t>(t)) + " is not supported");
  if (ne.empty() || ne.size() > static_cast<size_t>(kMaxDims))
    return InvalidArgument(what + ": " + std::to_string(ne.size()) + " dims, expected 1.." + std::to_string(kMaxDims));
  for (int64_t d : ne)
    if (d < 0) return InvalidArgument(what + ": negative dimension " + std::to_string(d));
  if (ne[0] % info->block_elems != 0)
    return InvalidArgument(what + ": ne[0] = " + std::to_string(ne[0]) + " is not a multiple of the " + info->name +
                           " block of " + std::to_string(info->block_elems) + " elements");
  uint64_t n = static_cast<uint64_t>(ne[0]) / info->block_elems * info->block_bytes;  // ne[0] < 2^63: no overflow
  for (size_t i = 1; i < ne.size(); ++i)
    if (__builtin_mul_overflow(n, static_cast<uint64_t>(ne[i]), &n))
      return InvalidArgument(what + ": the tensor has more bytes than fit in 64 bits");
  return n;
}

// ---- metadata values ------------------------------------------------------------------------------

std::string_view gguf_type_name(GgufType t) {
  switch (t) {
    case GgufType::kU8: return "u8";
    case GgufType::kI8: return "i8";
    case GgufType::kU16: return "u16";
    case GgufType::kI16: return "i16";
    case GgufType::kU32: return "u32";
    case GgufType::kI32: return "i32";
    case GgufType::kF32: return "f32";
    case GgufType::kBool: return "bool";
    case GgufType::kString: return "string";
    case GgufType::kArray: return "array";
    case GgufType::kU64: return "u64";
    case GgufType::kI64: return "i64";
    case GgufType::kF64: return "f64";
  }
  return "?";
}

size_t gguf_type_size(GgufType t) {
  switch (t) {
    case GgufType::kU8: case GgufType::kI8: case GgufType::kBool: return 1;
    case GgufType::kU16: case GgufType::kI16: return 2;
    case GgufType::kU32: case GgufType::kI32: case GgufType::kF32: return 4;
    case GgufType::kU64: case GgufType::kI64: case GgufType::kF64: return 8;
    case GgufType::kString: case GgufType::kArray: return 0;
  }
  return 0;
}

namespace {

bool valid_type_id(uint32_t id) { return id <= static_cast<uint32_t>(GgufType::kF64); }

// Scalar bits of type t (zero-extended) as int64/uint64 views.
std::optional<int64_t> bits_as_int(GgufType t, uint64_t b) {
  switch (t) {
    case GgufType::kU8: case GgufType::kU16: case GgufType::kU32: return static_cast<int64_t>(b);
    case GgufType::kI8: return static_cast<int8_t>(b);
    case GgufType::kI16: return static_cast<int16_t>(b);
    case GgufType::kI32: return static_cast<int32_t>(b);
    case GgufType::kI64: return static_cast<int64_t>(b);
    case GgufType::kU64:
      if (b > static_cast<uint64_t>(INT64_MAX)) return std::nullopt;
      return static_cast<int64_t>(b);
    default: return std::nullopt;
  }
}

std::optional<uint64_t> bits_as_uint(GgufType t, uint64_t b) {
  if (t == GgufType::kU64) return b;
  auto v = bits_as_int(t, b);
  if (!v || *v < 0) return std::nullopt;
  return static_cast<uint64_t>(*v);
}

std::optional<double> bits_as_float(GgufType t, uint64_t b) {
  if (t == GgufType::kF32) return std::bit_cast<float>(static_cast<uint32_t>(b));
  if (t == GgufType::kF64) return std::bit_cast<double>(b);
  return std::nullopt;
}

uint64_t load_le(const uint8_t* p, size_t n) {
  uint64_t v = 0;
  for (size_t i = n; i-- > 0;) v = (v << 8) | p[i];
  return v;
}

}  // namespace

GgufValue GgufValue::scalar(GgufType t, uint64_t bits) {
  GgufValue v;
  v.type_ = t;
  v.bits_ = bits;
  return v;
}
GgufValue GgufValue::f32(float f) { return scalar(GgufType::kF32, std::bit_cast<uint32_t>(f)); }
GgufValue GgufValue::f64(double f) { return scalar(GgufType::kF64, std::bit_cast<uint64_t>(f)); }
GgufValue GgufValue::string(std::string s) {
  GgufValue v;
  v.type_ = GgufType::kString;
  v.str_ = std::move(s);
  return v;
}
GgufValue GgufValue::array(GgufType elem, std::vector<uint8_t> raw) {
  STRATA_CHECK(gguf_type_size(elem) > 0 && raw.size() % gguf_type_size(elem) == 0,
               "GgufValue::array: a fixed-size element type and whole elements");
  GgufValue v;
  v.type_ = GgufType::kArray;
  v.elem_ = elem;
  v.raw_ = std::move(raw);
  return v;
}
GgufValue GgufValue::string_array(std::vector<std::string> s) {
  GgufValue v;
  v.type_ = GgufType::kArray;
  v.elem_ = GgufType::kString;
  v.strs_ = std::move(s);
  return v;
}

std::optional<uint64_t> GgufValue::as_uint() const { return bits_as_uint(type_, bits_); }
std::optional<int64_t> GgufValue::as_int() const { return bits_as_int(type_, bits_); }
std::optional<double> GgufValue::as_float() const { return bits_as_float(type_, bits_); }
std::optional<bool> GgufValue::as_bool() const {
  if (type_ != GgufType::kBool) return std::nullopt;
  return bits_ != 0;
}

uint64_t GgufValue::array_size() const {
  if (!is_array()) return 0;
  if (elem_ == GgufType::kString) return strs_.size();
  return raw_.size() / gguf_type_size(elem_);
}

namespace {
std::optional<uint64_t> elem_bits(const GgufValue& v, uint64_t i) {
  if (!v.is_array() || v.elem_type() == GgufType::kString || i >= v.array_size()) return std::nullopt;
  const size_t es = gguf_type_size(v.elem_type());
  return load_le(v.raw().data() + i * es, es);
}
}  // namespace

std::optional<uint64_t> GgufValue::uint_at(uint64_t i) const {
  auto b = elem_bits(*this, i);
  return b ? bits_as_uint(elem_, *b) : std::nullopt;
}
std::optional<int64_t> GgufValue::int_at(uint64_t i) const {
  auto b = elem_bits(*this, i);
  return b ? bits_as_int(elem_, *b) : std::nullopt;
}
std::optional<double> GgufValue::float_at(uint64_t i) const {
  auto b = elem_bits(*this, i);
  return b ? bits_as_float(elem_, *b) : std::nullopt;
}

std::string GgufValue::to_string() const {
  switch (type_) {
    case GgufType::kString: {
      // Built by appends: GCC 12 warns (-Wrestrict, a false positive) on const char* + std::string.
      std::string s(1, '"');
      s += str_;
      s += '"';
      return s;
    }
    case GgufType::kBool: return bits_ ? "true" : "false";
    case GgufType::kF32: case GgufType::kF64: return std::to_string(*as_float());
    case GgufType::kArray:
    {
      std::string s(1, '[');
      s += gguf_type_name(elem_);
      s += " x ";
      s += std::to_string(array_size());
      s += ']';
      return s;
    }
    case GgufType::kU64: return std::to_string(bits_);
    default: return std::to_string(*as_int());
  }
}

bool GgufValue::operator==(const GgufValue& o) const {
  return type_ == o.type_ && (!is_array() || elem_ == o.elem_) && bits_ == o.bits_ && str_ == o.str_ &&
         raw_ == o.raw_ && strs_ == o.strs_;
}

const GgufValue* GgufFile::find(std::string_view key) const {
  for (const auto& [k, v] : metadata)
    if (k == key) return &v;
  return nullptr;
}

// ---- the header parser ------------------------------------------------------------------------------

namespace {

// Sequential reads of the header through File::read_at, a 1 MiB window at a time. Every read is
// bounds-checked against the file size first, so a count or length from the file never causes a
// read (or an allocation) past the end.
class Cursor {
 public:
  explicit Cursor(const File& f) : f_(f), size_(f.size()) {}
  uint64_t pos() const { return pos_; }
  uint64_t left() const { return size_ - pos_; }

  // n bytes into dst; `what` says what was being read ("the tensor count").
  Status read(void* dst, size_t n, const std::string& what) {
    if (n > left())
      return Corruption(f_.path() + ": " + what + " (" + std::to_string(n) + " bytes at offset " +
                        std::to_string(pos_) + ") runs past the end of the file (" + std::to_string(size_) +
                        " bytes; truncated?)");
    auto* out = static_cast<uint8_t*>(dst);
    while (n > 0) {
      if (pos_ < win_start_ || pos_ >= win_start_ + win_.size()) STRATA_RETURN_IF_ERROR(fill());
      const size_t off = static_cast<size_t>(pos_ - win_start_);
      const size_t k = std::min(n, win_.size() - off);
      std::memcpy(out, win_.data() + off, k);
      out += k;
      n -= k;
      pos_ += k;
    }
    return Status();
  }
  template <typename T>
  Status read_le(T* v, const std::string& what) {
    uint8_t b[sizeof(T)];
    STRATA_RETURN_IF_ERROR(read(b, sizeof(T), what));
    *v = static_cast<T>(load_le(b, sizeof(T)));
    return Status();
  }
  // A GGUF string (u64 length + bytes) of at most `max` bytes.
  Status read_string(std::string* s, uint64_t max, const std::string& what) {
    uint64_t n = 0;
    STRATA_RETURN_IF_ERROR(read_le(&n, what + " length"));
    if (n > max || n > left())
      return Corruption(f_.path() + ": " + what + " length " + std::to_string(n) + " at offset " +
                        std::to_string(pos_ - 8) + " exceeds " +
                        (n > left() ? "the " + std::to_string(left()) + " bytes left in the file"
                                    : "the limit of " + std::to_string(max) + " bytes"));
    s->resize(static_cast<size_t>(n));
    return read(s->data(), s->size(), what);
  }

 private:
  Status fill() {
    constexpr uint64_t kWindow = 1u << 20;
    win_start_ = pos_;
    win_.resize(static_cast<size_t>(std::min(kWindow, size_ - pos_)));
    return f_.read_at(win_start_, win_.size(), win_.data());
  }
  const File& f_;
  uint64_t size_;
  uint64_t pos_ = 0;
  uint64_t win_start_ = 0;
  std::vector<uint8_t> win_;
};

Result<GgufValue> read_value(Cursor& c, const std::string& path, const std::string& key, GgufType type) {
  const std::string what = "key '" + key + "'";
  if (type == GgufType::kString) {
    std::string s;
    STRATA_RETURN_IF_ERROR(c.read_string(&s, kMaxGgufStringBytes, what + " string"));
    return GgufValue::string(std::move(s));
  }
  if (type == GgufType::kArray) {
    uint32_t et = 0;
    uint64_t n = 0;
    STRATA_RETURN_IF_ERROR(c.read_le(&et, what + " array element type"));
    STRATA_RETURN_IF_ERROR(c.read_le(&n, what + " array length"));
    if (!valid_type_id(et))
      return Corruption(path + ": " + what + ": array element type " + std::to_string(et) + " is not a GGUF type (0..12)");
    const GgufType elem = static_cast<GgufType>(et);
    if (elem == GgufType::kArray) return NotSupported(path + ": " + what + ": arrays of arrays are not supported");
    // Each element takes at least one byte (a string at least its 8-byte length).
    const uint64_t min_elem = elem == GgufType::kString ? 8 : gguf_type_size(elem);
    if (n > kMaxGgufArrayElems || n > c.left() / min_elem)
      return Corruption(path + ": " + what + ": array of " + std::to_string(n) + " " +
                        std::string(gguf_type_name(elem)) + " elements exceeds " +
                        (n > kMaxGgufArrayElems ? "the limit of " + std::to_string(kMaxGgufArrayElems)
                                                : "the " + std::to_string(c.left()) + " bytes left in the file"));
    if (elem == GgufType::kString) {
      std::vector<std::string> v(static_cast<size_t>(n));
      for (uint64_t i = 0; i < n; ++i)
        STRATA_RETURN_IF_ERROR(c.read_string(&v[i], kMaxGgufStringBytes, what + " element " + std::to_string(i)));
      return GgufValue::string_array(std::move(v));
    }
    std::vector<uint8_t> raw(static_cast<size_t>(n * min_elem));
    STRATA_RETURN_IF_ERROR(c.read(raw.data(), raw.size(), what + " array data"));
    if (elem == GgufType::kBool)
      for (uint64_t i = 0; i < n; ++i)
        if (raw[i] > 1)
          return Corruption(path + ": " + what + " element " + std::to_string(i) + ": bool byte " +
                            std::to_string(raw[i]) + ", expected 0 or 1");
    return GgufValue::array(elem, std::move(raw));
  }
  uint8_t b[8] = {};
  const size_t n = gguf_type_size(type);
  STRATA_RETURN_IF_ERROR(c.read(b, n, what + " value"));
  const uint64_t bits = load_le(b, n);
  switch (type) {
    case GgufType::kU8: return GgufValue::u8(static_cast<uint8_t>(bits));
    case GgufType::kI8: return GgufValue::i8(static_cast<int8_t>(bits));
    case GgufType::kU16: return GgufValue::u16(static_cast<uint16_t>(bits));
    case GgufType::kI16: return GgufValue::i16(static_cast<int16_t>(bits));
    case GgufType::kU32: return GgufValue::u32(static_cast<uint32_t>(bits));
    case GgufType::kI32: return GgufValue::i32(static_cast<int32_t>(bits));
    case GgufType::kU64: return GgufValue::u64(bits);
    case GgufType::kI64: return GgufValue::i64(static_cast<int64_t>(bits));
    case GgufType::kF32: return GgufValue::f32(std::bit_cast<float>(static_cast<uint32_t>(bits)));
    case GgufType::kF64: return GgufValue::f64(std::bit_cast<double>(bits));
    case GgufType::kBool:
      if (bits > 1) return Corruption(path + ": " + what + ": bool byte " + std::to_string(bits) + ", expected 0 or 1");
      return GgufValue::boolean(bits != 0);
    default: break;
  }
  return Internal(path + ": " + what + ": unhandled type");
}

}  // namespace

Result<GgufFile> parse_gguf(const File& file, int file_index) {
  GgufFile g;
  g.path = file.path();
  g.file_size = file.size();
  const std::string& path = g.path;
  Cursor c(file);
  uint8_t magic[4];
  if (file.size() < 24)
    return Corruption(path + ": " + std::to_string(file.size()) + " bytes, too small for a GGUF header (24 bytes)");
  STRATA_RETURN_IF_ERROR(c.read(magic, 4, "the magic"));
  if (std::memcmp(magic, "GGUF", 4) != 0)
    return Corruption(path + ": not a GGUF file (magic " + std::to_string(load_le(magic, 4)) + ", expected \"GGUF\")");
  STRATA_RETURN_IF_ERROR(c.read_le(&g.version, "the version"));
  if (g.version != 2 && g.version != 3) {
    if ((g.version & 0xFFFF) == 0 && (__builtin_bswap32(g.version) == 2 || __builtin_bswap32(g.version) == 3))
      return NotSupported(path + ": a big-endian GGUF (version " + std::to_string(__builtin_bswap32(g.version)) +
                          "); strata reads little-endian files only");
    return NotSupported(path + ": GGUF version " + std::to_string(g.version) + ", expected 3 (or 2)");
  }
  uint64_t n_tensors = 0, n_kv = 0;
  STRATA_RETURN_IF_ERROR(c.read_le(&n_tensors, "the tensor count"));
  STRATA_RETURN_IF_ERROR(c.read_le(&n_kv, "the metadata key count"));
  // Smallest encodings: a key/value is 8 (key length) + 4 (type) + 1 (a u8) bytes; a tensor info
  // 8 (name length) + 4 (n_dims) + 8 (one dim) + 4 (type) + 8 (offset).
  if (n_kv > kMaxGgufKeys || n_kv > c.left() / 13)
    return Corruption(path + ": " + std::to_string(n_kv) + " metadata keys declared; the " +
                      std::to_string(c.left()) + " bytes left hold at most " + std::to_string(c.left() / 13) +
                      " (limit " + std::to_string(kMaxGgufKeys) + ")");
  if (n_tensors > kMaxGgufTensors || n_tensors > c.left() / 32)
    return Corruption(path + ": " + std::to_string(n_tensors) + " tensors declared; the " + std::to_string(c.left()) +
                      " bytes left hold at most " + std::to_string(c.left() / 32) + " (limit " +
                      std::to_string(kMaxGgufTensors) + ")");

  std::set<std::string, std::less<>> keys;
  g.metadata.reserve(static_cast<size_t>(n_kv));
  for (uint64_t i = 0; i < n_kv; ++i) {
    std::string key;
    STRATA_RETURN_IF_ERROR(c.read_string(&key, kMaxGgufKeyBytes, "metadata key " + std::to_string(i)));
    if (key.empty()) return Corruption(path + ": metadata key " + std::to_string(i) + " is empty");
    if (!keys.insert(key).second) return Corruption(path + ": metadata key '" + key + "' appears twice");
    uint32_t t = 0;
    STRATA_RETURN_IF_ERROR(c.read_le(&t, "the type of key '" + key + "'"));
    if (!valid_type_id(t))
      return Corruption(path + ": key '" + key + "': value type " + std::to_string(t) + " is not a GGUF type (0..12)");
    STRATA_ASSIGN_OR_RETURN(GgufValue v, read_value(c, path, key, static_cast<GgufType>(t)));
    g.metadata.emplace_back(std::move(key), std::move(v));
  }
  if (const GgufValue* a = g.find("general.alignment")) {
    if (a->type() != GgufType::kU32)
      return Corruption(path + ": key 'general.alignment' has type " + std::string(gguf_type_name(a->type())) +
                        ", expected u32");
    const uint64_t al = *a->as_uint();
    if (al == 0 || !std::has_single_bit(al) || al > kMaxGgufAlignment)
      return Corruption(path + ": general.alignment = " + std::to_string(al) + ", expected a power of two <= " +
                        std::to_string(kMaxGgufAlignment));
    g.alignment = static_cast<uint32_t>(al);
  }

  std::set<std::string, std::less<>> names;
  g.tensors.reserve(static_cast<size_t>(n_tensors));
  std::vector<uint64_t> rel_offsets;
  for (uint64_t i = 0; i < n_tensors; ++i) {
    GgufTensorInfo t;
    t.file = file_index;
    STRATA_RETURN_IF_ERROR(c.read_string(&t.name, kMaxGgufNameBytes, "tensor " + std::to_string(i) + " name"));
    if (t.name.empty()) return Corruption(path + ": tensor " + std::to_string(i) + " has an empty name");
    if (!names.insert(t.name).second) return Corruption(path + ": tensor '" + t.name + "' appears twice");
    const std::string tw = "tensor '" + t.name + "'";
    auto bad = [&](const std::string& m) { return Corruption(path + ": " + tw + ": " + m); };
    uint32_t n_dims = 0;
    STRATA_RETURN_IF_ERROR(c.read_le(&n_dims, tw + " n_dims"));
    if (n_dims == 0 || n_dims > static_cast<uint32_t>(kMaxDims))
      return bad(std::to_string(n_dims) + " dims, expected 1.." + std::to_string(kMaxDims));
    for (uint32_t d = 0; d < n_dims; ++d) {
      int64_t ne = 0;
      STRATA_RETURN_IF_ERROR(c.read_le(&ne, tw + " ne[" + std::to_string(d) + "]"));
      if (ne < 0) return bad("ne[" + std::to_string(d) + "] = " + std::to_string(ne) + " is negative");
      t.ne.push_back(ne);
    }
    uint32_t type = 0;
    STRATA_RETURN_IF_ERROR(c.read_le(&type, tw + " type"));
    auto info = ggml_type_info(type);
    if (!info) {
      auto name = ggml_type_name_any(type);
      std::string supported;
      for (const GgmlTypeInfo& s : ggml_supported_types()) supported += std::string(supported.empty() ? "" : ", ") + s.name;
      if (name)
        return NotSupported(path + ": " + tw + ": ggml type " + std::string(*name) + " (" + std::to_string(type) +
                            ") is not supported; strata reads " + supported);
      return Corruption(path + ": " + tw + ": ggml type " + std::to_string(type) + " is not a known ggml type");
    }
    t.type = info->type;
    uint64_t off = 0;
    STRATA_RETURN_IF_ERROR(c.read_le(&off, tw + " offset"));
    auto nb = ggml_nbytes(t.type, t.ne, path + ": " + tw);
    if (!nb.ok()) return Corruption(nb.error().message());
    t.nbytes = *nb;
    if (off % g.alignment != 0)
      return bad("data offset " + std::to_string(off) + " is not a multiple of the alignment " +
                 std::to_string(g.alignment));
    t.shape.rank = static_cast<int>(n_dims);
    for (uint32_t d = 0; d < n_dims; ++d) t.shape.dims[d] = t.ne[n_dims - 1 - d];
    rel_offsets.push_back(off);
    g.tensors.push_back(std::move(t));
  }
  // The data section starts at the next multiple of the alignment after the tensor infos.
  const uint64_t end_infos = c.pos();
  const uint64_t pad = (g.alignment - end_infos % g.alignment) % g.alignment;
  g.data_offset = end_infos + pad;
  if (g.tensors.empty()) {
    g.data_offset = std::min(g.data_offset, g.file_size);  // a header-only file need not be padded
    return g;
  }
  if (g.data_offset > g.file_size)
    return Corruption(path + ": the data section would start at byte " + std::to_string(g.data_offset) +
                      ", past the end of the file (" + std::to_string(g.file_size) + " bytes; truncated?)");
  const uint64_t region = g.file_size - g.data_offset;
  for (size_t i = 0; i < g.tensors.size(); ++i) {
    GgufTensorInfo& t = g.tensors[i];
    const uint64_t off = rel_offsets[i];
    // Against the region size, never as data_offset + off (which could wrap).
    if (off > region || t.nbytes > region - off)
      return Corruption(path + ": tensor '" + t.name + "': data [" + std::to_string(off) + ", +" +
                        std::to_string(t.nbytes) + ") of the data section runs past the end of the file (" +
                        std::to_string(region) + " data bytes after offset " + std::to_string(g.data_offset) +
                        "; truncated?)");
    t.offset = g.data_offset + off;
  }
  // No two tensors may share bytes (gaps are allowed: the spec does not forbid them).
  std::vector<const GgufTensorInfo*> order;
  for (const auto& t : g.tensors)
    if (t.nbytes > 0) order.push_back(&t);
  std::sort(order.begin(), order.end(),
            [](const GgufTensorInfo* a, const GgufTensorInfo* b) { return a->offset < b->offset; });
  for (size_t i = 1; i < order.size(); ++i)
    if (order[i - 1]->offset + order[i - 1]->nbytes > order[i]->offset)
      return Corruption(path + ": tensors '" + order[i - 1]->name + "' and '" + order[i]->name +
                        "' overlap (data offsets " + std::to_string(order[i - 1]->offset - g.data_offset) + " +" +
                        std::to_string(order[i - 1]->nbytes) + " and " +
                        std::to_string(order[i]->offset - g.data_offset) + ")");
  return g;
}

// ---- split sets -----------------------------------------------------------------------------------

std::string gguf_split_path(const std::string& prefix, int n, int count) {
  char buf[64];
  std::snprintf(buf, sizeof(buf), "-%05d-of-%05d.gguf", n, count);
  return prefix + buf;
}

std::optional<GgufSplitName> parse_gguf_split_path(const std::string& path) {
  // "-NNNNN-of-MMMMM.gguf" is 20 characters.
  constexpr size_t kTail = 20;
  if (path.size() <= kTail) return std::nullopt;
  const std::string_view tail = std::string_view(path).substr(path.size() - kTail);
  auto digits = [](std::string_view s, int* v) {
    *v = 0;
    for (char ch : s) {
      if (ch < '0' || ch > '9') return false;
      *v = *v * 10 + (ch - '0');
    }
    return true;
  };
  GgufSplitName s;
  if (tail[0] != '-' || tail.substr(6, 4) != "-of-" || tail.substr(15) != ".gguf" || !digits(tail.substr(1, 5), &s.n) ||
      !digits(tail.substr(10, 5), &s.count) || s.n < 1 || s.n > s.count)
    return std::nullopt;
  s.prefix = path.substr(0, path.size() - kTail);
  return s;
}

namespace {

// split.* as gguf-split writes them (u16 / u16 / i32); any non-negative integer type is accepted.
Result<std::optional<uint64_t>> split_key(const GgufFile& g, std::string_view key) {
  const GgufValue* v = g.find(key);
  if (!v) return std::optional<uint64_t>();
  auto u = v->as_uint();
  if (!u)
    return Corruption(g.path + ": key '" + std::string(key) + "' is " + v->to_string() + " (" +
                      std::string(gguf_type_name(v->type())) + "), expected a non-negative integer");
  return std::optional<uint64_t>(*u);
}

}  // namespace

Result<std::unique_ptr<GgufModel>> GgufModel::open(const std::string& path) {
  STRATA_ASSIGN_OR_RETURN(auto first, open_file(path));
  STRATA_ASSIGN_OR_RETURN(GgufFile head, parse_gguf(*first, 0));
  STRATA_ASSIGN_OR_RETURN(auto count, split_key(head, "split.count"));
  const auto name = parse_gguf_split_path(path);
  // A single file: no split count above 1, and no split name (or "-00001-of-00001").
  if ((!count || *count <= 1) && (!name || name->count == 1)) {
    std::vector<std::unique_ptr<File>> files;
    files.push_back(std::move(first));
    return open_files(std::move(files));
  }
  if (!name)
    return InvalidArgument(path + ": split.count = " + std::to_string(*count) +
                           " but the name is not PREFIX-0000N-of-0000M.gguf, so the other splits cannot be found");
  if (!count || *count != static_cast<uint64_t>(name->count))
    return Corruption(path + ": named as split " + std::to_string(name->n) + " of " + std::to_string(name->count) +
                      " but split.count is " + (count ? std::to_string(*count) : std::string("missing")));
  std::vector<std::unique_ptr<File>> files;
  for (int i = 1; i <= name->count; ++i) {
    if (i == name->n) {
      files.push_back(std::move(first));
      continue;
    }
    const std::string p = gguf_split_path(name->prefix, i, name->count);
    auto f = open_file(p);
    if (!f.ok()) {
      if (f.error().code() == StatusCode::kNotFound)
        return NotFound(p + ": split " + std::to_string(i) + " of " + std::to_string(name->count) + " is missing");
      return f.error();
    }
    files.push_back(std::move(f).value());
  }
  return open_files(std::move(files));
}

Result<std::unique_ptr<GgufModel>> GgufModel::open_files(std::vector<std::unique_ptr<File>> files) {
  if (files.empty()) return InvalidArgument("GgufModel::open_files: no files");
  auto m = std::unique_ptr<GgufModel>(new GgufModel());
  const size_t n = files.size();
  uint64_t declared_total = 0;
  for (size_t i = 0; i < n; ++i) {
    STRATA_ASSIGN_OR_RETURN(GgufFile g, parse_gguf(*files[i], static_cast<int>(i)));
    STRATA_ASSIGN_OR_RETURN(auto count, split_key(g, "split.count"));
    STRATA_ASSIGN_OR_RETURN(auto no, split_key(g, "split.no"));
    STRATA_ASSIGN_OR_RETURN(auto total, split_key(g, "split.tensors.count"));
    if (n > 1 || (count && *count > 1)) {
      if (!count || *count != n)
        return Corruption(g.path + ": split.count is " + (count ? std::to_string(*count) : std::string("missing")) +
                          ", expected " + std::to_string(n) + " (the files of the set)");
      if (!no || *no != i)
        return Corruption(g.path + ": split.no is " + (no ? std::to_string(*no) : std::string("missing")) +
                          ", expected " + std::to_string(i) + " (split " + std::to_string(i + 1) + " of " +
                          std::to_string(n) + ")");
      if (!total) return Corruption(g.path + ": split.tensors.count is missing");
      if (i == 0) declared_total = *total;
      if (*total != declared_total)
        return Corruption(g.path + ": split.tensors.count = " + std::to_string(*total) + ", but split 1 says " +
                          std::to_string(declared_total));
    }
    for (const GgufTensorInfo& t : g.tensors) {
      auto [it, inserted] = m->tensors_.emplace(t.name, t);
      if (!inserted)
        return Corruption(g.path + ": tensor '" + t.name + "' is also in " + m->parsed_[it->second.file].path);
    }
    m->parsed_.push_back(std::move(g));
  }
  if (n > 1 && m->tensors_.size() != declared_total)
    return Corruption(m->parsed_.front().path + ": the " + std::to_string(n) + " splits hold " +
                      std::to_string(m->tensors_.size()) + " tensors, split.tensors.count says " +
                      std::to_string(declared_total));
  m->files_ = std::move(files);
  return m;
}

const GgufTensorInfo* GgufModel::find(const std::string& name) const {
  auto it = tensors_.find(name);
  return it == tensors_.end() ? nullptr : &it->second;
}

Status GgufModel::read_range(const GgufTensorInfo& t, uint64_t offset, uint64_t n, void* dst) const {
  if (t.file < 0 || static_cast<size_t>(t.file) >= files_.size())
    return InvalidArgument("tensor '" + t.name + "': file index " + std::to_string(t.file) + " out of range");
  if (offset > t.nbytes || n > t.nbytes - offset)
    return InvalidArgument(files_[static_cast<size_t>(t.file)]->path() + ": tensor '" + t.name + "': read of " +
                           std::to_string(n) + " bytes at " + std::to_string(offset) + " is outside its " +
                           std::to_string(t.nbytes) + " bytes");
  return files_[static_cast<size_t>(t.file)]->read_at(t.offset + offset, static_cast<size_t>(n), dst);
}

GgufValue gguf_text_value(const std::string& text) {
  if (text.size() <= kGgufTextPiece) return GgufValue::string(text);
  std::vector<std::string> pieces;
  for (size_t at = 0; at < text.size();) {
    size_t end = std::min(text.size(), at + kGgufTextPiece);
    // Never end a piece before a UTF-8 continuation byte (10xxxxxx): each piece is whole characters.
    while (end < text.size() && end > at + 1 && (static_cast<unsigned char>(text[end]) & 0xC0) == 0x80) --end;
    pieces.push_back(text.substr(at, end - at));
    at = end;
  }
  return GgufValue::string_array(std::move(pieces));
}

std::optional<std::string> gguf_text_of(const GgufValue& v) {
  if (const std::string* s = v.as_string()) return *s;
  const std::vector<std::string>* pieces = v.strings();
  if (!pieces) return std::nullopt;
  std::string out;
  for (const std::string& p : *pieces) out += p;
  return out;
}

}  // namespace strata::io
