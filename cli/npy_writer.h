// Writes NumPy .npy files (format 1.0, little-endian, C order) for `strata logits --dump`.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "core/status.h"

namespace strata::cli {

// descr: "<f4", "<i8", "<i4", "|b1". `data` holds numel elements of that type.
[[nodiscard]] Status write_npy(const std::string& path, const std::string& descr, const std::vector<int64_t>& shape,
                               const void* data, size_t elem_size);

}  // namespace strata::cli
