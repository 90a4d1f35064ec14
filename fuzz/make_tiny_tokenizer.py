#!/usr/bin/env python3
"""Writes fuzz/data/tiny_v41_tokenizer.json: a V4.1-shaped tokenizer small enough for fuzzing.

It is DeepSeek-V3's tokenizer.json cut down: the same pre-tokenizer regexes, ByteLevel decoder and
added-token flags, but only ids 0..2 (BOS, EOS, pad), the 256 byte tokens and the first N merges
(whose results are ids 259..258+N in V3), then the V3 role/tool tokens and the V4.1 rows
(<｜System｜>, <think>, </think>, ｜DSML｜, <｜latest_reminder｜>) renumbered densely after them, plus
one special placeholder. Every byte string is encodable (all 256 byte tokens are present), and
the chat renderer and output parser find every token they look up.

Usage: make_tiny_tokenizer.py V3_TOKENIZER_JSON OUT [N_MERGES]
  V3_TOKENIZER_JSON: ../shared/fixtures/v41-tiny/checkpoint/tokenizer.json
"""
import json
import sys

src, out = sys.argv[1], sys.argv[2]
n_merges = int(sys.argv[3]) if len(sys.argv) > 3 else 400
t = json.load(open(src, encoding="utf-8"))
vocab = t["model"]["vocab"]
inv = {i: s for s, i in vocab.items()}
merges = t["model"]["merges"][:n_merges]
keep = 259 + n_merges
for i, m in enumerate(merges):
    a, b = m.split(" ") if isinstance(m, str) else m
    assert inv[259 + i] == a + b, (i, m, inv[259 + i])
    assert vocab[a] < 259 + i and vocab[b] < 259 + i
new_vocab = {inv[i]: i for i in range(keep)}

# Added tokens: V3's ids 0..2 stay; the others (role, fim, tool markers) and the V4.1 rows follow.
v3_added = [a for a in t["added_tokens"] if "place▁holder" not in a["content"]]
v41 = [("<｜System｜>", False), ("<think>", False), ("</think>", False), ("｜DSML｜", False),
       ("<｜latest_reminder｜>", False)]
added = []
next_id = keep
for a in v3_added:
    a = dict(a)
    if a["id"] > 2:
        a["id"] = next_id
        next_id += 1
    added.append(a)
for text, special in v41 + [("<｜place▁holder▁no▁900｜>", True), ("<｜deepseek_image｜>", True)]:
    added.append({"id": next_id, "content": text, "single_word": False, "lstrip": False, "rstrip": False,
                  "normalized": not special, "special": special})
    next_id += 1

tiny = {
    "version": t["version"],
    "truncation": None,
    "padding": None,
    "added_tokens": added,
    "normalizer": t["normalizer"],
    "pre_tokenizer": t["pre_tokenizer"],
    "post_processor": None,
    "decoder": t["decoder"],
    "model": dict(t["model"], vocab=new_vocab, merges=merges),
}
with open(out, "w", encoding="utf-8") as f:
    json.dump(tiny, f, ensure_ascii=False, separators=(",", ":"))
    f.write("\n")
print(f"{out}: {len(new_vocab)} vocab, {len(merges)} merges, {len(added)} added tokens, ids 0..{next_id - 1}")
