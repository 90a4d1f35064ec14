// GGUF: read the header of a GGUF v3 file (or a gguf-split set of them): metadata key/values,
// tensor names, ggml types, shapes and where each tensor's bytes are.
//
// Layout (little-endian; source: ggml docs/gguf.md, the GGUF spec):
//   u32 magic "GGUF" | u32 version (3; 2 has the same layout) | u64 n_tensors | u64 n_kv
//   n_kv  x { string key | u32 value type | value }          string = u64 length + bytes (no NUL)
//   n_tensors x { string name | u32 n_dims | u64 ne[n_dims] | u32 ggml type | u64 offset }
//   zero padding to `general.alignment` (u32, a power of two; default 32), then the data section;
//   each tensor's offset is relative to the data section and a multiple of the alignment.
// Shapes: ggml lists dimensions innermost first (ne[0] is the contiguous one); strata's Shape is
// row-major, outer first. So `shape` is ne reversed: a linear weight strata holds as [out, in] is
// stored with ne = [in, out], and each of its `out` rows is ne[0] / block_elems blocks.
// Hardening (as io/safetensors.cpp): every count, length and offset is checked against the bytes
// left in the file before it is used or anything is allocated, sizes are computed in checked
// arithmetic, and errors (kCorruption; kNotSupported for valid files strata cannot use) name the
// file, the key or tensor, what was found and what was expected.
// Thread safety: a parsed GgufFile is an immutable value.
#pragma once

#include <array>
#include <cstdint>
#include <cstring>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "core/status.h"
#include "core/tensor.h"
#include "io/file.h"

namespace strata::io {

// ---- ggml tensor types --------------------------------------------------------------------------
// ggml's type ids (ggml/include/ggml.h enum ggml_type; fixed forever, new ones are appended). Only
// the ones strata reads are named here; every other id is kNotSupported at parse time.
enum class GgmlType : uint32_t {
  kF32 = 0,
  kF16 = 1,
  kQ8_0 = 8,
  kQ2_K = 10,
  kQ3_K = 11,
  kQ4_K = 12,
  kQ6_K = 14,
  kIq4Nl = 20,
  kI8 = 24,  // raw bytes: strata writes the official FP8/E8M0/packed-E2M1 tensors as I8 (docs/gguf.md)
  kBf16 = 30,
  kMxfp4 = 39,
};

// Block geometry of a type: `block_elems` consecutive ne[0] elements are stored in `block_bytes`.
struct GgmlTypeInfo {
  GgmlType type;
  const char* name;      // ggml's name: "f32", "q4_K", "mxfp4", ...
  uint32_t block_elems;  // 1 for F32/F16/BF16, 32 for Q8_0/IQ4_NL/MXFP4, 256 for the K-quants
  uint32_t block_bytes;  // 4, 2, 2, 34, 84, 110, 144, 210, 18, 17
};

// Info of a type strata reads; nullopt for any other id.
std::optional<GgmlTypeInfo> ggml_type_info(uint32_t id);
// ggml's name of any id ggml has defined ("q5_K", "iq2_xxs", ...), or nullopt for ids it never
// used (31-33 and 36-38 were removed from GGUF; anything past the enum is unknown).
std::optional<std::string_view> ggml_type_name_any(uint32_t id);
// Every type strata reads, in id order.
const std::vector<GgmlTypeInfo>& ggml_supported_types();

// Bytes of a tensor of type `t` with ggml dims `ne` (innermost first). kInvalidArgument when ne[0]
// is not a multiple of the block, a dim is negative, or the size overflows 64 bits; `what` names
// the tensor in the message.
[[nodiscard]] Result<uint64_t> ggml_nbytes(GgmlType t, const std::vector<int64_t>& ne, const std::string& what);

// ---- metadata values ------------------------------------------------------------------------------
// GGUF metadata value types (gguf_metadata_value_type in the spec).
enum class GgufType : uint32_t {
  kU8 = 0,
  kI8 = 1,
  kU16 = 2,
  kI16 = 3,
  kU32 = 4,
  kI32 = 5,
  kF32 = 6,
  kBool = 7,
  kString = 8,
  kArray = 9,
  kU64 = 10,
  kI64 = 11,
  kF64 = 12,
};
// "u8", "string", "array", ...; "?" for ids outside the enum.
std::string_view gguf_type_name(GgufType t);
// Bytes of one value of a fixed-size type (0 for string and array).
size_t gguf_type_size(GgufType t);

// One metadata value: a scalar, a string, or an array of scalars or of strings (arrays of arrays are
// valid GGUF but nothing uses them; the reader refuses them with kNotSupported, as ggml's does).
// Numeric arrays keep their little-endian bytes as stored (at most the file's own size in memory).
class GgufValue {
 public:
  GgufValue() = default;
  // Scalars.
  static GgufValue u8(uint8_t v) { return scalar(GgufType::kU8, v); }
  static GgufValue i8(int8_t v) { return scalar(GgufType::kI8, static_cast<uint8_t>(v)); }
  static GgufValue u16(uint16_t v) { return scalar(GgufType::kU16, v); }
  static GgufValue i16(int16_t v) { return scalar(GgufType::kI16, static_cast<uint16_t>(v)); }
  static GgufValue u32(uint32_t v) { return scalar(GgufType::kU32, v); }
  static GgufValue i32(int32_t v) { return scalar(GgufType::kI32, static_cast<uint32_t>(v)); }
  static GgufValue u64(uint64_t v) { return scalar(GgufType::kU64, v); }
  static GgufValue i64(int64_t v) { return scalar(GgufType::kI64, static_cast<uint64_t>(v)); }
  static GgufValue f32(float v);
  static GgufValue f64(double v);
  static GgufValue boolean(bool v) { return scalar(GgufType::kBool, v ? 1 : 0); }
  static GgufValue string(std::string v);
  // Arrays: `elem` is a fixed-size type and `raw` its elements' little-endian bytes
  // (raw.size() == n * gguf_type_size(elem)); or an array of strings.
  // (A bool array's bytes must be 0 or 1: GgufWriter refuses others, as the reader does.)
  static GgufValue array(GgufType elem, std::vector<uint8_t> raw);
  static GgufValue string_array(std::vector<std::string> v);
  template <typename T>
  static GgufValue array_of(GgufType elem, const std::vector<T>& v);  // T's size must match elem's

