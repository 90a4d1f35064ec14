#!/usr/bin/env bash
# Placement flags end to end (issue #3) on the v41-tiny fixture checkpoint, through the built binary:
#  - `strata logits` writes byte-identical logits and greedy tokens in resident, stream and mmap
#    placement, and in stream with the smallest budget the store accepts (every layer evicts);
#  - a budget below one token's working set is refused with one error line that prints the minimum,
#    and that minimum then runs;
#  - `strata calibrate` writes a hot file that `--hot` accepts (same logits); --pin-layers too;
#  - `--stats-json` holds both phases with the fields the issue lists;
#  - bad placement flags give one "strata: error:" line naming the flag.
set -uo pipefail
strata="$1"; fixtures="$2"
fx="$fixtures/v41-tiny"
ck="$fx/checkpoint"
if [[ ! -d "$ck" ]]; then echo "SKIP: fixture checkpoint $ck missing" >&2; exit 77; fi
fail=0
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT

# expect_error NAME PATTERN -- command...
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

# logits NAME [flags...]: prefill the fixture prompt, greedy-decode 6 tokens; logits of every
# prompt position and every decode step go to $tmp/NAME.f32 / NAME.dec.f32, tokens to NAME.tok.
logits() {
  local name="$1"; shift
  if ! "$strata" logits -m "$ck" --tokens "$fx/tokens.json" --out "$tmp/$name.f32" --decode 6 \
      --decode-logits "$tmp/$name.dec.f32" -t 2 "$@" >"$tmp/$name.tok" 2>"$tmp/$name.err"; then
    echo "FAIL $name: strata logits $* failed:"; cat "$tmp/$name.err"; fail=1; return 1
  fi
}
same_as_resident() {  # same_as_resident NAME: byte-compares NAME's outputs with the resident run's
  local name="$1"
  if cmp -s "$tmp/resident.f32" "$tmp/$name.f32" && cmp -s "$tmp/resident.dec.f32" "$tmp/$name.dec.f32" &&
     cmp -s "$tmp/resident.tok" "$tmp/$name.tok"; then
    echo "ok   $name: logits and greedy tokens byte-identical to resident"
  else
    echo "FAIL $name: outputs differ from resident"; fail=1
  fi
}

logits resident --load-mode resident || exit 1
[[ -s "$tmp/resident.f32" ]] || { echo "FAIL resident wrote no logits"; exit 1; }
logits stream --load-mode stream --stats-json "$tmp/stream.json" && same_as_resident stream
logits mmap --load-mode mmap && same_as_resident mmap
logits stream_lru --load-mode stream --cache-policy lru --no-prefetch && same_as_resident stream_lru

# A budget below one token's working set: refused, and the printed minimum then works.
expect_error "budget below the working set" "the minimum --ram-budget is" -- \
  "$strata" logits -m "$ck" --tokens "$fx/tokens.json" --out "$tmp/o.f32" --load-mode stream --ram-budget 4K
min=$(sed -n 's/.*the minimum --ram-budget is \([0-9]*\) bytes.*/\1/p' "$tmp/err")
if [[ -n "$min" ]]; then
  logits minimum --load-mode stream --ram-budget "$min" --stats-json "$tmp/minimum.json" && same_as_resident minimum
  python3 - "$tmp/minimum.json" <<'PY' || fail=1
import json, sys
d = json.load(open(sys.argv[1]))["phases"]["decode"]["expert"]
ok = d["evictions"] > 0 and d["loads"] > 0
print(("ok  " if ok else "FAIL") + " minimum budget: decode evicted %d experts and loaded %d" % (d["evictions"], d["loads"]))
sys.exit(0 if ok else 1)
PY
  # A phase's prefetch hit rate is used / (outstanding at its start + issued in it): never above 1,
  # even where the decode uses prefetches the prefill issued.
  python3 - "$tmp/stream.json" "$tmp/minimum.json" <<'PY' || fail=1
import json, sys
bad = []
for f in sys.argv[1:]:
    for name, ph in json.load(open(f))["phases"].items():
        p = ph["prefetch"]
        if not (0 <= p["hit_rate"] <= 1 and p["used"] <= p["outstanding_at_start"] + p["issued"]):
            bad.append("%s %s: %s" % (f.rsplit("/", 1)[-1], name, p))
print("FAIL prefetch hit rates: " + "; ".join(bad) if bad else "ok   prefetch hit rates within [0, 1] in every phase")
sys.exit(1 if bad else 0)
PY
  expect_error "one byte under the minimum" "is below one token's working set" -- \
    "$strata" logits -m "$ck" --tokens "$fx/tokens.json" --out "$tmp/o.f32" --load-mode stream --ram-budget "$((min - 1))"
else
  echo "FAIL: no minimum in the refusal message"; fail=1
fi

# The stats file: both phases, every figure of the issue.
python3 - "$tmp/stream.json" <<'PY' || fail=1
import json, sys
j = json.load(open(sys.argv[1]))
missing = []
for ph in ("prefill", "decode"):
    p = j["phases"].get(ph)
    if p is None:
        missing.append(ph); continue
    for k in ("tokens", "wall_s", "tok_per_s", "bytes_read", "bytes_read_per_token", "io_wait_s"):
        if k not in p: missing.append(f"{ph}.{k}")
    for g, ks in (("expert", ("hit_rate", "loads", "bytes_read")), ("prefetch", ("hit_rate", "issued", "prediction_recall")),
                  ("engram", ("rows_requested", "rows_read", "time_s", "share_of_wall")), ("cpu", ("user_s", "sys_s"))):
        for k in ks:
            if k not in p.get(g, {}): missing.append(f"{ph}.{g}.{k}")
