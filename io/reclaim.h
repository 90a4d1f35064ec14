// What removing a file gives back to its file system, for a writer that replaces files (`strata
// synth --force`) and must refuse for space before it removes anything: counting bytes a removal
// does not free let synth delete the earlier checkpoint and then fail for space (reliability.md,
// "synth --force's space check").
//
// A removal frees a file's allocated blocks only when the name removed is its last one (not a hard
// link or a symbolic link) and no process holds it open (a `strata serve` on the checkpoint, an
// mmap included): the blocks stay allocated until the last descriptor or mapping goes. What is
// counted is the allocated bytes (st_blocks), not the size: a sparse file frees fewer.
// Thread safety: reentrant. Source: lstat(2); fcntl(2) F_SETLEASE.
#pragma once

#include <cstdint>
#include <string>

namespace strata::io {

struct Reclaim {
  uint64_t bytes = 0;      // allocated bytes freed by the removal (0 when none are)
  bool held_open = false;  // another open file description or mapping holds the file
};

// Bytes that removing `path` frees now: st_blocks * 512 of a regular file with one name and no
// other holder; 0 for a hard link, a symbolic link, a directory, a missing file, or a file that
// another process holds open. "Held open" is seen by asking for a write lease (granted only
// while no other descriptor or mapping of the file exists); where leases are unavailable (not
// the file's owner, a file system without them) the file counts as not held. Cannot fail.
Reclaim bytes_freed_by_removing(const std::string& path);

// Room a new file may take beyond its bytes: its last block's rounding on a file system of 4 KiB
// blocks. A writer asking for space adds it for each file it will create (many small shards each
// round up).
constexpr uint64_t kFileRoundingBytes = 4096;

}  // namespace strata::io
