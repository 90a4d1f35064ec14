#!/usr/bin/env bash
# The tiering benchmark (issue #3): a checkpoint larger than RAM, run in `stream` and `mmap`
# placement, prefill at 512 and 2048 prompt tokens, then greedy decode, with per-phase placement
# stats (--stats-json) and the disk's own figures (bench/disk_read_bench) to divide by.
#
# Usage: bench/stream_bench.sh --model DIR [--text FILE] [--out DIR] [--build DIR] [--decode N]
#          [--prompts "512 2048"] [--modes "stream mmap"] [--cold] [--threads T] [--no-disk]
#          [--timeout S] [--summary-only] [-- extra strata flags]
#   --model DIR     checkpoint (e.g. strata synth --preset scaled --target-gb 48 --routing-skew 1.5)
#   --text FILE     prompt source text; its first N tokens are the N-token prompt (default: the
#                   GPL-3 and MPL-2.0 license texts plus stdio.h, prose then code then prose)
#   --cold          drop the page cache before every run (needs root: /proc/sys/vm/drop_caches)
#   --no-disk       keep the disk figures of an earlier run in --out (disk.json) instead of measuring
#   --timeout S     stop a run that takes longer than S seconds (its row is left out of the table)
#   --summary-only  run nothing: print the tables again from the files an earlier run left in --out
#   extra flags     passed to every `strata logits` run (e.g. --direct-io, --ram-budget 16G)
# Output: one stats JSON per run in --out, disk.json, and a summary table (summary.md) with the
# figures docs/performance.md reports: tok/s, bytes read per token, hit rates, the I/O roofline
# (sequential read bandwidth / miss bytes per token; "n/a" for a run that read nothing from disk,
# or when disk.json has no rate), the Engram share of decode time, and the Engram prefill row rate
# against the disk's 4 KiB random-read IOPS at queue depth 32.
# With build/bench/kernels_bench built, each run is bracketed by two memory read-bandwidth samples
# (BM_MemRead at the run's threads) and a second table divides decode by the roofline of issue 15
# item 3: 1 / (resident bytes / memory bandwidth + miss bytes / disk bandwidth) per token, where the
# bytes a token touches come from the safetensors headers (bench/decode_roofline.py), miss bytes are
# what the store read per decode token and resident bytes the rest (that sum assumes no overlap;
# beside it the bound with reads fully overlapped, 1 / max of the two terms); then the process's CPU
# time per decode token in user space and in the kernel (what the reads cost the cores).
set -euo pipefail

repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
build="$repo/build"
model=""
text=""
out="/tmp/strata_stream_bench"
decode=16
prompts="512 2048"
modes="stream mmap"
cold=0
threads=0
no_disk=0
timeout_s=0
summary_only=0
extra=()
while [[ $# -gt 0 ]]; do
  case "$1" in
    --model|--text|--out|--build|--decode|--prompts|--modes|--threads|--timeout)
      [[ $# -ge 2 ]] || { echo "stream_bench.sh: $1 needs a value (see --help)" >&2; exit 2; } ;;&
    --model) model="$2"; shift 2 ;;
    --text) text="$2"; shift 2 ;;
    --out) out="$2"; shift 2 ;;
    --build) build="$2"; shift 2 ;;
    --decode) decode="$2"; shift 2 ;;
    --prompts) prompts="$2"; shift 2 ;;
    --modes) modes="$2"; shift 2 ;;
    --cold) cold=1; shift ;;
    --threads) threads="$2"; shift 2 ;;
    --no-disk) no_disk=1; shift ;;
    --timeout) timeout_s="$2"; shift 2 ;;
    --summary-only) summary_only=1; shift ;;
    --) shift; extra=("$@"); break ;;
    -h|--help) sed -n '2,28p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "stream_bench.sh: unknown argument '$1' (see --help)" >&2; exit 2 ;;
  esac
done
[[ -n "$model" ]] || { echo "stream_bench.sh: --model DIR is required" >&2; exit 2; }
[[ -f "$model/config.json" ]] || { echo "stream_bench.sh: --model $model: no config.json there (a checkpoint directory)" >&2; exit 2; }
# The first new token comes from the prefill's logits: decode needs two steps to time one.
[[ "$decode" =~ ^[0-9]+$ && "$decode" -ge 2 ]] || { echo "stream_bench.sh: --decode $decode: need at least 2" >&2; exit 2; }
if [[ $summary_only -eq 1 && ! -s "$out/disk.json" ]]; then
  echo "stream_bench.sh: --summary-only: no $out/disk.json (run the bench with --out $out first)" >&2
  exit 2
