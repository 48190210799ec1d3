#!/usr/bin/env bash
# Issue 11's end-to-end decode, one GPU-machine call: build, the CUDA tests, then the 40-layer
# Qwen3.5-35B-A3B geometry (64 experts: the same bytes per token as 256) at depth 4096 with the
# fused decode launches (default) and without (WEFT_CUDA_FUSE=0), with programmatic dependent
# launch (default) and without (WEFT_CUDA_PDL=0), and with the L2 weight prefetch
# (WEFT_CUDA_PREFETCH=1; off by default) side by side, and the per-op GPU time of one decode
# step (WEFT_CUDA_PROFILE=1: CUDA events, graphs off, decode steps only; PROFILE_UNFUSED=1 also
# unfused). Logs and reports land in $OUT (and $OUT/e2e.tar.gz); the summary goes to stdout.
#
#   bash tools/gpu/bench-e2e.sh [--no-tests]     (FULL=1: also the 256-expert geometry at 4096;
#   FULL_PLAIN=1: that with plain launches too; UNFUSED=0 / ROWS1=1: skip / add those arms;
#   TESTS_ONCE=1: the CUDA tests only with the default settings; NOPDL=0 / PREFETCH=0: skip those
#   arms; SWITCHES=1: one arm per switch of the third round (WEFT_CUDA_FUSE_MOE_DOWN=0,
#   WEFT_CUDA_FUSE_ROUTE=1 (off by default), WEFT_CUDA_MATVEC_ROWS=2, WEFT_CUDA_MATVEC_WIDE=0; the
#   three defaults off with SWITCHES_NONE=1); BEFORE_SRC=dir: another source
#   tree (e.g. main's) built into dir/build-before meanwhile and benched as the "before" arm;
#   R4=1: the fourth round's arms, each switch set explicitly (as in its call, when
#   WEFT_CUDA_FUSE_NORM was still on by default): bench_r4_after: all three on (WEFT_CUDA_FUSE_NORM=1,
#   the attention gate fold and down_combine's early routing by default), bench_r4_before: all off
#   (WEFT_CUDA_FUSE_NORM=0 WEFT_CUDA_FUSE_GATE=0 WEFT_CUDA_DOWN_EARLY=0), at GEN4K tokens x
#   REPEATS4K; then the full geometry at 128K in memory with the current defaults (FULL128=1, f16 and
#   q8_0 KV, --tile-fill); then, while BUDGET_S seconds from the start are not spent, bench_r4_nonorm
#   (WEFT_CUDA_FUSE_NORM=0: today's defaults), bench_r4_nogate (norm on, gate off), down_combine's
#   early reads 0 and 2, and the per-op profile)
set -u
cd "$(dirname "$0")/../.."
ROOT=$PWD
BUILD=${BUILD:-build-gpu}
FINAL=${OUT:-$ROOT/gpu-out}
OUT=$(mktemp -d)  # logs; tarred into $FINAL/e2e.tar.gz at the end (the machine returns few files)
MODEL=${MODEL:-/tmp/q35e64}
if [ -d "$ROOT/.devdeps" ]; then DEPS=${WEFT_DEPS_DIR:-$ROOT/.devdeps}; else DEPS=${WEFT_DEPS_DIR:-$ROOT/../.devdeps}; fi
W=$BUILD/weft
T0=$(date +%s)
left() { echo $(( ${BUDGET_S:-100000} - ($(date +%s) - T0) )); }  # seconds of the call's budget left
lim() { local s=$1; shift; local t0=$(date +%s); timeout "$s" "$@"; local rc=$?; echo "[exit $rc after $(($(date +%s) - t0)) s: $*]"; }

lim 120 cmake -S . -B "$BUILD" -G Ninja -DCMAKE_BUILD_TYPE=Release -DWEFT_DEPS_DIR="$DEPS" > "$OUT/configure.log" 2>&1
lim 300 ninja -C "$BUILD" -j"$(nproc)" weft_cli backend_cuda_test > "$OUT/build.log" 2>&1 || { tail -30 "$OUT/build.log"; }
if [ -n "${BEFORE_SRC:-}" ]; then  # built on the CPU while the tests use the GPU
  (git -C "$BEFORE_SRC" log -1 --oneline; lim 120 cmake -S "$BEFORE_SRC" -B "$BEFORE_SRC/build-before" -G Ninja \
    -DCMAKE_BUILD_TYPE=Release -DWEFT_DEPS_DIR="$DEPS" && lim 300 ninja -C "$BEFORE_SRC/build-before" -j"$(nproc)" weft_cli) \
    > "$OUT/build_before.log" 2>&1 &
