// What removing a file gives back to its file system, for a writer that replaces files (`strata
// synth --force`) and must refuse for space before it removes anything: counting bytes a removal
// does not free let synth delete the earlier checkpoint and then fail for space (reliability.md,
// "synth --force's space check").
//
// A removal frees a file's allocated blocks only when the name removed is its last one (not a hard
// link or a symbolic link), no process holds it open (a `strata serve` on the checkpoint, an mmap
// included: the blocks stay allocated until the last descriptor or mapping goes) and the file
// system is not a union whose lower layer keeps the bytes (overlayfs: a removal writes a whiteout).
// What is counted is the allocated bytes (st_blocks), not the size: a sparse file frees fewer.
// Where the answer cannot be known, nothing is counted. Thread safety: reentrant.
// Source: lstat(2), statfs(2), fcntl(2) F_SETLEASE, unlink(2) EPERM/EACCES.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

namespace strata::io {

struct Reclaim {
  uint64_t bytes = 0;      // allocated bytes the removal frees (0 when none, or not known)
  bool held_open = false;  // another open file description or mapping holds the file
  bool frees = false;      // the removal frees the file (its inode and its allocated bytes)
  bool removable = true;   // this process may remove the name (directory permissions, sticky bit)
  std::string why;         // when bytes is 0 for a file that has some, or !removable: why, for messages
};

// What removing `path` would free now, and whether this process may remove it: st_blocks * 512 of a
// regular file with one name that no other process holds open. 0 (with `why`) for a hard link, a
// symbolic link, a file on overlayfs, a file another process holds open, or one where that cannot
// be seen (holders are seen by asking for a write lease, granted only while no other descriptor or
// mapping of the file exists: not the file's owner, or a file system without leases, is unknown);
// 0 without `why` for a directory or a missing file. The lease is released at once; an O_NONBLOCK
// open of the file by another process in that moment gets EAGAIN (a reader racing the file's
// removal). Cannot fail.
Reclaim bytes_freed_by_removing(const std::string& path);

// Free inodes for an unprivileged process on the file system holding directory `dir` (statvfs
// f_favail); nullopt where it reports none at all (f_files 0: no fixed inode table, as btrfs) or
// statvfs fails. A writer that creates many files checks it beside the bytes.
std::optional<uint64_t> free_inodes(const std::string& dir);

// Room a new file may take beyond its bytes: its last block's rounding on a file system of 4 KiB
// blocks. A writer asking for space adds it for each file it will create (many small shards each
// round up).
constexpr uint64_t kFileRoundingBytes = 4096;

}  // namespace strata::io
