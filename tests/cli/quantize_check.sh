#!/usr/bin/env bash
# strata quantize + running its GGUF end to end, on the v41-tiny fixture (issue 16):
#  - --experts keep --dense keep --head keep: `strata logits -m X.gguf` passes the fixture's own
#    checker (prefill and decode logits, 25 greedy tokens) and `strata run --temp 0` prints the same
#    text as the safetensors checkpoint;
#  - --experts q8_0: `strata run -m X.gguf -p hi -n 4` runs; its logits' mean KLD against the
#    official checkpoint is finite and bounded (the tiny model is chaotic: ~0.1);
#  - --split-max-size writes a gguf-split set whose logits equal the one file's;
#  - --experts mxfp4 (ggml MXFP4 experts) gives the keep file's logits resident and streamed, and
#    mmap refuses it naming the tensor;
#  - an existing output is refused; a K-quant on rows of 64 takes llama.cpp's fallback (IQ4_NL), says
#    so and runs;
#  - --engram iq4_nl: the summary gives 18 B rows, the GGUF runs; --engram q4_k (blocks of 256 on
#    head_dim 32) is refused.
# With a 4th argument TOKENIZER (tokenizer.json) it instead synthesizes the demo checkpoint, measures
# its Q4_K and Q2_K expert variants and checks KLD(Q4_K) < KLD(Q2_K) (cli.quantize_demo_check, label
# slow; the tiny checks above are cli.quantize_check's, not repeated); with a 5th argument TEXT
# (data/docs/gettysburg-address.txt) also through `strata eval --base` over that text (issue 16's
# acceptance: finite, and Q4_K's below Q2_K's).
# Exit 77 = fixture missing (skip).
set -euo pipefail
strata="$1"; fixtures="$2"; tools="$3"; demo_tokenizer="${4:-}"; demo_text="${5:-}"
fx="$fixtures/v41-tiny"; ck="$fx/checkpoint"
if [[ ! -f "$ck/config.json" || ! -f "$tools/check_fixture.py" ]]; then
  echo "SKIP: fixture $ck or checker missing" >&2
  exit 77
fi
py=/usr/bin/python3
[[ -x "$py" ]] || py=python3
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
pos=0,1,2,3,4,5,6,7,8,9,10,11,12,13,14,15
# KLD of a variant's logits at every prompt position against the official checkpoint's.
kld() {  # kld REF.f32 GOT.f32 -> mean KL(ref || got) in nats
  "$py" - "$1" "$2" <<'PY'
import sys, numpy as np
V = 129280
a = np.fromfile(sys.argv[1], dtype=np.float32).reshape(-1, V).astype(np.float64)
b = np.fromfile(sys.argv[2], dtype=np.float32).reshape(-1, V).astype(np.float64)
la = a - a.max(1, keepdims=True); la -= np.log(np.exp(la).sum(1, keepdims=True))
lb = b - b.max(1, keepdims=True); lb -= np.log(np.exp(lb).sum(1, keepdims=True))
print("%.6g" % (np.exp(la) * (la - lb)).sum(1).mean())
PY
}

