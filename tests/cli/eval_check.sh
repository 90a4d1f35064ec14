#!/usr/bin/env bash
# strata eval end to end on the v41-tiny fixture (issue 16 item 5):
#  - --save-base then --base on the same checkpoint: --json gives kld_mean = kld_max = 0, top1 = 100,
#    delta_ppl = 0;
#  - a Q8_0-expert GGUF from strata quantize against that base: finite kld_mean > 0;
#  - a truncated base, a base of another --ctx, --save-base with --base, a missing model, a one-token
#    text and a stride >= ctx fail naming the cause; --help lists the flags.
# Exit 77 = fixture missing (skip).
set -uo pipefail
strata="$1"; fixtures="$2"
ck="$fixtures/v41-tiny/checkpoint"; text="$fixtures/v41-tiny/prompt.txt"
if [[ ! -f "$ck/config.json" || ! -f "$text" ]]; then echo "SKIP: fixture $ck missing" >&2; exit 77; fi
py=/usr/bin/python3
[[ -x "$py" ]] || py=python3
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
fail=0
source "$(dirname "$0")/lib.sh"
ev=("$strata" eval -t 2 -f "$text" --ctx 48 --stride 16)

"${ev[@]}" -m "$ck" --save-base "$tmp/base.bin" --json "$tmp/base.json" > "$tmp/base.out" 2> "$tmp/base.err" \
  || { echo "FAIL eval --save-base"; cat "$tmp/base.err"; exit 1; }
grep -q "window 1/" "$tmp/base.err" || { echo "FAIL no progress on stderr"; cat "$tmp/base.err"; fail=1; }
"${ev[@]}" -m "$ck" --base "$tmp/base.bin" --json "$tmp/same.json" > /dev/null 2> "$tmp/same.err" \
  || { echo "FAIL eval --base (same model)"; cat "$tmp/same.err"; exit 1; }
"$py" - "$tmp/same.json" <<'PY' || fail=1
import json, sys
j = json.load(open(sys.argv[1]))
ok = j["kld_mean"] == 0 and j["kld_max"] == 0 and j["kld_p99"] == 0 and j["top1"] == 100 and j["delta_ppl"] == 0
print(("ok  " if ok else "FAIL") + " same model against its base: " + json.dumps(j, sort_keys=True).replace("\n", ""))
sys.exit(0 if ok else 1)
PY

"$strata" quantize -m "$ck" --out "$tmp/q8.gguf" --experts q8_0 > /dev/null || { echo "FAIL quantize"; exit 1; }
"${ev[@]}" -m "$tmp/q8.gguf" --base "$tmp/base.bin" --json "$tmp/q8.json" > /dev/null 2> "$tmp/q8.err" \
  || { echo "FAIL eval -m q8.gguf --base"; cat "$tmp/q8.err"; exit 1; }
"$py" - "$tmp/q8.json" <<'PY' || fail=1
import json, math, sys
j = json.load(open(sys.argv[1]))
ok = math.isfinite(j["kld_mean"]) and j["kld_mean"] > 0 and j["kld_max"] >= j["kld_p99"] and 0 <= j["top1"] <= 100
print(("ok  " if ok else "FAIL") + " q8_0 experts: kld_mean %g, kld_p99 %g, kld_max %g, top1 %g%%, delta_ppl %g"
      % (j["kld_mean"], j["kld_p99"], j["kld_max"], j["top1"], j["delta_ppl"]))
sys.exit(0 if ok else 1)
PY

head -c 100 "$tmp/base.bin" > "$tmp/short.bin"
if "${ev[@]}" -m "$ck" --base "$tmp/short.bin" > /dev/null 2> "$tmp/err"; then echo "FAIL a truncated base was accepted"; fail=1
elif grep -q "short.bin: size 100 bytes" "$tmp/err"; then echo "ok   truncated base: $(tail -1 "$tmp/err")"
else echo "FAIL truncated base:"; cat "$tmp/err"; fail=1; fi
if "$strata" eval -t 2 -f "$text" --ctx 40 -m "$ck" --base "$tmp/base.bin" > /dev/null 2> "$tmp/err"; then
  echo "FAIL a base of another ctx was accepted"; fail=1
elif grep -q "ctx 48, this run's is 40" "$tmp/err"; then echo "ok   other ctx: $(tail -1 "$tmp/err")"
else echo "FAIL other ctx:"; cat "$tmp/err"; fail=1; fi
"$strata" eval --help > "$tmp/help" 2>&1 && grep -q -- "--save-base" "$tmp/help" && echo "ok   eval --help" \
  || { echo "FAIL eval --help"; fail=1; }
expect_error "eval missing model" "no such file or directory" -- "$strata" eval -m "$tmp/none" -f "$text"
printf 'a' > "$tmp/one.txt"
expect_error "eval one-token text" "perplexity needs at least 2" -- "$strata" eval -t 2 -m "$ck" -f "$tmp/one.txt"
expect_usage "eval stride >= ctx" "stride" -- "$strata" eval -m "$ck" -f "$text" --ctx 8 --stride 8
expect_usage "save-base with base" "excludes" -- "$strata" eval -m "$ck" -f "$text" --save-base "$tmp/x" --base "$tmp/base.bin"
exit $fail
