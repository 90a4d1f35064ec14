// strata serve driven by the official OpenAI Node SDK (v6): the client most agents and chat front
// ends use. Non-streaming, streaming (incl. the SDK's stream helper that assembles tool calls),
// a tool-call round trip, reasoning on and off, stop strings, max_tokens inside reasoning, every
// documented bad request, two concurrent streams. Weights are random (tiny synthesized
// checkpoint): text comes from the server's TEST ONLY scripted output where it matters.
// Usage: node openai_sdk_test.mjs STRATA_BINARY CHECKPOINT_DIR
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import OpenAI from 'openai';
import { startServer, waitMetric } from './serve_process.mjs';

const [strata, ckpt] = process.argv.slice(2);
const model = 'deepseek-v4.1-flash';
let srv, client;

const tools = [{
  type: 'function',
  function: {
    name: 'get_weather', description: 'Current weather for a city',
    parameters: { type: 'object', properties: { location: { type: 'string' }, days: { type: 'integer' } }, required: ['location'] },
  },
}];
const toolScript = 'Need data.</think>\n\n<｜DSML｜ calls>\n<｜DSML｜ invoke name="get_weather">\n' +
  '<｜DSML｜ parameter name="location" string="true">Paris</｜DSML｜ parameter>\n' +
  '<｜DSML｜ parameter name="days" string="false">3</｜DSML｜ parameter>\n</｜DSML｜ invoke>\n</｜DSML｜ calls>';

before(async () => {
  srv = await startServer(strata, ckpt, ['--parallel', '2', '--ctx', '4096']);
  client = new OpenAI({ baseURL: srv.baseURL, apiKey: 'not-needed', maxRetries: 0, timeout: 60000 });
});
after(async () => {
  if (srv) assert.equal(await srv.stop(), 0, 'strata serve exits 0 on SIGTERM');
});

test('models', async () => {
  const list = await client.models.list();
  assert.equal(list.data[0].id, model);
  const m = await client.models.retrieve(model);
  assert.equal(m.owned_by, 'strata');
  assert.equal(m.context_length, 4096);
});

test('non-stream', async () => {
  const r = await client.chat.completions.create({ model, messages: [{ role: 'user', content: 'Hi' }], max_tokens: 6 });
  assert.match(r.id, /^chatcmpl-[0-9a-f]{32}$/);
  assert.equal(r.object, 'chat.completion');
  const c = r.choices[0];
  assert.ok(['stop', 'length'].includes(c.finish_reason));
  assert.equal(c.message.role, 'assistant');
  assert.equal(typeof c.message.reasoning_content, 'string', 'thinking is on by default');
  assert.equal(r.usage.total_tokens, r.usage.prompt_tokens + r.usage.completion_tokens);
  assert.ok(r.usage.completion_tokens <= 6 && r.usage.completion_tokens >= 1);
});

test('stream with usage', async () => {
  const stream = await client.chat.completions.create({
    model, messages: [{ role: 'user', content: 'Hi' }], stream: true, stream_options: { include_usage: true },
    thinking: { type: 'disabled' }, strata_test_output: 'Hello, world!<｜end▁of▁sentence｜>',
  });
  let content = '', finish = null, usage = null, first = null;
  for await (const chunk of stream) {
    first ??= chunk;
    assert.equal(chunk.id, first.id);
    if (chunk.usage) usage = chunk.usage;
    for (const ch of chunk.choices) {
      content += ch.delta.content ?? '';
      if (ch.finish_reason) finish = ch.finish_reason;
    }
  }
  assert.equal(first.choices[0].delta.role, 'assistant');
  assert.equal(content, 'Hello, world!');
  assert.equal(finish, 'stop');
  assert.ok(usage && usage.completion_tokens >= 2);
});

test('tool call round trip (stream helper assembles the call)', async () => {
  const runner = client.chat.completions.stream({
    model, messages: [{ role: 'user', content: 'Weather in Paris?' }], tools, strata_test_output: toolScript,
  });
  const done = await runner.finalChatCompletion();
  const msg = done.choices[0].message;
  assert.equal(done.choices[0].finish_reason, 'tool_calls');
  assert.equal(msg.tool_calls.length, 1);
  const call = msg.tool_calls[0];
  assert.match(call.id, /^call_[0-9a-f]{24}$/);
  assert.equal(call.function.name, 'get_weather');
  assert.deepEqual(JSON.parse(call.function.arguments), { location: 'Paris', days: 3 });
  // Non-stream gives the same call.
  const r = await client.chat.completions.create({
    model, messages: [{ role: 'user', content: 'Weather in Paris?' }], tools, strata_test_output: toolScript,
  });
  assert.equal(r.choices[0].message.content, null);
  assert.equal(r.choices[0].message.tool_calls[0].function.arguments, '{"location": "Paris", "days": 3}');
  // The tool result goes back; the model answers.
  const back = await client.chat.completions.create({
    model, tools,
    messages: [
      { role: 'user', content: 'Weather in Paris?' },
      { role: 'assistant', content: null, tool_calls: msg.tool_calls },
      { role: 'tool', tool_call_id: call.id, content: '{"temp_c": 18, "sky": "cloudy"}' },
    ],
    strata_test_output: 'It is mild.</think>18 C and cloudy.<｜end▁of▁sentence｜>',
  });
  assert.equal(back.choices[0].message.content, '18 C and cloudy.');
  assert.equal(back.choices[0].message.reasoning_content, 'It is mild.');
  assert.equal(back.choices[0].finish_reason, 'stop');
});