if [[ -z "$demo_tokenizer" ]]; then
  "$strata" quantize -m "$ck" --out "$tmp/keep.gguf" --experts keep --dense keep --head keep > "$tmp/q.out"
  "$strata" logits -m "$tmp/keep.gguf" --tokens "$fx/tokens.json" --out "$tmp/keep.f32" \
    --positions 0,1,7,24,49,98,147,187,195,196 --decode 25 --decode-logits "$tmp/decode.f32" > "$tmp/tokens.json"
  "$py" "$tools/check_fixture.py" "$fx" --logits "$tmp/keep.f32" --tokens "$tmp/tokens.json" \
    --decode-logits "$tmp/decode.f32" | grep -v "has no golden counterpart"
  "$strata" run -m "$ck" -p "$(cat "$fx/prompt.txt")" --temp 0 -n 12 > "$tmp/run_ref.txt" 2>/dev/null
  "$strata" run -m "$tmp/keep.gguf" -p "$(cat "$fx/prompt.txt")" --temp 0 -n 12 > "$tmp/run_keep.txt" 2>/dev/null
  cmp "$tmp/run_ref.txt" "$tmp/run_keep.txt" && echo "ok   run --temp 0 on the keep GGUF prints the checkpoint's text"

  # --split-max-size: a gguf-split set (llama-gguf-split's names) whose logits equal the one file's,
  # opened from any of its files; a set name that exists is refused.
  "$strata" quantize -m "$ck" --out "$tmp/sp.gguf" --experts keep --dense keep --head keep --split-max-size 8M > "$tmp/sp.out"
  n_split=$(ls "$tmp"/sp-0000?-of-0000?.gguf | wc -l)
  [[ $n_split -ge 3 && ! -e "$tmp/sp.gguf" ]] && grep -q "^split into $n_split files:" "$tmp/sp.out" \
    || { echo "FAIL --split-max-size 8M: $n_split files"; cat "$tmp/sp.out"; exit 1; }
  "$strata" logits -m "$tmp/sp-00002-of-0000$n_split.gguf" --tokens "$fx/tokens.json" --out "$tmp/sp.f32" \
    --positions 0,1,7,24,49,98,147,187,195,196 > /dev/null
  cmp "$tmp/keep.f32" "$tmp/sp.f32" || { echo "FAIL the split set's logits differ from the one file's"; exit 1; }
  # Refused before any work, a usage error naming --out (cli.bad_input has the stand-in cases).
  rc=0; "$strata" quantize -m "$ck" --out "$tmp/sp.gguf" --experts keep --split-max-size 8M > /dev/null 2> "$tmp/sp.err" || rc=$?
  [[ $rc == 2 ]] || { echo "FAIL a split set's name taken: exit $rc, expected 2"; cat "$tmp/sp.err"; exit 1; }
  grep -q -- "--out $tmp/sp.gguf: $tmp/sp-00001-of-0000$n_split.gguf exists" "$tmp/sp.err" ||
    { echo "FAIL split refusal message"; cat "$tmp/sp.err"; exit 1; }
  for bad in "" "8Q" "0" "1.5G"; do
    rc=0; "$strata" quantize -m "$ck" --out "$tmp/bad.gguf" --split-max-size "$bad" > /dev/null 2> "$tmp/bad.err" || rc=$?
    [[ $rc == 2 ]] && grep -q -- "--split-max-size '$bad'" "$tmp/bad.err" || { echo "FAIL --split-max-size '$bad': exit $rc"; cat "$tmp/bad.err"; exit 1; }
  done
  echo "ok   --split-max-size 8M: $n_split files, logits equal the one file's, an existing set refused, bad sizes exit 2"

  # --experts mxfp4: routed experts as ggml MXFP4 blocks (the llama.cpp forks' layout), read back
  # losslessly: logits equal the keep file's resident and streamed through a small expert cache;
  # mmap is refused naming the tensor and the load modes that work (docs/gguf.md).
  "$strata" quantize -m "$ck" --out "$tmp/mx.gguf" --experts MXFP4 --dense keep > "$tmp/mx.out"
  grep -q "(experts mxfp4, dense keep" "$tmp/mx.out" || { echo "FAIL --experts mxfp4 summary"; cat "$tmp/mx.out"; exit 1; }
  for mode in "--load-mode resident" "--load-mode stream --ram-budget 42000000 --direct-io" \
              "--load-mode stream --ram-budget 42000000 --buffered-io"; do
    # shellcheck disable=SC2086
    "$strata" logits -m "$tmp/mx.gguf" $mode --tokens "$fx/tokens.json" --out "$tmp/mx.f32" \
      --positions 0,1,7,24,49,98,147,187,195,196 > /dev/null
    cmp "$tmp/keep.f32" "$tmp/mx.f32" || { echo "FAIL --experts mxfp4 logits differ ($mode)"; exit 1; }
  done
  rc=0; "$strata" logits -m "$tmp/mx.gguf" --load-mode mmap --tokens "$fx/tokens.json" --out "$tmp/mx.f32" \
    --positions 0 > /dev/null 2> "$tmp/mx.err" || rc=$?
  [[ $rc != 0 ]] && grep -q "blk.0.ffn_.*_exps.weight' holds routed experts as ggml MXFP4.*--load-mode resident" "$tmp/mx.err" \
    || { echo "FAIL mmap of ggml MXFP4 experts: exit $rc"; cat "$tmp/mx.err"; exit 1; }
  echo "ok   --experts mxfp4: ggml MXFP4 experts, logits equal keep's resident and streamed; mmap refused, naming the tensor"

  "$strata" quantize -m "$ck" --out "$tmp/q8.gguf" --experts q8_0 > "$tmp/q8.out"
  "$strata" run -m "$tmp/q8.gguf" -p hi -n 4 > "$tmp/run_q8.txt" 2>"$tmp/run_q8.err"
  grep -Eq "generated [1-4] token" "$tmp/run_q8.err" || { echo "FAIL run -m q8.gguf"; cat "$tmp/run_q8.err"; exit 1; }
  echo "ok   strata run -m q8.gguf -p hi -n 4"

  "$strata" logits -m "$ck" --tokens "$fx/tokens.json" --out "$tmp/ref.f32" --positions $pos > /dev/null
  "$strata" logits -m "$tmp/q8.gguf" --tokens "$fx/tokens.json" --out "$tmp/q8.f32" --positions $pos > /dev/null
  k8="$(kld "$tmp/ref.f32" "$tmp/q8.f32")"
  "$py" -c "import math,sys; k=float('$k8'); sys.exit(0 if math.isfinite(k) and 0 < k < 0.3 else 1)" \
    || { echo "FAIL KLD(q8_0 experts) = $k8"; exit 1; }
  echo "ok   tiny KLD(q8_0 experts) = $k8"

  if "$strata" quantize -m "$ck" --out "$tmp/q8.gguf" --experts q8_0 > "$tmp/again.out" 2> "$tmp/again.err"; then
    echo "FAIL an existing output was overwritten"; exit 1
  fi
  grep -q "exists" "$tmp/again.err" || { echo "FAIL the refusal does not say the output exists"; cat "$tmp/again.err"; exit 1; }
  echo "ok   existing output refused"
  "$strata" quantize -m "$ck" --out "$tmp/q4.gguf" --experts q4_k > "$tmp/q4.out"
  grep -q "in iq4_nl (llama.cpp's fallback)" "$tmp/q4.out" || { echo "FAIL q4_k on rows of 64: no fallback note"; cat "$tmp/q4.out"; exit 1; }
  "$strata" run -m "$tmp/q4.gguf" -p hi -n 2 --temp 0 > /dev/null || { echo "FAIL the q4_k (iq4_nl fallback) GGUF does not run"; exit 1; }
  echo "ok   q4_k on rows of 64 takes llama.cpp's fallback (iq4_nl), says so and runs"
  # The notes come before the work; an --out run/serve would not recognise is refused up front (exit 2);
  # type names in any case.
  head -1 "$tmp/q4.out" | grep -q "^strata quantize: .* (experts q4_k," || { echo "FAIL the header is not first"; cat "$tmp/q4.out"; exit 1; }
  rc=0; "$strata" quantize -m "$ck" --out "$tmp/noext" --experts q8_0 > /dev/null 2> "$tmp/noext.err" || rc=$?
  [[ $rc == 2 && ! -e "$tmp/noext" ]] && grep -q "ending in .gguf" "$tmp/noext.err" \
    || { echo "FAIL --out without .gguf: exit $rc"; cat "$tmp/noext.err"; exit 1; }
  "$strata" quantize -m "$ck" --out "$tmp/upper.gguf" --experts Q8_0 --dense KEEP > "$tmp/upper.out" \
    && grep -q "(experts q8_0, dense keep," "$tmp/upper.out" || { echo "FAIL upper-case type names"; cat "$tmp/upper.out"; exit 1; }
  echo "ok   header and notes first; --out without .gguf refused (exit 2); type names in any case"
  # The Engram dial: head_dim 32 takes iq4_nl (18 B per row), refuses q4_k (blocks of 256).
  "$strata" quantize -m "$ck" --out "$tmp/e4.gguf" --experts keep --engram iq4_nl > "$tmp/e4.out"
  grep -q "Engram (iq4_nl): 24 rows x 18 B = 432 B read per token" "$tmp/e4.out" \
    || { echo "FAIL --engram iq4_nl summary"; cat "$tmp/e4.out"; exit 1; }
  "$strata" run -m "$tmp/e4.gguf" -p hi -n 4 > /dev/null 2>"$tmp/run_e4.err"
  grep -Eq "generated [1-4] token" "$tmp/run_e4.err" || { echo "FAIL run -m e4.gguf"; cat "$tmp/run_e4.err"; exit 1; }
  if "$strata" quantize -m "$ck" --out "$tmp/e4k.gguf" --experts keep --engram q4_k > /dev/null 2> "$tmp/e4k.err"; then
    echo "FAIL --engram q4_k on head_dim 32 was accepted"; exit 1
  fi
  grep -q "not a multiple of q4_k's block of 256" "$tmp/e4k.err" || { echo "FAIL --engram q4_k message"; cat "$tmp/e4k.err"; exit 1; }
  echo "ok   --engram iq4_nl: 18 B rows, runs; q4_k refused on head_dim 32"
