// Bounded load test of strata serve (loopback only): 16 clients x 50 requests each through the
// OpenAI SDK, mixed streaming / non-streaming, with about a fifth of the requests aborted by the
// client at a random moment. Asserts: no error other than the client's own aborts, the server
// healthy and idle at the end (no running or waiting requests), and its RSS back near the level
// measured after a warm-up (no per-request leak).
// Usage: node load_test.mjs STRATA_BINARY CHECKPOINT_DIR [CLIENTS] [REQUESTS_PER_CLIENT]
import assert from 'node:assert/strict';
import OpenAI from 'openai';
import { startServer, metric, waitMetric } from './serve_process.mjs';

const [strata, ckpt, nClients = '16', nRequests = '50'] = process.argv.slice(2);
const model = 'deepseek-v4.1-flash';
const srv = await startServer(strata, ckpt, ['--parallel', '4', '--max-queue', '64', '--ctx', '2048', '--prefix-cache-mib', '64']);
const client = new OpenAI({ baseURL: srv.baseURL, apiKey: 'x', maxRetries: 0, timeout: 120000 });
let seed = 12345;
const rand = () => ((seed = (seed * 1103515245 + 12345) % 2147483648) / 2147483648);
const counts = { ok: 0, aborted: 0, errors: [] };

async function one(i) {
  const stream = rand() < 0.5;
  const abort = rand() < 0.2;
  const ac = new AbortController();
  const body = {
    model, stream, max_tokens: 1 + Math.floor(rand() * 16), temperature: rand() * 1.5,
    messages: [{ role: 'user', content: `request ${i}: ${'word '.repeat(Math.floor(rand() * 40))}` }],
    thinking: rand() < 0.5 ? { type: 'disabled' } : { type: 'enabled' },
  };
  if (abort) setTimeout(() => ac.abort(), Math.floor(rand() * 40));
  try {
    const r = await client.chat.completions.create(body, { signal: ac.signal });
    if (stream) for await (const _ of r) { /* drain */ }
    counts.ok++;
  } catch (e) {
    if (abort && (e instanceof OpenAI.APIUserAbortError || e.name === 'AbortError')) counts.aborted++;
    else counts.errors.push(String(e));
  }
}

async function clientLoop(c, n) {
  for (let k = 0; k < n; k++) await one(c * 1000 + k);
}

// Warm up every slot, then measure.
await Promise.all(Array.from({ length: 8 }, (_, c) => clientLoop(100 + c, 2)));
assert.equal(await waitMetric(srv.port, 'strata_requests_running', 0), 0);
counts.ok = 0;
counts.aborted = 0;
const rss0 = srv.rssKiB();
const t0 = Date.now();
await Promise.all(Array.from({ length: Number(nClients) }, (_, c) => clientLoop(c, Number(nRequests))));
const seconds = (Date.now() - t0) / 1000;
assert.equal(await waitMetric(srv.port, 'strata_requests_running', 0, 10000), 0, 'no request still running');
assert.equal(await metric(srv.port, 'strata_requests_waiting'), 0, 'no request still waiting');
const rss1 = srv.rssKiB();
// The prefix cache keeps snapshots of earlier prompts by design (bounded by --prefix-cache-mib);
// what it holds is allowed growth, anything beyond it is a leak.
const cacheKiB = (await metric(srv.port, 'strata_prefix_cache_bytes')) / 1024;
assert.ok(cacheKiB <= 64 * 1024, `prefix cache holds ${cacheKiB} KiB, over its 64 MiB budget`);
// The storage-tier counters are exported too (cli/cmd_serve.cpp); a resident demo reads nothing.
for (const name of ['strata_store_bytes_read_total', 'strata_expert_cache_hit_rate', 'strata_store_io_wait_seconds_total'])
  assert.ok(Number.isFinite(await metric(srv.port, name)), `/metrics lacks ${name}`);
const health = await fetch(`http://127.0.0.1:${srv.port}/health`);
const total = Number(nClients) * Number(nRequests);
console.log(`load: ${total} requests in ${seconds.toFixed(1)} s: ${counts.ok} ok, ${counts.aborted} aborted by the client, ` +
  `${counts.errors.length} errors; RSS ${(rss0 / 1024).toFixed(1)} -> ${(rss1 / 1024).toFixed(1)} MiB ` +
  `(prefix cache ${(cacheKiB / 1024).toFixed(1)} MiB)`);
const code = await srv.stop();
assert.deepEqual(counts.errors, [], 'only client aborts may fail');
assert.equal(counts.ok + counts.aborted, total);
assert.equal(health.status, 200);
// RSS back near its start: within 25% + 32 MiB of the warmed-up level plus what the prefix cache holds.
assert.ok(rss1 <= rss0 * 1.25 + 32 * 1024 + cacheKiB, `RSS grew from ${rss0} KiB to ${rss1} KiB`);
assert.equal(code, 0);