fi
# The model file is written on the CPU while the tests use the GPU.
[ -f "$MODEL/config.json" ] || { lim 240 "$W" synth --preset qwen3.5-35b-a3b --layers 40 --experts 64 -o "$MODEL" > "$OUT/synth.log" 2>&1 & }
if [ "${1:-}" != "--no-tests" ]; then
  lim 240 "$BUILD/backend_cuda_test" --gtest_color=no > "$OUT/backend_cuda_test.log" 2>&1
  grep -E '^\[  (PASSED|FAILED) ' "$OUT/backend_cuda_test.log" | sort -u | head -30
  grep -E '^\[  FAILED  \]' "$OUT/backend_cuda_test.log" | head -20
fi
if [ "${1:-}" != "--no-tests" ] && [ "${TESTS_ONCE:-0}" != 1 ]; then
  # The same tests with one weight row per warp in the one-token products (WEFT_CUDA_MATVEC_ROWS=1).
  WEFT_CUDA_MATVEC_ROWS=1 lim 240 "$BUILD/backend_cuda_test" --gtest_color=no > "$OUT/backend_cuda_test_rows1.log" 2>&1
  grep -E '^\[  (PASSED|FAILED) ' "$OUT/backend_cuda_test_rows1.log" | sort -u | head -30
  # And with two rows per warp in every one-token product (the default picks by launch size).
  WEFT_CUDA_MATVEC_ROWS=2 lim 240 "$BUILD/backend_cuda_test" --gtest_color=no > "$OUT/backend_cuda_test_rows2.log" 2>&1
  grep -E '^\[  (PASSED|FAILED) ' "$OUT/backend_cuda_test_rows2.log" | sort -u | head -30
  # And with plain launches throughout (WEFT_CUDA_PDL=0).
  WEFT_CUDA_PDL=0 lim 240 "$BUILD/backend_cuda_test" --gtest_color=no > "$OUT/backend_cuda_test_nopdl.log" 2>&1
  grep -E '^\[  (PASSED|FAILED) ' "$OUT/backend_cuda_test_nopdl.log" | sort -u | head -30
fi
wait
tail -2 "$OUT/synth.log" 2>/dev/null

B="bench --device cuda -m $MODEL --ctx 4096 --gen 32 -q"
if [ "${R4:-0}" = 1 ]; then
  # Round 4: before/after in one call, same process setup, longer windows (the 4K arms are cheap
  # next to model load and prefill). Each report is printed as soon as its arm ends (a call cut
  # short still returns what ran).
  show() { [ -f "$OUT/$1/report.md" ] && { echo "### $1 [$(($(date +%s) - T0)) s]"; grep -E "decode|tok/s|^\|" "$OUT/$1/report.md" | head -20; }; }
  B4="bench --device cuda -m $MODEL --ctx 4096 --gen ${GEN4K:-128} -q --repeats ${REPEATS4K:-5}"
  WEFT_CUDA_FUSE_NORM=1 WEFT_CUDA_GRAPH_STATS=1 lim 60 "$W" $B4 --arms f16,q8_0 --out "$OUT/bench_r4_after" > "$OUT/bench_r4_after.log" 2>&1
  show bench_r4_after; grep "weft cuda graphs" "$OUT/bench_r4_after.log" | sort | uniq -c
  WEFT_CUDA_FUSE_NORM=0 WEFT_CUDA_FUSE_GATE=0 WEFT_CUDA_DOWN_EARLY=0 lim 60 "$W" $B4 --arms f16 --out "$OUT/bench_r4_before" > "$OUT/bench_r4_before.log" 2>&1
  show bench_r4_before
  if [ "${FULL128:-1}" = 1 ]; then
    lim "${FULL128_S:-150}" "$W" bench --device cuda --synthetic qwen3.5-35b-a3b --ctx 131072 --tile-fill 4096 --ctx-max 140000 \
      --arms f16,q8_0 --repeats 6 --gen 256 -q --out "$OUT/bench_full128" > "$OUT/bench_full128.log" 2>&1
    show bench_full128; tail -4 "$OUT/bench_full128.log"
  fi
  [ "$(left)" -gt 40 ] && { WEFT_CUDA_FUSE_NORM=0 lim 40 "$W" $B4 --arms f16 --out "$OUT/bench_r4_nonorm" > "$OUT/bench_r4_nonorm.log" 2>&1; show bench_r4_nonorm; }
  [ "$(left)" -gt 40 ] && { WEFT_CUDA_FUSE_NORM=1 WEFT_CUDA_FUSE_GATE=0 lim 40 "$W" $B4 --arms f16 --out "$OUT/bench_r4_nogate" > "$OUT/bench_r4_nogate.log" 2>&1; show bench_r4_nogate; }
  [ "$(left)" -gt 40 ] && { WEFT_CUDA_DOWN_EARLY=0 lim 40 "$W" $B4 --arms f16 --out "$OUT/bench_r4_early0" > "$OUT/bench_r4_early0.log" 2>&1; show bench_r4_early0; }
  [ "$(left)" -gt 40 ] && { WEFT_CUDA_DOWN_EARLY=2 lim 40 "$W" $B4 --arms f16 --out "$OUT/bench_r4_early2" > "$OUT/bench_r4_early2.log" 2>&1; show bench_r4_early2; }
  [ "$(left)" -gt 30 ] && WEFT_CUDA_FUSE_NORM=1 WEFT_CUDA_PROFILE=1 lim 30 "$W" bench --device cuda -m "$MODEL" --ctx 4096 --gen 16 -q --arms f16 --repeats 1 \
    > "$OUT/profile.log" 2>&1
  [ -f "$OUT/profile.log" ] && { echo "### profile"; grep -A45 "weft cuda profile" "$OUT/profile.log" | head -34; }
  echo "[call: $(($(date +%s) - T0)) s]"
  mkdir -p "$FINAL" && tar -czf "$FINAL/e2e.tar.gz" -C "$OUT" . && rm -rf "$OUT"
  exit 0