fi
strata="$build/cli/strata"
diskb="$build/bench/disk_read_bench"
kbench="$build/bench/kernels_bench"
# strata's -t 0 is one thread per physical core; BM_MemRead is registered at 1, 2, 4, 8 and 16.
bw_threads=$threads
[[ "$bw_threads" == 0 ]] && bw_threads=$(lscpu -p=core,socket | grep -v '^#' | sort -u | wc -l)
[[ -x "$strata" && -x "$diskb" ]] || { echo "stream_bench.sh: build strata and disk_read_bench in $build first" >&2; exit 2; }
mkdir -p "$out"
if [[ -z "$text" ]]; then
  text="$out/prompt_source.txt"
  cat /usr/share/common-licenses/GPL-3 /usr/include/stdio.h /usr/share/common-licenses/MPL-2.0 > "$text"
fi

drop_caches() {
  if [[ $cold -eq 1 ]]; then
    sync
    echo 3 > /proc/sys/vm/drop_caches || { echo "stream_bench.sh: cannot drop caches (not root?)" >&2; exit 1; }
  fi
}

# One memory read-bandwidth sample (BM_MemRead at the run's threads, median of 3, bytes/s) appended
# to FILE as "LABEL BYTES_PER_S"; nothing when kernels_bench is not built or has no such thread count.
mem_bw() {
  [[ -x "$kbench" ]] || return 0
  "$kbench" --benchmark_filter="BM_MemRead/$bw_threads/1/" --benchmark_repetitions=3 \
    --benchmark_report_aggregates_only=true --benchmark_format=json 2>/dev/null |
    python3 -c 'import json,sys
t=sys.stdin.read()
b=[x for x in json.loads(t)["benchmarks"] if x.get("aggregate_name")=="median"] if t.strip() else []
if b: print(sys.argv[1], b[0]["bytes_per_second"])' "$1" >> "$2" || true
}

