// Tool calls, run against `weft serve --test-reply ... --api-key ...` (tests/server_test.cpp):
// the replies are scripted (so a tiny model "calls" tools), the parse path is the real one.
// Scripted replies, in order: a JSON-form tool call; a text answer; reasoning + an XML-form call.
import test from 'node:test';
import assert from 'node:assert/strict';
import { client, post, BASE } from './lib.mjs';

const openai = client();
const tools = [{
  type: 'function',
  function: {
    name: 'get_weather', description: 'Weather for a city',
    parameters: { type: 'object', properties: { city: { type: 'string' }, days: { type: 'integer' } }, required: ['city'] },
  },
}];

test('401 without the API key, 200 with it; /health stays open', async () => {
  const bad = client({ apiKey: 'wrong' });
  await assert.rejects(bad.models.list(), (e) => e.status === 401);
  const r = await fetch(`${BASE}/v1/models`);
  assert.equal(r.status, 401);
  assert.equal((await r.json()).error.type, 'invalid_request_error');
  assert.equal((await fetch(`${BASE}/health`)).status, 200);
  assert.equal((await openai.models.list()).data.length, 1);
});

test('tool call round trip', async () => {
  const messages = [{ role: 'user', content: 'What is the weather in Paris?' }];
  const r1 = await openai.chat.completions.create({ model: 'weft', messages, tools });
  const m1 = r1.choices[0].message;
  assert.equal(r1.choices[0].finish_reason, 'tool_calls');
  assert.equal(m1.content, null);
  assert.equal(m1.tool_calls.length, 1);
  assert.equal(m1.tool_calls[0].type, 'function');
  assert.equal(m1.tool_calls[0].function.name, 'get_weather');
  assert.deepEqual(JSON.parse(m1.tool_calls[0].function.arguments), { city: 'Paris' });
  // The result goes back; the template renders the call and the result; the answer is text.
  messages.push(m1);
  messages.push({ role: 'tool', tool_call_id: m1.tool_calls[0].id, content: '{"sky": "sunny", "c": 21}' });
  const r2 = await openai.chat.completions.create({ model: 'weft', messages, tools });
  assert.equal(r2.choices[0].finish_reason, 'stop');
  assert.equal(r2.choices[0].message.content, 'It is sunny in Paris.');
  assert.equal(r2.choices[0].message.tool_calls, undefined);
  assert.ok(r2.usage.prompt_tokens > r1.usage.prompt_tokens);
});

test('streamed: reasoning_content, then an XML-form tool call with typed arguments', async () => {
  const stream = await openai.chat.completions.create({
    model: 'weft', messages: [{ role: 'user', content: 'Weather in Berlin for 3 days?' }], tools, stream: true,
  });
  let reasoning = '', content = '', finish = null;
  const calls = [];
  for await (const chunk of stream) {
    const d = chunk.choices[0]?.delta ?? {};
    reasoning += d.reasoning_content ?? '';
    content += d.content ?? '';
    for (const c of d.tool_calls ?? []) calls.push(c);
    if (chunk.choices[0]?.finish_reason) finish = chunk.choices[0].finish_reason;
    assert.ok(!(d.content ?? '').includes('<'), 'no markup leaks into content');
  }
  assert.equal(reasoning.trim(), 'The user wants the weather.');
  assert.equal(content, '');
  assert.equal(finish, 'tool_calls');
  assert.equal(calls.length, 1);
  assert.equal(calls[0].function.name, 'get_weather');
  assert.deepEqual(JSON.parse(calls[0].function.arguments), { city: 'Berlin', days: 3 });
});

test('tool_choice none: the block stays text', async () => {
  // The next scripted reply is the JSON-form call again (the list cycles).
  const r = await post('/v1/chat/completions', JSON.stringify({
    messages: [{ role: 'user', content: 'x' }], tools, tool_choice: 'none',
  }));
  assert.equal(r.status, 200);
  assert.equal(r.json.choices[0].message.tool_calls, undefined);
  assert.ok(r.json.choices[0].message.content.includes('<tool_call>'));
});
