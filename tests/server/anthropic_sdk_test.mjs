// strata serve's Anthropic Messages API driven by the official Anthropic Node SDK (@anthropic-ai/sdk,
// pinned in package.json): create, stream (the SDK's MessageStream assembles thinking, text and
// tool_use blocks from the events), a tool round trip, count_tokens, errors as the SDK's error
// classes, and x-api-key / Bearer authentication. Weights are random (tiny synthesized checkpoint):
// text comes from the server's TEST ONLY scripted output (`strata_test_output`, sent as an extra
// body field).
// Usage: node anthropic_sdk_test.mjs STRATA_BINARY CHECKPOINT_DIR
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import Anthropic from '@anthropic-ai/sdk';
import { startServer } from './serve_process.mjs';

const [strata, ckpt] = process.argv.slice(2);
const model = 'deepseek-v4.1-flash';
const EOS = '<｜end▁of▁sentence｜>';
let srv, client;

const tools = [{
  name: 'get_weather', description: 'Current weather for a city',
  input_schema: { type: 'object', properties: { location: { type: 'string' }, days: { type: 'integer' } }, required: ['location'] },
}];
const toolScript = 'Need data.</think>\n\n<｜DSML｜ calls>\n<｜DSML｜ invoke name="get_weather">\n' +
  '<｜DSML｜ parameter name="location" string="true">Paris</｜DSML｜ parameter>\n' +
  '<｜DSML｜ parameter name="days" string="false">3</｜DSML｜ parameter>\n</｜DSML｜ invoke>\n</｜DSML｜ calls>';
const thinking = { type: 'enabled', budget_tokens: 1024 };

const origin = (s) => `http://127.0.0.1:${s.port}`;

before(async () => {
  srv = await startServer(strata, ckpt, ['--parallel', '2', '--ctx', '4096']);
  client = new Anthropic({ baseURL: origin(srv), apiKey: 'not-needed', maxRetries: 0, timeout: 60000 });
});
after(async () => {
  if (srv) assert.equal(await srv.stop(), 0, 'strata serve exits 0 on SIGTERM');
});

test('create', async () => {
  const m = await client.messages.create({
    model, max_tokens: 64, system: 'Be brief.', messages: [{ role: 'user', content: 'Hi' }],
    strata_test_output: 'Hello, world!' + EOS,
  });
  assert.match(m.id, /^msg_[0-9a-f]{32}$/);
  assert.equal(m.type, 'message');
  assert.equal(m.role, 'assistant');
  assert.equal(m.model, model);
  assert.deepEqual(m.content, [{ type: 'text', text: 'Hello, world!' }]);
  assert.equal(m.stop_reason, 'end_turn');
  assert.equal(m.stop_sequence, null);
  assert.ok(m.usage.input_tokens > 0);
  assert.ok(m.usage.output_tokens >= 2);
  // Random weights, no script: max_tokens ends it.
  const r = await client.messages.create({ model, max_tokens: 3, messages: [{ role: 'user', content: 'Hi' }] });
  assert.equal(r.stop_reason, 'max_tokens');
  assert.equal(r.usage.output_tokens, 3);
  // stop_sequences.
  const s = await client.messages.create({
    model, max_tokens: 64, messages: [{ role: 'user', content: 'count' }], stop_sequences: ['3'],
    strata_test_output: '1, 2, 3, 4' + EOS,
  });
  assert.equal(s.stop_reason, 'stop_sequence');
  assert.equal(s.stop_sequence, '3');
  assert.deepEqual(s.content, [{ type: 'text', text: '1, 2, ' }]);
});

test('stream: thinking then text', async () => {
  const stream = client.messages.stream({
    model, max_tokens: 64, thinking, messages: [{ role: 'user', content: '2+2?' }],
    strata_test_output: 'Add them.</think>It is 4.' + EOS,
  });
  let text = '', thought = '';
  const types = [];
  stream.on('text', (delta) => { text += delta; });
  stream.on('thinking', (delta) => { thought += delta; });
  stream.on('streamEvent', (e) => { types.push(e.type); });
  const m = await stream.finalMessage();
  assert.equal(text, 'It is 4.');
  assert.equal(thought, 'Add them.');
  assert.deepEqual(m.content, [
    { type: 'thinking', thinking: 'Add them.', signature: '' },
    { type: 'text', text: 'It is 4.' },
  ]);
  assert.equal(m.stop_reason, 'end_turn');
  assert.ok(m.usage.output_tokens >= 4);
  // The exact lifecycle, with the deltas of each block collapsed.
  const lifecycle = types.filter((t, i) => !(t === 'content_block_delta' && types[i - 1] === 'content_block_delta'));
  assert.deepEqual(lifecycle, ['message_start', 'content_block_start', 'content_block_delta', 'content_block_stop',
    'content_block_start', 'content_block_delta', 'content_block_stop', 'message_delta', 'message_stop']);
});

