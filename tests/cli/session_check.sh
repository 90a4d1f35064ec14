#!/usr/bin/env bash
# strata run sessions on the v41-tiny fixture:
#  - with --temp 0, a run saved after k tokens (--save-session) and continued (--load-session -n N)
#    prints the same text as one uninterrupted run of k+N tokens, in both prefill modes;
#  - continuing with -p adds a user turn (the run succeeds and the session grows);
#  - --stats reports the global KV bytes per token of the config;
#  - a corrupted, truncated or missing session file, a session of another model and a bad
#    --prefill value fail with one clear error line and a non-zero exit.
# Exit 77 = fixture missing (skip).
set -euo pipefail
strata="$1"; fixtures="$2"
ck="$fixtures/v41-tiny/checkpoint"
if [[ ! -f "$ck/config.json" ]]; then
  echo "SKIP: fixture $ck missing" >&2
  exit 77
fi
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
prompt="$(head -c 400 "$fixtures/v41-tiny/prompt.txt")"

for mode in exact replay; do
  "$strata" run -m "$ck" -p "$prompt" --temp 0 -n 12 --prefill "$mode" > "$tmp/full.txt"
  "$strata" run -m "$ck" -p "$prompt" --temp 0 -n 5 --prefill "$mode" --save-session "$tmp/s.strata" \
    > "$tmp/a.txt" 2> "$tmp/a.err"
  grep -q "session saved to $tmp/s.strata" "$tmp/a.err"
  "$strata" run -m "$ck" --load-session "$tmp/s.strata" --temp 0 -n 7 > "$tmp/b.txt" 2> "$tmp/b.err"
  # stdout holds the generated text and one newline (the stats line is on stderr).
  text_of() { local c; c="$(cat "$1"; echo x)"; c="${c%x}"; printf '%s' "${c%$'\n'}"; }
  full="$(text_of "$tmp/full.txt"; echo x)"
  first="$(text_of "$tmp/a.txt")"
  second="$(text_of "$tmp/b.txt"; echo x)"
  if [[ "$first$second" != "$full" ]]; then
    echo "FAIL ($mode): saved + continued text differs from one run" >&2
    printf 'full:      %q\nsaved:     %q\ncontinued: %q\n' "$full" "$first" "$second" >&2
    exit 1
  fi
  grep -q "continued a saved session of" "$tmp/b.err"
done

# --stats reports the config's global KV per token: KV sources 2, 4 (ratio 2) and 5 (ratio 1), each
# entry 36 B (64 E2M1 + 4 E4M3 scales) + 17 B of index key (32 E2M1 + 1 ue8m0): 53/2 + 53/2 + 53 = 106.
"$strata" run -m "$ck" -p "$prompt" --temp 0 -n 2 --stats > /dev/null 2> "$tmp/stats.err"
if ! grep -q "kv cache: .* global KV 106.0 B/token" "$tmp/stats.err"; then
  echo "FAIL: --stats does not report 106.0 B/token of global KV" >&2; cat "$tmp/stats.err" >&2; exit 1
fi

# A new user turn after the loaded session; the session saved again is longer.
"$strata" run -m "$ck" --load-session "$tmp/s.strata" -p "And then?" --temp 0 -n 3 \
  --save-session "$tmp/s2.strata" > /dev/null 2> "$tmp/c.err"
n1="$(stat -c %s "$tmp/s.strata")"; n2="$(stat -c %s "$tmp/s2.strata")"
[[ "$n2" -gt "$n1" ]] || { echo "FAIL: continued session file is not larger ($n2 <= $n1)" >&2; exit 1; }

expect_error() {  # expect_error PATTERN args...: non-zero exit and one error line matching PATTERN
  local pattern="$1"; shift
  if "$strata" "$@" > "$tmp/out.txt" 2> "$tmp/err.txt"; then
    echo "FAIL: expected an error for: $*" >&2; exit 1
  fi
  if ! grep -q "^strata: error: .*$pattern" "$tmp/err.txt"; then
    echo "FAIL: error for '$*' does not match '$pattern':" >&2; cat "$tmp/err.txt" >&2; exit 1
  fi
}
cp "$tmp/s.strata" "$tmp/bad.strata"
printf '\x55' | dd of="$tmp/bad.strata" bs=1 seek=2000 conv=notrunc status=none
expect_error "payload checksum mismatch" run -m "$ck" --load-session "$tmp/bad.strata" -n 1
head -c 1000 "$tmp/s.strata" > "$tmp/short.strata"
expect_error "truncated" run -m "$ck" --load-session "$tmp/short.strata" -n 1
expect_error "no such session file" run -m "$ck" --load-session "$tmp/none.strata" -n 1
# Another model: the same tensors under a different config.json.
mkdir "$tmp/other"
for f in "$ck"/*; do ln -s "$f" "$tmp/other/"; done
rm "$tmp/other/config.json"
sed 's/"hidden_size"/"note": "other", "hidden_size"/' "$ck/config.json" > "$tmp/other/config.json"
expect_error "saved from another model" run -m "$tmp/other" --load-session "$tmp/s.strata" -n 1
expect_error "prefill mode 'fast' is not one of: exact, replay" run -m "$ck" -p hi --prefill fast
echo "session checks passed"
