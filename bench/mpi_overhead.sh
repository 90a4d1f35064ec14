#!/usr/bin/env bash
# Expert parallelism's cost on one machine (issue 18 item 4): decode of `strata run` alone, and under
# `mpirun -np N ... --mpi` (every rank -t 1) for each N in NPS and each injected latency in
# INJECT_US, interleaved over R rounds, with the decode time per token each way and what
# `strata plan --hosts` predicts for the same ranks at LATENCY_US + the injected latency.
# Usage: bench/mpi_overhead.sh STRATA MODEL_DIR [ROUNDS=3] [TOKENS=64] [LATENCY_US=2] [INJECT_US="0"] [NPS="1 2 3"]
#          [MODE=--mpi]
# MODE --mpi-pipeline measures pipeline parallelism instead (NPS >= 2; the plan columns are expert
# parallelism's prediction, not the pipeline's).
# LATENCY_US: the one-way message latency the plan is given for ranks on one machine (shared memory).
# INJECT_US: one-way latencies added with --mpi-inject-latency-us (a measurement aid standing in for
# netem, which this kernel may lack: docs/distributed.md), e.g. "0 1000".
# Example (issue 18 acceptance): nice -n -15 bench/mpi_overhead.sh build/cli/strata DIR 5 64 2 "0 1000" 2
set -euo pipefail
strata="$1"; dir="$2"; rounds="${3:-3}"; n="${4:-64}"; lat="${5:-2}"; injects="${6:-0}"; nps="${7:-1 2 3}"; mode="${8:---mpi}"
tmp="$(mktemp -d)"; trap 'rm -rf "$tmp"' EXIT
mpi=(mpirun --oversubscribe); [[ $(id -u) -eq 0 ]] && mpi+=(--allow-run-as-root)
args=(run -m "$dir" -p "Tell me a long story about the sea and the ships on it." -n "$n" --temp 0 -t 1)
decode_s() { python3 -c 'import json,sys; d=json.load(open(sys.argv[1]))["phases"]["decode"]; print(d["wall_s"]/d["tokens"])' "$1"; }
declare -A sum
for r in $(seq "$rounds"); do
  "$strata" "${args[@]}" --stats-json "$tmp/one.json" > /dev/null 2>&1
  sum[one]+=" $(decode_s "$tmp/one.json")"
  for np in $nps; do
    for inj in $injects; do
      "${mpi[@]}" -np "$np" "$strata" "${args[@]}" "$mode" --mpi-inject-latency-us "$inj" \
        --stats-json "$tmp/np$np-$inj.json" > /dev/null 2>&1
      sum[np$np-$inj]+=" $(decode_s "$tmp/np$np-$inj.json")"
    done
  done
done
echo "load average after the runs: $(cut -d' ' -f1-3 /proc/loadavg)"
rows=("one process|1|0|${sum[one]}")
for inj in $injects; do
  hosts="$tmp/hosts-$inj.txt"
  total=$(python3 -c "print($lat + $inj)")
  for i in $(seq 0 $(( $(tr ' ' '\n' <<< "$nps" | sort -n | tail -1) - 1 ))); do echo "rank$i ram=1T link_gbps=80 latency_us=$total" >> "$hosts"; done
  "$strata" plan -m "$dir" -t 1 --hosts "$hosts" --json > "$tmp/plan-$inj.json" 2>/dev/null
  for np in $nps; do rows+=("np $np +${inj}us|$np|$inj|${sum[np$np-$inj]}"); done
done
python3 - "$tmp" "${rows[@]}" <<'PY'
import json, statistics, sys
tmp, rows = sys.argv[1], [r.split("|") for r in sys.argv[2:]]
plans = {}
def plan(inj, ranks):
    if inj not in plans:
        plans[inj] = {e["ranks"]: e for e in json.load(open("%s/plan-%s.json" % (tmp, inj)))["expert_parallel"]}
    return plans[inj].get(ranks, {})
base = statistics.median(float(x) for x in rows[0][3].split())
print("%-16s %20s %8s %12s %12s %14s" % ("", "decode ms/tok (min-max)", "tok/s", "vs one proc", "plan ms/tok", "plan comm/tok"))
for name, ranks, inj, vals in rows:
    v = sorted(float(x) for x in vals.split())
    med = statistics.median(v)
    e = plan(rows[1][2] if name == "one process" else inj, int(ranks)) if len(rows) > 1 else {}
    print("%-16s %8.2f (%5.2f-%5.2f) %8.1f %11.2fx %12s %14s" % (
        name, med * 1e3, v[0] * 1e3, v[-1] * 1e3, 1 / med, base / med,
        "%.2f" % (e["token_s"] * 1e3) if e.get("token_s") else "n/a",
        "%.3f ms" % (e["comm_s_per_token"] * 1e3) if e else "n/a"))
print("every run, decode ms/token in run order:")
for name, ranks, inj, vals in rows:
    print("  %-16s %s" % (name, " ".join("%.2f" % (float(x) * 1e3) for x in vals.split())))
PY
