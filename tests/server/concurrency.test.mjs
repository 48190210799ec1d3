// 8 clients at once: each gets exactly what it gets alone (greedy), none lost or mixed up.
import test from 'node:test';
import assert from 'node:assert/strict';
import { client, metrics } from './lib.mjs';

const openai = client();
const prompts = Array.from({ length: 8 }, (_, i) => `Story number ${i}: once upon a time, ${'a '.repeat(i * 9)}little`);
const ask = (p) => openai.chat.completions.create({ model: 'weft', messages: [{ role: 'user', content: p }], max_tokens: 16 + prompts.indexOf(p), temperature: 0, cache_prompt: false });

test('8 concurrent clients get their own replies', async () => {
  const alone = [];
  for (const p of prompts) alone.push((await ask(p)).choices[0].message.content);
  const together = await Promise.all(prompts.map((p) => ask(p)));
  together.forEach((r, i) => assert.equal(r.choices[0].message.content, alone[i], `client ${i}`));
  const m = await metrics();
  assert.equal(m.weft_active_sequences, 0);
  assert.equal(m.weft_queue_depth, 0);
});