fi

if [[ -n "$demo_tokenizer" ]]; then
  [[ -f "$demo_tokenizer" ]] || { echo "FAIL demo tokenizer $demo_tokenizer missing (npm ci)"; exit 1; }
  demo="$tmp/demo"
  "$strata" synth --preset demo --seed 0 --tokenizer "$demo_tokenizer" --out "$demo" > /dev/null 2>&1
  "$strata" logits -m "$demo" --tokens "$fx/tokens.json" --out "$tmp/d_ref.f32" --positions $pos > /dev/null
  [[ -z "$demo_text" ]] || "$strata" eval -m "$demo" -f "$demo_text" --save-base "$tmp/d_base.bin" > /dev/null 2>&1
  for t in q4_k q2_k; do
    "$strata" quantize -m "$demo" --out "$tmp/d_$t.gguf" --experts "$t" > /dev/null
    "$strata" logits -m "$tmp/d_$t.gguf" --tokens "$fx/tokens.json" --out "$tmp/d_$t.f32" --positions $pos > /dev/null
    eval "k_$t=$(kld "$tmp/d_ref.f32" "$tmp/d_$t.f32")"
    if [[ -n "$demo_text" ]]; then
      "$strata" eval -m "$tmp/d_$t.gguf" -f "$demo_text" --base "$tmp/d_base.bin" --json "$tmp/e_$t.json" > /dev/null 2>&1 \
        || { echo "FAIL strata eval -m $t.gguf --base"; exit 1; }
    fi
    rm -f "$tmp/d_$t.gguf"
  done
  echo "demo KLD vs official: q4_k $k_q4_k, q2_k $k_q2_k"
  "$py" -c "import math,sys; a,b=float('$k_q4_k'),float('$k_q2_k'); sys.exit(0 if math.isfinite(a) and a < b else 1)" \
    || { echo "FAIL demo KLD(q4_k) >= KLD(q2_k)"; exit 1; }
  echo "ok   demo KLD(q4_k) < KLD(q2_k)"
  if [[ -n "$demo_text" ]]; then
    "$py" - "$tmp/e_q4_k.json" "$tmp/e_q2_k.json" <<'PY' || { echo "FAIL demo eval KLD order"; exit 1; }
import json, math, sys
q4, q2 = (json.load(open(p)) for p in sys.argv[1:])
for n, j in (("q4_k", q4), ("q2_k", q2)):
    print("demo eval %s: kld_mean %.4g kld_p99 %.4g kld_max %.4g top1 %.1f%% delta_ppl %.4g"
          % (n, j["kld_mean"], j["kld_p99"], j["kld_max"], j["top1"], j["delta_ppl"]))
ok = all(math.isfinite(j["kld_mean"]) and j["kld_mean"] > 0 for j in (q4, q2)) and q4["kld_mean"] < q2["kld_mean"]
sys.exit(0 if ok else 1)
PY
    echo "ok   demo eval on the text: KLD(q4_k) < KLD(q2_k), all finite"
  fi
fi
