// What the operating system reports about memory and I/O, for placement decisions and stats.
// Linux: /proc/meminfo and /proc/self/io. Thread safety: stateless, safe anywhere.
#pragma once

#include <cstdint>

#include "core/status.h"

namespace strata::store {

// MemAvailable from /proc/meminfo in bytes (free RAM plus reclaimable page cache): what strata can
// use without swapping or pushing other processes out. kNotFound / kCorruption when unreadable.
[[nodiscard]] Result<uint64_t> available_memory_bytes();

// Bytes this process caused to be read from storage (/proc/self/io read_bytes), or 0 if unknown.
uint64_t process_read_bytes();

}  // namespace strata::store
