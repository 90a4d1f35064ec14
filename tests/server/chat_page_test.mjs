// The chat page at `/` in headless Chromium (Debian's chromium, driven by playwright-core):
// headers and CSP of the embedded files, a streamed reply with reasoning folded, a tool call,
// multi-turn history, the stop button (the page aborts its fetch and the server cancels the
// sequence), the engine panel filled from /metrics, and a screenshot.
// Weights are random (tiny synthesized checkpoint): the first two turns use the server's TEST ONLY
// scripted output (injected into the page's request by a route), the stop turn samples freely.
// The server streams experts and Engram rows through its RAM cache (--load-mode stream), so the
// panel's tiering numbers come from real reads.
// Usage: node chat_page_test.mjs STRATA_BINARY CHECKPOINT_DIR CHROMIUM SCREENSHOT_PNG [SERVE_ARGS...]
// (docs/chat-page.png: the demo checkpoint with SERVE_ARGS --ram-budget 256MiB)
// Bounded: every wait has a timeout, and the whole file must end within 120 s (ASan builds run it too) (node --test-timeout
// is not used: one watchdog below fails the run instead of hanging CI).
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { chromium } from 'playwright-core';
import { startServer, metric, waitMetric } from './serve_process.mjs';

const [strata, ckpt, chromiumPath, screenshot, ...serveArgs] = process.argv.slice(2);
const watchdog = setTimeout(() => { console.error('chat_page_test: FAIL: over 120 s'); process.exit(1); }, 120000);
watchdog.unref();

let srv, browser, page, base;
const pageErrors = [];

const tools = [{
  type: 'function',
  function: { name: 'get_weather', description: 'Weather', parameters: { type: 'object', properties: { location: { type: 'string' } } } },
}];
const toolScript = 'Need data.</think>\n\n<｜DSML｜ calls>\n<｜DSML｜ invoke name="get_weather">\n' +
  '<｜DSML｜ parameter name="location" string="true">Paris</｜DSML｜ parameter>\n</｜DSML｜ invoke>\n</｜DSML｜ calls>';

before(async () => {
  srv = await startServer(strata, ckpt, ['--ctx', '4096', '--load-mode', 'stream', ...serveArgs]);
  base = `http://127.0.0.1:${srv.port}`;
  browser = await chromium.launch({
    executablePath: chromiumPath, headless: true, timeout: 30000,
    // The closed network of CI machines: no background connections, no first-run work.
    args: ['--no-sandbox', '--disable-gpu', '--disable-quic', '--no-first-run', '--disable-background-networking',
      '--disable-component-update', '--disable-sync'],
  });
  page = await browser.newPage({ viewport: { width: 1200, height: 800 } });
  page.setDefaultTimeout(20000);
  page.on('pageerror', (e) => pageErrors.push(String(e)));
  // Chromium logs every HTTP error response; the one 400 below is expected.
  page.on('console', (m) => {
    if (m.type() === 'error' && !/status of 400 \(Bad Request\)/.test(m.text())) pageErrors.push(m.text());
  });
});
after(async () => {
  if (browser) await browser.close();
  if (srv) assert.equal(await srv.stop(), 0, 'strata serve exits 0 on SIGTERM');
});

test('the embedded files: types, CSP, cache headers', async () => {
  const want = { '/': 'text/html; charset=utf-8', '/index.html': 'text/html; charset=utf-8',
    '/chat.js': 'text/javascript; charset=utf-8', '/chat.css': 'text/css; charset=utf-8' };
  for (const [path, type] of Object.entries(want)) {
    const r = await fetch(base + path);
    assert.equal(r.status, 200, path);
    assert.equal(r.headers.get('content-type'), type, path);
    assert.equal(r.headers.get('cache-control'), 'no-cache', path);
    assert.match(r.headers.get('content-security-policy'), /default-src 'none'; script-src 'self'/, path);
    assert.equal(r.headers.get('x-content-type-options'), 'nosniff', path);
    assert.ok((await r.text()).length > 100, path);
  }
  assert.equal((await fetch(base + '/chat.html')).status, 404);
  assert.equal((await fetch(base + '/', { method: 'POST', body: '{}' })).status, 405);
});