test('reasoning on and off', async () => {
  const on = await client.chat.completions.create({
    model, messages: [{ role: 'user', content: '2+2?' }], reasoning_effort: 'high',
    strata_test_output: 'Add them.</think>4<｜end▁of▁sentence｜>',
  });
  assert.equal(on.choices[0].message.reasoning_content, 'Add them.');
  assert.equal(on.choices[0].message.content, '4');
  assert.ok(on.usage.completion_tokens_details.reasoning_tokens >= 2);
  const off = await client.chat.completions.create({
    model: 'deepseek-chat', messages: [{ role: 'user', content: '2+2?' }], strata_test_output: '4<｜end▁of▁sentence｜>',
  });
  assert.equal(off.choices[0].message.content, '4');
  assert.equal(off.choices[0].message.reasoning_content, undefined);
  assert.equal(off.usage.completion_tokens_details.reasoning_tokens, 0);
});

test('stop strings', async () => {
  const r = await client.chat.completions.create({
    model, messages: [{ role: 'user', content: 'count' }], stop: ['3'], thinking: { type: 'disabled' },
    strata_test_output: '1, 2, 3, 4',
  });
  assert.equal(r.choices[0].message.content, '1, 2, ');
  assert.equal(r.choices[0].finish_reason, 'stop');
});

test('max_tokens reached inside reasoning', async () => {
  const r = await client.chat.completions.create({
    model, messages: [{ role: 'user', content: 'think' }], max_completion_tokens: 3,
    strata_test_output: 'Let me think about this very carefully',
  });
  assert.equal(r.choices[0].finish_reason, 'length');
  assert.equal(r.choices[0].message.content, '');
  assert.ok(r.choices[0].message.reasoning_content.length > 0);
  assert.equal(r.usage.completion_tokens, 3);
});

test('logprobs (chat, streamed chat, legacy completions)', async () => {
  const body = { model, messages: [{ role: 'user', content: 'Hi' }], max_tokens: 8, temperature: 0,
    thinking: { type: 'disabled' }, logprobs: true, top_logprobs: 3 };
  const check = (entries) => {
    let sum = 0;
    for (const e of entries) {
      assert.ok(e.logprob <= 0, `${e.logprob} <= 0`);
      sum += e.logprob;
      assert.equal(e.top_logprobs.length, 3);
      assert.equal(e.top_logprobs[0].token, e.token, 'greedy: the token is the top-1 alternative');
      assert.equal(e.top_logprobs[0].logprob, e.logprob);
      for (let k = 1; k < 3; ++k) assert.ok(e.top_logprobs[k - 1].logprob >= e.top_logprobs[k].logprob);
    }
    assert.ok(sum <= 0);
    return entries.map((e) => e.token).join('');
  };
  const r = await client.chat.completions.create(body);
  const entries = r.choices[0].logprobs.content;
  assert.ok(entries.length > 0);
  assert.equal(check(entries), r.choices[0].message.content);
  const stream = await client.chat.completions.create({ ...body, stream: true });
  const streamed = [];
  let text = '';
  for await (const chunk of stream) {
    const ch = chunk.choices[0];
    if (!ch) continue;
    text += ch.delta?.content ?? '';
    streamed.push(...(ch.logprobs?.content ?? []));
  }
  assert.equal(check(streamed), text);
  assert.deepEqual(streamed.map((e) => e.token), entries.map((e) => e.token));
  const c = await client.completions.create({ model, prompt: 'Once upon a time', max_tokens: 6, temperature: 0, logprobs: 2 });
  const lp = c.choices[0].logprobs;
  assert.equal(lp.tokens.join(''), c.choices[0].text);
  assert.ok(lp.token_logprobs.every((l) => l <= 0));
  assert.ok(lp.top_logprobs.every((t, i) => Math.max(...Object.values(t)) === lp.token_logprobs[i]));
});