  GgufType type() const { return type_; }
  bool is_array() const { return type_ == GgufType::kArray; }

  // Scalar accessors: nullopt when the value is not of a fitting type. as_uint accepts any integer
  // type holding a value >= 0; as_int any integer type whose value fits int64; as_float f32/f64.
  std::optional<uint64_t> as_uint() const;
  std::optional<int64_t> as_int() const;
  std::optional<double> as_float() const;
  std::optional<bool> as_bool() const;
  const std::string* as_string() const { return type_ == GgufType::kString ? &str_ : nullptr; }

  // Array accessors (elem_type() is meaningful only for arrays).
  GgufType elem_type() const { return elem_; }
  uint64_t array_size() const;
  // Element i of a numeric array, read as as_uint/as_int/as_float would; nullopt out of range or
  // for a non-fitting type.
  std::optional<uint64_t> uint_at(uint64_t i) const;
  std::optional<int64_t> int_at(uint64_t i) const;
  std::optional<double> float_at(uint64_t i) const;
  // The strings of a string array (null otherwise), the raw bytes of a numeric array.
  const std::vector<std::string>* strings() const { return is_array() && elem_ == GgufType::kString ? &strs_ : nullptr; }
  const std::vector<uint8_t>& raw() const { return raw_; }

  // A short rendering for messages and tools: 42, -3, 0.5, true, "text", [u32 x 4].
  std::string to_string() const;
  bool operator==(const GgufValue& o) const;

 private:
  static GgufValue scalar(GgufType t, uint64_t bits);
  GgufType type_ = GgufType::kU8;
  GgufType elem_ = GgufType::kU8;
  uint64_t bits_ = 0;              // scalar bits, zero-extended (float: its bit pattern)
  std::string str_;                // kString
  std::vector<uint8_t> raw_;       // numeric array elements, little-endian as stored
  std::vector<std::string> strs_;  // string array
};

template <typename T>
GgufValue GgufValue::array_of(GgufType elem, const std::vector<T>& v) {
  STRATA_CHECK(sizeof(T) == gguf_type_size(elem), "GgufValue::array_of: element size differs from the GGUF type's");
  std::vector<uint8_t> raw(v.size() * sizeof(T));
  if (!raw.empty()) std::memcpy(raw.data(), v.data(), raw.size());  // x86-64 and aarch64: little-endian
  return array(elem, std::move(raw));
}

// A long text as a metadata value (strata.tokenizer_json: ~8 MB): a string up to kGgufTextPiece
// bytes, else an array of strings of at most that many bytes each, cut between UTF-8 characters.
// Why: Hugging Face's parser (@huggingface/gguf, the Hub's GGUF viewer) fails on a single value of
// more than ~4 MB followed by more keys ("Offset is outside the bounds of the DataView"); pieces of
// 1 MiB parse. gguf_text_of reads either form back (nullopt for any other type).
inline constexpr size_t kGgufTextPiece = 1u << 20;
GgufValue gguf_text_value(const std::string& text);
std::optional<std::string> gguf_text_of(const GgufValue& v);

// ---- tensors and files ------------------------------------------------------------------------------
struct GgufTensorInfo {
  std::string name;               // e.g. "blk.3.attn_q_a.weight"
  GgmlType type = GgmlType::kF32;
  std::vector<int64_t> ne;        // ggml dims, innermost first (1..4 of them)
  Shape shape;                    // strata order: ne reversed (outer first)
  int file = 0;                   // index into GgufModel::files() (0 for a single file)
  uint64_t offset = 0;            // absolute byte offset in that file
  uint64_t nbytes = 0;            // bytes of data (ggml_nbytes)
};

// Limits on what a file may declare. Real GGUFs are far inside them (a V4.1 GGUF: ~1,500 tensors,
// ~60 keys, a 129,280-entry vocabulary); they bound what a hostile file can make the reader do.
inline constexpr uint64_t kMaxGgufTensors = 1u << 20;
inline constexpr uint64_t kMaxGgufKeys = 1u << 16;
inline constexpr uint64_t kMaxGgufArrayElems = 1u << 26;
inline constexpr uint64_t kMaxGgufStringBytes = 1u << 30;
inline constexpr uint64_t kMaxGgufKeyBytes = 1u << 16;
inline constexpr uint64_t kMaxGgufNameBytes = 1u << 12;  // ggml itself stops at 63 (GGML_MAX_NAME)
inline constexpr uint32_t kMaxGgufAlignment = 1u << 20;
inline constexpr uint32_t kGgufDefaultAlignment = 32;

// One parsed GGUF file: its metadata in file order, its tensors in file order, the alignment and the
// data section's offset. Tensor `file` indices are the value given to parse.
struct GgufFile {
  std::string path;
  uint32_t version = 3;
  std::vector<std::pair<std::string, GgufValue>> metadata;  // file order, keys unique
  std::vector<GgufTensorInfo> tensors;                      // file order, names unique
  uint32_t alignment = kGgufDefaultAlignment;
  uint64_t data_offset = 0;  // absolute offset of the data section
  uint64_t file_size = 0;

