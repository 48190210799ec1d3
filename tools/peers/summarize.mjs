// The side-by-side table of side_by_side.sh: node summarize.mjs OUT_DIR MODEL.gguf...
// Reads OUT_DIR/weft_NAME.json (weft bench --json) and OUT_DIR/llama_NAME.jsonl
// (decode_timing.mjs) and prints Markdown: per model, depth and KV type, both engines' decode
// tok/s, weft / llama.cpp, and each one's share of the byte roofline, where the roofline is
// bandwidth / bytes per token with weft's byte model of this file and KV type (the bytes a decode
// step must read: active weights, KV at that depth, GDN state) and weft's measured bandwidth.
import fs from "node:fs";
import path from "node:path";

const [out, ...models] = process.argv.slice(2);
if (!out || models.length === 0) {
  console.error("usage: node summarize.mjs OUT_DIR MODEL.gguf...");
  process.exit(2);
}
const rows = [];
for (const m of models) {
  const name = path.basename(m, ".gguf");
  const weft = JSON.parse(fs.readFileSync(path.join(out, `weft_${name}.json`), "utf8"));
  const llama = fs.readFileSync(path.join(out, `llama_${name}.jsonl`), "utf8").trim().split("\n").map((l) => JSON.parse(l));
  const bw = weft.bandwidth.roofline_gb_s * 1e9;
  for (const d of weft.depths) {
    for (const [kv, a] of Object.entries(d.arms)) {
      const l = llama.find((r) => r.depth === d.ctx && r.kv === kv);
      const roof = bw / a.bytes_per_token;
      rows.push({name, depth: d.ctx, kv, weft: a.tok_s, llama: l ? l.tok_s : NaN, roof, mib: a.bytes_per_token / 2 ** 20});
    }
  }
}
const f = (x, n = 2) => (Number.isFinite(x) ? x.toFixed(n) : "-");
console.log("| model | depth | KV | MiB/token (byte model) | roofline tok/s | weft tok/s | llama.cpp tok/s | weft / llama.cpp | weft % roofline | llama.cpp % roofline |");
console.log("|---|---:|---|---:|---:|---:|---:|---:|---:|---:|");
for (const r of rows)
  console.log(`| ${r.name} | ${r.depth} | ${r.kv} | ${f(r.mib, 1)} | ${f(r.roof, 1)} | ${f(r.weft)} | ${f(r.llama)} | ${f(r.weft / r.llama)} | ${f(100 * r.weft / r.roof, 1)}% | ${f(100 * r.llama / r.roof, 1)}% |`);
