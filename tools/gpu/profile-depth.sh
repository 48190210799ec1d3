#!/usr/bin/env bash
# Where a deep decode step's time goes, per KV arm, in one GPU-machine call: build weft_cli and
# attention_cuda_bench, time the attention call alone at the depth (microbenchmark, L2 flushed),
# then the full Qwen3.5-35B-A3B geometry (weights generated on the GPU) at the depth with
# --tile-fill: the per-op GPU time of a decode step for each KV arm (WEFT_CUDA_PROFILE=1: events
# around each op, graphs off) and the paired graphs-on bench of the arms. Logs land in $OUT.
#
#   CTX=131072 ARMS="f16 q8_0" bash tools/gpu/profile-depth.sh
#
# Environment: BUILD (build-gpu), OUT (gpu-out), WEFT_DEPS_DIR (./.devdeps: tools/gpu/make-deps.sh),
# CTX (131072), ARMS ("f16 q8_0"), REPEATS (6), GEN (256), PROFILE_GEN (16), AB_ENV (an extra
# "VAR=value" for a second bench of the arms, same call; empty: none), ATT_FILTER (attention_cuda_test
# filter to run first; empty: none), MICRO_ARMS (KV types of the microbenchmark; default ARMS),
# PROFILE_AB (1: also the per-op profile of each arm with AB_ENV; 0: skip).
set -u
cd "$(dirname "$0")/../.."
BUILD=${BUILD:-build-gpu}
OUT=${OUT:-$PWD/gpu-out}
DEPS=${WEFT_DEPS_DIR:-$PWD/.devdeps}
CTX=${CTX:-131072}
ARMS=${ARMS:-"f16 q8_0"}
mkdir -p "$OUT"
t0=$(date +%s)
stamp() { echo "[$(($(date +%s) - t0)) s] $*"; }

cmake -S . -B "$BUILD" -G Ninja -DCMAKE_BUILD_TYPE=Release -DWEFT_DEPS_DIR="$DEPS" > "$OUT/configure.log" 2>&1 ||
  { tail -20 "$OUT/configure.log"; exit 1; }
TARGETS="weft_cli attention_cuda_bench"
[ -n "${ATT_FILTER:-}" ] && TARGETS="$TARGETS attention_cuda_test"
timeout 330 ninja -C "$BUILD" -j"$(nproc)" $TARGETS > "$OUT/build.log" 2>&1 ||
  { tail -40 "$OUT/build.log"; exit 1; }
stamp "built"
nvidia-smi --query-gpu=name,clocks.max.sm,memory.total --format=csv,noheader
if [ -n "${ATT_FILTER:-}" ]; then
  timeout 120 "$BUILD/attention_cuda_test" --gtest_color=no --gtest_filter="$ATT_FILTER" > "$OUT/att_test.log" 2>&1
  stamp "attention_cuda_test $ATT_FILTER (rc $?)"
  grep -E '^\[  (PASSED|FAILED) |^\[  FAILED  \]|Failure|differ' "$OUT/att_test.log" | head -20
fi

for a in ${MICRO_ARMS:-$ARMS}; do
  timeout 60 "$BUILD/attention_cuda_bench" --type "$a" --max-depth "$CTX" --repeats 21 > "$OUT/micro_$a.log" 2>&1
  stamp "microbench $a (rc $?)"
  grep -E '^\|' "$OUT/micro_$a.log" | tail -4
done

arms_csv=$(echo $ARMS | tr ' ' ',')
B="bench --device cuda --synthetic qwen3.5-35b-a3b --ctx $CTX --tile-fill 4096 --ctx-max $((CTX + 8192)) -q"
for a in $ARMS; do
  WEFT_CUDA_PROFILE=1 timeout 150 "$BUILD/weft" $B --arms "$a" --repeats 1 --gen "${PROFILE_GEN:-16}" > "$OUT/profile_$a.log" 2>&1
  stamp "profile $a (rc $?)"
  grep -E 'weft cuda profile|^\| ' "$OUT/profile_$a.log" | head -30
done
if [ -n "${AB_ENV:-}" ] && [ "${PROFILE_AB:-1}" = 1 ]; then
  for a in $ARMS; do
    env "$AB_ENV" WEFT_CUDA_PROFILE=1 timeout 150 "$BUILD/weft" $B --arms "$a" --repeats 1 --gen "${PROFILE_GEN:-16}" > "$OUT/profile_ab_$a.log" 2>&1
    stamp "profile $a with $AB_ENV (rc $?)"
    grep -E 'weft cuda profile|^\| (kv_append|attention) ' "$OUT/profile_ab_$a.log" | head -5
  done
fi
timeout 200 "$BUILD/weft" $B --arms "$arms_csv" --repeats "${REPEATS:-6}" --gen "${GEN:-256}" > "$OUT/bench.log" 2>&1
stamp "bench (rc $?)"
grep -E '^\| [0-9]+' "$OUT/bench.log" | head -8
if [ -n "${AB_ENV:-}" ]; then
  env "$AB_ENV" timeout 200 "$BUILD/weft" $B --arms "$arms_csv" --repeats "${REPEATS:-6}" --gen "${GEN:-256}" > "$OUT/bench_ab.log" 2>&1
  stamp "bench with $AB_ENV (rc $?)"
  grep -E '^\| [0-9]+' "$OUT/bench_ab.log" | head -8
fi
