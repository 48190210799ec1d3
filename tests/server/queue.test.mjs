// A full queue answers 503 with Retry-After (run against --parallel 1 --queue 1).
import test from 'node:test';
import assert from 'node:assert/strict';
import { post, metrics } from './lib.mjs';

test('503 + Retry-After when the queue is full; the others complete', async () => {
  const body = JSON.stringify({ prompt: 'Once upon a time', max_tokens: 60, ignore_eos: true });
  const results = await Promise.all(Array.from({ length: 6 }, () => post('/v1/completions', body)));
  const full = results.filter((r) => r.status === 503);
  const ok = results.filter((r) => r.status === 200);
  assert.ok(full.length >= 1, 'some were refused');
  assert.ok(ok.length >= 2, 'the running one and the queued one completed');
  assert.equal(full.length + ok.length, 6);
  for (const r of full) {
    assert.equal(r.headers.get('retry-after'), '1');
    assert.equal(r.json.error.type, 'server_error');
  }
  for (const r of ok) assert.equal(r.json.usage.completion_tokens, 60);
  assert.ok((await metrics()).weft_requests_rejected_total >= full.length);
});
