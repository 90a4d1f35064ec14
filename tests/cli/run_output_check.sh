#!/usr/bin/env bash
# What `strata run` prints, on the v41-tiny fixture checkpoint (issue #19):
#  - stdout holds the answer only; the summary line is on stderr (`> answer.txt` captures text alone);
#  - "generated N tokens" agrees with --stats' decode column (N - 1 decoded after the prefill's one);
#  - counters that do not apply to a resident store read "n/a", not "0.0% of 0";
#  - placement flags with no effect when auto chose resident are warned about, not silently ignored;
#  - a continued session says so instead of "prompt 0 tokens, prefill 0.0 tok/s".
# Exit 77 = fixture missing (skip).
set -uo pipefail
strata="$1"; fixtures="$2"
ck="$fixtures/v41-tiny/checkpoint"
if [[ ! -f "$ck/config.json" ]]; then
  echo "SKIP: fixture checkpoint $ck missing" >&2
  exit 77
fi
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
fail=0
check() {  # check NAME FILE PATTERN: FILE has a line matching PATTERN (grep -E)
  if grep -Eq -- "$3" "$2"; then echo "ok   $1"; else echo "FAIL $1: no line matching '$3' in"; cat "$2"; fail=1; fi
}
check_not() {  # check_not NAME FILE PATTERN
  if grep -Eq -- "$3" "$2"; then echo "FAIL $1: '$3' found in"; cat "$2"; fail=1; else echo "ok   $1"; fi
}

"$strata" run -m "$ck" -p "Hello there" -n 8 --temp 0 --stats --save-session "$tmp/s.strata" \
  > "$tmp/out" 2> "$tmp/err" || { echo "FAIL strata run"; cat "$tmp/err"; exit 1; }
check_not "stdout holds no summary" "$tmp/out" '\[strata\]'
check "summary on stderr" "$tmp/err" \
  '^\[strata\] prompt [0-9]+ tokens, prefill [0-9.]+ tok/s \| generated 8 tokens, decode [0-9.]+ tok/s over the last 7 '
check "stats decode column counts the same 7" "$tmp/err" '^  tokens +\| [0-9]+ +\| 7 +$'
check "expert hit rate n/a when resident" "$tmp/err" '^  expert hit rate +\| n/a \(not streamed\) +\| n/a \(not streamed\)'
check "prediction recall n/a when resident" "$tmp/err" '^  prediction recall +\| n/a'
check_not "no 0.0% of 0" "$tmp/err" '0\.0% of 0'

"$strata" run -m "$ck" --load-session "$tmp/s.strata" -n 3 --temp 0 > "$tmp/out2" 2> "$tmp/err2" ||
  { echo "FAIL continued run"; cat "$tmp/err2"; exit 1; }
check "continued session summary" "$tmp/err2" '^\[strata\] continued a saved session of [0-9]+ tokens \| generated 3 tokens'
check_not "no 'prompt 0 tokens'" "$tmp/err2" 'prompt 0 tokens'

"$strata" run -m "$ck" -p hi -n 1 --pin-layers 0-1 --no-prefetch > /dev/null 2> "$tmp/err3" ||
  { echo "FAIL run with stream-only flags"; cat "$tmp/err3"; exit 1; }
check "--pin-layers warned in resident mode" "$tmp/err3" '^strata: warn: --pin-layers has no effect: the weights are resident'
check "--no-prefetch warned in resident mode" "$tmp/err3" '^strata: warn: --no-prefetch has no effect'
"$strata" run -m "$ck" -p hi -n 1 --load-mode stream --ram-budget 64M --pin-layers 0-1 > /dev/null 2> "$tmp/err4" ||
  { echo "FAIL stream run"; cat "$tmp/err4"; exit 1; }
check_not "no warning when streaming" "$tmp/err4" 'has no effect'
exit $fail
