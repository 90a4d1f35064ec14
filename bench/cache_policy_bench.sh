#!/usr/bin/env bash
# Expert cache policy benchmark (issue #3): how the stream store's expert cache does on uniform and on
# skewed routing, with LFU, LRU, and LFU plus a calibrated hot set, at a budget that holds a fixed
# share of the routed experts.
#
# Usage: bench/cache_policy_bench.sh --model DIR [--model DIR2 ...] [--build DIR] [--out DIR]
#          [--share 0.5] [--tokens 1024] [--threads T]
#   --model DIR   checkpoint(s), e.g. strata synth --preset scaled --target-gb 2 --routing-skew 0 (uniform)
#                 and --routing-skew 1.5 (skewed)
#   --share F     expert cache = F x all routed experts (the rest of the budget: resident tensors + Engram)
#   --tokens N    tokens of the evaluation text, run one at a time (teacher-forced decode:
#                 `strata calibrate --chunk 1`), so every token's routing hits the cache as in decode
# Texts: the hot set is calibrated on one text (Apache-2.0 license + stdlib.h) and evaluated on
# another whose topic shifts (GPL-3 prose, then stdio.h code, then MPL-2.0 prose), so a hot set only
# helps as far as popularity carries over between texts.
# Output: one stats JSON per run in --out and a table (summary.md).
set -euo pipefail

repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
build="$repo/build"
models=()
out="/tmp/strata_cache_policy_bench"
share=0.5
tokens=1024
threads=0
while [[ $# -gt 0 ]]; do
  case "$1" in
    --model) models+=("$2"); shift 2 ;;
    --build) build="$2"; shift 2 ;;
    --out) out="$2"; shift 2 ;;
    --share) share="$2"; shift 2 ;;
    --tokens) tokens="$2"; shift 2 ;;
    --threads) threads="$2"; shift 2 ;;
    -h|--help) sed -n '2,18p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "cache_policy_bench.sh: unknown argument '$1' (see --help)" >&2; exit 2 ;;
  esac
done
[[ ${#models[@]} -gt 0 ]] || { echo "cache_policy_bench.sh: --model DIR is required" >&2; exit 2; }
strata="$build/cli/strata"
[[ -x "$strata" ]] || { echo "cache_policy_bench.sh: build strata in $build first" >&2; exit 2; }
mkdir -p "$out"
lic=/usr/share/common-licenses
calib_text="$out/calibrate.txt"
eval_text="$out/eval.txt"
cat "$lic/Apache-2.0" /usr/include/stdlib.h > "$calib_text"
{ head -c 3000 "$lic/GPL-3"; head -c 3000 /usr/include/stdio.h; head -c 3000 "$lic/MPL-2.0"; } > "$eval_text"

# The minimum budget the store accepts (stderr of a refused run), in bytes.
minimum() {  # minimum MODEL [extra flags]
  local m="$1"; shift
  "$strata" calibrate -m "$m" -f "$eval_text" --out "$out/none.json" --max-tokens 1 --load-mode stream \
    --ram-budget 4K "$@" 2>&1 >/dev/null | sed -n 's/.*the minimum --ram-budget is \([0-9]*\) bytes.*/\1/p' || true
}

for m in "${models[@]}"; do
  name="$(basename "$m")"
  # Slot size: pinning one more layer raises the minimum by exactly that layer's slots. (Pinning
  # layer 0 alone can also move the Engram scales into RAM, so compare pinning 0-0 with 0-1.)
  n0=$(python3 -c "import json,sys; c=json.load(open(sys.argv[1])); c=c.get('text_config',c); print(c['n_routed_experts'])" "$m/config.json")
  min1=$(minimum "$m" --pin-layers 0-0)
  min2=$(minimum "$m" --pin-layers 0-1)
  [[ -n "$min1" && -n "$min2" ]] || { echo "cache_policy_bench.sh: could not read the minimum budget of $m" >&2; exit 1; }
  slot=$(( (min2 - min1) / n0 ))
  fixed=$(( min1 - (n0 + 6) * slot ))  # resident tensors + Engram (scales and row cache)
  # Routed experts of the backbone layers (DSpark stages do not run here).
  nl=$(python3 -c "import json,sys; c=json.load(open(sys.argv[1])); c=c.get('text_config',c); print(c['num_hidden_layers'])" "$m/config.json")
  total=$(( nl * n0 ))
  keep=$(python3 -c "print(max(int($share * $total), 6))")
  budget=$(( fixed + keep * slot ))
  echo "== $name: $total routed experts, slot $slot B; cache $keep experts ($share): --ram-budget $budget" >&2
  "$strata" calibrate -m "$m" -f "$calib_text" --out "$out/${name}_hot.json" --max-tokens 2048 -t "$threads" \
    > "$out/${name}_calibrate.out"
  "$strata" calibrate -m "$m" -f "$eval_text" --out "$out/${name}_evalrank.json" --max-tokens "$tokens" -t "$threads" \
    > "$out/${name}_evalrank.out"
  for run in lfu lru lfu_hot lfu_noprefetch; do
    flags=(--cache-policy lfu)
    case "$run" in
      lru) flags=(--cache-policy lru) ;;
      lfu_hot) flags=(--cache-policy lfu --hot "$out/${name}_hot.json") ;;
      lfu_noprefetch) flags=(--cache-policy lfu --no-prefetch) ;;
    esac
    "$strata" calibrate -m "$m" -f "$eval_text" --out "$out/none.json" --max-tokens "$tokens" --chunk 1 -t "$threads" \
      --load-mode stream --ram-budget "$budget" "${flags[@]}" --stats-json "$out/${name}_$run.json" > /dev/null
  done
done

python3 - "$out" "${models[@]}" <<'PY' | tee "$out/summary.md"
import json, os, re, sys
out, models = sys.argv[1], sys.argv[2:]
print("| checkpoint | top 10% of experts' share of picks (eval text) | policy | expert hit rate | "
      "bytes read / token | prefetch hit rate | prediction recall | tok/s |")
print("|" + "---|" * 8)
for m in models:
    name = os.path.basename(m)
    rank = open(os.path.join(out, f"{name}_evalrank.out")).read()
    top10 = re.search(r"top 10% of experts take ([0-9.]+)%", rank).group(1)
    for run in ("lfu", "lru", "lfu_hot", "lfu_noprefetch"):
        f = os.path.join(out, f"{name}_{run}.json")
        if not os.path.exists(f):
            continue
        p = json.load(open(f))["phases"]["calibrate"]
        print(f"| {name} | {top10}% | {run.replace('_', ' + ')} | {100 * p['expert']['hit_rate']:.1f}% | "
              f"{p['bytes_read_per_token'] / 1e6:.2f} MB | {100 * p['prefetch']['hit_rate']:.1f}% | "
              f"{100 * p['prefetch']['prediction_recall']:.1f}% | {p['tok_per_s']:.1f} |")
PY
