#!/usr/bin/env bash
# Decode-attention round on the GPU machine (issue 11): build only the attention test and
# microbenchmark, run the test (default kernels; again with round 7's fixed 256-key splits
# (WEFT_CUDA_ATTN_LONG_SPLITS=0), with the key-parallel kernel's plain loop, and with the
# key-parallel kernel forced for every type), the microbenchmark sweep (default kernel per KV type
# next to each tiled kernel forced and round 7's splits, same run, and the split kernel / merge
# breakdown), an Nsight Compute profile of the key-parallel kernel and its merge (q8_0, 128K,
# long and fixed splits) when ncu is there, and compute-sanitizer memcheck on the key-parallel
# seams and the long splits (--memcheck). One call; few files under $OUT (the machine returns only
# a handful): summary.txt, test.log, test-more.log, bench.md, ncu.txt, memcheck.log, e2e.txt.
# --e2e also builds weft_cli and runs the end-to-end bar (full Qwen3.5-35B-A3B geometry, weights
# generated on the GPU, f16 and q8_0 KV at 128K), twice: the default and round 7's fixed splits
# (WEFT_CUDA_ATTN_LONG_SPLITS=0), so the ratio's before and after come from one call. Steps after
# the bench are skipped once BUDGET_S seconds (default 540) of the call are spent. MORE: the
# environment settings the accuracy and bit tests run again under (space-separated).
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
if [ "$E2E" = 1 ]; then
  for v in "WEFT_CUDA_ATTN_LONG_SPLITS=1" "WEFT_CUDA_ATTN_LONG_SPLITS=0"; do
    [ "$(left)" -gt 60 ] || { stamp "skipped e2e $v: budget"; continue; }
    echo "=== $v" >> "$OUT/e2e.txt"
    env "$v" timeout 150 "$BUILD/weft" bench --device cuda --synthetic qwen3.5-35b-a3b \
      --ctx 131072 --tile-fill 4096 --ctx-max 140000 --arms f16,q8_0 --repeats 6 --gen 256 -q >> "$OUT/e2e.txt" 2>&1
    stamp "e2e $v rc $?: $(grep -E '131072|128K' "$OUT/e2e.txt" | tail -1)"
  done
fi
if [ "$MEMCHECK" = 1 ] && [ "$(left)" -gt 60 ]; then
  timeout 150 compute-sanitizer --tool memcheck "$BUILD/attention_cuda_test" --gtest_color=no \
    --gtest_filter='*KeyParallelSeams*:*PipelinedLoop*:*LongSplits*:*PdlMerge*' > "$OUT/memcheck.log" 2>&1
  stamp "memcheck rc $?: $(grep -E 'ERROR SUMMARY|^\[  (PASSED|FAILED)' "$OUT/memcheck.log" | tr '\n' ' ')"
fi
for v in ${MORE:-WEFT_CUDA_ATTN_LONG_SPLITS=0 WEFT_CUDA_ATTN_PIPELINE=0 WEFT_CUDA_ATTN_KERNEL=keys}; do
  [ "$(left)" -gt 40 ] || { stamp "skipped $v: budget"; continue; }
  echo "=== $v" >> "$OUT/test-more.log"
  env "$v" timeout 120 "$BUILD/attention_cuda_test" --gtest_color=no \
    --gtest_filter='*Match*:*Bits*:*Determ*' >> "$OUT/test-more.log" 2>&1
  stamp "test $v rc $?: $(sed -n "/=== $v/,\$p" "$OUT/test-more.log" | grep -E '^\[  (PASSED|FAILED)  \]' | tr '\n' ' ')"
done
NCU_BIN=$(command -v ncu || ls /usr/local/cuda/bin/ncu /opt/nvidia/nsight-compute/*/ncu 2>/dev/null | head -1)
if [ "$NCU" = 1 ] && [ -n "$NCU_BIN" ] && [ "$(left)" -gt 60 ]; then
  # Launches of the qkeys and qmerge kernels together, per depth with --repeats 1 (each timing is a
  # warm-up + 1, each a split kernel + a merge): default 4, forced key-parallel 4, forced with
  # 256-key splits 4, the parts table 16 (split alone, merge alone, both; each tree) = 28; depths
  # 8K, 32K, 64K, 128K: 128K's measured default pair is #86-87 (long splits), the forced 256-key
  # splits pair #94-95.
  echo "=== ncu qkeys_kernel + qmerge_kernel, q8_0 depth 128K (launches 86..95)" >> "$OUT/ncu.txt"
  timeout 150 "$NCU_BIN" --clock-control none --section SpeedOfLight --section Occupancy --section LaunchStats \
    --section WarpStateStats -k "regex:qkeys_kernel|qmerge_kernel" --launch-skip 86 -c 10 \
    "$BUILD/attention_cuda_bench" --type q8_0 --max-depth 131072 --repeats 1 >> "$OUT/ncu.txt" 2>&1
  stamp "ncu rc $?"
fi
