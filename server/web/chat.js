// strata's chat page: streams /v1/chat/completions (SSE), keeps the conversation in memory, shows
// reasoning folded and tool calls as they arrive, stops a generation by aborting its fetch (the
// server cancels the sequence when the connection closes), and polls GET /metrics for the engine
// panel. No framework, no build step: the server embeds this file as it is.
'use strict';

const $ = (id) => document.getElementById(id);
const conversation = [];  // the conversation sent with each request (OpenAI chat messages)
let controller = null;   // the running request's AbortController
let modelId = 'deepseek-v4.1-flash';

function el(tag, cls, text) {
  const e = document.createElement(tag);
  if (cls) e.className = cls;
  if (text !== undefined) e.textContent = text;
  return e;
}

function addMessage(role, text) {
  const box = el('article', 'msg ' + role);
  box.append(el('p', 'role', role === 'user' ? 'You' : 'strata'));
  const content = el('div', 'content', text || '');
  box.append(content);
  $('messages').append(box);
  box.scrollIntoView({ block: 'end' });
  return { box, content };
}

function headers() {
  const h = { 'Content-Type': 'application/json' };
  const key = $('api-key').value.trim();
  if (key) h.Authorization = 'Bearer ' + key;
  return h;
}

// The assistant's side of one turn, filled in as deltas arrive.
class Turn {
  constructor() {
    const { box, content } = addMessage('assistant', '');
    this.box = box;
    this.content = content;
    this.text = '';
    this.reasoning = '';
    this.calls = [];  // {id, name, arguments, node}
    this.details = null;
    this.meta = el('p', 'meta');
    box.append(this.meta);
    // Screen readers announce the answer once, when it is complete, not token by token.
    box.setAttribute('aria-busy', 'true');
  }
  addReasoning(t) {
    if (!this.details) {
      this.details = el('details', 'thinking');
      this.summary = el('summary', '', 'Reasoning');
      this.reasoningNode = el('div', 'reasoning');
      this.details.append(this.summary, this.reasoningNode);
      this.box.insertBefore(this.details, this.content);
    }
    this.reasoning += t;
    this.reasoningNode.textContent = this.reasoning;
  }
  addContent(t) {
    this.text += t;
    this.content.textContent = this.text;
  }
  addToolCall(tc) {
    let c = this.calls[tc.index];
    if (!c) {
      c = { id: tc.id || '', name: '', arguments: '', node: el('div', 'tool') };
      this.calls[tc.index] = c;
      this.box.insertBefore(c.node, this.meta);
    }
    if (tc.function && tc.function.name) c.name += tc.function.name;
    if (tc.function && tc.function.arguments) c.arguments += tc.function.arguments;
    c.node.textContent = 'tool call ' + c.name + '(' + c.arguments + ')';
  }
  // The message that goes back into the history.
  message() {
    const m = { role: 'assistant', content: this.text };
    if (this.reasoning) m.reasoning_content = this.reasoning;
    const calls = this.calls.filter(Boolean);
    if (calls.length)
      m.tool_calls = calls.map((c) => ({ id: c.id, type: 'function', function: { name: c.name, arguments: c.arguments } }));
    return m;
  }
}

// Reads an SSE body, calling onData(json) for each "data:" event until [DONE].
async function readEvents(body, onData) {
  const reader = body.getReader();
  const decoder = new TextDecoder();
  let buf = '';
  for (;;) {
    const { value, done } = await reader.read();
    if (done) return;
    buf += decoder.decode(value, { stream: true });
    let cut;
    while ((cut = buf.indexOf('\n\n')) >= 0) {
      const event = buf.slice(0, cut);
      buf = buf.slice(cut + 2);
      for (const line of event.split('\n')) {
        if (!line.startsWith('data: ')) continue;  // ": keep-alive" comments
        const data = line.slice(6);
        if (data === '[DONE]') return;
        onData(JSON.parse(data));
      }
    }
  }
}

