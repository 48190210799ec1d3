#!/usr/bin/env bash
# Decode-attention round on the GPU machine (issue 11): build only the attention test and
# microbenchmark, run the test (default kernels; again with the key-parallel kernel's plain loop,
# with its pipelined loop compiled for 2 blocks per SM as in round 6, and with the key-parallel
# kernel forced for every type), the microbenchmark sweep (default kernel per KV type next to each
# tiled kernel forced, same run), an Nsight Compute profile of the key-parallel kernel and its
# merge (q8_0, 128K) when ncu is there, and compute-sanitizer memcheck on the key-parallel seams
# (--memcheck). One call; few files under $OUT (the machine returns only a
# handful): summary.txt, test.log, test-more.log, bench.md, ncu.txt, memcheck.log, e2e.txt.
# --e2e also builds weft_cli and runs the end-to-end bar (full Qwen3.5-35B-A3B geometry, weights
# generated on the GPU, f16 and q8_0 KV at 128K; round 7's calls gated it on a 2% microbenchmark
# gain, which did not come). Steps after the bench are skipped once BUDGET_S
# seconds (default 540) of the call are spent.
#
#   OUT=/some/dir bash tools/gpu/attn-bench.sh [--no-ncu] [--memcheck] [--e2e]
set -u
cd "$(dirname "$0")/../.."
ROOT=$PWD
BUILD=${BUILD:-build-gpu}
if [ -d "$ROOT/.devdeps" ]; then DEPS=${WEFT_DEPS_DIR:-$ROOT/.devdeps}; else DEPS=${WEFT_DEPS_DIR:-$ROOT/../.devdeps}; fi
OUT=${OUT:-$ROOT/gpu-out}
NCU=1
MEMCHECK=0
E2E=0
for a in "$@"; do
  case "$a" in
    --no-ncu) NCU=0 ;;
    --memcheck) MEMCHECK=1 ;;
    --e2e) E2E=1 ;;
    *) echo "usage: $0 [--no-ncu] [--memcheck] [--e2e]" >&2; exit 2 ;;
  esac
done
mkdir -p "$OUT"
SUM="$OUT/summary.txt"
t0=$(date +%s)
left() { echo $(( ${BUDGET_S:-540} - ($(date +%s) - t0) )); }
stamp() { echo "[$(($(date +%s) - t0)) s] $*" | tee -a "$SUM"; }
passfail() { grep -E '^\[  (PASSED|FAILED)  \]|^\[  FAILED  \] AttentionCuda' "$1" | tr '\n' ' '; }
{ cat COMMIT 2>/dev/null || git log -1 --format='%H %s' 2>/dev/null; nvidia-smi --query-gpu=name,clocks.max.sm,driver_version --format=csv,noheader 2>&1; } >> "$SUM"
cmake -S . -B "$BUILD" -G Ninja -DCMAKE_BUILD_TYPE=Release -DWEFT_DEPS_DIR="$DEPS" > "$OUT/build.log" 2>&1 ||
  { tail -20 "$OUT/build.log"; exit 1; }
stamp configured
TARGETS="attention_cuda_test attention_cuda_bench"
[ "$E2E" = 1 ] && TARGETS="$TARGETS weft_cli"
ninja -C "$BUILD" -j"$(nproc)" $TARGETS >> "$OUT/build.log" 2>&1 ||
  { tail -40 "$OUT/build.log"; exit 1; }
rm -f "$OUT/build.log"
stamp built
timeout 240 "$BUILD/attention_cuda_test" --gtest_color=no > "$OUT/test.log" 2>&1
stamp "test rc $?: $(passfail "$OUT/test.log")"
grep -E 'Failure|Expected|Which is|differ|error' "$OUT/test.log" | head -20 | tee -a "$SUM"
timeout 200 "$BUILD/attention_cuda_bench" --sweep --repeats 21 > "$OUT/bench.md" 2>&1
stamp "bench rc $?"
if [ "$MEMCHECK" = 1 ] && [ "$(left)" -gt 60 ]; then
  timeout 100 compute-sanitizer --tool memcheck "$BUILD/attention_cuda_test" --gtest_color=no \
    --gtest_filter='*KeyParallelSeams*:*PipelinedLoop*' > "$OUT/memcheck.log" 2>&1
  stamp "memcheck rc $?: $(grep -E 'ERROR SUMMARY|^\[  (PASSED|FAILED)' "$OUT/memcheck.log" | tr '\n' ' ')"
fi
if [ "$E2E" = 1 ]; then
  timeout $(( $(left) > 60 ? $(left) : 60 )) "$BUILD/weft" bench --device cuda --synthetic qwen3.5-35b-a3b \
    --ctx 131072 --tile-fill 4096 --ctx-max 140000 --arms f16,q8_0 --repeats 5 --gen 256 -q > "$OUT/e2e.txt" 2>&1
  stamp "e2e rc $?"
fi
for v in "WEFT_CUDA_ATTN_PIPELINE=0" "WEFT_CUDA_ATTN_PIPE3=1" "WEFT_CUDA_ATTN_VWORDS=1" "WEFT_CUDA_ATTN_KERNEL=keys"; do
  [ "$(left)" -gt 40 ] || { stamp "skipped $v: budget"; continue; }
  echo "=== $v" >> "$OUT/test-more.log"
  env "$v" timeout 120 "$BUILD/attention_cuda_test" --gtest_color=no \
    --gtest_filter='*Match*:*Bits*:*Determ*' >> "$OUT/test-more.log" 2>&1
  stamp "test $v rc $?: $(sed -n "/=== $v/,\$p" "$OUT/test-more.log" | grep -E '^\[  (PASSED|FAILED)  \]' | tr '\n' ' ')"
done
NCU_BIN=$(command -v ncu || ls /usr/local/cuda/bin/ncu /opt/nvidia/nsight-compute/*/ncu 2>/dev/null | head -1)
if [ "$NCU" = 1 ] && [ -n "$NCU_BIN" ] && [ "$(left)" -gt 60 ]; then
  # Launches of the qkeys (and qmerge) kernel per depth with --repeats 1: default (warm-up + 1),
  # forced key-parallel (2), forced with V as words (2); depths 8K, 32K, 64K, 128K: 128K's default
  # measured launch is #19, the V-words one #23.
  for k in "qkeys_kernel 19 5" "qmerge_kernel 19 1"; do
    set -- $k
    echo "=== ncu $1 q8_0 depth 128K (launches $2 + $3)" >> "$OUT/ncu.txt"
    timeout 90 "$NCU_BIN" --clock-control none --section SpeedOfLight --section Occupancy --section LaunchStats \
      --section WarpStateStats --section SchedulerStats --section InstructionStats \
      -k "regex:$1" --launch-skip "$2" -c "$3" "$BUILD/attention_cuda_bench" --type q8_0 --max-depth 131072 \
      --repeats 1 >> "$OUT/ncu.txt" 2>&1
    stamp "ncu $1 rc $?"
  done
fi