test('Responses API: create, stream, function-call round trip via previous_response_id', async () => {
  const r = await client.responses.create({
    model, input: 'Hi', instructions: 'Be brief.', reasoning: { effort: 'none' }, max_output_tokens: 32,
    strata_test_output: 'Hello, world!<｜end▁of▁sentence｜>',
  });
  assert.match(r.id, /^resp_[0-9a-f]{32}$/);
  assert.equal(r.status, 'completed');
  assert.equal(r.output_text, 'Hello, world!');
  assert.ok(r.usage.input_tokens > 0 && r.usage.output_tokens >= 2);
  // Streamed with the SDK's helper, which assembles the response from the events.
  const stream = client.responses.stream({
    model, input: [{ role: 'user', content: [{ type: 'input_text', text: '2+2?' }] }], max_output_tokens: 64,
    strata_test_output: 'Add them.</think>It is 4.<｜end▁of▁sentence｜>',
  });
  let text = '';
  stream.on('response.output_text.delta', (e) => { text += e.delta; });
  const final = await stream.finalResponse();
  assert.equal(text, 'It is 4.');
  assert.equal(final.output[1].content[0].text, 'It is 4.');  // (output_text is the SDK's, on create only)
  assert.deepEqual(final.output.map((o) => o.type), ['reasoning', 'message']);
  assert.equal(final.output[0].content[0].text, 'Add them.');
  // A function call, then its output sent back with previous_response_id only.
  const rtools = [{ type: 'function', name: 'get_weather', description: 'Current weather for a city',
    parameters: tools[0].function.parameters }];
  const first = await client.responses.create({
    model, input: 'Weather in Paris?', tools: rtools, strata_test_output: toolScript,
  });
  const call = first.output.find((o) => o.type === 'function_call');
  assert.equal(call.name, 'get_weather');
  assert.deepEqual(JSON.parse(call.arguments), { location: 'Paris', days: 3 });
  const second = await client.responses.create({
    model, tools: rtools, previous_response_id: first.id,
    input: [{ type: 'function_call_output', call_id: call.call_id, output: '{"temp_c": 18}' }],
    strata_test_output: 'It is mild.</think>18 C.<｜end▁of▁sentence｜>',
  });
  assert.equal(second.output_text, '18 C.');
  assert.ok(second.usage.input_tokens_details.cached_tokens > 0, 'the stored conversation was reused');
  await assert.rejects(client.responses.create({ model, input: 'x', previous_response_id: 'resp_nope' }),
    (e) => e instanceof OpenAI.NotFoundError && e.code === 'previous_response_not_found');
});

test('response_format json_schema: the answer parses and follows the schema', async () => {
  const schema = {
    type: 'object',
    properties: { name: { type: 'string', maxLength: 10 }, age: { type: 'integer' } },
    required: ['name', 'age'], additionalProperties: false,
  };
  const r = await client.chat.completions.create({
    model, messages: [{ role: 'user', content: 'A person as JSON' }], max_tokens: 200, temperature: 1, seed: 7,
    thinking: { type: 'disabled' },
    response_format: { type: 'json_schema', json_schema: { name: 'person', strict: true, schema } },
  });
  assert.equal(r.choices[0].finish_reason, 'stop');
  const v = JSON.parse(r.choices[0].message.content);
  assert.deepEqual(Object.keys(v), ['name', 'age']);
  assert.equal(typeof v.name, 'string');
  assert.ok([...v.name].length <= 10, v.name);
  assert.ok(Number.isInteger(v.age), String(v.age));
});

