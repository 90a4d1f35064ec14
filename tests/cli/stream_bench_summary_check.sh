#!/usr/bin/env bash
# bench/stream_bench.sh --summary-only on hand-made stats files (the bench itself needs a checkpoint
# larger than RAM and is not run here): a run that read nothing from disk (mmap with the page cache
# warm) or a disk.json without a sequential rate has no I/O roofline, and its cells read "n/a", never
# "inf" or a ZeroDivisionError; the table of a run with disk reads still divides by the disk. Figures
# that are not numbers (a rate of `true`, memory samples of 0) read "n/a" too, and a file that does
# not parse (disk.json, a stats JSON, a .membw) gives one line naming it, never a traceback.
# Usage: stream_bench_summary_check.sh REPO_ROOT FIXTURES_DIR. Exit 77 = fixture missing (skip).
set -uo pipefail
repo="$1"; fixtures="$2"
ck="$fixtures/v41-tiny/checkpoint"  # only its config.json and safetensors headers are read
if [[ ! -f "$ck/config.json" ]]; then echo "SKIP: fixture checkpoint $ck missing" >&2; exit 77; fi
command -v python3 >/dev/null || { echo "SKIP: no python3" >&2; exit 77; }
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
fail=0

# --summary-only runs neither binary, but the script wants both in --build.
mkdir -p "$tmp/build/cli" "$tmp/build/bench"
for b in cli/strata bench/disk_read_bench; do printf '#!/bin/sh\nexit 1\n' > "$tmp/build/$b"; chmod +x "$tmp/build/$b"; done

# stats MODE BYTES_READ_PER_TOKEN OS_READ_BYTES: a stats JSON with the fields the summary reads.
stats() {
  python3 - "$tmp/out/$1_512.json" "$2" "$3" <<'PY'
import json, sys
path, bpt, osb = sys.argv[1], float(sys.argv[2]), int(sys.argv[3])
eng = {"reads": 100, "busy_s": 0.5, "share_of_wall": 0.1}
pre = {"tokens": 512, "tok_per_s": 50.0, "engram": eng}
dec = {"tokens": 15, "tok_per_s": 2.0, "wall_s": 7.5, "bytes_read_per_token": bpt, "os_read_bytes": osb,
       "io_wait_s": 1.0, "expert": {"hit_rate": 0.5}, "prefetch": {"hit_rate": 0.25, "prediction_recall": 0.5},
       "engram": eng, "cpu": {"user_s": 1.5, "sys_s": 0.3}}
json.dump({"phases": {"prefill": pre, "decode": dec}}, open(path, "w"))
PY
}

# summary NAME DISK_JSON: runs --summary-only; its output goes to $tmp/NAME.md.
summary() {
  echo "$2" > "$tmp/out/disk.json"
  if ! bash "$repo/bench/stream_bench.sh" --model "$ck" --out "$tmp/out" --build "$tmp/build" --prompts 512 \
       --threads 2 --summary-only >"$tmp/$1.md" 2>"$tmp/$1.err"; then
    echo "FAIL $1: stream_bench.sh --summary-only failed:"; cat "$tmp/$1.err"; fail=1; return 1
  fi
}
check_not() {  # check_not NAME FILE PATTERN (grep -E)
  if grep -Eqi -- "$3" "$2"; then echo "FAIL $1: '$3' found in"; cat "$2"; fail=1; else echo "ok   $1"; fi
}
check() {  # check NAME FILE PATTERN (grep -E)
  if grep -Eq -- "$3" "$2"; then echo "ok   $1"; else echo "FAIL $1: no line matching '$3' in"; cat "$2"; fail=1; fi
}

mkdir -p "$tmp/out"
stats stream 4000000 60000000
stats mmap 0 0  # every page was in the page cache: nothing read from disk
# Memory bandwidth samples of the mmap run, so the second table computes its roofline too.
printf 'before 20000000000\nafter 22000000000\n' > "$tmp/out/mmap_512.membw"
disk='{"seq_gbps_qd32": 2.0, "rand4k_iops_qd32": 100000, "rand4k_iops_qd32_buffered": 50000}'
if summary reads "$disk"; then
  check_not "no inf roofline" "$tmp/reads.md" '\binf\b|nan'
  check "mmap row without disk reads: roofline n/a" "$tmp/reads.md" '^\| mmap \| 512 \|.*\| 0\.0 MB \|.*\| n/a \| n/a \|'
  # stream: 2 GB/s over 4 MB per token is 500 tok/s; decode 2 tok/s is 0% of it
  check "stream row divides by the disk" "$tmp/reads.md" '^\| stream \| 512 \|.*\| 500\.000 \| 0% \|'
  # memory only (no miss bytes): the roofline is memory BW / bytes touched, finite
  check "mmap memory-only roofline" "$tmp/reads.md" '^\| mmap \| 512 \| 2\.000 \| 21\.0 GB/s .*\| 0\.0 MB \| [0-9.]+ MB \| [0-9.]+ \| [0-9]+% \|'
