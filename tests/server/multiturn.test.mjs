// Multi-turn prefix reuse: turn N+1 reports cached_tokens >= the reusable prefix of turn N and
// gives exactly the tokens (and logprobs: the same logits bits) of a cold run (strict tier).
import test from 'node:test';
import assert from 'node:assert/strict';
import { client, LONG_SYSTEM } from './lib.mjs';

const openai = client();

test('a follow-up turn reuses the conversation and equals a cold run', async () => {
  const messages = [{ role: 'system', content: LONG_SYSTEM }, { role: 'user', content: 'Hello, who are you?' }];
  const opts = { model: 'weft', max_tokens: 24, temperature: 0, logprobs: true, top_logprobs: 3 };
  let prevPrompt = 0;
  for (let turn = 0; turn < 3; turn++) {
    const warm = await openai.chat.completions.create({ ...opts, messages });
    const cold = await openai.chat.completions.create({ ...opts, messages, cache_prompt: false });
    assert.equal(cold.usage.prompt_tokens_details.cached_tokens, 0);
    assert.equal(warm.choices[0].message.content, cold.choices[0].message.content, `turn ${turn}`);
    assert.deepEqual(warm.choices[0].logprobs, cold.choices[0].logprobs, `turn ${turn}: logprobs`);
    if (turn > 0) {
      // Reusable: the previous prompt up to its last multiple of 64 (prefill checkpoints).
      const reusable = Math.floor(prevPrompt / 64) * 64;
      assert.ok(reusable >= 64);
      assert.ok(warm.usage.prompt_tokens_details.cached_tokens >= reusable,
        `turn ${turn}: cached ${warm.usage.prompt_tokens_details.cached_tokens} < ${reusable}`);
    }
    prevPrompt = warm.usage.prompt_tokens;
    messages.push({ role: 'assistant', content: warm.choices[0].message.content });
    messages.push({ role: 'user', content: `Thanks. Question ${turn + 2}: and then?` });
  }
});
