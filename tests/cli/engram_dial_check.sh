#!/usr/bin/env bash
# The Engram width dial end to end with K-quants (issue 16 item 4): the test fixtures' engram_head_dim
# is 32, where only the 32-blocks (Q8_0, IQ4_NL) fit, so this synthesizes the smallest checkpoint of
# the release's layout (`synth --preset scaled --target-gb 1`: dim 256, engram_head_dim 256, as the
# release) and checks, for --engram q4_k and q8_0:
#  - quantize's summary gives the row bytes of the block format (144 and 272 B per 256-value row)
#    and 48 rows per token;
#  - the GGUF runs from a stream store (tables on disk, rows read per token), and the rows the
#    decode read from disk are exactly that many bytes each (official: 264 B a row, of which the
#    256 code bytes come from disk and the scales from RAM);
#  - `strata eval` against the official checkpoint's base: finite KLD > 0 for both, and the finer
#    type closer (KLD q8_0 < q4_k; fixed seeds, so the same every run).
# Label slow (about a minute). Usage: engram_dial_check.sh STRATA TOKENIZER TEXT. Exit 77 = skip.
set -euo pipefail
strata="$1"; tokenizer="$2"; text="$3"
[[ -f "$tokenizer" ]] || { echo "SKIP: tokenizer $tokenizer missing (npm ci)" >&2; exit 77; }
py=python3
tmp="$(mktemp -d)"; trap 'rm -rf "$tmp"' EXIT
ck="$tmp/scaled1"
"$strata" synth --preset scaled --target-gb 1 --seed 0 --tokenizer "$tokenizer" --out "$ck" > /dev/null 2>&1 \
  || { echo "FAIL synth --preset scaled --target-gb 1"; exit 1; }
hd=$("$py" -c "import json,sys; print(json.load(open(sys.argv[1]))['text_config']['engram_head_dim'])" "$ck/config.json")
[[ "$hd" == 256 ]] || { echo "FAIL the scaled checkpoint's engram_head_dim is $hd, expected 256"; exit 1; }
"$strata" eval -m "$ck" -f "$text" --save-base "$tmp/base.bin" > /dev/null 2>&1 || { echo "FAIL eval --save-base"; exit 1; }

# Row bytes the decode of `model` read from disk per Engram row: "rows bytes_per_row".
decode_rows() {
  "$strata" run -m "$1" -p "Four score and seven years ago" -n 6 --temp 0 --load-mode stream --ram-budget 1G \
    --stats-json "$tmp/stats.json" > /dev/null 2>&1 || { echo "FAIL run -m $1 (stream)"; exit 1; }
  "$py" - "$tmp/stats.json" <<'PY'
import json, sys
e = json.load(open(sys.argv[1]))["phases"]["decode"]["engram"]
assert e["rows_read"] > 0, e
print(e["rows_read"], e["bytes_read"] / e["rows_read"], e["row_bytes_read"] / e["rows_read"])
PY
}

read -r rows disk row <<< "$(decode_rows "$ck")"
[[ "$disk" == 256.0 && "$row" == 264.0 ]] || { echo "FAIL official: $disk B from disk, $row B a row (want 256, 264)"; exit 1; }
echo "ok   official FP8 tables: $rows rows read in decode, 264 B a row (256 from disk)"
declare -A want=([q4_k]=144 [q8_0]=272) kld
for t in q4_k q8_0; do
  "$strata" quantize -m "$ck" --out "$tmp/e_$t.gguf" --experts keep --engram "$t" > "$tmp/q.out" 2>&1 \
    || { echo "FAIL quantize --engram $t"; cat "$tmp/q.out"; exit 1; }
  grep -q "Engram ($t): 48 rows x ${want[$t]} B = $((48 * ${want[$t]})) B read per token" "$tmp/q.out" \
    || { echo "FAIL quantize --engram $t summary"; cat "$tmp/q.out"; exit 1; }
  read -r rows disk row <<< "$(decode_rows "$tmp/e_$t.gguf")"
  [[ "$disk" == "${want[$t]}.0" && "$row" == "${want[$t]}.0" ]] \
    || { echo "FAIL --engram $t: $disk B from disk, $row B a row (want ${want[$t]})"; exit 1; }
  "$strata" eval -m "$tmp/e_$t.gguf" -f "$text" --base "$tmp/base.bin" --json "$tmp/e_$t.json" > /dev/null 2>&1 \
    || { echo "FAIL eval -m e_$t.gguf --base"; exit 1; }
  kld[$t]=$("$py" -c "import json,sys; print(json.load(open(sys.argv[1]))['kld_mean'])" "$tmp/e_$t.json")
  echo "ok   --engram $t: ${want[$t]} B rows in the summary and from disk in decode ($rows rows); KLD ${kld[$t]}"
done
"$py" -c "import math,sys; a,b=map(float,sys.argv[1:]); sys.exit(0 if math.isfinite(a) and math.isfinite(b) and 0 < a < b else 1)" \
  "${kld[q8_0]}" "${kld[q4_k]}" || { echo "FAIL KLD q8_0 ${kld[q8_0]} < q4_k ${kld[q4_k]} (both finite, > 0)"; exit 1; }
echo "ok   KLD against the official tables: q8_0 ${kld[q8_0]} < q4_k ${kld[q4_k]}"
