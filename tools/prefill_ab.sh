#!/usr/bin/env bash
# Side-by-side prefill and decode speed of two weft binaries on one model, alternated in one run
# (before, after / after, before, ...), so machine load falls on both alike. Each run is one
# `weft generate --json` from a token-id file: prefill_tok_s of the prompt and decode_tok_s of
# the N generated tokens (greedy). Also checks that both binaries generate the same tokens.
#
#   tools/prefill_ab.sh BEFORE AFTER MODEL IDS_FILE THREADS [ROUNDS=3] [N=1]
#
# e.g. 16 threads, 4096-token prompt, on the GPU host's CPU (see docs/results.md §8.3):
#   tools/prefill_ab.sh build-main/weft build/weft m.gguf p4k.txt 16 3
# Prints one line per run, then per binary the median and the range, and after / before.
set -euo pipefail
if [[ $# -lt 5 ]]; then
  sed -n '2,12p' "$0" >&2
  exit 2
fi
before=$1 after=$2 model=$3 ids=$4 threads=$5 rounds=${6:-3} n=${7:-1}
for f in "$before" "$after"; do [[ -x $f ]] || { echo "prefill_ab: not an executable: $f" >&2; exit 2; }; done
[[ -r $ids ]] || { echo "prefill_ab: cannot read $ids" >&2; exit 2; }
log=$(mktemp)
trap 'rm -f "$log"' EXIT
for ((r = 1; r <= rounds; r++)); do
  if ((r % 2)); then order=("before" "after"); else order=("after" "before"); fi
  for which in "${order[@]}"; do
    bin=$before
    [[ $which == after ]] && bin=$after
    out=$("$bin" generate -m "$model" --ids-file "$ids" -n "$n" --temp 0 --json --threads "$threads" 2>/dev/null | head -1)
    load=$(cut -d' ' -f1 /proc/loadavg)
    python3 -c '
import hashlib, json, sys
d = json.loads(sys.argv[1])
print(sys.argv[2], "prefill_tok_s=%.2f" % d["prefill_tok_s"], "decode_tok_s=%.3f" % (d.get("decode_tok_s") or 0),
      "tokens=" + hashlib.md5(str(d["tokens"]).encode()).hexdigest()[:8], "load=" + sys.argv[3])' "$out" "$which" "$load" |
      tee -a "$log"
  done
done
python3 - "$log" <<'EOF'
import statistics, sys
runs = {"before": [], "after": []}
tokens = set()
for line in open(sys.argv[1]):
    f = line.split()
    kv = dict(x.split("=", 1) for x in f[1:])
    runs[f[0]].append((float(kv["prefill_tok_s"]), float(kv["decode_tok_s"])))
    tokens.add(kv["tokens"])
for i, what in enumerate(["prefill tok/s", "decode tok/s"]):
    med = {}
    for k in ("before", "after"):
        v = [r[i] for r in runs[k]]
        med[k] = statistics.median(v)
        print(f"{what:14s} {k:6s} median {med[k]:9.2f}  range {min(v):.2f}-{max(v):.2f}")
    if med["before"] > 0:
        print(f"{what:14s} after/before {med['after'] / med['before']:.3f}")
print("same tokens in every run" if len(tokens) == 1 else "TOKENS DIFFER between runs")
EOF
