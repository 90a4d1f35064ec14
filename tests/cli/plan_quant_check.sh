#!/usr/bin/env bash
# strata plan --quant (issue 16 item 6), on the v41-tiny fixture:
#  - a bad --quant (unknown key, unknown type, an Engram K-quant whose block of 256 does not divide
#    the fixture's head_dim 32, --quant beside a GGUF) is a usage error (exit 2) naming what is wrong;
#    so are `plan --config X.gguf`, `quantize -m X.gguf` and quantize's own --engram q4_k there;
#  - `strata plan -m X.gguf --json` of a GGUF `strata quantize` wrote equals `strata plan --config
#    <its config.json> --quant <the same choices> --json` (everything but the "config" path), and its
#    checkpoint bytes equal the GGUF's tensor bytes (quantize's report);
#  - the text output names the choice and labels the block-format rate as assumed.
# The machine profile is tests/cli/data/machine_profile.json (no probe runs). Exit 77 = fixture missing.
set -uo pipefail
strata="$1"; fixtures="$2"
ck="$fixtures/v41-tiny/checkpoint"
[[ -f "$ck/config.json" ]] || { echo "SKIP: fixture $ck missing" >&2; exit 77; }
probe="$(dirname "${BASH_SOURCE[0]}")/data/machine_profile.json"
py=/usr/bin/python3
[[ -x "$py" ]] || py=python3
fail=0
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

plan=("$strata" plan --probe "$probe" --ram 1G)
expect_usage "plan --quant unknown key" "unknown key 'expert' (expected one of experts, dense, head, engram)" -- \
  "${plan[@]}" --config "$ck/config.json" --quant expert=q4_k
expect_usage "plan --quant unknown type" "'q5_k' is not a quantisation type (keep, q8_0" -- \
  "${plan[@]}" --config "$ck/config.json" --quant experts=q5_k
expect_usage "plan --quant not KEY=TYPE" "'q4_k' is not KEY=TYPE" -- \
  "${plan[@]}" --config "$ck/config.json" --quant q4_k
expect_usage "plan --quant engram K-quant on head_dim 32" "--quant engram=q4_k: rows of 32 values (engram_head_dim) are not a multiple of q4_k's block of 256" -- \
  "${plan[@]}" --config "$ck/config.json" --quant engram=Q4_K

# The GGUF's own types against the same choices given with --quant (case-insensitive).
q="experts=q8_0,dense=q8_0,head=q8_0,engram=iq4_nl"
"$strata" quantize -m "$ck" --out "$tmp/q.gguf" --experts q8_0 --dense q8_0 --head q8_0 --engram iq4_nl -t 2 \
  > "$tmp/quantize.out" || { echo "FAIL quantize"; exit 1; }
expect_usage "plan --quant beside a GGUF" "is a GGUF, whose tensor types plan reads" -- \
  "${plan[@]}" -m "$tmp/q.gguf" --quant "$q"
# A GGUF where a config.json or an official checkpoint is expected; an Engram type the checkpoint's
# head_dim refuses: the same usage error (exit 2) from quantize as from plan --quant.
expect_usage "plan --config X.gguf" "a GGUF is a checkpoint, not a config.json; use -m $tmp/q.gguf" -- \
  "${plan[@]}" --config "$tmp/q.gguf"
expect_usage "quantize -m X.gguf" "re-quantising a GGUF is not supported" -- \
  "$strata" quantize -m "$tmp/q.gguf" --out "$tmp/qq.gguf"
expect_usage "quantize --engram q4_k on head_dim 32" "--engram q4_k: rows of 32 values (engram_head_dim) are not a multiple of q4_k's block of 256" -- \
  "$strata" quantize -m "$ck" --out "$tmp/e4k.gguf" --engram q4_k
[[ ! -e "$tmp/qq.gguf" && ! -e "$tmp/e4k.gguf" ]] || { echo "FAIL: a refused quantize left a file"; fail=1; }
# A path that is not UTF-8 still gives valid JSON (the bad bytes replaced), not a crash.
bad="$tmp/bad$(printf '\xff')dir"
mkdir -p "$bad" && cp "$ck/config.json" "$bad/"
"${plan[@]}" --config "$bad/config.json" --json > "$tmp/bad.json" 2> "$tmp/bad.err" &&
  "$py" -c 'import json,sys; json.load(open(sys.argv[1]))' "$tmp/bad.json" ||
  { echo "FAIL plan --json with a non-UTF-8 path"; cat "$tmp/bad.err"; fail=1; }
"${plan[@]}" -m "$tmp/q.gguf" --json > "$tmp/gguf.json" 2>/dev/null || { echo "FAIL plan -m q.gguf"; exit 1; }
"${plan[@]}" --config "$ck/config.json" --quant "EXPERTS=Q8_0,dense=q8_0,head=q8_0,engram=IQ4_NL" --json > "$tmp/quant.json" \
  || { echo "FAIL plan --quant"; exit 1; }
"${plan[@]}" --config "$ck/config.json" --quant "$q" > "$tmp/quant.txt" || { echo "FAIL plan --quant (text)"; exit 1; }
"$py" - "$tmp/gguf.json" "$tmp/quant.json" "$tmp/quantize.out" <<'PY' || fail=1
import json, re, sys
a, b = (json.load(open(p)) for p in sys.argv[1:3])
for j in (a, b):
    j.pop("config")
if a != b:
    diff = [k for k in set(a) | set(b) if a.get(k) != b.get(k)]
    print("FAIL plan -m X.gguf differs from plan --quant in", diff); sys.exit(1)
want = {"experts": "q8_0", "dense": "q8_0", "head": "q8_0", "engram": "iq4_nl"}
got = {k: a["quant"][k] for k in want}
if got != want:
    print("FAIL quant read from the GGUF:", got); sys.exit(1)
# quantize's report: "wrote N tensors (M re-quantised), B bytes from S source bytes"
m = re.search(r"wrote \d+ tensors .*?, (\d+) bytes from", open(sys.argv[3]).read())
if not a["rates_assumed"]:
    print("FAIL rates_assumed is false for block formats"); sys.exit(1)
print("ok   plan -m X.gguf == plan --quant %s (tensor data %d B; the file, with config and tokenizer, %s B)" % (
    ",".join("%s=%s" % kv for kv in want.items()), a["checkpoint_bytes"], m.group(1) if m else "?"))
PY
for pat in "quantised as \`strata quantize\` writes it: experts=q8_0,dense=q8_0,head=q8_0,engram=iq4_nl" \
           "ASSUMED RATES" "assumed rate: block-format kernels (Q8_0)" "per decode token: "; do
  if grep -qF -- "$pat" "$tmp/quant.txt"; then echo "ok   text has: $pat"; else echo "FAIL text lacks: $pat"; fail=1; fi
done
exit $fail