function setBusy(busy) {
  $('send').disabled = busy;
  $('stop').disabled = !busy;
  $('prompt').disabled = busy;
  document.body.dataset.state = busy ? 'generating' : 'idle';
}

async function send(text) {
  conversation.push({ role: 'user', content: text });
  addMessage('user', text);
  const turn = new Turn();
  const max = Number($('max-tokens').value) || undefined;
  const body = {
    model: modelId, messages: conversation, stream: true, stream_options: { include_usage: true },
    thinking: { type: $('thinking').checked ? 'enabled' : 'disabled' },
  };
  if (max) body.max_tokens = max;
  controller = new AbortController();
  setBusy(true);
  $('status').textContent = 'Generating…';
  const t0 = performance.now();
  let tFirst = 0, finish = null, usage = null, failed = false;
  try {
    const res = await fetch('/v1/chat/completions', {
      method: 'POST', headers: headers(), body: JSON.stringify(body), signal: controller.signal,
    });
    if (!res.ok) {
      const j = await res.json().catch(() => ({}));
      throw new Error((j.error && j.error.message) || res.status + ' ' + res.statusText);
    }
    await readEvents(res.body, (j) => {
      if (j.error) throw new Error(j.error.message);
      if (j.usage) usage = j.usage;
      const c = j.choices && j.choices[0];
      if (!c) return;
      const d = c.delta || {};
      const r = d.reasoning_content || d.reasoning;
      if (r || d.content || d.tool_calls) {
        if (!tFirst) tFirst = performance.now();
      }
      if (r) turn.addReasoning(r);
      if (d.content) turn.addContent(d.content);
      for (const tc of d.tool_calls || []) turn.addToolCall(tc);
      if (c.finish_reason) finish = c.finish_reason;
    });
    const secs = (performance.now() - (tFirst || t0)) / 1000;
    let meta = 'finish: ' + (finish || '?');
    if (usage) {
      meta += ' · ' + usage.prompt_tokens + ' prompt + ' + usage.completion_tokens + ' generated tokens';
      if (usage.prompt_tokens_details && usage.prompt_tokens_details.cached_tokens)
        meta += ' (' + usage.prompt_tokens_details.cached_tokens + ' prompt tokens reused)';
      if (secs > 0 && usage.completion_tokens > 1)
        meta += ' · ' + ((usage.completion_tokens - 1) / secs).toFixed(1) + ' tok/s after the first';
    }
    turn.meta.textContent = meta;
    $('status').textContent = '';
  } catch (e) {
    if (e.name === 'AbortError') {
      turn.meta.textContent = 'stopped';
      $('status').textContent = 'Stopped.';
    } else {
      failed = true;
      turn.box.classList.add('error');
      turn.meta.textContent = 'error: ' + e.message;
      $('status').textContent = 'Error: ' + e.message;
    }
  } finally {
    // A failed turn leaves the conversation as it was (the user may edit and resend); a stopped
    // one keeps what was generated, as the assistant's answer.
    if (failed) conversation.pop();
    else conversation.push(turn.message());
    turn.box.removeAttribute('aria-busy');
    controller = null;
    setBusy(false);
    $('prompt').focus();
    refreshStats();
  }
}

// ---- the engine panel: GET /metrics (Prometheus text), samples without labels ----

function parseMetrics(text) {
  const m = {};
  for (const line of text.split('\n')) {
    if (!line || line[0] === '#') continue;
    const sp = line.lastIndexOf(' ');
    const name = line.slice(0, sp);
    if (name.includes('{')) continue;
    m[name] = Number(line.slice(sp + 1));
  }
  return m;
}

function bytes(n) {
  if (!(n >= 0)) return '–';
  const u = ['B', 'KiB', 'MiB', 'GiB', 'TiB'];
  let i = 0;
  while (n >= 1024 && i < u.length - 1) { n /= 1024; i++; }
  return (i ? n.toFixed(1) : String(Math.round(n))) + ' ' + u[i];
}
const pct = (x) => (x >= 0 ? (100 * x).toFixed(1) + ' %' : '–');
const rate = (x) => (x >= 0 ? x.toFixed(1) + ' tok/s' : '–');
const secs = (x) => (x >= 0 ? (x < 1 ? (1000 * x).toFixed(1) + ' ms' : x.toFixed(2) + ' s') : '–');

