#!/usr/bin/env bash
# Decode-attention round on the GPU machine (issue 11): build only the attention test and
# microbenchmark, run the test (default kernels; again with the round-6 kernel's plain loop and
# with the round-4 key-parallel kernel forced), the microbenchmark sweep (default kernel per KV
# type next to each tiled kernel forced, same run), an Nsight Compute profile of the quantized
# key-parallel kernel (q8_0, 32K and 128K) when ncu is there, and compute-sanitizer memcheck on
# the key-parallel seams (--memcheck). One call; few files under $OUT (the machine returns only a
# handful): summary.txt, test.log, test-more.log, bench.md, ncu.txt, memcheck.log.
#
#   OUT=/some/dir bash tools/gpu/attn-bench.sh [--no-ncu] [--memcheck]
set -u
cd "$(dirname "$0")/../.."
ROOT=$PWD
BUILD=${BUILD:-build-gpu}
if [ -d "$ROOT/.devdeps" ]; then DEPS=${WEFT_DEPS_DIR:-$ROOT/.devdeps}; else DEPS=${WEFT_DEPS_DIR:-$ROOT/../.devdeps}; fi
OUT=${OUT:-$ROOT/gpu-out}
NCU=1
MEMCHECK=0
for a in "$@"; do
  case "$a" in
    --no-ncu) NCU=0 ;;
    --memcheck) MEMCHECK=1 ;;
    *) echo "usage: $0 [--no-ncu] [--memcheck]" >&2; exit 2 ;;
  esac
done
mkdir -p "$OUT"
SUM="$OUT/summary.txt"
t0=$(date +%s)
stamp() { echo "[$(($(date +%s) - t0)) s] $*" | tee -a "$SUM"; }
passfail() { grep -E '^\[  (PASSED|FAILED)  \]|^\[  FAILED  \] AttentionCuda' "$1" | tr '\n' ' '; }
{ cat COMMIT 2>/dev/null || git log -1 --format='%H %s' 2>/dev/null; nvidia-smi --query-gpu=name,clocks.max.sm,driver_version --format=csv,noheader 2>&1; } >> "$SUM"
cmake -S . -B "$BUILD" -G Ninja -DCMAKE_BUILD_TYPE=Release -DWEFT_DEPS_DIR="$DEPS" > "$OUT/build.log" 2>&1 ||
  { tail -20 "$OUT/build.log"; exit 1; }
stamp configured
ninja -C "$BUILD" -j"$(nproc)" attention_cuda_test attention_cuda_bench >> "$OUT/build.log" 2>&1 ||
  { tail -40 "$OUT/build.log"; exit 1; }
rm -f "$OUT/build.log"
stamp built
timeout 240 "$BUILD/attention_cuda_test" --gtest_color=no > "$OUT/test.log" 2>&1
stamp "test rc $?: $(passfail "$OUT/test.log")"
grep -E 'Failure|Expected|Which is|differ|error' "$OUT/test.log" | head -20 | tee -a "$SUM"
for v in "WEFT_CUDA_ATTN_PIPELINE=0" "WEFT_CUDA_ATTN_KERNEL=keys4"; do
  echo "=== $v" >> "$OUT/test-more.log"
  env "$v" timeout 120 "$BUILD/attention_cuda_test" --gtest_color=no \
    --gtest_filter='*Match*:*Bits*:*Determ*' >> "$OUT/test-more.log" 2>&1
  stamp "test $v rc $?: $(sed -n "/=== $v/,\$p" "$OUT/test-more.log" | grep -E '^\[  (PASSED|FAILED)  \]' | tr '\n' ' ')"
done
timeout 200 "$BUILD/attention_cuda_bench" --sweep --repeats 21 > "$OUT/bench.md" 2>&1
stamp "bench rc $?"
NCU_BIN=$(command -v ncu || ls /usr/local/cuda/bin/ncu /opt/nvidia/nsight-compute/*/ncu 2>/dev/null | head -1)
if [ "$NCU" = 1 ] && [ -n "$NCU_BIN" ]; then
  # Launches of the qkeys kernel per depth: default (warm-up + 1) and forced key-parallel (2).
  for cfg in "32768 5" "131072 13"; do
    set -- $cfg
    echo "=== ncu q8_0 depth $1" >> "$OUT/ncu.txt"
    timeout 60 "$NCU_BIN" --clock-control none --section SpeedOfLight --section Occupancy --section LaunchStats \
      --section WarpStateStats --section SchedulerStats --section InstructionStats --section SourceCounters \
      -k regex:qkeys_kernel --launch-skip "$2" -c 1 "$BUILD/attention_cuda_bench" --type q8_0 --max-depth "$1" \
      --repeats 1 >> "$OUT/ncu.txt" 2>&1
    stamp "ncu $1 rc $?"
  done
fi
if [ "$MEMCHECK" = 1 ]; then
  timeout 100 compute-sanitizer --tool memcheck "$BUILD/attention_cuda_test" --gtest_color=no \
    --gtest_filter='*KeyParallelSeams*' > "$OUT/memcheck.log" 2>&1
  stamp "memcheck rc $?: $(grep -E 'ERROR SUMMARY|^\[  (PASSED|FAILED)' "$OUT/memcheck.log" | tr '\n' ' ')"
fi