fi
WEFT_CUDA_GRAPH_STATS=1 lim 150 "$W" $B --arms f16,q8_0 --repeats 3 --energy --out "$OUT/bench_4k" > "$OUT/bench_4k.log" 2>&1
[ "${UNFUSED:-1}" = 1 ] && WEFT_CUDA_FUSE=0 lim 100 "$W" $B --arms f16 --repeats 3 --energy --out "$OUT/bench_4k_unfused" \
  > "$OUT/bench_4k_unfused.log" 2>&1
[ "${NOPDL:-1}" = 1 ] && WEFT_CUDA_PDL=0 lim 100 "$W" $B --arms f16 --repeats 3 --energy --out "$OUT/bench_4k_nopdl" > "$OUT/bench_4k_nopdl.log" 2>&1
[ "${PREFETCH:-1}" = 1 ] && WEFT_CUDA_PREFETCH=1 lim 100 "$W" $B --arms f16 --repeats 3 --energy --out "$OUT/bench_4k_pf" > "$OUT/bench_4k_pf.log" 2>&1
if [ -n "${BEFORE_SRC:-}" ]; then
  wait
  tail -3 "$OUT/build_before.log"
  [ -x "$BEFORE_SRC/build-before/weft" ] && lim 100 "$BEFORE_SRC/build-before/weft" $B --arms f16 --repeats 3 --energy \
    --out "$OUT/bench_4k_before" > "$OUT/bench_4k_before.log" 2>&1
fi
if [ "${SWITCHES:-0}" = 1 ]; then
  WEFT_CUDA_FUSE_MOE_DOWN=0 lim 100 "$W" $B --arms f16 --repeats 3 --out "$OUT/bench_4k_nodown" > "$OUT/bench_4k_nodown.log" 2>&1
  WEFT_CUDA_FUSE_ROUTE=1 lim 100 "$W" $B --arms f16 --repeats 3 --out "$OUT/bench_4k_route" > "$OUT/bench_4k_route.log" 2>&1
  WEFT_CUDA_MATVEC_ROWS=2 lim 100 "$W" $B --arms f16 --repeats 3 --out "$OUT/bench_4k_rows2" > "$OUT/bench_4k_rows2.log" 2>&1
  WEFT_CUDA_MATVEC_WIDE=0 lim 100 "$W" $B --arms f16 --repeats 3 --out "$OUT/bench_4k_nowide" > "$OUT/bench_4k_nowide.log" 2>&1
  [ "${SWITCHES_NONE:-0}" = 1 ] && WEFT_CUDA_FUSE_MOE_DOWN=0 WEFT_CUDA_FUSE_ROUTE=0 WEFT_CUDA_MATVEC_ROWS=2 WEFT_CUDA_MATVEC_WIDE=0 lim 100 "$W" $B --arms f16 --repeats 3 \
    --out "$OUT/bench_4k_none" > "$OUT/bench_4k_none.log" 2>&1
fi
[ "${ROWS1:-0}" = 1 ] && WEFT_CUDA_MATVEC_ROWS=1 lim 100 "$W" $B --arms f16 --repeats 3 --energy --out "$OUT/bench_4k_rows1" \
  > "$OUT/bench_4k_rows1.log" 2>&1
WEFT_CUDA_PROFILE=1 lim 80 "$W" bench --device cuda -m "$MODEL" --ctx 4096 --gen 16 -q --arms f16 --repeats 1 \
  > "$OUT/profile.log" 2>&1
[ "${PROFILE_UNFUSED:-1}" = 1 ] && WEFT_CUDA_FUSE=0 WEFT_CUDA_PROFILE=1 lim 80 "$W" bench --device cuda -m "$MODEL" --ctx 4096 --gen 16 -q --arms f16 \
  --repeats 1 > "$OUT/profile_unfused.log" 2>&1
