#!/usr/bin/env bash
# Ctrl-C in `strata run` (issue #13 item 10), on the v41-tiny fixture:
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

# 1. One SIGINT: clean stop, stats, session saved, exit 130.
start_run "$tmp/a.txt" "$tmp/a.err.txt" --save-session "$tmp/s.strata"
sleep 0.3
kill -0 "$pid" 2>/dev/null || die "strata run finished before the SIGINT (EOS or context full)"
kill -INT "$pid"
wait "$pid"; rc=$?; pid=""
[[ $rc -eq 130 ]] || die "exit status $rc after one SIGINT, expected 130"
grep -q '^\[strata\] prompt [0-9]* tokens, .* generated [0-9]* tokens, .*(interrupted)$' "$tmp/a.err.txt" ||
  die "no stats line marked (interrupted)"
grep -q "session saved to $tmp/s.strata" "$tmp/a.err.txt" || die "session not saved"
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
echo "interrupt checks passed"
