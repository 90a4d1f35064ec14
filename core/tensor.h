// TensorView: a non-owning, typed, row-major view of bytes that live somewhere else (a weight store
// tier, an activation buffer). Views never own; owners (store::*, AlignedBuffer) outlive them.
// Thread safety: a view is a value; concurrent reads of the viewed bytes are fine.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <string>

#include "core/dtype.h"

namespace strata {

inline constexpr int kMaxDims = 4;

struct Shape {
  std::array<int64_t, kMaxDims> dims{};  // outer first
  int rank = 0;

  Shape() = default;
  Shape(std::initializer_list<int64_t> d) {
    for (int64_t v : d) dims[rank++] = v;
  }
  int64_t operator[](int i) const { return dims[i]; }
  int64_t numel() const {
    int64_t n = 1;
    for (int i = 0; i < rank; ++i) n *= dims[i];
    return n;
  }
  bool operator==(const Shape& o) const {
    if (rank != o.rank) return false;
    for (int i = 0; i < rank; ++i)
      if (dims[i] != o.dims[i]) return false;
    return true;
  }
  // "[1280, 5120]"
  std::string to_string() const {
    std::string s = "[";
    for (int i = 0; i < rank; ++i) {
      if (i) s += ", ";
      s += std::to_string(dims[i]);
    }
    return s + "]";
  }
};

struct TensorView {
  const void* data = nullptr;
  DType dtype = DType::kF32;
  Shape shape;

  bool empty() const { return data == nullptr; }
  int64_t numel() const { return shape.numel(); }
  size_t nbytes() const { return static_cast<size_t>(dtype_nbytes(dtype, numel())); }
  template <typename T>
  const T* as() const {
    return static_cast<const T*>(data);
  }
};

}  // namespace strata