# Kernel by kernel (Nsight Compute, when installed): the durations of graph-free decode steps'
# kernels (NCU_COUNT launches after NCU_SKIP; ncu-step.py keeps whole steps), per kernel name.
NCU=$(command -v ncu || ls /usr/local/cuda/bin/ncu 2>/dev/null | head -1)
if [ -n "$NCU" ] && [ "${NCU_STEP:-1}" = 1 ]; then
  seq 1 8 | tr '\n' ' ' > "$OUT/ids8.txt"
  WEFT_CUDA_GRAPHS=0 lim 150 "$NCU" --metrics gpu__time_duration.sum --csv --launch-skip "${NCU_SKIP:-2500}" \
    --launch-count "${NCU_COUNT:-2000}" "$W" generate --device cuda -m "$MODEL" --ids-file "$OUT/ids8.txt" -n 14 \
    --ignore-eos > "$OUT/ncu.csv" 2> "$OUT/ncu.log"
  python3 tools/gpu/ncu-step.py < "$OUT/ncu.csv" > "$OUT/ncu_step.md" 2>> "$OUT/ncu.log"
  echo "### ncu"; head -40 "$OUT/ncu_step.md"; tail -3 "$OUT/ncu.log"
fi
# Achieved DRAM bandwidth of the product kernels (NCU_BW=1): duration, DRAM bytes, grid, registers
# of NCU_BW_COUNT launches of the one-token products in graph-free decode steps (ncu-bw.py).
if [ -n "$NCU" ] && [ "${NCU_BW:-0}" = 1 ]; then
  seq 1 8 | tr '\n' ' ' > "$OUT/ids8.txt"
  WEFT_CUDA_GRAPHS=0 lim "${NCU_BW_S:-120}" "$NCU" --metrics \
    gpu__time_duration.sum,dram__bytes_read.sum,launch__grid_size,launch__registers_per_thread --csv \
    -k regex:"matvec|down_combine|matmul_kernel" --launch-skip "${NCU_BW_SKIP:-400}" --launch-count "${NCU_BW_COUNT:-250}" \
    "$W" generate --device cuda -m "$MODEL" --ids-file "$OUT/ids8.txt" -n 12 --ignore-eos > "$OUT/ncu_bw.csv" 2> "$OUT/ncu_bw.log"
  python3 tools/gpu/ncu-bw.py < "$OUT/ncu_bw.csv" > "$OUT/ncu_bw.md" 2>> "$OUT/ncu_bw.log"
  echo "### ncu bandwidth"; head -30 "$OUT/ncu_bw.md"; tail -3 "$OUT/ncu_bw.log"
fi
if [ -n "${EXTRA:-}" ]; then lim "${EXTRA_S:-120}" bash -c "$EXTRA" > "$OUT/extra.log" 2>&1; tail -40 "$OUT/extra.log"; fi

# The full 256-expert geometry, generated in host memory (70 GB) and uploaded: FULL=1.
if [ "${FULL:-0}" = 1 ]; then
  lim "${FULL_S:-200}" "$W" bench --device cuda --synthetic qwen3.5-35b-a3b --ctx 4096 --arms f16,q8_0 --repeats 2 \
    --gen 32 --energy -q --out "$OUT/bench_full" > "$OUT/bench_full.log" 2>&1
  tail -3 "$OUT/bench_full.log"
  [ "${FULL_PLAIN:-0}" = 1 ] && WEFT_CUDA_PDL=0 lim "${FULL_S:-200}" "$W" bench --device cuda \
    --synthetic qwen3.5-35b-a3b --ctx 4096 --arms f16 --repeats 2 --gen 32 --energy -q --out "$OUT/bench_full_plain" \
    > "$OUT/bench_full_plain.log" 2>&1
fi
for f in bench_4k bench_4k_before bench_4k_none bench_4k_nodown bench_4k_route bench_4k_rows2 bench_4k_nowide bench_4k_nopdl bench_4k_pf \
  bench_4k_unfused bench_4k_rows1 bench_full bench_full_plain; do
  [ -f "$OUT/$f/report.md" ] && { echo "### $f"; grep -E "decode|tok/s|^\|" "$OUT/$f/report.md" | head -20; }
done
grep "weft cuda graphs" "$OUT/bench_4k.log" | sort | uniq -c
for f in profile profile_unfused; do [ -f "$OUT/$f.log" ] && { echo "### $f"; grep -A45 "weft cuda profile" "$OUT/$f.log" | head -34; }; done
(command -v ncu || ls /usr/local/cuda/bin/ncu /opt/nvidia/nsight-compute/*/ncu) > "$OUT/ncu-where.txt" 2>&1
mkdir -p "$FINAL" && tar -czf "$FINAL/e2e.tar.gz" -C "$OUT" . && rm -rf "$OUT"
