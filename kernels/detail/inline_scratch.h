// InlineScratch: uninitialised, 64-byte aligned scratch on the stack up to N bytes and on the heap
// beyond, for kernel drivers whose decode-sized temporaries (prepared activation rows, attention
// scores) must not cost an allocation per call: a decode token makes ~500 such calls (docs/
// performance.md, "Where a lone decode step's time goes"). Prefill-sized requests take the heap.
// The caller writes before it reads (no zero fill). HeapScratch (N = 0) is the prefill drivers'
// heap-only form. The ISA files of kernels/x86 keep their own copy (x86/common.h `Scratch`): a
// template shared with them would be compiled under each file's -m flags and merged by the linker.
#pragma once

#include <array>
#include <cstddef>
#include <cstdlib>
#include <memory>

#include "core/status.h"

namespace strata::kernels::detail {

template <size_t N>
class InlineScratch {
 public:
  explicit InlineScratch(size_t bytes) { resize(bytes); }
  InlineScratch(const InlineScratch&) = delete;
  InlineScratch& operator=(const InlineScratch&) = delete;

  // Room for `bytes` (what it held is not kept): for scratch sized after it is constructed.
  void resize(size_t bytes) {
    heap_.reset();
    if (bytes <= N) return;
    void* p = std::aligned_alloc(64, (bytes + 63) / 64 * 64);
    STRATA_CHECK(p != nullptr, "kernels: out of memory for scratch");
    heap_.reset(static_cast<unsigned char*>(p));
  }

  unsigned char* get() { return heap_ ? heap_.get() : inline_.data(); }
  const unsigned char* get() const { return heap_ ? heap_.get() : inline_.data(); }
  template <class T>
  T* as() {
    return reinterpret_cast<T*>(get());
  }

 private:
  struct FreeDeleter {
    void operator()(void* p) const { std::free(p); }
  };
  std::unique_ptr<unsigned char, FreeDeleter> heap_;
  alignas(64) std::array<unsigned char, N> inline_;
};

using HeapScratch = InlineScratch<0>;

}  // namespace strata::kernels::detail
