#!/usr/bin/env bash
# strata calibrate --imatrix / strata quantize --imatrix end to end on the v41-tiny fixture (issue 16
# item 3):
#  - calibrate needs --out or --imatrix (usage error, exit 2), writes both when given both;
#  - quantize --imatrix writes a GGUF that `strata logits` runs (finite logits), and says how many
#    tensors were weighted; with every dial at keep or q8_0 it notes that the imatrix has no effect;
#  - a missing, garbled, JSON or mismatched imatrix (a wrong column count, or no entry naming any
#    matrix: another model's) exits 1 with one `strata: error:` line naming the file (and the tensor).
# Exit 77 = fixture missing (skip).
set -uo pipefail
strata="$1"; fixtures="$2"
fx="$fixtures/v41-tiny"; ck="$fx/checkpoint"
if [[ ! -f "$ck/config.json" ]]; then
  echo "SKIP: fixture $ck missing" >&2
  exit 77
fi
py=/usr/bin/python3
[[ -x "$py" ]] || py=python3
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
fail=0
source "$(dirname "$0")/lib.sh"

expect_usage "calibrate without --out or --imatrix" "nothing to write" -- \
  "$strata" calibrate -m "$ck" -f "$fx/prompt.txt" -t 2
"$strata" calibrate -m "$ck" -f "$fx/prompt.txt" --imatrix "$tmp/t.imatrix" --out "$tmp/hot.json" -t 2 > "$tmp/cal.out" || fail=1
if [[ -s "$tmp/t.imatrix" && -s "$tmp/hot.json" ]] && grep -q "imatrix: 95 entries" "$tmp/cal.out"; then
  echo "ok   calibrate --imatrix --out: $(grep imatrix "$tmp/cal.out")"
else
  echo "FAIL calibrate --imatrix --out"; cat "$tmp/cal.out"; fail=1
fi

"$strata" quantize -m "$ck" --out "$tmp/w.gguf" --experts q2_k --dense iq4_nl --head iq4_nl --imatrix "$tmp/t.imatrix" \
  -t 2 > "$tmp/q.out" || { echo "FAIL quantize --imatrix"; cat "$tmp/q.out"; fail=1; }
if grep -q "^imatrix: 95 tensors quantised with importance weights" "$tmp/q.out" &&
   grep -q "^note: 'mtp.0.attn_q_a.weight' has no entry in" "$tmp/q.out"; then
  echo "ok   quantize --imatrix: $(grep '^imatrix:' "$tmp/q.out"); DSpark stages noted"
else
  echo "FAIL quantize --imatrix summary/notes"; cat "$tmp/q.out"; fail=1
fi
if "$strata" logits -m "$tmp/w.gguf" --tokens "$fx/tokens.json" --out "$tmp/w.f32" --positions 0,1,2,3 -t 2 > /dev/null &&
   "$py" -c "import sys,numpy as np; a=np.fromfile(sys.argv[1],dtype=np.float32); sys.exit(0 if a.size and np.isfinite(a).all() else 1)" "$tmp/w.f32"; then
  echo "ok   strata logits -m the imatrix GGUF: finite logits"
else
  echo "FAIL strata logits -m the imatrix GGUF"; fail=1
fi
"$strata" quantize -m "$ck" --out "$tmp/k.gguf" --experts keep --dense q8_0 --imatrix "$tmp/t.imatrix" -t 2 > "$tmp/k.out" || fail=1
if grep -q "^note: --imatrix .* has no effect" "$tmp/k.out"; then
  echo "ok   quantize --imatrix with keep/q8_0: $(grep 'has no effect' "$tmp/k.out")"
else
  echo "FAIL quantize --imatrix with keep/q8_0 gives no note"; cat "$tmp/k.out"; fail=1
fi

expect_error "missing imatrix" "strata: error: .*nope.imatrix" -- \
  "$strata" quantize -m "$ck" --out "$tmp/e1.gguf" --experts q2_k --imatrix "$tmp/nope.imatrix"
printf 'garbage!' > "$tmp/garbled.dat"
expect_error "garbled imatrix" "strata: error: .*garbled.dat" -- \
  "$strata" quantize -m "$ck" --out "$tmp/e2.gguf" --experts q2_k --imatrix "$tmp/garbled.dat"
# legacy_dat OUT NAME COLS: a legacy .dat imatrix with one entry NAME of COLS columns, all 1.
legacy_dat() {
  "$py" - "$@" <<'PY'
import struct, sys
out, name, cols = sys.argv[1], sys.argv[2].encode(), int(sys.argv[3])
b = struct.pack("<i", 1) + struct.pack("<i", len(name)) + name + struct.pack("<ii", 1, cols) + struct.pack("<%df" % cols, *([1.0] * cols))
open(out, "wb").write(b)
PY
}
# An entry for blk.0.attn_q_a.weight of 32 columns (the matrix has 64).
legacy_dat "$tmp/wrong.dat" blk.0.attn_q_a.weight 32
expect_error "imatrix of the wrong width" "strata: error: .*wrong.dat.*blk.0.attn_q_a.weight.*64 columns" -- \
  "$strata" quantize -m "$ck" --out "$tmp/e3.gguf" --experts q2_k --dense iq4_nl --imatrix "$tmp/wrong.dat"
expect_error "a JSON file as imatrix" "strata: error: .*hot.json: a JSON file, not an imatrix" -- \
  "$strata" quantize -m "$ck" --out "$tmp/e5.gguf" --experts q2_k --imatrix "$tmp/hot.json"
# An imatrix whose only entry names no matrix of this checkpoint (another model's): refused.
legacy_dat "$tmp/other.dat" blk.0.ffn_other.weight 64
expect_error "imatrix of another model" "strata: error: .*other.dat: none of its 1 entries names a matrix quantised here.*blk.0.ffn_other.weight" -- \
  "$strata" quantize -m "$ck" --out "$tmp/e4.gguf" --experts q2_k --dense iq4_nl --imatrix "$tmp/other.dat"
for f in e1 e2 e3 e4 e5; do
  [[ -e "$tmp/$f.gguf" ]] && { echo "FAIL $f.gguf left behind"; fail=1; }
done
exit $fail
