#!/usr/bin/env bash
# The one script for the GPU machine: configure, build the CUDA targets, run the CUDA tests and the
# CUDA benches, print a summary table. Each step has its own time limit so a call stays well
# inside the machine's 10-minute command limit. End to end on the 35B-A3B geometry (graphs on/off,
# per-op profile, deeper and batched arms): tools/gpu/bench-moe.sh, after this script's build.
#
#   bash tools/gpu/check.sh [--tests-only] [--bench-args "..."]
#
# Environment: WEFT_DEPS_DIR (default ./.devdeps, else ../.devdeps: nlohmann, CLI11, googletest
# sources for a machine without the Debian packages; made by tools/gpu/make-deps.sh), BUILD (default build-gpu), OUT (logs; default gpu-out),
# JOBS (default: all cores). Logs of every step land in $OUT; the table goes to stdout and
# $OUT/summary.md.
set -u
cd "$(dirname "$0")/../.."
ROOT=$PWD
BUILD=${BUILD:-build-gpu}
if [ -d "$ROOT/.devdeps" ]; then DEPS=${WEFT_DEPS_DIR:-$ROOT/.devdeps}; else DEPS=${WEFT_DEPS_DIR:-$ROOT/../.devdeps}; fi
OUT=${OUT:-$ROOT/gpu-out}
JOBS=${JOBS:-$(nproc)}
TESTS_ONLY=0
BENCH_ARGS="--ctx 512,2048 --repeats 3 --gen 32 --arms f16,q8_0,q4_0 --energy"
while [ $# -gt 0 ]; do
  case "$1" in
    --tests-only) TESTS_ONLY=1 ;;
    --bench-args) BENCH_ARGS="$2"; shift ;;
    *) echo "usage: $0 [--tests-only] [--bench-args \"...\"]" >&2; exit 2 ;;
  esac
  shift
done
mkdir -p "$OUT"
ROWS=()
TEST_TIMEOUT=${TEST_TIMEOUT:-300}
row() { ROWS+=("| $1 | $2 | $3 | $4 |"); }
step() {  # step NAME LIMIT_S LOG CMD...: runs CMD with a time limit, records status and time
  local name=$1 limit=$2 log=$3; shift 3
  local t0=$(date +%s%N) rc
  timeout "$limit" "$@" > "$OUT/$log" 2>&1; rc=$?
  local ms=$((($(date +%s%N) - t0) / 1000000))
  local dt="$((ms / 1000)).$(((ms % 1000) / 100))"
  STEP_RC=$rc
  STEP_T=$dt
  [ $rc -eq 124 ] && echo "($name: timed out after ${limit}s)" >> "$OUT/$log"
  return $rc
}

nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader > "$OUT/gpu.txt" 2>&1
GPU=$(head -1 "$OUT/gpu.txt")

step configure 120 configure.log cmake -S . -B "$BUILD" -G Ninja -DCMAKE_BUILD_TYPE=Release -DWEFT_DEPS_DIR="$DEPS"
row configure "$([ $STEP_RC -eq 0 ] && echo ok || echo FAIL)" "${STEP_T}s" "$GPU"
TESTS=$(ls tests/*_cuda_test.cu 2>/dev/null | xargs -rn1 basename | sed 's/\.cu$//' | tr '\n' ' ')
BENCHES=$(ls tools/*_cuda_bench.cu 2>/dev/null | xargs -rn1 basename | sed 's/\.cu$//' | tr '\n' ' ')
step build 300 build.log ninja -C "$BUILD" -j"$JOBS" weft_cli $TESTS $BENCHES
row build "$([ $STEP_RC -eq 0 ] && echo ok || echo FAIL)" "${STEP_T}s" "weft_cli $TESTS $BENCHES"
if [ $STEP_RC -ne 0 ]; then tail -40 "$OUT/build.log"; fi

for t in $TESTS; do
  [ -x "$BUILD/$t" ] || { row "$t" "not built" - -; continue; }
  step "$t" 300 "$t.log" "$BUILD/$t" --gtest_color=no
  passed=$(grep -c '^\[       OK \]' "$OUT/$t.log"); failed=$(grep -cE '^\[  FAILED  \] .* \([0-9]+ ms\)$' "$OUT/$t.log")
  skipped=$(grep -cE '^\[  SKIPPED \] .* \([0-9]+ ms\)$' "$OUT/$t.log")
  row "$t" "$([ $STEP_RC -eq 0 ] && echo ok || echo FAIL)" "${STEP_T}s" "$passed passed, $failed failed, $skipped skipped"
  grep -E '^\[  FAILED  \] [A-Za-z]' "$OUT/$t.log" | sort -u | head -20 >&2
done

if [ $TESTS_ONLY -eq 0 ]; then
  for b in $BENCHES; do
    [ -x "$BUILD/$b" ] || continue
    step "$b" 240 "$b.log" "$BUILD/$b"
    row "$b" "$([ $STEP_RC -eq 0 ] && echo ok || echo FAIL)" "${STEP_T}s" "see $OUT/$b.log"
  done
  # End to end on the shipped model: bench output unchanged, with the CUDA backend.
  step "weft bench --device cuda" 240 bench_cuda.log "$BUILD/weft" bench --device cuda $BENCH_ARGS --out "$OUT/bench_cuda"
  row "weft bench --device cuda $BENCH_ARGS" "$([ $STEP_RC -eq 0 ] && echo ok || echo FAIL)" "${STEP_T}s" "$OUT/bench_cuda/report.md"
fi

{
  echo "## tools/gpu/check.sh on $GPU"
  echo
  echo "| step | status | time | detail |"
  echo "|---|---|---|---|"
  printf '%s\n' "${ROWS[@]}"
  echo
  for t in $TESTS; do grep -hE '^\[ .* \] rel_rms' "$OUT/$t.log" 2>/dev/null; done
  for b in $BENCHES; do [ -f "$OUT/$b.log" ] && { echo; echo "### $b"; tail -40 "$OUT/$b.log"; }; done
  [ -f "$OUT/bench_cuda/report.md" ] && { echo; cat "$OUT/bench_cuda/report.md"; }
} | tee "$OUT/summary.md"
