#!/usr/bin/env bash
# End-to-end decode of the Qwen3.5-35B-A3B geometry on the GPU machine, after tools/gpu/check.sh
# has built $BUILD: writes the synthetic model (40 layers, 10 full attention, vocab 248,320, bf16;
# 64 experts top-8 instead of 256 — the same bytes read per token, and the file fits the machine's
# 64 GB disk), then `weft bench --device cuda` with CUDA graphs and without (WEFT_CUDA_GRAPHS=0),
# the batched arms, and the per-op profile of one decode step. Every step has a time limit; logs
# land in $OUT.
#
#   bash tools/gpu/bench-moe.sh [--quick]      (--quick: depth 4096 only, no batch arms)
#   bash tools/gpu/bench-moe.sh --full         (the 256-expert geometry, generated in host memory
#                                               by `bench --synthetic`: no file; 70 GB of RAM)
set -u
cd "$(dirname "$0")/../.."
BUILD=${BUILD:-build-gpu}
OUT=${OUT:-$PWD/gpu-out}
MODEL=${MODEL:-/tmp/q35e64}
W=$BUILD/weft
mkdir -p "$OUT"
lim() { local s=$1; shift; local t0=$(date +%s); timeout "$s" "$@"; local rc=$?; echo "[exit $rc after $(($(date +%s) - t0)) s: $*]"; }

if [ "${1:-}" = "--full" ]; then
  lim 560 "$W" bench --device cuda --synthetic qwen3.5-35b-a3b --ctx 4096,32768 --arms f16,q8_0 --repeats 3 --gen 32 \
    --energy --batch 1,8 -q --out "$OUT/bench_full" > "$OUT/bench_full.log" 2>&1
  tail -5 "$OUT/bench_full.log"; cat "$OUT/bench_full/report.md" 2>/dev/null
  exit 0
fi
[ -f "$MODEL/config.json" ] || lim 200 "$W" synth --preset qwen3.5-35b-a3b --layers 40 --experts 64 -o "$MODEL" > "$OUT/synth.log" 2>&1
tail -2 "$OUT/synth.log" 2>/dev/null

# Graphs on (default; replay counts on stderr) vs off, depth 4096.
WEFT_CUDA_GRAPH_STATS=1 lim 150 "$W" bench --device cuda -m "$MODEL" --ctx 4096 --arms f16,q8_0 --repeats 3 --gen 32 \
  --energy -q --out "$OUT/bench_4k" > "$OUT/bench_4k.log" 2>&1
WEFT_CUDA_GRAPHS=0 lim 120 "$W" bench --device cuda -m "$MODEL" --ctx 4096 --arms f16 --repeats 2 --gen 32 -q \
  --out "$OUT/bench_4k_nographs" > "$OUT/bench_4k_nographs.log" 2>&1
# GPU time per op of the decode steps (CUDA events; graphs off while profiling).
seq 1 8 | tr '\n' ' ' > "$OUT/ids8.txt"
WEFT_CUDA_PROFILE=1 lim 90 "$W" generate --device cuda -m "$MODEL" --ids-file "$OUT/ids8.txt" -n 32 --ignore-eos \
  > "$OUT/profile.log" 2>&1
# Where a graph-replayed step's GPU time goes, kernel by kernel (Nsight Systems, when installed).
NSYS=$(command -v nsys || ls /usr/local/cuda/bin/nsys /opt/nvidia/nsight-systems/*/bin/nsys 2>/dev/null | head -1)
if [ -n "$NSYS" ]; then
  lim 120 "$NSYS" profile --cuda-graph-trace=node -o "$OUT/step" -f true "$W" generate --device cuda -m "$MODEL" \
    --ids-file "$OUT/ids8.txt" -n 64 --ignore-eos > "$OUT/nsys.log" 2>&1
  lim 60 "$NSYS" stats --report cuda_gpu_kern_sum --format csv -o "$OUT/kernels" "$OUT/step.nsys-rep" >> "$OUT/nsys.log" 2>&1
  rm -f "$OUT/step.nsys-rep" "$OUT/step.sqlite"
fi
# Deeper and batched, inside what is left of $DEADLINE (epoch seconds) when it is set.
if [ "${1:-}" != "--quick" ]; then
  left=300
  [ -n "${DEADLINE:-}" ] && left=$((DEADLINE - $(date +%s)))
  [ "$left" -gt 300 ] && left=300
  [ "$left" -gt 30 ] && lim "$left" "$W" bench --device cuda -m "$MODEL" --ctx 4096,32768 --arms f16,q8_0,q4_0 --repeats 3 \
    --gen 32 --energy --batch 1,8 -q --out "$OUT/bench_32k" > "$OUT/bench_32k.log" 2>&1
fi
for f in bench_4k bench_4k_nographs bench_32k; do
  [ -f "$OUT/$f/report.md" ] && { echo "### $f"; cat "$OUT/$f/report.md"; }
done
grep "weft cuda graphs" "$OUT/bench_4k.log" | sort | uniq -c
grep -A40 "weft cuda profile" "$OUT/profile.log" | head -45
ls "$OUT"/kernels*.csv >/dev/null 2>&1 && head -40 "$OUT"/kernels*.csv
