#!/usr/bin/env bash
# strata logits on the v41-tiny fixture, checked by the shared checker (prefill logits, 25 greedy
# tokens, decode logits and every dumped intermediate/selection). Exit 77 = fixture missing (skip).
set -euo pipefail
strata="$1"; fixtures="$2"; tools="$3"
fx="$fixtures/v41-tiny"
if [[ ! -f "$fx/manifest.json" || ! -f "$tools/check_fixture.py" ]]; then
  echo "SKIP: fixture $fx or checker $tools/check_fixture.py missing" >&2
  exit 77
fi
py=/usr/bin/python3
[[ -x "$py" ]] || py=python3
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
"$strata" logits -m "$fx/checkpoint" --tokens "$fx/tokens.json" --out "$tmp/out.f32" \
  --positions 0,1,7,24,49,98,147,187,195,196 --decode 25 --decode-logits "$tmp/decode.f32" \
  --dump "$tmp/dumps" > "$tmp/tokens.json"
"$py" "$tools/check_fixture.py" "$fx" --logits "$tmp/out.f32" --tokens "$tmp/tokens.json" \
  --decode-logits "$tmp/decode.f32" --dumps "$tmp/dumps" | grep -v "has no golden counterpart"
