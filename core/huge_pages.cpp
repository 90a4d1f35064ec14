#include "core/huge_pages.h"

#include <sys/mman.h>

#include <algorithm>
#include <cstdint>
#include <new>

namespace strata {

HugePageBytes alloc_huge_page_bytes(size_t bytes) {
  constexpr size_t kSmallAlign = 64;
  const size_t align = bytes >= kHugePageBytes ? kHugePageBytes : kSmallAlign;
  if (bytes > SIZE_MAX - align) throw std::bad_alloc();  // the rounding below would wrap
  const size_t size = (std::max<size_t>(bytes, 1) + align - 1) / align * align;
  auto* p = static_cast<uint8_t*>(std::aligned_alloc(align, size));
  if (!p) throw std::bad_alloc();
  if (align == kHugePageBytes) (void)::madvise(p, size, MADV_HUGEPAGE);  // advice only (see the header)
  return HugePageBytes(p);
}

}  // namespace strata