function show(id, text) { $(id).textContent = text; }

async function refreshStats() {
  let m;
  try {
    const res = await fetch('/metrics', { cache: 'no-store' });
    if (!res.ok) return;
    m = parseMetrics(await res.text());
  } catch (e) {
    return;
  }
  const has = (k) => Object.prototype.hasOwnProperty.call(m, k);
  const tokens = (m.strata_prompt_tokens_total || 0) - (m.strata_prompt_tokens_cached_total || 0) +
    (m.strata_generation_tokens_total || 0);
  show('stat-prefill', rate(m.strata_prefill_tokens_per_second));
  show('stat-decode', rate(m.strata_decode_tokens_per_second));
  show('stat-expert-hits', has('strata_expert_cache_hit_rate') ? pct(m.strata_expert_cache_hit_rate) : '–');
  show('stat-bytes-read', has('strata_store_bytes_read_total') ? bytes(m.strata_store_bytes_read_total) : '–');
  show('stat-bytes-per-token', has('strata_store_bytes_read_total') && tokens > 0
    ? bytes(m.strata_store_bytes_read_total / tokens) : '–');
  show('stat-io-wait', has('strata_store_io_wait_seconds_total') ? secs(m.strata_store_io_wait_seconds_total) : '–');
  show('stat-engram', has('strata_engram_fetch_seconds_total')
    ? secs(m.strata_engram_fetch_seconds_total) + (tokens > 0
      ? ' (' + secs(m.strata_engram_fetch_seconds_total / tokens) + '/token)' : '') : '–');
  show('stat-engram-hits', has('strata_engram_row_cache_hit_rate') ? pct(m.strata_engram_row_cache_hit_rate) : '–');
  show('stat-kv', has('strata_kv_bytes') ? bytes(m.strata_kv_bytes) + ' in ' + m.strata_kv_sessions + ' slot(s)' : '–');
  show('stat-prefix', has('strata_prefix_cache_bytes')
    ? bytes(m.strata_prefix_cache_bytes) + ', ' + pct(m.strata_prefix_cache_hit_rate) + ' of prompt tokens' : '–');
  show('stat-requests', (m.strata_requests_running || 0) + ' running, ' + (m.strata_requests_waiting || 0) + ' waiting');
}

async function loadModel() {
  try {
    const res = await fetch('/v1/models', { headers: headers() });
    const j = await res.json();
    if (j.data && j.data[0]) {
      modelId = j.data[0].id;
      $('model').textContent = modelId + ' · context ' + j.data[0].context_length + ' tokens';
    } else {
      $('model').textContent = (j.error && j.error.message) || 'no model';
    }
  } catch (e) {
    $('model').textContent = 'server unreachable';
  }
}

document.addEventListener('DOMContentLoaded', () => {
  $('composer').addEventListener('submit', (ev) => {
    ev.preventDefault();
    const text = $('prompt').value.trim();
    if (!text || controller) return;
    $('prompt').value = '';
    send(text);
  });
  $('prompt').addEventListener('keydown', (ev) => {
    if (ev.key === 'Enter' && !ev.shiftKey && !ev.isComposing) {
      ev.preventDefault();
      $('composer').requestSubmit();
    }
  });
  $('stop').addEventListener('click', () => { if (controller) controller.abort(); });
  document.addEventListener('keydown', (ev) => { if (ev.key === 'Escape' && controller) controller.abort(); });
  $('clear').addEventListener('click', () => {
    if (controller) controller.abort();
    conversation.length = 0;
    $('messages').replaceChildren();
  });
  $('api-key').addEventListener('change', loadModel);
  setBusy(false);
  loadModel();
  refreshStats();
  setInterval(refreshStats, 1000);
});
