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

# strata run --temp 0 on the fixture's prompt must render the fixture's 197 prompt ids and then
# print exactly the text of the 25 greedy tokens of decode_tokens_fixed.npy.
"$strata" run -m "$fx/checkpoint" -p "$(cat "$fx/prompt.txt")" --temp 0 -n 25 > "$tmp/run.txt" 2> "$tmp/run.err"
"$py" - "$fx" "$tmp/run.txt" "$tmp/run.err" <<'PY'
import json, sys
import numpy as np
fx, out = sys.argv[1], sys.argv[2]
tok = json.load(open(fx + "/checkpoint/tokenizer.json"))
inv = {v: k for k, v in tok["model"]["vocab"].items()}
for a in tok["added_tokens"]:
    inv[a["id"]] = a["content"]
# GPT-2 byte <-> unicode table of the ByteLevel decoder.
bs = list(range(33, 127)) + list(range(161, 173)) + list(range(174, 256))
cs = bs[:]
n = 0
for b in range(256):
    if b not in bs:
        bs.append(b); cs.append(256 + n); n += 1
u2b = {chr(c): b for b, c in zip(bs, cs)}
ids = [int(t) for t in np.load(fx + "/golden/decode_tokens_fixed.npy")]
want = b"".join(bytes(u2b[ch] for ch in inv[i]) for i in ids).decode("utf-8", "replace")
# stdout: the text and one newline; stderr: the summary line "[strata] prompt N tokens, ...".
text = open(out, encoding="utf-8", errors="replace").read()
got = text[:-1] if text.endswith("\n") else text
err = open(sys.argv[3], encoding="utf-8", errors="replace").read()
stats = err.split("[strata] prompt ")[1] if "[strata] prompt " in err else ""
ok = got == want and stats.startswith("197 tokens")
print(("ok  " if ok else "FAIL") + " strata run --temp 0: %d chars of greedy text %s the fixture's 25 tokens; stats: %s"
      % (len(got), "equal" if got == want else "differ from", stats.strip()))
if not ok:
    print("want:", repr(want)); print("got: ", repr(got)); sys.exit(1)
PY
