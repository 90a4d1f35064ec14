// model/engram_gguf_check.h
#include "model/engram_gguf_check.h"

#include <vector>

#include "io/checkpoint.h"
#include "io/gguf.h"
#include "io/gguf_config.h"

namespace strata::model {

namespace {

// Compares an integer array key with `want`, naming the first difference.
Status compare(const io::GgufModel& g, const std::string& path, const std::string& key, const std::string& what,
               const std::vector<int64_t>& want) {
  const io::GgufValue* v = g.find_key(key);
  if (!v) return Status();
  auto bad = [&](const std::string& m) {
    return InvalidArgument(path + ": metadata key '" + key + "' differs from the " + what + " strata computes: " + m);
  };
  if (!v->is_array() || v->strings()) return bad("it is not an array of integers");
  if (v->array_size() != want.size())
    return bad("it has " + std::to_string(v->array_size()) + " entries, strata has " + std::to_string(want.size()));
  for (size_t i = 0; i < want.size(); ++i) {
    auto x = v->int_at(i);
    if (!x) {
      auto u = v->uint_at(i);
      if (!u) return bad("entry " + std::to_string(i) + " is not an integer");
      x = static_cast<int64_t>(*u);
    }
    if (*x != want[i])
      return bad("entry " + std::to_string(i) + " is " + std::to_string(*x) + ", strata has " +
                 std::to_string(want[i]));
  }
  return Status();
}

}  // namespace

Status check_gguf_engram_tables(const std::string& path, const EngramHasher& h,
                                std::span<const uint32_t> class_of_token, uint32_t pad_class) {
  if (!io::is_gguf_path(path)) return Status();
  STRATA_ASSIGN_OR_RETURN(auto g, io::GgufModel::open(path));
  const std::string pre = std::string(io::kForeignGgufArch) + ".engram.";
  std::vector<int64_t> primes, mult, map(class_of_token.begin(), class_of_token.end());
  for (int l = 0; l < h.n_layers(); ++l) {
    for (int64_t p : h.primes(l)) primes.push_back(p);
    for (int64_t m : h.multipliers(l)) mult.push_back(m);
  }
  STRATA_RETURN_IF_ERROR(compare(*g, path, pre + "primes", "bucket primes (engram.py EngramLayout)", primes));
  STRATA_RETURN_IF_ERROR(compare(*g, path, pre + "multipliers", "hash multipliers (compute_hash_multipliers)", mult));
  STRATA_RETURN_IF_ERROR(compare(*g, path, pre + "token_map", "compressed-vocab map (from the tokenizer)", map));
  if (const io::GgufValue* v = g->find_key(pre + "pad_id")) {
    auto x = v->as_uint();
    if (!x || *x != pad_class)
      return InvalidArgument(path + ": metadata key '" + pre + "pad_id' is " + v->to_string() +
                             ", strata's compressed id of engram_pad_token_id is " + std::to_string(pad_class));
  }
  return Status();
}

}  // namespace strata::model
