// Chat, streaming, completions, logprobs, stop strings and the OpenAI-style errors.
import test from 'node:test';
import assert from 'node:assert/strict';
import { client, post, BASE, metrics } from './lib.mjs';

const openai = client();
const messages = [{ role: 'user', content: 'Once upon a time there was a' }];

test('models lists the served model', async () => {
  const list = await openai.models.list();
  assert.equal(list.data.length, 1);
  assert.equal(list.data[0].object, 'model');
});

test('health', async () => {
  const res = await fetch(`${BASE}/health`);
  assert.equal(res.status, 200);
  assert.deepEqual(await res.json(), { status: 'ok' });
});

test('chat completion: text, finish reason, usage', async () => {
  const r = await openai.chat.completions.create({ model: 'weft', messages, max_tokens: 12, temperature: 0 });
  assert.equal(r.object, 'chat.completion');
  assert.equal(r.choices.length, 1);
  assert.equal(r.choices[0].message.role, 'assistant');
  assert.equal(typeof r.choices[0].message.content, 'string');
  assert.ok(r.choices[0].message.content.length > 0);
  assert.ok(['stop', 'length'].includes(r.choices[0].finish_reason));
  assert.ok(r.usage.prompt_tokens > 5);
  assert.ok(r.usage.completion_tokens >= 1 && r.usage.completion_tokens <= 12);
  assert.equal(r.usage.total_tokens, r.usage.prompt_tokens + r.usage.completion_tokens);
  assert.equal(typeof r.usage.prompt_tokens_details.cached_tokens, 'number');
});

test('streaming gives the same text as one body (greedy), then usage', async () => {
  const body = { model: 'weft', messages, max_tokens: 20, temperature: 0 };
  const whole = await openai.chat.completions.create(body);
  const stream = await openai.chat.completions.create({ ...body, stream: true, stream_options: { include_usage: true } });
  let text = '';
  let finish = null;
  let usage = null;
  let chunks = 0;
  for await (const chunk of stream) {
    chunks++;
    if (chunk.usage) usage = chunk.usage;
    for (const c of chunk.choices) {
      text += c.delta.content ?? '';
      if (c.finish_reason) finish = c.finish_reason;
    }
  }
  assert.ok(chunks > 3, 'several chunks');
  assert.equal(text, whole.choices[0].message.content);
  assert.equal(finish, whole.choices[0].finish_reason);
  assert.equal(usage.completion_tokens, whole.usage.completion_tokens);
});

test('completions: text, logprobs, token-id prompts', async () => {
  const r = await openai.completions.create({ model: 'weft', prompt: 'The cat sat on the', max_tokens: 6, logprobs: 3, temperature: 0 });
  assert.equal(r.object, 'text_completion');
  const lp = r.choices[0].logprobs;
  assert.equal(lp.tokens.length, r.usage.completion_tokens);
  assert.equal(lp.tokens.join(''), r.choices[0].text);
  for (let i = 0; i < lp.tokens.length; i++) {
    assert.ok(lp.token_logprobs[i] <= 0);
    assert.equal(Object.keys(lp.top_logprobs[i]).length, 3);
    // Greedy: the chosen token is the most likely one.
    assert.equal(Math.max(...Object.values(lp.top_logprobs[i])), lp.token_logprobs[i]);
  }
  const ids = await openai.completions.create({ model: 'weft', prompt: [464, 3797, 3332], max_tokens: 3 });
  assert.equal(ids.usage.prompt_tokens, 3);
});

test('chat logprobs and top_logprobs', async () => {
  const r = await openai.chat.completions.create({ model: 'weft', messages, max_tokens: 5, temperature: 0, logprobs: true, top_logprobs: 2 });
  const content = r.choices[0].logprobs.content;
  assert.equal(content.length, r.usage.completion_tokens);
  for (const t of content) {
    assert.equal(t.top_logprobs.length, 2);
    assert.ok(t.logprob <= 0);
    assert.ok(Array.isArray(t.bytes) && t.bytes.length > 0);
  }
});