fi
# A disk.json without the sequential rate (or a zero one): no disk roofline for any run; the
# second table still bounds the run that read nothing by memory alone.
cp "$tmp/out/mmap_512.membw" "$tmp/out/stream_512.membw"
if summary nodisk '{"rand4k_iops_qd32": 0}'; then
  check_not "no inf without a disk rate" "$tmp/nodisk.md" '\binf\b|nan'
  check "stream row without a disk rate: n/a" "$tmp/nodisk.md" '^\| stream \| 512 \| 50\.00 \|.*\| n/a \| n/a \|'
  check "stream roofline without a disk rate: n/a" "$tmp/nodisk.md" '^\| stream \| 512 \| 2\.000 \|.*\| n/a \| n/a \| n/a \| n/a \|'
  check "mmap memory-only roofline without a disk rate" "$tmp/nodisk.md" '^\| mmap \| 512 \| 2\.000 \|.*\| 0\.0 MB \| [0-9.]+ MB \| [0-9.]+ \| [0-9]+% \|'
fi
# expect_summary_error NAME DISK_JSON PATTERN: --summary-only fails with one stderr line matching
# PATTERN (grep -F) and no Python traceback.
expect_summary_error() {
  echo "$2" > "$tmp/out/disk.json"
  if bash "$repo/bench/stream_bench.sh" --model "$ck" --out "$tmp/out" --build "$tmp/build" --prompts 512 \
       --threads 2 --summary-only >"$tmp/$1.md" 2>"$tmp/$1.err"; then
    echo "FAIL $1: exit 0"; fail=1; return
  fi
  if [[ $(wc -l <"$tmp/$1.err") -ne 1 ]] || ! grep -qF -- "$3" "$tmp/$1.err"; then
    echo "FAIL $1: expected one stderr line with '$3', got:"; cat "$tmp/$1.err"; fail=1; return
  fi
  echo "ok   $1: $(cat "$tmp/$1.err")"
}
# A disk rate that is not a number (JSON true is 1 in Python's arithmetic: it read as 1 GB/s) is no rate.
if summary boolrate '{"seq_gbps_qd32": true, "rand4k_iops_qd32": 100000}'; then
  check "boolean disk rate: n/a in the header" "$tmp/boolrate.md" '^disk: sequential n/a '
  check "boolean disk rate: stream row n/a" "$tmp/boolrate.md" '^\| stream \| 512 \| 50\.00 \|.*\| n/a \| n/a \|'
fi
# Memory bandwidth samples of 0 (no measurement): no memory roofline for that run, not a ZeroDivisionError.
printf 'before 0\nafter 0\n' > "$tmp/out/mmap_512.membw"
if summary zeromem "$disk"; then
  check "memory samples of 0: roofline n/a" "$tmp/zeromem.md" '^\| mmap \| 512 \| 2\.000 \| n/a .*\| n/a \| n/a \| n/a \| n/a \|'
  check "memory samples of 0: the other run keeps its roofline" "$tmp/zeromem.md" '^\| stream \| 512 \| 2\.000 \| 21\.0 GB/s '
fi
printf 'before 2e10\nafter lots\n' > "$tmp/out/mmap_512.membw"
expect_summary_error badmem "$disk" "$tmp/out/mmap_512.membw: line 2"
printf 'before 20000000000\nafter 22000000000\n' > "$tmp/out/mmap_512.membw"
# Files that do not parse: one line naming the file.
expect_summary_error notjson 'not json {' "$tmp/out/disk.json: not JSON"
expect_summary_error notobject '[2.0]' "$tmp/out/disk.json: not a JSON object"
cp "$tmp/out/mmap_512.json" "$tmp/mmap_512.json.good"
echo '{"phases": ' > "$tmp/out/mmap_512.json"
expect_summary_error badstats "$disk" "$tmp/out/mmap_512.json: not JSON"
cp "$tmp/mmap_512.json.good" "$tmp/out/mmap_512.json"
exit $fail
