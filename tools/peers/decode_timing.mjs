// llama.cpp's decode speed at given context depths, per KV-cache type, from a GGUF file:
//   node tools/peers/decode_timing.mjs MODEL.gguf [--depths 0,4096,32768] [--kv f16,q8_0]
//        [--gen 16] [--repeats 3] [--threads 2]
// One context per KV type (flash attention on: llama.cpp needs it for a quantized V cache, and
// uses it for f16 too, so both arms run the same attention code), filled with the same
// pseudo-random token ids to each depth in turn; at each depth the KV arms take turns, `repeats`
// rounds of `gen` single-token decode calls each (llama_decode of one token, what generation
// does), so the arms see the same machine load. Prints one JSON object per (kv, depth) on stdout:
// {"kv", "depth", "gen", "tok_s" (median over rounds), "rounds": [tok/s...], "fill_tok_s"} and
// progress on stderr. Depths grow by gen * repeats decoded tokens per depth (not rolled back:
// the recurrent state of a hybrid model cannot be), negligible against the depths.
import {getLlama, LlamaLogLevel} from "node-llama-cpp";

const args = process.argv.slice(2);
const modelPath = args[0];
const opt = (name, def) => {
  const i = args.indexOf(name);
  return i >= 0 && i + 1 < args.length ? args[i + 1] : def;
};
const depths = opt("--depths", "0,4096,32768").split(",").map(Number);
const kvTypes = opt("--kv", "f16,q8_0").split(",");
const gen = Number(opt("--gen", "16"));
const repeats = Number(opt("--repeats", "3"));
const threads = Number(opt("--threads", "2"));
const ggmlType = {f16: "F16", q8_0: "Q8_0", q4_0: "Q4_0", f32: "F32"};
if (!modelPath || depths.some((d) => !(d >= 0)) || kvTypes.some((k) => !ggmlType[k]) || !(gen > 0) || !(repeats > 0) ||
    !(threads > 0)) {
  console.error("usage: node decode_timing.mjs MODEL.gguf [--depths 0,4096,32768] [--kv f16,q8_0] [--gen 16] [--repeats 3] [--threads 2]");
  process.exit(2);
}
for (let i = 1; i < depths.length; ++i)
  if (depths[i] <= depths[i - 1]) {
    console.error("--depths must be ascending");
    process.exit(2);
  }

const llama = await getLlama({gpu: false, logLevel: LlamaLogLevel.error, maxThreads: threads});
const model = await llama.loadModel({modelPath, gpuLayers: 0});
const maxDepth = depths[depths.length - 1];
const contextSize = maxDepth + depths.length * gen * repeats + 64;

// The same pseudo-random ids for every arm (an LCG), in [1, 1000): valid in any real vocabulary;
// ids do not change the work of a decode step.
let state = 12345n;
const fillIds = [];
for (let i = 0; i < maxDepth + depths.length * gen * repeats + 8; ++i) {
  state = (state * 6364136223846793005n + 1442695040888963407n) & ((1n << 64n) - 1n);
  fillIds.push(Number((state >> 33n) % 999n) + 1);
}

const arms = [];
for (const kv of kvTypes) {
  const context = await model.createContext({
    contextSize, batchSize: 512, threads, flashAttention: true,
    experimentalKvCacheKeyType: ggmlType[kv], experimentalKvCacheValueType: ggmlType[kv],
  });
  arms.push({kv, context, sequence: context.getSequence(), pos: 0});
}

const median = (v) => {
  const s = [...v].sort((a, b) => a - b);
  return s.length % 2 ? s[(s.length - 1) / 2] : (s[s.length / 2 - 1] + s[s.length / 2]) / 2;
};

for (const depth of depths) {
  const fillRate = {};
  for (const arm of arms) {  // fill every arm to this depth
    if (arm.pos < depth) {
      const t0 = performance.now();
      const n = depth - arm.pos;
      await arm.sequence.evaluateWithoutGeneratingNewTokens(fillIds.slice(arm.pos, depth));
      arm.pos = depth;
      fillRate[arm.kv] = n / ((performance.now() - t0) / 1000);
      console.error(`[${arm.kv}] filled to ${depth} at ${fillRate[arm.kv].toFixed(1)} tok/s`);
    }
  }
  const rounds = Object.fromEntries(arms.map((a) => [a.kv, []]));
  for (let r = 0; r < repeats; ++r) {
    for (const arm of arms) {  // arms take turns within each round
      const t0 = performance.now();
      for (let i = 0; i < gen; ++i) {
        await arm.sequence.evaluateWithoutGeneratingNewTokens([fillIds[arm.pos]]);
        arm.pos += 1;
      }
      rounds[arm.kv].push(gen / ((performance.now() - t0) / 1000));
    }
  }
  for (const arm of arms) {
    const rec = {kv: arm.kv, depth, gen, tok_s: median(rounds[arm.kv]), rounds: rounds[arm.kv].map((x) => +x.toFixed(3))};
    if (fillRate[arm.kv] !== undefined) rec.fill_tok_s = +fillRate[arm.kv].toFixed(2);
    console.log(JSON.stringify(rec));
    console.error(`[${arm.kv}] depth ${depth}: ${rec.tok_s.toFixed(2)} tok/s (rounds ${rec.rounds.join(", ")})`);
  }
}
for (const arm of arms) await arm.context.dispose();
await model.dispose();
