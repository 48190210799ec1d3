// llama.cpp's next-token distribution at every position of a token stream, teacher-forced, from
// a GGUF file: node tools/peers/logits.mjs MODEL.gguf IDS.txt OUT.f32
// Writes T x V little-endian f32 log-probabilities (log softmax of llama.cpp's logits at
// temperature 1, no truncation; -1e30 where llama.cpp reports no probability) and prints
// "T V" on stdout. IDS.txt holds token ids separated by whitespace or commas.
import fs from "node:fs";
import {getLlama, LlamaLogLevel} from "node-llama-cpp";

const [modelPath, idsPath, outPath] = process.argv.slice(2);
if (!modelPath || !idsPath || !outPath) {
  console.error("usage: node logits.mjs MODEL.gguf IDS.txt OUT.f32");
  process.exit(2);
}
const ids = fs.readFileSync(idsPath, "utf8").split(/[\s,]+/).filter((s) => s.length > 0).map(Number);

const llama = await getLlama({gpu: false, logLevel: LlamaLogLevel.error});
const model = await llama.loadModel({modelPath, gpuLayers: 0});
const context = await model.createContext({contextSize: Math.max(256, ids.length + 16), batchSize: 512, threads: 2});
const sequence = context.getSequence();
const sampling = {temperature: 1, topK: 0, topP: 1, minP: 0};
const input = ids.map((t) => [t, {generateNext: {probabilities: true, options: sampling}}]);
const results = await sequence.controlledEvaluate(input);
// The vocabulary size: the probability map of a position lists every token.
let V = 0;
for (const r of results) if (r?.next?.probabilities) V = Math.max(V, r.next.probabilities.size);
const out = new Float32Array(ids.length * V).fill(-1e30);
for (let t = 0; t < ids.length; ++t) {
  const probs = results[t]?.next?.probabilities;
  if (!probs) throw new Error(`no probabilities at position ${t}`);
  for (const [token, p] of probs) if (token < V && p > 0) out[t * V + token] = Math.log(p);
}
fs.writeFileSync(outPath, Buffer.from(out.buffer));
console.log(`${ids.length} ${V}`);
await context.dispose();
await model.dispose();
