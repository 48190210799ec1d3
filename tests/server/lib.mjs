// Shared by the server tests: the server under test comes from the environment
// (tests/server_test.cpp starts `weft serve` and sets WEFT_URL, WEFT_API_KEY).
import OpenAI from 'openai';

export const BASE = process.env.WEFT_URL;
if (!BASE) throw new Error('WEFT_URL is not set: run these through tests/server_test.cpp');
export const KEY = process.env.WEFT_API_KEY || 'none';

export function client(options = {}) {
  return new OpenAI({ baseURL: `${BASE}/v1`, apiKey: KEY, maxRetries: 0, timeout: 120000, ...options });
}

// A raw POST (bytes as given), for what the client library would not send.
export async function post(path, body, headers = {}) {
  const res = await fetch(`${BASE}${path}`, {
    method: 'POST',
    headers: { 'Content-Type': 'application/json', Authorization: `Bearer ${KEY}`, ...headers },
    body,
  });
  const text = await res.text();
  let json = null;
  try { json = JSON.parse(text); } catch { /* not JSON */ }
  return { status: res.status, headers: res.headers, text, json };
}

// /metrics as {name or name{labels}: value}.
export async function metrics() {
  const text = await (await fetch(`${BASE}/metrics`)).text();
  const out = {};
  for (const line of text.split('\n')) {
    if (!line || line.startsWith('#')) continue;
    const i = line.lastIndexOf(' ');
    out[line.slice(0, i)] = Number(line.slice(i + 1));
  }
  return out;
}

export const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

// A system prompt longer than two prefill chunks (64 tokens), so prefix reuse has work to do.
export const LONG_SYSTEM = Array.from({ length: 24 }, (_, i) => `Rule ${i}: the quick brown fox jumps over the lazy dog.`).join(' ');
