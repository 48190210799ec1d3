#!/usr/bin/env bash
# Quantized weights on the GPU in one call: build weft_cli and backend_cuda_test, run the
# quantized-weight tests (GTEST_FILTER, default the q8_0/q4_0 suite and the product kernels'
# tests), write a synthetic Qwen3.5-35B-A3B GGUF with TYPE weights (q8_0 or q4_0; LAYERS, EXPERTS),
# then decode it beside the same geometry in bf16 (weights generated on the GPU), alternated, one
# `weft bench` per run. Logs land in $OUT.
#
#   LAYERS=40 EXPERTS=64 bash tools/gpu/quant-weights.sh
#
# Environment: BUILD (build-gpu), OUT (gpu-out), WEFT_DEPS_DIR (./.devdeps: tools/gpu/make-deps.sh),
# TYPE (q8_0), AB_ENV (unset), LAYERS (40), EXPERTS (256), CTX (4096), REPEATS (6), GEN (256), ROUNDS (2), TEST_S (150),
# SYNTH_S (240), BENCH_S (per run, 150), MODEL_DIR (/tmp).
set -u
cd "$(dirname "$0")/../.."
BUILD=${BUILD:-build-gpu}
OUT=${OUT:-$PWD/gpu-out}
DEPS=${WEFT_DEPS_DIR:-$PWD/.devdeps}
LAYERS=${LAYERS:-40}
EXPERTS=${EXPERTS:-256}
mkdir -p "$OUT"
t0=$(date +%s)
stamp() { echo "[$(($(date +%s) - t0)) s] $*"; }

cmake -S . -B "$BUILD" -G Ninja -DCMAKE_BUILD_TYPE=Release -DWEFT_DEPS_DIR="$DEPS" > "$OUT/configure.log" 2>&1 ||
  { tail -20 "$OUT/configure.log"; exit 1; }
timeout 330 ninja -C "$BUILD" -j"$(nproc)" weft_cli backend_cuda_test > "$OUT/build.log" 2>&1 ||
  { tail -40 "$OUT/build.log"; exit 1; }
stamp "built"
nvidia-smi --query-gpu=name,clocks.max.sm,memory.total --format=csv,noheader

timeout "${TEST_S:-150}" "$BUILD/backend_cuda_test" --gtest_color=no \
  --gtest_filter="${GTEST_FILTER:-Q8/*:CudaMatvec.*:CudaWeightLayout.*}" > "$OUT/test.log" 2>&1
stamp "backend_cuda_test rc=$?: $(grep -c '^\[       OK \]' "$OUT/test.log") passed, $(grep -cE '^\[  FAILED  \] .*\([0-9]+ ms\)$' "$OUT/test.log") failed"
grep -E '^\[  FAILED  \]|rel_rms cuda q8_0' "$OUT/test.log" | head -30

TYPE=${TYPE:-q8_0}
model=${MODEL_DIR:-/tmp}/q35_L${LAYERS}_E${EXPERTS}_${TYPE}.gguf
[[ -s $model ]] || timeout "${SYNTH_S:-240}" "$BUILD/weft" synth --preset qwen3.5-35b-a3b --layers "$LAYERS" --experts "$EXPERTS" \
  --format gguf --type "$TYPE" -o "$model" > "$OUT/synth.log" 2>&1
stamp "synth rc=$? $(du -h "$model" 2>/dev/null | cut -f1)"
"$BUILD/weft" info -m "$model" > "$OUT/info.log" 2>&1

for ((r = 1; r <= ${ROUNDS:-2}; r++)); do
  # AB_ENV (e.g. WEFT_CUDA_VEC_ALIGN16=1): the quantized file also decoded under that environment,
  # right before its default run in every round (a before/after of one binary, alternated).
  if [[ -n ${AB_ENV:-} ]]; then
    timeout "${BENCH_S:-150}" env $AB_ENV "$BUILD/weft" bench --device cuda -m "$model" --ctx "${CTX:-4096}" --arms f16,q8_0 \
      --repeats "${REPEATS:-6}" --gen "${GEN:-256}" -q > "$OUT/bench_ab_${r}.log" 2>&1
    stamp "$TYPE weights with $AB_ENV, run $r (rc $?)"
    grep -E '^\| [0-9]+ \| (f16|q8_0) \|' "$OUT/bench_ab_${r}.log" | head -4
  fi
  timeout "${BENCH_S:-150}" "$BUILD/weft" bench --device cuda -m "$model" --ctx "${CTX:-4096}" --arms f16,q8_0 \
    --repeats "${REPEATS:-6}" --gen "${GEN:-256}" -q > "$OUT/bench_q8_${r}.log" 2>&1
  stamp "$TYPE weights, run $r (rc $?)"
  grep -E '^\| [0-9]+ \| (f16|q8_0) \||bytes per token|read per token' "$OUT/bench_q8_${r}.log" | head -6
  timeout "${BENCH_S:-150}" "$BUILD/weft" bench --device cuda --synthetic qwen3.5-35b-a3b --layers "$LAYERS" \
    --experts "$EXPERTS" --ctx "${CTX:-4096}" --arms f16,q8_0 --repeats "${REPEATS:-6}" --gen "${GEN:-256}" -q \
    > "$OUT/bench_bf16_${r}.log" 2>&1
  stamp "bf16 weights, run $r (rc $?)"
  grep -E '^\| [0-9]+ \| (f16|q8_0) \||bytes per token|read per token' "$OUT/bench_bf16_${r}.log" | head -6
done

# Per-op GPU time of a decode step (events around every op, graphs off: each op's own time), q8_0
# weights then bf16, when PROFILE=1.
if [[ ${PROFILE:-0} == 1 ]]; then
  WEFT_CUDA_PROFILE=1 timeout 120 "$BUILD/weft" bench --device cuda -m "$model" --ctx 4096 --gen 16 -q --arms f16 \
    --repeats 1 > "$OUT/profile_q8.log" 2>&1
  stamp "profile $TYPE (rc $?)"
  grep -E '^\| ' "$OUT/profile_q8.log" | grep -v -E '^\| [0-9]+ \|' | head -40
  [[ ${PROFILE_BF16:-1} == 1 ]] || exit 0
  WEFT_CUDA_PROFILE=1 timeout 120 "$BUILD/weft" bench --device cuda --synthetic qwen3.5-35b-a3b --layers "$LAYERS" \
    --experts "$EXPERTS" --ctx 4096 --gen 16 -q --arms f16 --repeats 1 > "$OUT/profile_bf16.log" 2>&1
  stamp "profile bf16 (rc $?)"
  grep -E '^\| ' "$OUT/profile_bf16.log" | grep -v -E '^\| [0-9]+ \|' | head -40
fi