  // The value of `key`, or null.
  const GgufValue* find(std::string_view key) const;
};

// Parses the header of `file` and checks every tensor against it: known ggml type (kNotSupported
// naming the type otherwise), 1..4 dims with ne[0] a multiple of the block, offset a multiple of the
// alignment, data inside the file, no two tensors sharing bytes, unique names and keys. Tensors get
// file index `file_index`. Errors: kCorruption (malformed), kNotSupported (big-endian, version other
// than 2/3, unsupported tensor type, nested arrays), kIOError from reads. Reads the header in 1 MiB
// chunks; allocates at most a small multiple of the header's size.
[[nodiscard]] Result<GgufFile> parse_gguf(const File& file, int file_index = 0);

// "PREFIX-0000N-of-0000M.gguf" (llama.cpp's llama_split_path; n counts from 1).
std::string gguf_split_path(const std::string& prefix, int n, int count);
// When `path` names a split ("...-00002-of-00005.gguf"), its prefix, number (from 1) and count.
struct GgufSplitName {
  std::string prefix;
  int n = 0;
  int count = 0;
};
std::optional<GgufSplitName> parse_gguf_split_path(const std::string& path);

// A GGUF model: one file, or every file of a gguf-split set. Metadata comes from the first file
// (gguf-split writes the model's keys into split 1 only; every split carries split.no (u16),
// split.count (u16) and split.tensors.count (i32, the total)). Tensors from all files, each naming
// its file. Every file stays open for later reads.
// Thread safety: const methods may be called concurrently.
class GgufModel {
 public:
  // Opens `path`. A file with split.count > 1 (or named like a split) opens the whole set from its
  // prefix; any split of the set may be given. Checks: each split has split.no = its position - 1 and
  // the same split.count, the tensors add up to split.tensors.count, no tensor is in two files.
  // Errors: kNotFound (a missing split, naming it), kCorruption, kNotSupported, kIOError.
  [[nodiscard]] static Result<std::unique_ptr<GgufModel>> open(const std::string& path);
  // The same over files already open (tests inject faulty or in-memory files), in split order.
  [[nodiscard]] static Result<std::unique_ptr<GgufModel>> open_files(std::vector<std::unique_ptr<File>> files);

  const std::vector<GgufFile>& files() const { return parsed_; }
  const File& file(int i) const { return *files_[static_cast<size_t>(i)]; }
  // Metadata of the model (the first file's).
  const GgufFile& header() const { return parsed_.front(); }
  const GgufValue* find_key(std::string_view key) const { return header().find(key); }
  // The tensor named `name`, or null.
  const GgufTensorInfo* find(const std::string& name) const;
  // All tensors, by name.
  const std::map<std::string, GgufTensorInfo>& tensors() const { return tensors_; }
  // Reads `n` bytes at `offset` inside tensor `t` into dst. kInvalidArgument when the range is not
  // inside the tensor; read errors as File::read_at.
  [[nodiscard]] Status read_range(const GgufTensorInfo& t, uint64_t offset, uint64_t n, void* dst) const;

 private:
  std::vector<std::unique_ptr<File>> files_;
  std::vector<GgufFile> parsed_;
  std::map<std::string, GgufTensorInfo> tensors_;
};

}  // namespace strata::io
