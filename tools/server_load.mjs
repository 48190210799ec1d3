#!/usr/bin/env node
// Bounded loopback load test of `weft serve` with the official openai client (installed by
// `npm ci` in tests/server). It starts the servers itself, one after the other, on free ports:
//
//   1. --parallel 1, then --parallel P: the same load (C concurrent clients, R requests in all,
//      greedy, prompts drawn from a fixed set) against each. Every reply is checked against a
//      single-client reference run of its prompt: no lost, failed or mixed-up response. Reports
//      aggregate completion tok/s of each, and the server's RSS before and after the load.
//   2. time to first token of a follow-up turn (prefix reused) vs the same prompt cold
//      (cache_prompt: false), median of a few runs, on the --parallel P server.
//
//   node tools/server_load.mjs [--weft build/weft] [--model DIR] [--clients 32] [--requests 256]
//                              [--parallel 8] [--max-tokens 24] [--threads 0]
// Exits non-zero on any failed check; stops by itself.
import { spawn } from 'node:child_process';
import { createRequire } from 'node:module';
import { readFileSync } from 'node:fs';

const require = createRequire(new URL('../tests/server/package.json', import.meta.url));
const OpenAI = require('openai').default ?? require('openai');

const args = Object.fromEntries(process.argv.slice(2).reduce((acc, a, i, all) => {
  if (a.startsWith('--')) acc.push([a.slice(2), all[i + 1]]);
  return acc;
}, []));
const weft = args.weft ?? 'build/weft';
const clients = Number(args.clients ?? 32);
const total = Number(args.requests ?? 256);
const parallel = Number(args.parallel ?? 8);
const maxTokens = Number(args['max-tokens'] ?? 24);
const threads = String(args.threads ?? 0);

function startServer(extra) {
  return new Promise((resolve, reject) => {
    const cmd = [weft, 'serve', '--port', '0', '--threads', threads, '--queue', String(total + clients), ...extra];
    if (args.model) cmd.push('-m', args.model);
    const proc = spawn(cmd[0], cmd.slice(1), { stdio: ['ignore', 'ignore', 'pipe'] });
    let log = '';
    proc.stderr.on('data', (d) => {
      log += d;
      const m = log.match(/serving .* on (http:\/\/127\.0\.0\.1:\d+)/);
      if (m && !proc.url) {
        proc.url = m[1];
        resolve(proc);
      }
    });
    proc.on('exit', (code) => { if (!proc.url) reject(new Error(`weft serve exited ${code}: ${log}`)); });
  });
}

async function stopServer(proc) {
  const done = new Promise((r) => proc.on('exit', r));
  proc.kill('SIGTERM');
  const code = await done;
  if (code !== 0) throw new Error(`weft serve exited ${code} on SIGTERM`);
}

const rssMiB = (pid) => Number(readFileSync(`/proc/${pid}/status`, 'utf8').match(/VmRSS:\s+(\d+)/)[1]) / 1024;
const prompts = Array.from({ length: 24 }, (_, i) => `Tale ${i}: ${'once upon a time '.repeat(1 + (i % 7))}there lived a`);
const failures = [];

async function load(proc, reference) {
  const openai = new OpenAI({ baseURL: `${proc.url}/v1`, apiKey: 'none', maxRetries: 0, timeout: 600000 });
  const ask = (p) => openai.chat.completions.create({
    model: 'weft', messages: [{ role: 'user', content: prompts[p] }], max_tokens: maxTokens, temperature: 0, cache_prompt: false,
  });
  if (reference.length === 0) {
    for (let p = 0; p < prompts.length; p++) reference.push((await ask(p)).choices[0].message.content);
  }
  // Warm-up: every slot used once, so RSS is measured after the pages a slot needs exist.
  await Promise.all(Array.from({ length: Math.max(parallel, 2) }, (_, i) => ask(i % prompts.length)));
  const rssBefore = rssMiB(proc.pid);
  let next = 0, tokens = 0, done = 0;
  const t0 = performance.now();
  await Promise.all(Array.from({ length: clients }, async () => {
    while (next < total) {
      const i = next++;
      const p = i % prompts.length;
      try {
        const r = await ask(p);
        tokens += r.usage.completion_tokens;
        if (r.choices[0].message.content !== reference[p]) failures.push(`request ${i}: reply differs from prompt ${p}'s reference`);
        done++;
      } catch (e) {
        failures.push(`request ${i}: ${e.status ?? ''} ${e.message}`);
      }
    }
  }));
  const secs = (performance.now() - t0) / 1000;
  return { done, tokens, secs, tokS: tokens / secs, rssBefore, rssAfter: rssMiB(proc.pid) };
}

