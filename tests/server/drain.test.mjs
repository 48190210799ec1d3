// SIGTERM drains: a stream in flight runs to its end, new requests are refused with 503, and the
// server exits (tests/server_test.cpp then checks exit status 0). WEFT_PID is the server's pid.
import test from 'node:test';
import assert from 'node:assert/strict';
import { client, post, BASE } from './lib.mjs';

const openai = client();

test('SIGTERM finishes the stream in flight and refuses new work', async () => {
  const pid = Number(process.env.WEFT_PID);
  assert.ok(pid > 0, 'WEFT_PID is set');
  const stream = await openai.chat.completions.create({
    model: 'weft', messages: [{ role: 'user', content: 'A long story, please' }], max_tokens: 120, ignore_eos: true,
    stream: true, stream_options: { include_usage: true },
  });
  let chunks = 0, usage = null, finish = null, refused = null;
  for await (const chunk of stream) {
    if (++chunks === 3) {
      process.kill(pid, 'SIGTERM');
      await new Promise((r) => setTimeout(r, 300));
      const r = await post('/v1/completions', JSON.stringify({ prompt: 'x', max_tokens: 2 })).catch(() => ({ status: 'refused' }));
      refused = r.status;
      const h = await fetch(`${BASE}/health`).then((x) => x.status).catch(() => 'refused');
      assert.ok(h === 503 || h === 'refused', `health while draining: ${h}`);
    }
    if (chunk.usage) usage = chunk.usage;
    if (chunk.choices[0]?.finish_reason) finish = chunk.choices[0].finish_reason;
  }
  assert.ok(refused === 503 || refused === 'refused', `a new request while draining: ${refused}`);
  assert.equal(finish, 'length');
  assert.equal(usage.completion_tokens, 120);
});
