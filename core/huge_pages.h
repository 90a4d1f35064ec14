// Memory for bytes that are streamed whole, again and again: resident weights, and the buffers
// the probe and the benchmarks time as stand-ins for them. An allocation of 2 MiB or more is 2 MiB
// aligned and advised MADV_HUGEPAGE (transparent huge pages): one fault per 2 MiB instead of 512
// when it is first written, and far fewer TLB misses when it is read. On this VM (EPT, two-level
// page walks) the same 512 MiB read loop at 2 threads ran 15-26 GB/s on 4 KiB pages and 26-33 GB/s
// on huge pages, minutes apart (docs/performance.md, 2026-12-07): a bandwidth measured on 4 KiB
// pages is not the limit of a decode that reads huge pages.
// Smaller allocations are 64-byte aligned (vector kernels use aligned loads) with no advice.
// The advice is advice only: where THP is off ("never") the memory stays on 4 KiB pages.
// Contents are uninitialised.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <memory>

namespace strata {

inline constexpr size_t kHugePageBytes = size_t{2} << 20;

struct FreeBytes {
  void operator()(uint8_t* p) const { std::free(p); }
};
using HugePageBytes = std::unique_ptr<uint8_t, FreeBytes>;

// `bytes` (rounded up to the alignment; 0 counts as 1) of uninitialised memory, as the header says.
// Throws std::bad_alloc when the allocation fails, as operator new does.
HugePageBytes alloc_huge_page_bytes(size_t bytes);

}  // namespace strata
