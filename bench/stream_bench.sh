#!/usr/bin/env bash
# The tiering benchmark (issue #3): a checkpoint larger than RAM, run in `stream` and `mmap`
# placement, prefill at 512 and 2048 prompt tokens, then greedy decode, with per-phase placement
# stats (--stats-json) and the disk's own figures (bench/disk_read_bench) to divide by.
#
# Usage: bench/stream_bench.sh --model DIR [--text FILE] [--out DIR] [--build DIR] [--decode N]
#          [--prompts "512 2048"] [--modes "stream mmap"] [--cold] [--threads T] [--no-disk]
#          [--timeout S] [-- extra strata flags]
#   --model DIR     checkpoint (e.g. strata synth --preset scaled --target-gb 48 --routing-skew 1.5)
#   --text FILE     prompt source text; its first N tokens are the N-token prompt (default: the
#                   GPL-3 and MPL-2.0 license texts plus stdio.h, prose then code then prose)
#   --cold          drop the page cache before every run (needs root: /proc/sys/vm/drop_caches)
#   --no-disk       keep the disk figures of an earlier run in --out (disk.json) instead of measuring
#   --timeout S     stop a run that takes longer than S seconds (its row is left out of the table)
#   extra flags     passed to every `strata logits` run (e.g. --direct-io, --ram-budget 16G)
# Output: one stats JSON per run in --out, disk.json, and a summary table (summary.md) with the
# figures docs/performance.md reports: tok/s, bytes read per token, hit rates, the I/O roofline
# (miss bytes per token / sequential read bandwidth), the Engram share of decode time, and the
# Engram prefill row rate against the disk's 4 KiB random-read IOPS at queue depth 32.
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
extra=()
while [[ $# -gt 0 ]]; do
  case "$1" in
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
    --) shift; extra=("$@"); break ;;
    -h|--help) sed -n '2,20p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "stream_bench.sh: unknown argument '$1' (see --help)" >&2; exit 2 ;;
  esac
done
[[ -n "$model" ]] || { echo "stream_bench.sh: --model DIR is required" >&2; exit 2; }
strata="$build/cli/strata"
diskb="$build/bench/disk_read_bench"
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
    drop_caches
    echo "== $mode, $p-token prompt, $decode decode steps" >&2
    limit=()
    [[ "$timeout_s" != 0 ]] && limit=(timeout "$timeout_s")
    /usr/bin/time -v "${limit[@]}" "$strata" logits -m "$model" --tokens "$out/ids_$p.json" --out "$out/logits.f32" \
      --positions $((p - 1)) --decode "$decode" -t "$threads" --load-mode "$mode" \
      --stats --stats-json "$out/${mode}_$p.json" "${extra[@]}" > "$out/${mode}_$p.tokens" 2> "$out/${mode}_$p.log" ||
      { echo "stream_bench.sh: run failed or timed out, see $out/${mode}_$p.log" >&2; tail -5 "$out/${mode}_$p.log" >&2;
        rm -f "$out/${mode}_$p.json"; continue; }
    grep -E "placement|Maximum resident" "$out/${mode}_$p.log" >&2 || true
  done
done

python3 - "$out" "$modes" "$prompts" <<'PY' | tee "$out/summary.md"
import json, sys, os
out, modes, prompts = sys.argv[1], sys.argv[2].split(), sys.argv[3].split()
disk = json.load(open(os.path.join(out, "disk.json")))
bw = disk["seq_gbps_qd32"] * 1e9
iops = disk["rand4k_iops_qd32"]
print(f"disk: sequential {disk['seq_gbps_qd32']:.2f} GB/s (1 MiB, QD32, O_DIRECT), "
      f"4 KiB random {iops:.0f} IOPS (QD32, O_DIRECT), {disk['rand4k_iops_qd32_buffered']:.0f} IOPS buffered\n")
print("| mode | prompt | prefill tok/s | decode tok/s | decode bytes read/token | expert hit rate (decode) | "
      "prefetch hit rate | prediction recall | roofline tok/s | decode / roofline | Engram share of decode | "
      "Engram prefill rows/s (vs IOPS) | blocked on I/O (decode) |")
print("|" + "---|" * 13)
for m in modes:
    for p in prompts:
        f = os.path.join(out, f"{m}_{p}.json")
        if not os.path.exists(f):
            continue
        j = json.load(open(f))
        pre, dec = j["phases"]["prefill"], j["phases"].get("decode")
        if dec is None:
            continue
        bpt = dec["bytes_read_per_token"] if m == "stream" else dec["os_read_bytes"] / max(dec["tokens"], 1)
        roof = bw / bpt if bpt > 0 else float("inf")
        eng = pre["engram"]
        # Engram prefill fetch: read requests / wall time with a fetch in flight (both layers' fetches
        # start together before layer 0).
        rows_s = eng["reads"] / eng["busy_s"] if eng["busy_s"] > 0 else 0
        print(f"| {m} | {p} | {pre['tok_per_s']:.2f} | {dec['tok_per_s']:.3f} | {bpt/1e6:.1f} MB | "
              f"{100*dec['expert']['hit_rate']:.1f}% | {100*dec['prefetch']['hit_rate']:.1f}% | "
              f"{100*dec['prefetch']['prediction_recall']:.1f}% | {roof:.3f} | "
              f"{100*dec['tok_per_s']/roof if roof not in (0, float('inf')) else 0:.0f}% | "
              f"{100*dec['engram']['share_of_wall']:.1f}% | {rows_s:.0f} ({100*rows_s/iops:.0f}%) | "
              f"{dec['io_wait_s']/max(dec['wall_s'],1e-9)*100:.0f}% |")
PY