test('bad requests raise the SDK error classes', async () => {
  const msgs = [{ role: 'user', content: 'Hi' }];
  const cases = [
    [{ model, messages: msgs, temperature: 3 }, OpenAI.BadRequestError, 400, 'temperature'],
    [{ model, messages: [] }, OpenAI.BadRequestError, 400, 'messages'],
    [{ model, messages: [{ role: 'robot', content: 'x' }] }, OpenAI.BadRequestError, 400, 'messages[0].role'],
    [{ model, messages: [{ role: 'user', content: [{ type: 'image_url', image_url: { url: 'http://x' } }] }] },
      OpenAI.BadRequestError, 400, 'messages[0].content[0].type'],
    [{ model, messages: msgs, n: 2 }, OpenAI.BadRequestError, 400, 'n'],
    [{ model, messages: msgs, logprobs: true, top_logprobs: 21 }, OpenAI.BadRequestError, 400, 'top_logprobs'],
    [{ model, messages: msgs, reasoning_effort: 'extreme' }, OpenAI.BadRequestError, 400, 'reasoning_effort'],
    [{ model, messages: msgs, tools, tool_choice: { type: 'function', function: { name: 'nope' } } },
      OpenAI.BadRequestError, 400, 'tool_choice'],
    [{ model, messages: [{ role: 'user', content: 'x' }, { role: 'assistant', content: 'y' }] },
      OpenAI.BadRequestError, 400, 'messages[1]'],
    [{ model, messages: msgs, max_tokens: 5000 }, OpenAI.BadRequestError, 400, 'max_tokens'],
    [{ model: 'gpt-4o', messages: msgs }, OpenAI.NotFoundError, 404, 'model'],
  ];
  for (const [body, cls, status, param] of cases) {
    await assert.rejects(client.chat.completions.create(body), (e) => {
      assert.ok(e instanceof cls, `${JSON.stringify(body)} -> ${e}`);
      assert.equal(e.status, status);
      assert.equal(e.param, param);
      return true;
    });
  }
  await assert.rejects(client.chat.completions.create({ model, messages: msgs, max_tokens: 5000 }),
    (e) => e.code === 'context_length_exceeded');
  // 413: a body over the limit.
  const big = await fetch(`${srv.baseURL}/chat/completions`, {
    method: 'POST', headers: { 'content-type': 'application/json' }, body: 'x'.repeat(65 * 1024 * 1024),
  });
  assert.equal(big.status, 413);
  assert.equal((await big.json()).error.code, 'request_too_large');
  // 405 and 404.
  const get = await fetch(`${srv.baseURL}/chat/completions`);
  assert.equal(get.status, 405);
  const nope = await fetch(`${srv.baseURL}/nope`, { method: 'POST', body: '{}' });
  assert.equal(nope.status, 404);
  assert.equal((await nope.json()).error.message, 'Invalid URL (POST /v1/nope)');
  // The server is still healthy.
  assert.equal((await fetch(`http://127.0.0.1:${srv.port}/health`)).status, 200);
});

test('API key', async () => {
  const keyed = await startServer(strata, ckpt, ['--api-key', 'sekret']);
  try {
    const bad = new OpenAI({ baseURL: keyed.baseURL, apiKey: 'wrong', maxRetries: 0 });
    await assert.rejects(bad.models.list(), (e) => e instanceof OpenAI.AuthenticationError && e.code === 'invalid_api_key');
    const good = new OpenAI({ baseURL: keyed.baseURL, apiKey: 'sekret', maxRetries: 0 });
    const r = await good.chat.completions.create({ model, messages: [{ role: 'user', content: 'Hi' }], max_tokens: 1 });
    assert.equal(r.object, 'chat.completion');
    assert.equal((await fetch(`http://127.0.0.1:${keyed.port}/health`)).status, 200);
  } finally {
    await keyed.stop();
  }
});

test('503 overloaded when the queue is full', async () => {
  const one = await startServer(strata, ckpt, ['--parallel', '1', '--max-queue', '0']);
  try {
    const c = new OpenAI({ baseURL: one.baseURL, apiKey: 'x', maxRetries: 0 });
    const ac = new AbortController();
    const long = await c.chat.completions.create(
      { model, messages: [{ role: 'user', content: 'Hi' }], max_tokens: 100000, stream: true }, { signal: ac.signal });
    const it = long[Symbol.asyncIterator]();
    await it.next();
    await assert.rejects(c.chat.completions.create({ model, messages: [{ role: 'user', content: 'Hi' }], max_tokens: 1 }),
      (e) => e.status === 503 && e.code === 'overloaded');
    ac.abort();
    await it.next().catch(() => {});
    assert.equal(await waitMetric(one.port, 'strata_requests_running', 0), 0, 'the aborted stream frees its slot');
  } finally {
    await one.stop();
  }
});

test('two concurrent streams', async () => {
  const run = async (text) => {
    const s = await client.chat.completions.create({
      model, messages: [{ role: 'user', content: text }], stream: true, thinking: { type: 'disabled' },
      strata_test_output: `${text} ${text} ${text}<｜end▁of▁sentence｜>`,
    });
    let out = '';
    for await (const ch of s) out += ch.choices[0]?.delta?.content ?? '';
    return out;
  };
  const [a, b] = await Promise.all([run('alpha'), run('beta')]);
  assert.equal(a, 'alpha alpha alpha');
  assert.equal(b, 'beta beta beta');
});

test('legacy completions', async () => {
  const r = await client.completions.create({ model, prompt: 'Once upon a time', max_tokens: 4 });
  assert.equal(r.object, 'text_completion');
  assert.equal(typeof r.choices[0].text, 'string');
  assert.ok(r.usage.completion_tokens <= 4);
});
