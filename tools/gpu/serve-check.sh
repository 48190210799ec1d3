#!/usr/bin/env bash
# `weft serve` on the CPU and on the GPU with the same concurrent requests (tools/gpu/serve_check.py:
# six chat completions at once with --parallel 4, so decode steps batch several sequences, and one
# streamed), then the replies compared text for text (docs/results.md §10). Needs a weft built with
# cpp-httplib (the `serve` command): `BUILD=build-gpu bash tools/gpu/serve-check.sh`. Logs in $OUT.
set -u
cd "$(dirname "$0")/../.."
W=${BUILD:-build-gpu}/weft
OUT=${OUT:-gpu-out}
mkdir -p "$OUT"
"$W" serve --help > /dev/null 2>&1 || { echo "no serve command in $W (built without cpp-httplib)"; exit 1; }
for dev in cpu cuda; do
  "$W" serve --device $dev --port 18180 --parallel 4 > "$OUT/serve_$dev.log" 2>&1 &
  pid=$!
  timeout 120 python3 tools/gpu/serve_check.py http://127.0.0.1:18180 "$OUT/replies_$dev.json" > "$OUT/client_$dev.log" 2>&1
  echo "serve --device $dev: client rc=$?"
  kill $pid; wait $pid
done
python3 - "$OUT" <<'PY'
import json, sys
a = json.load(open(sys.argv[1] + "/replies_cpu.json")); b = json.load(open(sys.argv[1] + "/replies_cuda.json"))
keys = [k for k in a if k != "metrics"]
same = sum(a[k]["content"] == b[k]["content"] for k in keys)
for k in keys:
    print(k, "same" if a[k]["content"] == b[k]["content"] else "DIFFERENT", repr(b[k]["content"][:60]))
print(f"{same} of {len(keys)} replies identical on cpu and cuda")
sys.exit(0 if same == len(keys) else 1)
PY