if [[ $summary_only -eq 0 ]]; then
# Disk figures first, from the checkpoint's own shards (O_DIRECT, so the page cache does not matter
# except for the buffered random-read line).
if [[ $no_disk -eq 0 || ! -s "$out/disk.json" ]]; then
  drop_caches
  "$diskb" --seconds 5 --json "$model"/*.safetensors > "$out/disk.json"
fi
cat "$out/disk.json"

"$strata" tokenize -m "$model" --file "$text" > "$out/all_ids.json"
for p in $prompts; do
  python3 - "$out/all_ids.json" "$p" "$out/ids_$p.json" <<'PY'
import json, sys
ids = json.load(open(sys.argv[1]))
n = int(sys.argv[2])
if len(ids) < n:
    sys.exit(f"stream_bench.sh: the text has {len(ids)} tokens, fewer than {n}")
json.dump(ids[:n], open(sys.argv[3], "w"))
PY
done

for mode in $modes; do
  for p in $prompts; do
    rm -f "$out/${mode}_$p.membw"
    drop_caches
    mem_bw before "$out/${mode}_$p.membw"
    echo "== $mode, $p-token prompt, $decode decode steps" >&2
    limit=()
    [[ "$timeout_s" != 0 ]] && limit=(timeout "$timeout_s")
    /usr/bin/time -v "${limit[@]}" "$strata" logits -m "$model" --tokens "$out/ids_$p.json" --out "$out/logits.f32" \
      --positions $((p - 1)) --decode "$decode" -t "$threads" --load-mode "$mode" \
      --stats --stats-json "$out/${mode}_$p.json" "${extra[@]}" > "$out/${mode}_$p.tokens" 2> "$out/${mode}_$p.log" ||
      { echo "stream_bench.sh: run failed or timed out, see $out/${mode}_$p.log" >&2
        sed '/Command being timed/,$d' "$out/${mode}_$p.log" | tail -5 >&2  # strata's own lines, not time -v's
        rm -f "$out/${mode}_$p.json"; continue; }
    mem_bw after "$out/${mode}_$p.membw"
    grep -E "placement|Maximum resident" "$out/${mode}_$p.log" >&2 || true
  done
done
fi

# The tables go to summary.md only when some run of these --modes and --prompts has a decode phase
# (a --summary-only with other lists, or runs that all failed, leave an earlier summary.md alone).
python3 - "$out" "$modes" "$prompts" "$model" "$repo/bench" "$bw_threads" > "$out/summary.md.tmp" <<'PY' || { rm -f "$out/summary.md.tmp"; exit 1; }
import json, math, sys, os
out, modes, prompts, model = sys.argv[1], sys.argv[2].split(), sys.argv[3].split(), sys.argv[4]
bw_threads = sys.argv[6]
sys.path.insert(0, sys.argv[5])
sys.dont_write_bytecode = True  # no __pycache__ in the repo's bench/
from decode_roofline import decode_bytes_per_token


def fail(msg):
    """Exits 1 with one line on stderr (a file that does not parse is named, never a traceback)."""
    sys.exit(f"stream_bench.sh: {msg}")


def load_object(path, what):
    """The JSON object in `path`, or a one-line error naming the file and what it should hold."""
    try:
        with open(path) as f:
            v = json.load(f)
    except OSError as e:
        fail(f"{path}: cannot read ({e.strerror})")
    except ValueError as e:  # JSONDecodeError, or bytes that are not UTF-8
        fail(f"{path}: not JSON ({e}; expected {what})")
    if not isinstance(v, dict):
        fail(f"{path}: not a JSON object (expected {what})")
    return v


def positive(v):
    """v where it is a finite number > 0, else None (JSON true is not a number here, though Python
    would count it as 1)."""
    ok = isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v) and v > 0
    return v if ok else None


disk = load_object(os.path.join(out, "disk.json"), "disk_read_bench --json output")


def disk_figure(key):
    """A positive figure of disk.json, or None where it is missing, 0 or not a number (not measured)."""
    return positive(disk.get(key))


def fmt(v, spec, suffix=""):
    """v formatted by spec, or "n/a" where there is no figure (None)."""
    return "n/a" if v is None else format(v, spec) + suffix


def membw(path):
    """The memory bandwidth samples of one run, {label: bytes/s} ({} when none were taken); a line
    that is not "LABEL BYTES_PER_S" is a one-line error naming the file."""
    samples = {}
    if not os.path.exists(path):
        return samples
    with open(path) as f:
        for i, line in enumerate(f, 1):
            parts = line.split()
            if not parts:
                continue
            try:
                if len(parts) != 2:
                    raise ValueError
                samples[parts[0]] = float(parts[1])
            except ValueError:
                fail(f"{path}: line {i} {line.strip()!r} is not 'LABEL BYTES_PER_S'")
    return samples


def runs():
    """(mode, prompt, prefill, decode) of each run whose stats file has a decode phase."""
    for m in modes:
        for p in prompts:
            f = os.path.join(out, f"{m}_{p}.json")
            if not os.path.exists(f):
                continue
            phases = load_object(f, "strata --stats-json output").get("phases")
            if not isinstance(phases, dict):
                fail(f'{f}: no "phases" object (expected strata --stats-json output)')
            if phases.get("decode") and phases["decode"]["tokens"]:
                yield m, p, phases["prefill"], phases["decode"]


if next(runs(), None) is None:
    sys.exit(f"stream_bench.sh: no run of modes {modes} and prompts {prompts} with decode tokens in {out}")
seq_gbps = disk_figure("seq_gbps_qd32")
bw = seq_gbps * 1e9 if seq_gbps else None  # bytes/s; None: no disk roofline
iops = disk_figure("rand4k_iops_qd32")
print(f"disk: sequential {fmt(seq_gbps, '.2f', ' GB/s')} (1 MiB, QD32, O_DIRECT), "
      f"4 KiB random {fmt(iops, '.0f', ' IOPS')} (QD32, O_DIRECT), "
      f"{fmt(disk_figure('rand4k_iops_qd32_buffered'), '.0f', ' IOPS')} buffered\n")
print("| mode | prompt | prefill tok/s | decode tok/s | decode bytes read/token | expert hit rate (decode) | "
      "prefetch hit rate | prediction recall | roofline tok/s | decode / roofline | Engram share of decode | "
      "Engram prefill rows/s (vs IOPS) | blocked on I/O (decode) |")
print("|" + "---|" * 13)


for m, p, pre, dec in runs():
    bpt = dec["bytes_read_per_token"] if m == "stream" else dec["os_read_bytes"] / max(dec["tokens"], 1)
    # No I/O roofline for a run that read nothing from disk (mmap with the page cache warm: bw / 0
    # printed "inf") or without a disk rate; the second table bounds such a run by memory alone.
    roof = bw / bpt if bw and bpt > 0 else None
    eng = pre["engram"]
    # Engram prefill fetch: read requests / wall time with a fetch in flight (both layers' fetches
    # start together before layer 0).
    rows_s = eng["reads"] / eng["busy_s"] if eng["busy_s"] > 0 else 0
    print(f"| {m} | {p} | {pre['tok_per_s']:.2f} | {dec['tok_per_s']:.3f} | {bpt/1e6:.1f} MB | "
          f"{100*dec['expert']['hit_rate']:.1f}% | {100*dec['prefetch']['hit_rate']:.1f}% | "
          f"{100*dec['prefetch']['prediction_recall']:.1f}% | {fmt(roof, '.3f')} | "
          f"{fmt(100*dec['tok_per_s']/roof if roof else None, '.0f', '%')} | "
          f"{100*dec['engram']['share_of_wall']:.1f}% | {rows_s:.0f} ({fmt(100*rows_s/iops if iops else None, '.0f', '%')}) | "
          f"{dec['io_wait_s']/max(dec['wall_s'],1e-9)*100:.0f}% |")

# Issue 15 item 3: decode against 1 / (resident bytes / memory BW + miss bytes / disk BW), both
# bandwidths measured in this run (memory: the mean of the samples before and after the run). That
# sum assumes no read overlaps compute; the store overlaps them (decode can beat the sum), so beside
# it the upper bound with reads fully overlapped, 1 / max(resident bytes / memory BW, miss bytes / disk BW).
touched = sum(decode_bytes_per_token(model).values())
print(f"\nbytes a decode token touches (safetensors headers, bench/decode_roofline.py): {touched/1e6:.1f} MB\n")
print("| mode | prompt | decode tok/s | memory BW (before / after) | miss bytes/token | resident bytes/token | "
      "roofline tok/s | decode / roofline | overlapped bound tok/s | decode / bound | "
      "CPU user / kernel per decode token |")
print("|" + "---|" * 11)
for m, p, _, dec in runs():
    fb = os.path.join(out, f"{m}_{p}.membw")
    samples = membw(fb)
    cpu = dec.get("cpu", {"user_s": 0, "sys_s": 0})
    user_ms, sys_ms = 1e3 * cpu["user_s"] / dec["tokens"], 1e3 * cpu["sys_s"] / dec["tokens"]
    miss = dec["bytes_read_per_token"] if m == "stream" else dec["os_read_bytes"] / dec["tokens"]
    resident = max(touched - miss, 0.0)
    before, after = samples.get("before"), samples.get("after")
    if before is None or after is None:
        print(f"| {m} | {p} | {dec['tok_per_s']:.3f} | not measured (no kernels_bench, or no BM_MemRead/{bw_threads}) | "
              f"{miss/1e6:.1f} MB | "
              f"{resident/1e6:.1f} MB | - | - | - | - | {user_ms:.0f} / {sys_ms:.0f} ms |")
        continue
    # A sample of 0 (or below) measured nothing: no memory term, so no roofline for this run.
    mem = (before + after) / 2 if positive(before) and positive(after) else None
    mem_s = resident / mem if mem else None
    # Seconds per token reading from disk: 0 when nothing was read (the memory-only bound), unknown
    # (no roofline) when bytes were read but disk.json has no rate.
    disk_s = miss / bw if bw else (0.0 if miss == 0 else None)
    roof = bound = None
    if mem_s is not None and disk_s is not None and mem_s + disk_s > 0:
        roof = 1.0 / (mem_s + disk_s)
        bound = 1.0 / max(mem_s, disk_s)  # reads fully overlapped with compute
    print(f"| {m} | {p} | {dec['tok_per_s']:.3f} | {fmt(mem and mem/1e9, '.1f', ' GB/s')} ({before/1e9:.1f} / "
          f"{after/1e9:.1f}) | {miss/1e6:.1f} MB | {resident/1e6:.1f} MB | {fmt(roof, '.2f')} | "
          f"{fmt(100*dec['tok_per_s']/roof if roof else None, '.0f', '%')} | {fmt(bound, '.2f')} | "
          f"{fmt(100*dec['tok_per_s']/bound if bound else None, '.0f', '%')} | "
          f"{user_ms:.0f} / {sys_ms:.0f} ms |")
PY
mv "$out/summary.md.tmp" "$out/summary.md"
cat "$out/summary.md"
