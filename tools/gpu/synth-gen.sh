#!/usr/bin/env bash
# Synthetic weights generated in GPU memory vs in host memory and uploaded (docs/results.md §10,
# "Synthetic weights generated on the GPU"): builds weft and synth_fill_cuda_test, runs the test,
# then the same full-geometry bench twice — generated on the GPU (the default) and with
# WEFT_SYNTH_ON_HOST=1 (the former path) — under /usr/bin/time -v, with each stderr line stamped
# with the seconds since the command started (tools/gpu/stamp.py), so the time to the first result
# and the peak host RSS sit side by side. Logs land in $OUT (default gpu-out).
#
#   bash tools/gpu/synth-gen.sh [BENCH ARGS...]
set -u
cd "$(dirname "$0")/../.."
ROOT=$PWD
BUILD=${BUILD:-build-gpu}
if [ -d "$ROOT/.devdeps" ]; then DEPS=${WEFT_DEPS_DIR:-$ROOT/.devdeps}; else DEPS=${WEFT_DEPS_DIR:-$ROOT/../.devdeps}; fi
OUT=${OUT:-$ROOT/gpu-out}
mkdir -p "$OUT"
ARGS=("$@")
[ ${#ARGS[@]} -eq 0 ] && ARGS=(--synthetic qwen3.5-35b-a3b --ctx 4096 --arms f16 --repeats 1 --gen 32)
T0=$(date +%s)
log() { echo "[$(( $(date +%s) - T0 ))s] $*" | tee -a "$OUT/summary.txt"; }
cmake -S . -B "$BUILD" -G Ninja -DCMAKE_BUILD_TYPE=Release -DWEFT_DEPS_DIR="$DEPS" > "$OUT/cfg.log" 2>&1 ||
  { tail "$OUT/cfg.log"; exit 1; }
ninja -C "$BUILD" -j"$(nproc)" weft_cli synth_fill_cuda_test > "$OUT/build.log" 2>&1 ||
  { tail -40 "$OUT/build.log" | tee -a "$OUT/summary.txt"; exit 1; }
log "built"
timeout 120 "$BUILD/synth_fill_cuda_test" --gtest_color=no > "$OUT/synth_fill_cuda_test.log" 2>&1
log "synth_fill_cuda_test rc=$? $(grep -E '^\[  (PASSED|FAILED|SKIPPED)  \]' "$OUT/synth_fill_cuda_test.log" | tr '\n' ' ')"
grep -E '^\[  FAILED  \]|Failure|first differing' "$OUT/synth_fill_cuda_test.log" | head -20 | tee -a "$OUT/summary.txt"
TIME=()
[ -x /usr/bin/time ] && TIME=(/usr/bin/time -v)
for arm in gpu host; do
  env=()
  [ $arm = host ] && env=(WEFT_SYNTH_ON_HOST=1)
  log "bench ($arm): weft bench --device cuda ${ARGS[*]}"
  timeout 120 env "${env[@]}" python3 tools/gpu/stamp.py "$OUT/bench-$arm.err" -- "${TIME[@]}" "$BUILD/weft" bench \
    --device cuda "${ARGS[@]}" > "$OUT/bench-$arm.md"
  log "bench ($arm) rc=$?"
  grep -E "generat|Maximum resident|Elapsed \(wall|peak_rss|wall_s" "$OUT/bench-$arm.err" | tee -a "$OUT/summary.txt"
  grep -E "^\| [0-9]+ \|" "$OUT/bench-$arm.md" | head -4 | tee -a "$OUT/summary.txt"
done
log done