pre, dec = j["phases"]["prefill"], j["phases"]["decode"]
# --decode 6: the first new token comes from the prefill's logits, so decode runs 5 forward passes.
# CPU time: the prefill runs, so its user + kernel time is above zero (getrusage splits the exact
# total between the two by ticks, so a tiny prefill's user time alone may stay zero); no field is
# negative (a sign error in phase_between).
cpu_fields = [ph["cpu"][k] for ph in (pre, dec) for k in ("user_s", "sys_s")] if not missing else []
if not missing and (pre["tokens"] <= 0 or dec["tokens"] != 5 or pre["engram"]["rows_requested"] <= 0 or pre["bytes_read"] <= 0
                    or not pre["cpu"]["user_s"] + pre["cpu"]["sys_s"] > 0 or min(cpu_fields) < 0):
    missing.append("plausible counts (tokens %d/%d, Engram rows %d, bytes %d, CPU user/kernel s %s)" %
                   (pre["tokens"], dec["tokens"], pre["engram"]["rows_requested"], pre["bytes_read"], cpu_fields))
print(("FAIL stats json lacks " + ", ".join(missing)) if missing else
      "ok   stats json: prefill %d tokens, %d bytes read, expert hit rate %.2f; decode %d tokens" %
      (pre["tokens"], pre["bytes_read"], pre["expert"]["hit_rate"], dec["tokens"]))
sys.exit(1 if missing else 0)
PY

# Calibrate, then pin its ranking; pin layers.
if "$strata" calibrate -m "$ck" -f "$fx/prompt.txt" --out "$tmp/hot.json" -t 2 >"$tmp/cal.out" 2>"$tmp/cal.err" &&
   grep -q '"experts"' "$tmp/hot.json"; then
  echo "ok   calibrate: $(head -1 "$tmp/cal.out")"
  # Token by token through a stream store: the cache policy benchmark's measurement.
  if "$strata" calibrate -m "$ck" -f "$fx/prompt.txt" --out "$tmp/hot1.json" --chunk 1 --max-tokens 40 -t 2 \
       --load-mode stream --stats-json "$tmp/cal.json" >/dev/null 2>"$tmp/cal.err" &&
     python3 -c "import json,sys; p=json.load(open(sys.argv[1]))['phases']['calibrate']; sys.exit(0 if p['tokens']==40 and p['expert']['acquires']>0 else 1)" "$tmp/cal.json"; then
    echo "ok   calibrate --chunk 1 --stats-json: 40 tokens with expert counters"
  else
    echo "FAIL calibrate --chunk 1 --stats-json:"; cat "$tmp/cal.err" "$tmp/cal.json"; fail=1
  fi
  logits hot --load-mode stream --hot "$tmp/hot.json" && same_as_resident hot
else
  echo "FAIL calibrate:"; cat "$tmp/cal.err"; fail=1
fi
logits pinned --load-mode stream --pin-layers 0-1 && same_as_resident pinned

# Bad placement flags.
run_flags=("$strata" logits -m "$ck" --tokens "$fx/tokens.json" --out "$tmp/o.f32")
expect_error "bad budget unit" "--ram-budget '12X'" -- "${run_flags[@]}" --ram-budget 12X
expect_error "bad load mode" "--load-mode" -- "${run_flags[@]}" --load-mode paged
expect_error "bad cache policy" "--cache-policy" -- "${run_flags[@]}" --cache-policy fifo
expect_error "reversed pin range" "--pin-layers '3-1'" -- "${run_flags[@]}" --pin-layers 3-1
expect_error "pin range past the last layer" "--pin-layers 0-999" -- "${run_flags[@]}" --load-mode stream --pin-layers 0-999
expect_error "missing hot file" "$tmp/none.json" -- "${run_flags[@]}" --hot "$tmp/none.json"
echo '{"experts": [[0, 1' > "$tmp/badhot.json"
expect_error "corrupt hot file" "badhot.json" -- "${run_flags[@]}" --hot "$tmp/badhot.json"
expect_error "hot with resident" "apply to --load-mode stream" -- "${run_flags[@]}" --load-mode resident --pin-layers 0-1
expect_error "buffered-io with resident" "apply to --load-mode stream" -- "${run_flags[@]}" --load-mode resident --buffered-io
expect_error "direct-io and buffered-io together" "excludes" -- "${run_flags[@]}" --load-mode stream --direct-io --buffered-io
expect_error "resident over the budget" "run it with --load-mode stream" -- "${run_flags[@]}" --load-mode resident --ram-budget 64K
expect_error "plan: buffered-io with resident" "applies to --load-mode stream" -- "$strata" plan --config "$ck/config.json" --load-mode resident --buffered-io
expect_error "calibrate missing text" "$tmp/none.txt" -- "$strata" calibrate -m "$ck" -f "$tmp/none.txt" --out "$tmp/h.json"
exit $fail
