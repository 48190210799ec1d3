#!/usr/bin/env bash
# weft and llama.cpp decode speed side by side on the same GGUF files, same depths, same KV types,
# same thread count, one run:
#   tools/peers/side_by_side.sh OUT_DIR MODEL.gguf [MODEL.gguf...]
# Env: DEPTHS (default 16,4096,32768), KV (f16,q8_0), THREADS (2), REPEATS (3), GEN (16),
#      WEFT (build/weft).
# Per model: `weft bench --json` (its KV arms interleaved, its in-process bandwidth probe and
# byte model) then tools/peers/decode_timing.mjs (llama.cpp through node-llama-cpp 3.21.1, its
# KV arms interleaved), the load average logged before and after each; then summarize.mjs prints
# one Markdown table: tok/s of both, the ratio, and each engine's share of the byte roofline
# (weft's byte model for the file and KV type over weft's measured bandwidth, the same bytes for
# both engines). Depth 0 is not a weft bench depth: use 16 for both.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
out=${1:?usage: side_by_side.sh OUT_DIR MODEL.gguf [MODEL.gguf...]}
shift
[ $# -ge 1 ] || { echo "usage: side_by_side.sh OUT_DIR MODEL.gguf [MODEL.gguf...]" >&2; exit 2; }
DEPTHS=${DEPTHS:-16,4096,32768}
KV=${KV:-f16,q8_0}
THREADS=${THREADS:-2}
REPEATS=${REPEATS:-3}
GEN=${GEN:-16}
WEFT=${WEFT:-$root/build/weft}
[ -x "$WEFT" ] || { echo "no weft binary at $WEFT (set WEFT=)" >&2; exit 2; }
[ -f "$here/node_modules/node-llama-cpp/package.json" ] || { echo "install the peer: cd tools/peers && npm ci" >&2; exit 2; }
mkdir -p "$out"
for m in "$@"; do
  [ -f "$m" ] || { echo "no such model: $m" >&2; exit 2; }
  name=$(basename "$m" .gguf)
  echo "== $name: weft (load $(cut -d' ' -f1-3 /proc/loadavg))" >&2
  "$WEFT" bench -m "$m" --ctx "$DEPTHS" --arms "$KV" --threads "$THREADS" --repeats "$REPEATS" --gen "$GEN" --json \
    > "$out/weft_$name.json"
  echo "== $name: llama.cpp (load $(cut -d' ' -f1-3 /proc/loadavg))" >&2
  (cd "$here" && node decode_timing.mjs "$m" --depths "$DEPTHS" --kv "$KV" --threads "$THREADS" --repeats "$REPEATS" \
    --gen "$GEN") > "$out/llama_$name.jsonl"
  echo "== $name: done (load $(cut -d' ' -f1-3 /proc/loadavg))" >&2
done
node "$here/summarize.mjs" "$out" "$@" | tee "$out/side_by_side.md"
