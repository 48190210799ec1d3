#!/usr/bin/env bash
# The AVX-512 few-token matmul kernel on the GPU host's CPU (issue 9; no GPU used): the kernel
# alone and the whole model's batched decode, before vs after, alternated in one call. "before"
# is the same binary with the kernels before it (WEFT_MATMUL_FEW_TOKENS=0: the one-token kernel
# once per token; WEFT_MATMUL_STREAMING_TOKENS=3: the old decode/prefill boundary), so both arms
# read the same weights in the same process layout.
#
#   OUT=... bash tools/gpu/few-tokens.sh        (through the device tool: carry [".devdeps"])
set -u
cd "$(dirname "$0")/../.."
ROOT=$PWD
OUT=${OUT:-$ROOT/gpu-out}
B=${BUILD:-build-cpu}
if [ -d "$ROOT/.devdeps" ]; then DEPS=${WEFT_DEPS_DIR:-$ROOT/.devdeps}; else DEPS=${WEFT_DEPS_DIR:-$ROOT/../.devdeps}; fi
ROUNDS=${ROUNDS:-2}
mkdir -p "$OUT"
lscpu | grep -E 'Model name|^CPU\(s\)' | tr -s ' '
cmake -S . -B "$B" -G Ninja -DCMAKE_BUILD_TYPE=Release -DWEFT_CUDA=OFF -DWEFT_DEPS_DIR="$DEPS" > "$OUT/configure.log" 2>&1
ninja -C "$B" -j"$(nproc)" weft_cli quant_bench matmul_test > "$OUT/build.log" 2>&1 || { tail -30 "$OUT/build.log"; exit 1; }
"$B/matmul_test" --gtest_filter='Matmul.*' 2>&1 | grep -E '^\[  (PASSED|FAILED)'
arm_env() {
  case $1 in
    before) echo "WEFT_MATMUL_FEW_TOKENS=0 WEFT_MATMUL_STREAMING_TOKENS=3" ;;
    after) echo "WEFT_MATMUL_FEW_TOKENS=1" ;;
    wide) echo "WEFT_MATMUL_STREAMING_TOKENS=64" ;;
  esac
}
echo "== kernel: quant_bench --n 512 --k 2048 --t T --threads 1,16 --mib 64 --rounds 20, bf16 row (best ms, med ms per call)"
for r in $(seq "$ROUNDS"); do
  for T in 2 4 8 16 32; do
    for arm in before after wide; do
      [ "$arm" = wide ] && [ "$T" -le 16 ] && continue
      env $(arm_env $arm) "$B/quant_bench" --n 512 --k 2048 --t "$T" --threads 1,16 --mib 64 --rounds 20 > "$OUT/qb.log" 2>&1
      echo "round $r T=$T $arm: $(grep '^bf16' "$OUT/qb.log" | awk '{printf "%s/%s ", $3, $4}')"
    done
  done
done
M=/tmp/q35_32
[ -f $M/model.safetensors ] || "$B/weft" synth --preset qwen3.5-35b-a3b --layers 4 --experts 32 --vocab 32000 -o $M > "$OUT/synth.log" 2>&1
echo "== model: weft bench -m q35_32 --ctx 4096 --tile-fill 1024 --arms f16 --batch 4,8 --repeats 5 --gen 16 --threads T -q"
for r in $(seq "$ROUNDS"); do
  for T in ${THREADS:-16 4}; do
    for arm in before after; do
      env $(arm_env $arm) "$B/weft" bench -m $M --ctx 4096 --tile-fill 1024 --arms f16 --batch 4,8 --repeats 5 \
        --gen 16 --threads "$T" -q > "$OUT/bench-$r-$T-$arm.log" 2>&1
      echo "-- round $r threads $T $arm"
      grep -E '^\| 4096 \| f16 \| [148] ' "$OUT/bench-$r-$T-$arm.log"
    done
  done
done
