// alloc_huge_page_bytes (core/huge_pages.h): the alignment and the rounding it promises, and that
// the memory is usable to its last byte (ASan reports an overrun if the size were rounded down).
#include "core/huge_pages.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <new>

namespace strata {
namespace {

TEST(HugePages, TwoMiBAndMoreAreHugePageAligned) {
  for (size_t bytes : {kHugePageBytes, kHugePageBytes + 1, 3 * kHugePageBytes - 7}) {
    HugePageBytes p = alloc_huge_page_bytes(bytes);
    ASSERT_NE(p, nullptr);
    EXPECT_EQ(reinterpret_cast<uintptr_t>(p.get()) % kHugePageBytes, 0u) << bytes;
    std::memset(p.get(), 0xA5, bytes);
    EXPECT_EQ(p.get()[bytes - 1], 0xA5);
  }
}

TEST(HugePages, SmallAllocationsAre64ByteAligned) {
  for (size_t bytes : {size_t{0}, size_t{1}, size_t{63}, size_t{4096}, kHugePageBytes - 1}) {
    HugePageBytes p = alloc_huge_page_bytes(bytes);
    ASSERT_NE(p, nullptr);
    EXPECT_EQ(reinterpret_cast<uintptr_t>(p.get()) % 64, 0u) << bytes;
    if (bytes > 0) {
      std::memset(p.get(), 0x5A, bytes);
      EXPECT_EQ(p.get()[bytes - 1], 0x5A);
    }
  }
}

TEST(HugePages, SizesThatWouldWrapThrow) {
  // Rounding SIZE_MAX up to 2 MiB wrapped to 0 and returned a usable-looking pointer.
  EXPECT_THROW(alloc_huge_page_bytes(SIZE_MAX), std::bad_alloc);
  EXPECT_THROW(alloc_huge_page_bytes(SIZE_MAX - kHugePageBytes + 3), std::bad_alloc);
}

}  // namespace
}  // namespace strata
