// The quantize dials and their rules (see quant_choice.h).
#include "tools/quant_choice.h"

#include <cctype>

#include "io/gguf_names.h"
#include "store/expert_catalog.h"

namespace strata::tools {

namespace {

constexpr std::pair<const char*, DType> kChoices[] = {{"q8_0", DType::kQ8_0}, {"q6_k", DType::kQ6_K},
                                                      {"q4_k", DType::kQ4_K}, {"q3_k", DType::kQ3_K},
                                                      {"q2_k", DType::kQ2_K}, {"iq4_nl", DType::kIQ4_NL}};

std::string lower(std::string s) {
  for (char& ch : s) ch = static_cast<char>(std::tolower(static_cast<unsigned char>(ch)));
  return s;
}

std::string trim(const std::string& s) {
  size_t a = 0, b = s.size();
  while (a < b && std::isspace(static_cast<unsigned char>(s[a]))) ++a;
  while (b > a && std::isspace(static_cast<unsigned char>(s[b - 1]))) --b;
  return s.substr(a, b - a);
}

}  // namespace

Result<std::optional<DType>> parse_quant_choice(const std::string& s) {
  const std::string l = lower(s);
  if (l == "keep") return std::optional<DType>();
  for (const auto& [n, d] : kChoices)
    if (l == n) return std::optional<DType>(d);
  return InvalidArgument("'" + s + "' is not a quantisation type (" + kQuantTypeNames + ")");
}

std::string quant_choice_name(const std::optional<DType>& d) {
  if (!d) return "keep";
  for (const auto& [n, t] : kChoices)
    if (t == *d) return n;
  return "?";
}

std::string QuantChoice::to_string() const {
  return "experts=" + quant_choice_name(experts) + ",dense=" + quant_choice_name(dense) +
         ",head=" + quant_choice_name(head) + ",engram=" + quant_choice_name(engram);
}

Result<QuantChoice> parse_quant_spec(const std::string& spec, const std::string& flag) {
  QuantChoice q;
  bool seen[4] = {};
  size_t pos = 0;
  if (trim(spec).empty())
    return InvalidArgument(flag + ": empty; expected KEY=TYPE,... with KEY one of " + kQuantKeys + " and TYPE one of " +
                           kQuantTypeNames);
  while (pos <= spec.size()) {
    const size_t comma = spec.find(',', pos);
    const std::string item = trim(spec.substr(pos, comma == std::string::npos ? std::string::npos : comma - pos));
    pos = comma == std::string::npos ? spec.size() + 1 : comma + 1;
    const size_t eq = item.find('=');
    if (eq == std::string::npos)
      return InvalidArgument(flag + ": '" + item + "' is not KEY=TYPE (KEY one of " + kQuantKeys + "; TYPE one of " +
                             kQuantTypeNames + ")");
    const std::string key = lower(trim(item.substr(0, eq))), value = trim(item.substr(eq + 1));
    static constexpr const char* kKeys[4] = {"experts", "dense", "head", "engram"};
    std::optional<DType>* slots[4] = {&q.experts, &q.dense, &q.head, &q.engram};
    int k = 0;
    while (k < 4 && key != kKeys[k]) ++k;
    if (k == 4)
      return InvalidArgument(flag + ": unknown key '" + item.substr(0, eq) + "' (expected one of " + kQuantKeys + ")");
    if (seen[k]) return InvalidArgument(flag + ": key '" + key + "' given twice");
    seen[k] = true;
    // experts=mxfp4 (strata quantize --experts mxfp4): the kept MXFP4 bits in ggml's blocks, the
    // same bytes as keep.
    if (k == 0 && lower(value) == "mxfp4") continue;
    auto t = parse_quant_choice(value);
    if (!t.ok()) return InvalidArgument(flag + " " + key + ": " + t.error().message());
    *slots[k] = *t;
  }
  return q;
}

QuantDial quant_dial_of(const std::string& name, DType dtype, bool has_scale) {
  if (io::gguf_expert_tensor(name)) return name.ends_with(".weight") ? QuantDial::kExperts : QuantDial::kNone;
  if (store::ExpertCatalog::is_engram_table(name))
    return name.ends_with(".weight") ? QuantDial::kEngram : QuantDial::kNone;
  if (name == "head.weight") return QuantDial::kHead;
  if (dtype == DType::kF8E4M3 && name.ends_with(".weight") && has_scale) return QuantDial::kDense;
  return QuantDial::kNone;
}

int64_t quant_row_values(const Shape& shape, DType dtype) {
  const int64_t in = shape.rank >= 2 ? shape[1] : shape[0];
  return dtype == DType::kI8 ? 2 * in : in;
}

bool quant_fits(DType t, const Shape& shape, DType dtype) {
  return shape.rank == 2 && quant_row_values(shape, dtype) % dtype_block(t).elems == 0;
}

std::optional<DType> expert_fallback(DType t) {
  switch (t) {
    case DType::kQ2_K:
    case DType::kQ3_K:
    case DType::kQ4_K: return DType::kIQ4_NL;
    case DType::kQ6_K: return DType::kQ8_0;
    default: return std::nullopt;
  }
}

std::optional<DType> expert_quant_type(DType chosen, const Shape& shape, DType dtype) {
  if (quant_fits(chosen, shape, dtype)) return chosen;
  const std::optional<DType> f = expert_fallback(chosen);
  if (f && quant_fits(*f, shape, dtype)) return f;
  return std::nullopt;
}

std::string expert_note(DType chosen, const std::optional<DType>& fallback, const std::string& tensor, const Shape& shape,
                        DType dtype) {
  const std::string in = std::to_string(quant_row_values(shape, dtype));
  const std::string why = "'" + tensor + "' has rows of " + in + " values, not a multiple of " + quant_choice_name(chosen) +
                          "'s block of " + std::to_string(dtype_block(chosen).elems);
  if (!fallback) return "routed experts kept in their official format: " + why;
  return "routed experts with rows of " + in + " values in " + quant_choice_name(fallback) + " (llama.cpp's fallback): " + why;
}

Status check_engram_quant(DType t, int64_t head_dim, const std::string& where) {
  const std::string tn = quant_choice_name(t);
  const int64_t be = dtype_block(t).elems;
  if (head_dim % be == 0) return Status();
  return InvalidArgument(where + ": rows of " + std::to_string(head_dim) + " values (engram_head_dim) are not a multiple of " +
                         tn + "'s block of " + std::to_string(be) +
                         "; pick a type whose block divides it (q8_0 and iq4_nl have blocks of 32) or keep");
}

Result<QuantChoice> quant_choice_of_checkpoint(const io::Checkpoint& ck) {
  QuantChoice q;
  std::string first[4];  // the tensor each dial's type came from
  for (const auto& [name, t] : ck.tensors()) {
    if (!dtype_is_block_quant(t.dtype)) continue;
    // A quantised tensor has no .scale beside it (a routed expert's is an empty placeholder).
    int k = 1;  // dense
    if (io::gguf_expert_tensor(name)) k = 0;
    else if (store::ExpertCatalog::is_engram_table(name)) k = 3;
    else if (name == "head.weight") k = 2;
    std::optional<DType>* slots[4] = {&q.experts, &q.dense, &q.head, &q.engram};
    if (k == 0 && *slots[k] && **slots[k] != t.dtype) {
      // Routed experts: a K-quant with its fallback on the matrices it does not fit.
      if (expert_fallback(t.dtype) == **slots[k]) {
        *slots[k] = t.dtype;
        first[k] = name;
        continue;
      }
      if (expert_fallback(**slots[k]) == t.dtype) continue;
    }
    if (*slots[k] && **slots[k] != t.dtype)
      return NotSupported(ck.dir() + ": tensors '" + first[k] + "' (" + std::string(dtype_name(**slots[k])) + ") and '" +
                          name + "' (" + std::string(dtype_name(t.dtype)) +
                          ") are one quantize dial in two block formats; plan sizes one type per dial");
    *slots[k] = t.dtype;
    if (first[k].empty()) first[k] = name;
  }
  return q;
}

}  // namespace strata::tools