test('tool round trip (create and stream)', async () => {
  const first = await client.messages.create({
    model, max_tokens: 256, thinking, tools, messages: [{ role: 'user', content: 'Weather in Paris?' }],
    strata_test_output: toolScript,
  });
  assert.equal(first.stop_reason, 'tool_use');
  const use = first.content.find((b) => b.type === 'tool_use');
  assert.match(use.id, /^toolu_[0-9a-f]{32}$/);
  assert.equal(use.name, 'get_weather');
  assert.deepEqual(use.input, { location: 'Paris', days: 3 });
  assert.deepEqual(first.content[0], { type: 'thinking', thinking: 'Need data.', signature: '' });
  // Streamed, the SDK assembles the same input from input_json_delta fragments.
  const streamed = await client.messages.stream({
    model, max_tokens: 256, thinking, tools, messages: [{ role: 'user', content: 'Weather in Paris?' }],
    strata_test_output: toolScript,
  }).finalMessage();
  assert.equal(streamed.stop_reason, 'tool_use');
  assert.deepEqual(streamed.content.find((b) => b.type === 'tool_use').input, { location: 'Paris', days: 3 });
  // The result goes back with the assistant turn as it came; the model answers.
  const back = await client.messages.create({
    model, max_tokens: 256, thinking, tools,
    messages: [
      { role: 'user', content: 'Weather in Paris?' },
      { role: 'assistant', content: first.content },
      { role: 'user', content: [{ type: 'tool_result', tool_use_id: use.id, content: '{"temp_c": 18, "sky": "cloudy"}' }] },
    ],
    strata_test_output: 'It is mild.</think>18 C and cloudy.' + EOS,
  });
  assert.equal(back.stop_reason, 'end_turn');
  assert.deepEqual(back.content, [
    { type: 'thinking', thinking: 'It is mild.', signature: '' },
    { type: 'text', text: '18 C and cloudy.' },
  ]);
  // A forced tool call (tool_choice any) with thinking off.
  const forced = await client.messages.create({
    model, max_tokens: 64, tools, tool_choice: { type: 'any' }, messages: [{ role: 'user', content: 'x' }],
    strata_test_output: '<｜DSML｜ invoke name="get_weather">\n<｜DSML｜ parameter name="location" string="true">Oslo' +
      '</｜DSML｜ parameter>\n</｜DSML｜ invoke>\n</｜DSML｜ calls>',
  });
  assert.equal(forced.stop_reason, 'tool_use');
  assert.deepEqual(forced.content.map((b) => b.type), ['tool_use']);
  assert.deepEqual(forced.content[0].input, { location: 'Oslo' });
});

test('count_tokens', async () => {
  const body = { model, system: 'Be brief.', messages: [{ role: 'user', content: 'Hi' }] };
  const n = await client.messages.countTokens(body);
  assert.ok(n.input_tokens > 0);
  const m = await client.messages.create({ ...body, max_tokens: 1 });
  assert.equal(n.input_tokens, m.usage.input_tokens + m.usage.cache_read_input_tokens);
});

test('bad requests raise the SDK error classes', async () => {
  const messages = [{ role: 'user', content: 'Hi' }];
  const cases = [
    [{ model, messages }, Anthropic.BadRequestError, 400, 'max_tokens'],
    [{ model, max_tokens: 8, messages: [] }, Anthropic.BadRequestError, 400, 'messages'],
    [{ model, max_tokens: 8, messages: [{ role: 'system', content: 'x' }] }, Anthropic.BadRequestError, 400, 'messages[0].role'],
    [{ model, max_tokens: 8, messages: [{ role: 'user', content: [{ type: 'image', source: { type: 'url', url: 'http://x' } }] }] },
      Anthropic.BadRequestError, 400, 'messages[0].content[0].type'],
    [{ model, max_tokens: 8, messages, thinking: { type: 'sometimes' } }, Anthropic.BadRequestError, 400, 'thinking.type'],
    [{ model, max_tokens: 8, messages, tools, tool_choice: { type: 'tool', name: 'nope' } },
      Anthropic.BadRequestError, 400, 'tool_choice.name'],
    [{ model, max_tokens: 5000, messages }, Anthropic.BadRequestError, 400, 'max_tokens'],
    [{ model: 'claude-x', max_tokens: 8, messages }, Anthropic.NotFoundError, 404, 'claude-x'],
  ];
  for (const [body, cls, status, says] of cases) {
    await assert.rejects(client.messages.create(body), (e) => {
      assert.ok(e instanceof cls, `${JSON.stringify(body)} -> ${e}`);
      assert.equal(e.status, status);
      assert.equal(e.error.type, 'error');
      assert.ok(e.error.error.message.includes(says), `${e.error.error.message} names ${says}`);
      return true;
    });
  }
  // The same errors while streaming come before the first byte.
  await assert.rejects(client.messages.stream({ model, messages }).finalMessage(), Anthropic.BadRequestError);
  assert.equal((await fetch(`${origin(srv)}/health`)).status, 200);
});

test('API key: x-api-key or Bearer', async () => {
  const keyed = await startServer(strata, ckpt, ['--api-key', 'sekret']);
  try {
    const body = { model, max_tokens: 1, messages: [{ role: 'user', content: 'Hi' }] };
    const bad = new Anthropic({ baseURL: origin(keyed), apiKey: 'wrong', maxRetries: 0 });
    await assert.rejects(bad.messages.create(body), Anthropic.AuthenticationError);
    const good = new Anthropic({ baseURL: origin(keyed), apiKey: 'sekret', maxRetries: 0 });
    assert.equal((await good.messages.create(body)).type, 'message');
    const bearer = new Anthropic({ baseURL: origin(keyed), apiKey: null, authToken: 'sekret', maxRetries: 0 });
    assert.equal((await bearer.messages.create(body)).type, 'message');
  } finally {
    await keyed.stop();
  }
});