test('page: streamed turns, reasoning folded, tool call, history, stop, engine panel', async () => {
  // Turns 1 and 2 get scripted output (and, on turn 2, tools); each request body is kept.
  const bodies = [];
  let script = ['Let me think about it.</think>Hello from strata!<｜end▁of▁sentence｜>', toolScript];
  await page.route('**/v1/chat/completions', async (route) => {
    const body = JSON.parse(route.request().postData());
    bodies.push(body);
    const s = script.shift();
    if (s !== undefined) {
      body.strata_test_output = s;
      if (s === toolScript) body.tools = tools;
    }
    await route.continue({ postData: JSON.stringify(body) });
  });
  await page.goto(base + '/');
  await page.waitForFunction(() => document.getElementById('model').textContent.includes('deepseek-v4.1-flash'));

  // Turn 1: reasoning in a closed <details>, then the answer.
  await page.fill('#prompt', 'Hi');
  await page.press('#prompt', 'Enter');
  await page.waitForFunction(() => document.body.dataset.state === 'idle' &&
    document.querySelectorAll('.msg.assistant .meta')[0]?.textContent.startsWith('finish'));
  const a1 = page.locator('.msg.assistant').nth(0);
  assert.equal(await a1.locator('.content').textContent(), 'Hello from strata!');
  assert.equal(await a1.locator('details.thinking .reasoning').textContent(), 'Let me think about it.');
  assert.equal(await a1.locator('details.thinking').getAttribute('open'), null, 'reasoning starts folded');
  assert.equal(await a1.getAttribute('aria-busy'), null, 'announced once complete');
  assert.match(await a1.locator('.meta').textContent(), /finish: stop · \d+ prompt \+ \d+ generated tokens/);

  // Turn 2: the history goes back (user, assistant with its reasoning, user); a tool call shows.
  await page.fill('#prompt', 'Weather in Paris?');
  await page.click('#send');
  await page.waitForFunction(() => document.body.dataset.state === 'idle' &&
    document.querySelectorAll('.msg.assistant .meta')[1]?.textContent.startsWith('finish'));
  assert.deepEqual(bodies[1].messages.map((m) => m.role), ['user', 'assistant', 'user']);
  assert.equal(bodies[1].messages[1].content, 'Hello from strata!');
  assert.equal(bodies[1].messages[1].reasoning_content, 'Let me think about it.');
  assert.equal(bodies[1].stream, true);
  const a2 = page.locator('.msg.assistant').nth(1);
  assert.equal(await a2.locator('.tool').textContent(), 'tool call get_weather({"location": "Paris"})');
  assert.match(await a2.locator('.meta').textContent(), /finish: tool_calls/);

  // Turn 3, in a new chat: free sampling, up to 3000 tokens. Tokens stream in; Stop ends it.
  await page.click('#clear');
  assert.equal(await page.locator('.msg').count(), 0);
  await page.uncheck('#thinking');
  await page.fill('#max-tokens', '3000');
  const before = await metric(srv.port, 'strata_generation_tokens_total');
  await page.fill('#prompt', 'Tell me a long story.');
  await page.click('#send');
  const a3 = page.locator('.msg.assistant').nth(0).locator('.content');
  await page.waitForFunction(() => (document.querySelector('.msg.assistant .content')?.textContent.length || 0) > 0);
  const first = (await a3.textContent()).length;
  await page.waitForFunction((n) => document.querySelector('.msg.assistant .content').textContent.length > n, first);
  assert.equal(await page.locator('body').getAttribute('data-state'), 'generating', 'still generating when stopped');
  await page.click('#stop');
  await page.waitForFunction(() => document.body.dataset.state === 'idle');
  assert.equal(await page.locator('.msg.assistant .meta').textContent(), 'stopped');
  assert.equal(await page.locator('#status').textContent(), 'Stopped.');
  // Server side: the sequence is cancelled, not finished in the background.
  assert.equal(await waitMetric(srv.port, 'strata_requests_running', 0, 10000), 0, 'the server cancelled the sequence');
  const after1 = await metric(srv.port, 'strata_generation_tokens_total');
  await new Promise((r) => setTimeout(r, 500));
  assert.equal(await metric(srv.port, 'strata_generation_tokens_total'), after1, 'no tokens after the stop');
  assert.ok(after1 - before < 3000, `stopped before max_tokens (${after1 - before} tokens generated)`);

  // A refused request (max_tokens beyond the context: 400) shows its error and leaves the history
  // as it was; the stopped answer stays in it.
  await page.fill('#max-tokens', '100000');
  await page.fill('#prompt', 'Too long');
  await page.click('#send');
  await page.waitForFunction(() => document.body.dataset.state === 'idle' &&
    document.querySelectorAll('.msg.assistant').length === 2);
  assert.match(await page.locator('.msg.assistant.error .meta').textContent(), /^error: .*context/);
  assert.match(await page.locator('#status').textContent(), /^Error: /);
  await page.fill('#max-tokens', '1');
  await page.fill('#prompt', 'Again');
  await page.click('#send');
  await page.waitForFunction(() => document.body.dataset.state === 'idle' &&
    document.querySelectorAll('.msg.assistant .meta')[2]?.textContent.startsWith('finish'));
  const last = bodies[bodies.length - 1];
  assert.deepEqual(last.messages.map((m) => m.role), ['user', 'assistant', 'user']);
  assert.deepEqual([last.messages[0].content, last.messages[2].content], ['Tell me a long story.', 'Again']);
  assert.equal(last.messages[1].content, await a3.textContent(), 'the stopped answer is history');

  // The engine panel: numbers from /metrics (the page polls every second).
  const want = [['stat-prefill', '^\\d+\\.\\d tok/s$'], ['stat-decode', '^\\d+\\.\\d tok/s$'],
    ['stat-expert-hits', '^\\d+\\.\\d %$'], ['stat-bytes-per-token', '^\\d+(\\.\\d)? (B|KiB|MiB)$'],
    ['stat-engram', '^\\d+(\\.\\d+)? (ms|s)'], ['stat-kv', '^\\d+(\\.\\d)? (B|KiB|MiB|GiB) in \\d+ slot\\(s\\)$'],
    ['stat-requests', '^0 running, 0 waiting$']];
  const panelReady = (w) => w.every(([id, re]) => new RegExp(re).test(document.getElementById(id).textContent));
  await page.waitForFunction(panelReady, want, { timeout: 5000 }).catch(() => {});
  for (const [id, re] of want) assert.match(await page.locator('#' + id).textContent(), new RegExp(re), id);
  await page.screenshot({ path: screenshot, fullPage: true });
  assert.deepEqual(pageErrors, [], 'no script errors or CSP violations in the page');
});