async function ttft(proc) {
  const openai = new OpenAI({ baseURL: `${proc.url}/v1`, apiKey: 'none', maxRetries: 0, timeout: 600000 });
  const system = Array.from({ length: 90 }, (_, i) => `Rule ${i}: answer briefly and stay on topic.`).join(' ');
  const first = [{ role: 'system', content: system }, { role: 'user', content: 'Tell me about foxes.' }];
  const r1 = await openai.chat.completions.create({ model: 'weft', messages: first, max_tokens: 16, temperature: 0 });
  const follow = [...first, { role: 'assistant', content: r1.choices[0].message.content }, { role: 'user', content: 'And wolves?' }];
  const time = async (cache) => {
    const t0 = performance.now();
    const stream = await openai.chat.completions.create({ model: 'weft', messages: follow, max_tokens: 4, temperature: 0, stream: true, cache_prompt: cache, stream_options: { include_usage: true } });
    let t = null, usage = null;
    for await (const c of stream) {
      if (t === null && c.choices[0]?.delta?.content) t = performance.now() - t0;
      if (c.usage) usage = c.usage;
    }
    return { ms: t ?? performance.now() - t0, usage };
  };
  const warm = [], cold = [];
  let usage;
  for (let k = 0; k < 5; k++) {
    cold.push((await time(false)).ms);
    const w = await time(true);
    warm.push(w.ms);
    usage = w.usage;
  }
  const median = (a) => a.sort((x, y) => x - y)[Math.floor(a.length / 2)];
  return { prompt: usage.prompt_tokens, cached: usage.prompt_tokens_details.cached_tokens, coldMs: median(cold), warmMs: median(warm) };
}

const reference = [];
const s1 = await startServer(['--parallel', '1']);
const one = await load(s1, reference);
await stopServer(s1);
const sp = await startServer(['--parallel', String(parallel)]);
const many = await load(sp, reference);
const t = await ttft(sp);
await stopServer(sp);

const row = (name, r) => console.log(`${name.padEnd(14)} ${String(r.done).padStart(5)} ok  ${String(r.tokens).padStart(6)} tokens  ${r.secs.toFixed(1).padStart(6)} s  ${r.tokS.toFixed(1).padStart(7)} tok/s  RSS ${r.rssBefore.toFixed(0)} -> ${r.rssAfter.toFixed(0)} MiB`);
console.log(`weft serve load: ${clients} clients, ${total} requests per server, max_tokens ${maxTokens}, greedy`);
row('--parallel 1', one);
row(`--parallel ${parallel}`, many);
console.log(`aggregate tok/s ratio (--parallel ${parallel} / --parallel 1): ${(many.tokS / one.tokS).toFixed(2)}`);
console.log(`follow-up turn, ${t.prompt} prompt tokens (${t.cached} reused): time to first token ${t.warmMs.toFixed(0)} ms vs cold ${t.coldMs.toFixed(0)} ms (${(t.coldMs / t.warmMs).toFixed(1)}x)`);
for (const r of [one, many]) {
  if (r.done !== total) failures.push(`${total - r.done} requests lost`);
  if (r.rssAfter > r.rssBefore * 1.25 + 64) failures.push(`RSS grew ${r.rssBefore.toFixed(0)} -> ${r.rssAfter.toFixed(0)} MiB`);
}
if (t.cached === 0) failures.push('the follow-up turn reused nothing');
if (failures.length) {
  console.error(`FAILED:\n  ${failures.slice(0, 20).join('\n  ')}`);
  process.exit(1);
}
console.log('no crash, no lost or mixed-up replies');