test('a stop string ends the reply and is not part of it', async () => {
  const free = await openai.completions.create({ model: 'weft', prompt: 'The cat sat on the', max_tokens: 12, temperature: 0 });
  const text = free.choices[0].text;
  const stop = text.slice(4, 7);
  const r = await openai.completions.create({ model: 'weft', prompt: 'The cat sat on the', max_tokens: 12, temperature: 0, stop: [stop] });
  assert.equal(r.choices[0].finish_reason, 'stop');
  assert.equal(r.choices[0].text, text.slice(0, text.indexOf(stop)));
});

test('seeded sampling repeats', async () => {
  const body = { model: 'weft', messages, max_tokens: 10, temperature: 1.0, top_p: 0.95, seed: 7 };
  const a = await openai.chat.completions.create(body);
  const b = await openai.chat.completions.create(body);
  assert.equal(a.choices[0].message.content, b.choices[0].message.content);
});

test('bad requests are 400 with an OpenAI error body, never a crash', async () => {
  const cases = [
    ['{"messages": [', 'not valid JSON'],
    ['[]', 'must be a JSON object'],
    [JSON.stringify({ messages: [{ role: 'wizard', content: 'x' }] }), 'role'],
    [JSON.stringify({ messages: [] }), 'must not be empty'],
    [JSON.stringify({ messages: 'hi' }), 'must be an array'],
    [JSON.stringify({ messages, max_tokens: '5' }), 'max_tokens'],
    [JSON.stringify({ messages, max_tokens: -1 }), 'max_tokens'],
    [JSON.stringify({ messages, temperature: 'hot' }), 'temperature'],
    [JSON.stringify({ messages, stop: [1, 2] }), 'stop'],
    [JSON.stringify({ messages, stop: ['a', 'b', 'c', 'd', 'e'] }), 'stop'],
    [JSON.stringify({ messages, n: 2 }), "'n'"],
    [JSON.stringify({ messages, tools: [{ type: 'function' }] }), 'tools'],
    [JSON.stringify({ messages: [{ role: 'user', content: 5 }] }), 'content'],
  ];
  for (const [body, needle] of cases) {
    const r = await post('/v1/chat/completions', body);
    assert.equal(r.status, 400, body);
    assert.equal(r.json.error.type, 'invalid_request_error');
    assert.ok(r.json.error.message.includes(needle), `${body}: ${r.json.error.message}`);
  }
  // Invalid UTF-8 inside a string.
  const bytes = Buffer.concat([Buffer.from('{"messages":[{"role":"user","content":"'), Buffer.from([0xff, 0xfe]), Buffer.from('"}]}')]);
  const u = await post('/v1/chat/completions', bytes);
  assert.equal(u.status, 400);
  assert.ok(u.json.error.message.includes('UTF-8'));
  // The client library raises its typed error for a 400.
  await assert.rejects(openai.chat.completions.create({ model: 'weft', messages: [{ role: 'wizard', content: 'x' }] }),
    (e) => e.status === 400);
  const nf = await post('/v1/nothing', '{}');
  assert.equal(nf.status, 404);
  assert.ok(nf.json.error.message.includes('no such endpoint'));
  // A prompt longer than the context.
  const long = await post('/v1/completions', JSON.stringify({ prompt: 'word '.repeat(5000), max_tokens: 1 }));
  assert.equal(long.status, 400);
  assert.ok(long.json.error.message.includes('context'));
  // Too large a body.
  const big = await post('/v1/completions', JSON.stringify({ prompt: 'x'.repeat(3 << 20) }));
  assert.equal(big.status, 413);
  const m = await metrics();
  assert.ok(m['weft_http_responses_total{endpoint="/v1/chat/completions",status="400"}'] >= cases.length);
});
