#!/usr/bin/env bash
# Expert parallelism's cost on one machine (issue 18 item 4): decode of `strata run` alone, and under
# `mpirun -np 1/2/3 ... --mpi` (every rank -t 1), interleaved over R rounds, with the decode time
# per token each way and what `strata plan --hosts` predicts for the same ranks.
# Usage: bench/mpi_overhead.sh STRATA MODEL_DIR [ROUNDS=3] [TOKENS=64] [LATENCY_US=2]
# LATENCY_US: the one-way message latency the plan is given for ranks on one machine (shared memory).
set -euo pipefail
strata="$1"; dir="$2"; rounds="${3:-3}"; n="${4:-64}"; lat="${5:-2}"
tmp="$(mktemp -d)"; trap 'rm -rf "$tmp"' EXIT
mpi=(mpirun --oversubscribe); [[ $(id -u) -eq 0 ]] && mpi+=(--allow-run-as-root)
args=(run -m "$dir" -p "Tell me a long story about the sea and the ships on it." -n "$n" --temp 0 -t 1)
decode_s() { python3 -c 'import json,sys; d=json.load(open(sys.argv[1]))["phases"]["decode"]; print(d["wall_s"]/d["tokens"])' "$1"; }
declare -A sum
for r in $(seq "$rounds"); do
  "$strata" "${args[@]}" --stats-json "$tmp/one.json" > /dev/null 2>&1
  sum[one]+=" $(decode_s "$tmp/one.json")"
  for np in 1 2 3; do
    "${mpi[@]}" -np "$np" "$strata" "${args[@]}" --mpi --stats-json "$tmp/np$np.json" > /dev/null 2>&1
    sum[np$np]+=" $(decode_s "$tmp/np$np.json")"
  done
done
hosts="$tmp/hosts.txt"
for i in 0 1 2; do echo "rank$i ram=1T link_gbps=80 latency_us=$lat" >> "$hosts"; done
"$strata" plan -m "$dir" -t 1 --hosts "$hosts" --json > "$tmp/plan.json" 2>/dev/null
python3 - "$tmp/plan.json" "${sum[one]}" "${sum[np1]}" "${sum[np2]}" "${sum[np3]}" <<'PY'
import json, statistics, sys
plan = json.load(open(sys.argv[1]))
ep = {e["ranks"]: e for e in plan["expert_parallel"]}
runs = {"one process": sys.argv[2], "np 1": sys.argv[3], "np 2": sys.argv[4], "np 3": sys.argv[5]}
base = statistics.median(float(x) for x in runs["one process"].split())
print("%-12s %14s %12s %14s %16s %14s" % ("", "decode ms/tok", "tok/s", "vs one proc", "plan ms/tok", "plan comm/tok"))
for name, vals in runs.items():
    v = sorted(float(x) for x in vals.split())
    med = statistics.median(v)
    ranks = 1 if name == "one process" else int(name.split()[1])
    e = ep.get(ranks, {})
    print("%-12s %8.2f (%4.2f-%4.2f) %8.1f %13.2fx %16s %14s" % (
        name, med * 1e3, v[0] * 1e3, v[-1] * 1e3, 1 / med, base / med,
        "%.2f" % (e["token_s"] * 1e3) if e.get("token_s") else "n/a",
        "%.3f ms" % (e["comm_s_per_token"] * 1e3) if e else "n/a"))
PY
