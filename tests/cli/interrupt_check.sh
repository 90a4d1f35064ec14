#!/usr/bin/env bash
# Ctrl-C in `strata run` (issue #13 item 10), `strata bench` and `strata eval`, and SIGTERM in run and
# bench, on the v41-tiny fixture:
#  - the first SIGINT, sent once tokens are streaming, ends generation after the current token: exit
#    130, the stats line "(interrupted)", and --save-session written; the saved session loads, and
#    the interrupted text + its continuation equal one uninterrupted run (--temp 0);
#  - two SIGINTs back to back exit 130 at once; whatever is at the session path then still loads
#    (old or new, never partial), and the next save sweeps a temp file the cut-off save left.
# Exit 77 = fixture missing (skip).
set -uo pipefail
strata="$1"; fixtures="$2"
ck="$fixtures/v41-tiny/checkpoint"
if [[ ! -f "$ck/config.json" ]]; then
  echo "SKIP: fixture $ck missing" >&2
  exit 77
fi
tmp="$(mktemp -d)"
pid=""
cleanup() { [[ -n "$pid" ]] && kill -9 "$pid" 2>/dev/null; rm -rf "$tmp"; }
trap cleanup EXIT
die() { echo "FAIL: $*" >&2; for f in "$tmp"/*.txt; do echo "--- $f" >&2; tail -c 600 "$f" >&2; done; exit 1; }
prompt="$(head -c 400 "$fixtures/v41-tiny/prompt.txt")"

# Starts `strata run ... -n 100000` in the background and waits (<= 60 s) until it has printed
# generated text. Sets $pid.
start_run() {  # start_run OUT ERR args...
  local out="$1" err="$2"; shift 2
  "$strata" run -m "$ck" -p "$prompt" --temp 0 -n 100000 "$@" > "$out" 2> "$err" &
  pid=$!
  for _ in $(seq 600); do
    [[ -s "$out" ]] && return 0
    kill -0 "$pid" 2>/dev/null || die "strata run ended before printing any token"
    sleep 0.1
  done
  die "no token within 60 s"
}

# run_stopped SIG STATUS NAME SESSION: one SIG once tokens stream in a run saving SESSION: exit
# STATUS, the stats line marked (interrupted), the session saved.
run_stopped() {
  local sig="$1" want="$2" err="$tmp/$3.err.txt"
  start_run "$tmp/$3.txt" "$err" --save-session "$4"
  sleep 0.3
  kill -0 "$pid" 2>/dev/null || die "strata run finished before the SIG$sig (EOS or context full)"
  kill -"$sig" "$pid"
  wait "$pid"; rc=$?; pid=""
  [[ $rc -eq $want ]] || die "exit status $rc after one SIG$sig, expected $want"
  grep -q '^\[strata\] prompt [0-9]* tokens, .* generated [0-9]* tokens, .*(interrupted)$' "$err" ||
    die "SIG$sig: no stats line marked (interrupted)"
  grep -q "session saved to $4" "$err" || die "SIG$sig: session not saved"
}

# 1. One SIGINT: clean stop, stats, session saved, exit 130.
run_stopped INT 130 a "$tmp/s.strata"
n="$(sed -n 's/.* generated \([0-9]*\) tokens.*/\1/p' "$tmp/a.err.txt")"
[[ "$n" -ge 1 ]] || die "generated token count '$n'"
if ls "$tmp" | grep -q "\.tmp\."; then die "temp file left: $(ls "$tmp")"; fi

# The saved session continues where the interrupted run stopped.
"$strata" run -m "$ck" --load-session "$tmp/s.strata" --temp 0 -n 4 > "$tmp/b.txt" 2> "$tmp/b.err.txt" ||
  die "--load-session of the interrupted run's session failed"
grep -q "continued a saved session of" "$tmp/b.err.txt" || die "continuation did not resume the session"
"$strata" run -m "$ck" -p "$prompt" --temp 0 -n "$((n + 4))" > "$tmp/full.txt" 2> /dev/null || die "reference run failed"
# stdout holds the generated text and one newline (the stats line is on stderr); the text itself may
# hold newlines.
text_of() { local c; c="$(cat "$1"; echo x)"; c="${c%x}"; printf '%s' "${c%$'\n'}"; }
full="$(text_of "$tmp/full.txt"; echo x)"
first="$(text_of "$tmp/a.txt")"
second="$(text_of "$tmp/b.txt"; echo x)"
if [[ "$first$second" != "$full" ]]; then
  printf 'full:        %q\ninterrupted: %q\ncontinued:   %q\n' "$full" "$first" "$second" >&2
  die "interrupted + continued text differs from one run of $((n + 4)) tokens"
fi

# 2. Two SIGINTs back to back: exit 130 at once; the session path is never partial.
cp "$tmp/s.strata" "$tmp/s2.strata"
start_run "$tmp/c.txt" "$tmp/c.err.txt" --save-session "$tmp/s2.strata"
kill -INT "$pid"; kill -INT "$pid"
wait "$pid"; rc=$?; pid=""
[[ $rc -eq 130 ]] || die "exit status $rc after two SIGINTs, expected 130"
"$strata" run -m "$ck" --load-session "$tmp/s2.strata" --temp 0 -n 1 > /dev/null 2> "$tmp/d.err.txt" ||
  die "the session file is not loadable after a second SIGINT"
# A later save over it sweeps any temp file the cut-off save left (its pid is gone).
"$strata" run -m "$ck" --load-session "$tmp/s2.strata" --temp 0 -n 1 --save-session "$tmp/s2.strata" \
  > /dev/null 2> "$tmp/e.err.txt" || die "saving over the session failed"
if ls "$tmp" | grep -q '\.tmp\.'; then die "temp file left after the next save: $(ls "$tmp")"; fi
# 3. `strata bench --cold copy`: one SIGINT during the cold runs ends it with exit 130 and no report,
# and the cold copy (the checkpoint's size) is removed; it used to stay until a later bench's sweep
# 600 s on. The checkpoint is copied into $tmp first, as the cold copy is made beside it.
cp -r "$ck" "$tmp/bck"
# bench_stopped SIG STATUS NAME: starts the cold-copy bench, sends SIG once the copy exists, and checks
# the exit STATUS, the message, no report on stdout and no copy left.
bench_stopped() {
  local sig="$1" want="$2" out="$tmp/$3.txt" err="$tmp/$3.err.txt"
  "$strata" bench -m "$tmp/bck" --cold copy --prompt 64 --gen 100000 --reps 1 --no-plan > "$out" 2> "$err" &
  pid=$!
  for _ in $(seq 600); do
    ls -d "$tmp"/bck.strata-bench-cold-* >/dev/null 2>&1 && break
    kill -0 "$pid" 2>/dev/null || die "strata bench ended before making its cold copy"
    sleep 0.1
  done
  ls -d "$tmp"/bck.strata-bench-cold-* >/dev/null 2>&1 || die "no cold copy within 60 s"
  sleep 1
  kill -"$sig" "$pid"
  wait "$pid"; rc=$?; pid=""
  [[ $rc -eq $want ]] || die "bench: exit status $rc after one SIG$sig, expected $want"
  grep -q "bench interrupted: no report written" "$err" || die "bench: no interrupted message after SIG$sig"
  [[ ! -s "$out" ]] || die "bench: a report was printed after the SIG$sig"
  if ls -d "$tmp"/bck.strata-bench-cold-* >/dev/null 2>&1; then die "bench: cold copy left after SIG$sig: $(ls "$tmp")"; fi
}
bench_stopped INT 130 f
# 4. `strata eval --save-base`: one SIGINT between windows ends it with exit 130, and neither the
# base file nor its temp file is left (the temp used to stay until the next save of that name).
for _ in $(seq 40); do cat "$fixtures/v41-tiny/prompt.txt"; done > "$tmp/long.txt"
"$strata" eval -m "$ck" -f "$tmp/long.txt" --ctx 32 --stride 1 --save-base "$tmp/base.bin" > "$tmp/g.txt" 2> "$tmp/g.err.txt" &
pid=$!
for _ in $(seq 600); do
  grep -q "window 2/" "$tmp/g.err.txt" 2>/dev/null && break
  kill -0 "$pid" 2>/dev/null || die "strata eval ended before its second window"
  sleep 0.1
done
kill -INT "$pid"
wait "$pid"; rc=$?; pid=""
[[ $rc -eq 130 ]] || die "eval: exit status $rc after one SIGINT, expected 130"
grep -q "eval: interrupted after [0-9]* of [0-9]* windows: nothing written" "$tmp/g.err.txt" || die "eval: no interrupted message"
[[ ! -e "$tmp/base.bin" ]] || die "eval: --save-base written after the SIGINT"
if ls -a "$tmp" | grep -q "base.bin"; then die "eval: temp file left: $(ls -a "$tmp")"; fi
# 5. SIGTERM (what `timeout` and `kill` send) is a clean stop too, with exit 143: `strata run` prints
# its stats line marked (interrupted) and saves the session; `strata bench --cold copy` removes its
# cold copy (both used to die at once, the bench leaving the checkpoint-sized copy for a later sweep).
run_stopped TERM 143 h "$tmp/s3.strata"
bench_stopped TERM 143 i
echo "interrupt checks passed"
