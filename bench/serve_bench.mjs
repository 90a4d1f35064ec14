// End-to-end serving benchmark for `strata serve` (docs/performance.md "Server"): C concurrent
// streaming chat requests, each with the same prompt and max_tokens; reports per-stream time to
// first token and decode rate, and the aggregate token rate. Plain fetch + SSE, no dependencies.
// Usage: node bench/serve_bench.mjs URL PROMPT_FILE MAX_TOKENS C1[,C2,...] [REPEATS] [TEMPERATURE]
//   TEMPERATURE defaults to 1.0 (seeded per stream); 0 gives greedy streams (the batching figures).
//   e.g. node bench/serve_bench.mjs http://127.0.0.1:8000 data/docs/gettysburg-address.txt 64 1,2,4
import { readFileSync } from 'node:fs';

const [url, promptFile, maxTokens = '64', concList = '1', repeats = '1', temperature = '1.0'] = process.argv.slice(2);
const prompt = readFileSync(promptFile, 'utf8');

async function stream(i) {
  const t0 = performance.now();
  const r = await fetch(`${url}/v1/chat/completions`, {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify({
      model: 'deepseek-v4.1-flash', stream: true, stream_options: { include_usage: true }, max_tokens: Number(maxTokens),
      temperature: Number(temperature), seed: i, thinking: { type: 'disabled' },
      messages: [{ role: 'user', content: `${prompt}\n\nQuestion ${i}: summarise the text.` }],
    }),
  });
  if (r.status !== 200) throw new Error(`HTTP ${r.status}: ${await r.text()}`);
  let buf = '', tFirst = 0, tLast = 0, usage = null;
  const dec = new TextDecoder();
  for await (const part of r.body) {
    buf += dec.decode(part, { stream: true });
    let k;
    while ((k = buf.indexOf('\n\n')) >= 0) {
      const ev = buf.slice(0, k);
      buf = buf.slice(k + 2);
      if (!ev.startsWith('data: ') || ev === 'data: [DONE]') continue;
      const j = JSON.parse(ev.slice(6));
      if (j.usage) usage = j.usage;
      const d = j.choices?.[0]?.delta;
      if (d && (d.content || d.reasoning_content)) {
        tLast = performance.now();
        if (!tFirst) tFirst = tLast;
      }
    }
  }
  const n = usage ? usage.completion_tokens : 0;
  return { ttft: (tFirst - t0) / 1000, n, prompt: usage?.prompt_tokens ?? 0, cached: usage?.prompt_tokens_details?.cached_tokens ?? 0,
           decode: n > 1 && tLast > tFirst ? (n - 1) / ((tLast - tFirst) / 1000) : 0, wall: (performance.now() - t0) / 1000 };
}

const med = (xs) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)];
console.log('| streams | prompt tok | TTFT s (median) | per-stream decode tok/s (median) | aggregate tok/s |');
console.log('|---|---|---|---|---|');
let seed = 0;
for (const c of concList.split(',').map(Number)) {
  const ttft = [], dec = [], agg = [];
  let p = 0;
  for (let rep = 0; rep < Number(repeats); rep++) {
    const t0 = performance.now();
    const rs = await Promise.all(Array.from({ length: c }, () => stream(seed++)));
    const wall = (performance.now() - t0) / 1000;
    for (const r of rs) { ttft.push(r.ttft); dec.push(r.decode); p = r.prompt; }
    agg.push(rs.reduce((a, r) => a + r.n, 0) / wall);
  }
  console.log(`| ${c} | ${p} | ${med(ttft).toFixed(2)} | ${med(dec).toFixed(1)} | ${med(agg).toFixed(1)} |`);
}
