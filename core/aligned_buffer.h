// AlignedBuffer: an owned, 64-byte aligned, zero-initialised byte or float array (RAII).
// Used for activations and resident weights so vector kernels can use aligned loads.
// Not thread-safe to resize; concurrent reads/writes of disjoint ranges are fine.
#pragma once

#include <cstddef>
#include <cstdlib>
#include <cstring>
#include <new>
#include <utility>

namespace strata {

inline constexpr size_t kBufferAlign = 64;

template <typename T>
class AlignedArray {
 public:
  AlignedArray() = default;
  explicit AlignedArray(size_t n) { resize(n); }
  ~AlignedArray() { std::free(p_); }
  AlignedArray(const AlignedArray&) = delete;
  AlignedArray& operator=(const AlignedArray&) = delete;
  AlignedArray(AlignedArray&& o) noexcept : p_(std::exchange(o.p_, nullptr)), n_(std::exchange(o.n_, 0)) {}
  AlignedArray& operator=(AlignedArray&& o) noexcept {
    if (this != &o) {
      std::free(p_);
      p_ = std::exchange(o.p_, nullptr);
      n_ = std::exchange(o.n_, 0);
    }
    return *this;
  }

  // Reallocates to n zeroed elements (old contents are dropped). Aborts on out-of-memory via bad_alloc.
  void resize(size_t n) {
    std::free(p_);
    p_ = nullptr;
    n_ = 0;
    if (n == 0) return;
    size_t bytes = (n * sizeof(T) + kBufferAlign - 1) / kBufferAlign * kBufferAlign;
    p_ = static_cast<T*>(std::aligned_alloc(kBufferAlign, bytes));
    if (!p_) throw std::bad_alloc();
    std::memset(p_, 0, bytes);
    n_ = n;
  }
  // Grows (never shrinks) to at least n elements, zeroing everything when it grows.
  void reserve_zeroed(size_t n) {
    if (n > n_) resize(n);
  }
  void zero() {
    if (p_) std::memset(p_, 0, n_ * sizeof(T));
  }

  T* data() { return p_; }
  const T* data() const { return p_; }
  size_t size() const { return n_; }
  T& operator[](size_t i) { return p_[i]; }
  const T& operator[](size_t i) const { return p_[i]; }

 private:
  T* p_ = nullptr;
  size_t n_ = 0;
};

using AlignedBytes = AlignedArray<unsigned char>;

}  // namespace strata
