// A client that goes away mid-stream frees its slot at once (/metrics shows it).
import test from 'node:test';
import assert from 'node:assert/strict';
import { client, metrics, sleep } from './lib.mjs';

const openai = client();

test('a client that disconnects mid-stream frees its slot', async () => {
  const before = await metrics();
  const controller = new AbortController();
  const stream = await openai.chat.completions.create(
    { model: 'weft', messages: [{ role: 'user', content: 'Tell me a very long story' }], max_tokens: 3000, ignore_eos: true, stream: true },
    { signal: controller.signal });
  let chunks = 0;
  let active = -1;
  try {
    for await (const _ of stream) {
      if (++chunks === 5) {
        active = (await metrics()).weft_active_sequences;
        controller.abort();  // the client library ends the iteration (or throws its abort error)
      }
    }
  } catch (e) {
    assert.equal(e.name, 'APIUserAbortError');
  }
  assert.equal(active, 1, 'the request was running');
  assert.ok(chunks >= 5 && chunks < 3000);
  const t0 = Date.now();
  let m;
  do {
    await sleep(50);
    m = await metrics();
  } while ((m.weft_active_sequences !== 0) && Date.now() - t0 < 5000);
  assert.equal(m.weft_active_sequences, 0, 'slot freed');
  assert.equal(m.weft_requests_cancelled_total, before.weft_requests_cancelled_total + 1);
  assert.ok(m.weft_completion_tokens_total - before.weft_completion_tokens_total < 3000, 'stopped early');
});
