#!/usr/bin/env bash
# The SASS-level view of the quantized decode-attention split kernel (issue 11), in one GPU-machine
# call: the disassembly of the pipelined head_dim-256 decode kernels (q8_0 and q4_0, K and V of one
# type) and an Nsight Compute profile of the default 32K call's split kernel for each type, with the
# per-instruction stall samples (source counters) exported as CSV, so the instruction count and the
# stalls of one 16-key sub-tile can be read on a machine without the profiler.
#
#   OUT=/some/dir bash tools/gpu/sass-profile.sh
#
# Environment: BUILD (build-gpu), OUT (gpu-out), WEFT_DEPS_DIR (./.devdeps: tools/gpu/make-deps.sh),
# DEPTH (32768), TYPES ("q8_0 q4_0").
# Files under $OUT: sass_<type>.txt.gz (cuobjdump -sass of the kernel), ncu_<type>.txt (details
# page), source_<type>.csv.gz (source page, SASS), summary.txt.
set -u
cd "$(dirname "$0")/../.."
BUILD=${BUILD:-build-gpu}
OUT=${OUT:-$PWD/gpu-out}
DEPS=${WEFT_DEPS_DIR:-$PWD/.devdeps}
DEPTH=${DEPTH:-32768}
mkdir -p "$OUT"
t0=$(date +%s)
stamp() { echo "[$(($(date +%s) - t0)) s] $*" | tee -a "$OUT/summary.txt"; }
nvidia-smi --query-gpu=name,clocks.max.sm --format=csv,noheader | tee -a "$OUT/summary.txt"
cmake -S . -B "$BUILD" -G Ninja -DCMAKE_BUILD_TYPE=Release -DWEFT_DEPS_DIR="$DEPS" > "$OUT/build.log" 2>&1 ||
  { tail -20 "$OUT/build.log"; exit 1; }
timeout 330 ninja -C "$BUILD" -j"$(nproc)" attention_cuda_bench >> "$OUT/build.log" 2>&1 ||
  { tail -40 "$OUT/build.log"; exit 1; }
rm -f "$OUT/build.log"
stamp built
NCU=$(command -v ncu || ls /usr/local/cuda/bin/ncu /opt/nvidia/nsight-compute/*/ncu 2>/dev/null | head -1)
# The kernels' mangled names: qkeys_kernel<256, 1, false, KT, VT, 2, false> (attention_common.cuh: kKvQ8 = 2, kKvQ4 = 3).
for ty in ${TYPES:-q8_0 q4_0}; do
  case "$ty" in q8_0) k=2; tu=kq8 ;; q4_0) k=3; tu=kq4 ;; *) continue ;; esac
  fn="_ZN4weft4cuda6detail5qkeys12qkeys_kernelILi256ELi1ELb0ELi${k}ELi${k}ELi2ELb0EEEvNS2_7QLaunchE"
  obj="$BUILD/CMakeFiles/weft_cuda.dir/src/kernels/cuda/attention_qkeys_${tu}.cu.o"
  cuobjdump -sass -fun "$fn" "$obj" > "$OUT/sass_$ty.txt" 2>&1
  stamp "sass $ty: $(grep -cE '^\s+/\*[0-9a-f]{4}\*/' "$OUT/sass_$ty.txt") instructions"
  gzip -f "$OUT/sass_$ty.txt"
  [ -n "$NCU" ] || continue
  # The bench's qkeys_kernel launches per depth (--repeats 1: a warm-up + 1 each): default 2,
  # forced key-parallel 2, forced 256-key splits 2, the parts table 8 = 14; the first depth is 8K,
  # so the measured default launch at 32K is #15.
  timeout 150 "$NCU" --clock-control none --import-source yes --section SpeedOfLight --section Occupancy \
    --section LaunchStats --section WarpStateStats --section InstructionStats --section SchedulerStats \
    --section SourceCounters --section MemoryWorkloadAnalysis -k "regex:qkeys_kernel" --launch-skip 15 -c 1 \
    -f -o "$OUT/rep_$ty" "$BUILD/attention_cuda_bench" --type "$ty" --max-depth "$DEPTH" --repeats 1 > "$OUT/ncu_run_$ty.log" 2>&1
  stamp "ncu $ty rc $?"
  tail -4 "$OUT/ncu_run_$ty.log" >> "$OUT/summary.txt"
  rm -f "$OUT/ncu_run_$ty.log"
  "$NCU" -i "$OUT/rep_$ty.ncu-rep" --page details > "$OUT/ncu_$ty.txt" 2>&1
  "$NCU" -i "$OUT/rep_$ty.ncu-rep" --page source --csv --print-source sass > "$OUT/source_$ty.csv" 2>&1 ||
    "$NCU" -i "$OUT/rep_$ty.ncu-rep" --page source --csv > "$OUT/source_$ty.csv" 2>&1
  stamp "source page $ty: $(wc -l < "$OUT/source_$ty.csv") lines"
  gzip -f "$OUT/source_$ty.csv"
  rm -f "$OUT/rep_$ty.ncu-rep"
  grep -E "Duration|Executed Instructions |Registers Per|Achieved Occupancy|Issue Slots Busy|Warp Cycles Per Issued|DRAM Throughput" \
    "$OUT/ncu_$ty.txt" | tee -a "$OUT/summary.txt"
done
ls -la "$OUT"
