#!/usr/bin/env bash
# One environment switch, A/B, on the GPU machine in one call: build weft_cli and
# backend_cuda_test, run the CUDA backend tests (GTEST_FILTER, default all), then the full
# Qwen3.5-35B-A3B decode bench (weights generated on the GPU) with the switch at each value of
# VALUES in turn, so the arms alternate inside one machine start. Logs land in $OUT.
#
#   SWITCH=WEFT_CUDA_EARLY_WEIGHTS VALUES="0 1 0 1" bash tools/gpu/ab-switch.sh
#
# Environment: BUILD (build-gpu), OUT (gpu-out), WEFT_DEPS_DIR (./.devdeps: tools/gpu/make-deps.sh),
# CTX (4096,131072), REPEATS (6), GEN (256), TEST_S (test time limit, 150), BENCH_S (per run, 200).
set -u
cd "$(dirname "$0")/../.."
BUILD=${BUILD:-build-gpu}
OUT=${OUT:-$PWD/gpu-out}
DEPS=${WEFT_DEPS_DIR:-$PWD/.devdeps}
: "${SWITCH:?set SWITCH to the environment variable to compare}"
VALUES=${VALUES:-"0 1 0 1"}
mkdir -p "$OUT"
t0=$(date +%s)
stamp() { echo "[$(($(date +%s) - t0)) s] $*"; }

cmake -S . -B "$BUILD" -G Ninja -DCMAKE_BUILD_TYPE=Release -DWEFT_DEPS_DIR="$DEPS" > "$OUT/configure.log" 2>&1 ||
  { tail -20 "$OUT/configure.log"; exit 1; }
timeout 330 ninja -C "$BUILD" -j"$(nproc)" weft_cli backend_cuda_test > "$OUT/build.log" 2>&1 ||
  { tail -40 "$OUT/build.log"; exit 1; }
stamp "built"
nvidia-smi --query-gpu=name,clocks.max.sm,memory.total --format=csv,noheader

timeout "${TEST_S:-150}" "$BUILD/backend_cuda_test" --gtest_color=no --gtest_filter="${GTEST_FILTER:-*}" > "$OUT/test.log" 2>&1
stamp "backend_cuda_test rc=$?: $(grep -c '^\[       OK \]' "$OUT/test.log") passed, $(grep -cE '^\[  FAILED  \] .*\([0-9]+ ms\)$' "$OUT/test.log") failed"
grep -E '^\[  FAILED  \]' "$OUT/test.log" | head -20

i=0
for v in $VALUES; do
  i=$((i + 1))
  env "$SWITCH=$v" timeout "${BENCH_S:-200}" "$BUILD/weft" bench --device cuda --synthetic qwen3.5-35b-a3b \
    --ctx "${CTX:-4096,131072}" --tile-fill 4096 --ctx-max 140000 --arms f16,q8_0 --repeats "${REPEATS:-6}" \
    --gen "${GEN:-256}" -q > "$OUT/bench_${i}_${v}.log" 2>&1
  stamp "run $i: $SWITCH=$v (rc $?)"
  grep -E '^\| [0-9]+ \| (f16|q8_0) \|' "$OUT/bench_${i}_${v}.log" | head -8
done
