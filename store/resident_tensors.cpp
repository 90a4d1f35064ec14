#include "store/resident_tensors.h"

#include <algorithm>
#include <cstring>

namespace strata::store {

Result<TensorView> ResidentTensors::get(const io::Checkpoint& ck, const std::string& name) {
  const io::TensorInfo* t = ck.find(name);
  if (!t) return NotFound(ck.dir() + ": tensor '" + name + "' is missing from the checkpoint");
  auto it = loaded_.find(name);
  if (it == loaded_.end()) {
    AlignedBytes buf(std::max<uint64_t>(t->nbytes, 1));
    STRATA_RETURN_IF_ERROR(ck.read(*t, buf.data()));
    bytes_ += t->nbytes;
    it = loaded_.emplace(name, std::move(buf)).first;
  }
  return TensorView{it->second.data(), t->dtype, t->shape};
}

Status gather_engram_rows(const std::string& table, const uint8_t* weights, const uint8_t* scales, int64_t n_rows,
                          int64_t row_bytes, int64_t scale_bytes, std::span<const int64_t> rows, uint8_t* weight_out,
                          uint8_t* scale_out) {
  for (size_t i = 0; i < rows.size(); ++i) {
    const int64_t r = rows[i];
    if (r < 0 || r >= n_rows)
      return InvalidArgument("Engram row " + std::to_string(r) + " out of range for '" + table + "' with " +
                             std::to_string(n_rows) + " rows");
    std::memcpy(weight_out + i * row_bytes, weights + r * row_bytes, static_cast<size_t>(row_bytes));
    std::memcpy(scale_out + i * scale_bytes, scales + r * scale_bytes, static_cast<size_t>(scale_bytes));
  }
  return Status();
}

}  // namespace strata::store
