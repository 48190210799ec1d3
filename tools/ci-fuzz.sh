#!/usr/bin/env bash
# CI stage: runs every libFuzzer target in fuzz/ for a bounded time, starting from its committed
# seed corpus (fuzz/corpus/<name>/), and fails on any crash, sanitizer report, leak, timeout or
# out-of-memory. Builds with clang into ./build-fuzz (-DWEFT_FUZZ=ON; see fuzz/README.md).
#
#   bash tools/ci-fuzz.sh                  # every target, WEFT_FUZZ_SECONDS (default 60) each
#   bash tools/ci-fuzz.sh tokenizer_fuzz   # only the named targets
set -euo pipefail
cd "$(dirname "$0")/.."
seconds="${WEFT_FUZZ_SECONDS:-60}"
jobs="$(nproc)"

# clang and its sanitizer/libFuzzer runtimes (libclang-rt-dev) are only needed by these stages.
bash tools/install-deps.sh clang libclang-rt-dev
# Release (-O2) plus the sanitizers: fuzzing wants many executions per second, and the
# sanitizers see the same bugs at -O2. BUILD_TESTING=OFF: the tests are built elsewhere;
# WEFT_CUDA=OFF: the loaders and parsers fuzzed here are host code.
cmake -S . -B build-fuzz -DCMAKE_BUILD_TYPE=Release -DCMAKE_CXX_COMPILER=clang++ \
  -DWEFT_FUZZ=ON -DBUILD_TESTING=OFF -DWEFT_CUDA=OFF >/dev/null
cmake --build build-fuzz -j"$jobs" --target fuzz_all

targets=("$@")
if [ ${#targets[@]} -eq 0 ]; then
  for src in fuzz/*_fuzz.cpp; do targets+=("$(basename "$src" .cpp)"); done
fi

# Each run gets a working corpus of its own (seeds copied in, new inputs added there, never into
# the repository) and a log; crash inputs land in build-fuzz/artifacts/.
work=build-fuzz/fuzz-work
rm -rf "$work" && mkdir -p "$work" build-fuzz/artifacts
run_one() {
  local name=$1 seconds=$2 work=$3
  local name_short=${name%_fuzz}
  mkdir -p "$work/$name/corpus"
  cp fuzz/corpus/"$name_short"/* "$work/$name/corpus/" 2>/dev/null || true
  # -rss_limit_mb: loaders must not let a small file make us allocate gigabytes;
  # -timeout: no single input may take 10 s (a hang or a quadratic blow-up).
  if build-fuzz/fuzz/"$name" -max_total_time="$seconds" -rss_limit_mb=2048 -timeout=10 \
       -print_final_stats=1 -artifact_prefix=build-fuzz/artifacts/"$name"- \
       "$work/$name/corpus" >"$work/$name/log" 2>&1; then
    echo "fuzz: $name ok ($(grep -ho 'stat::number_of_executed_units: *[0-9]*' "$work/$name/log" | grep -o '[0-9]*$') runs in ${seconds} s)"
  else
    echo "fuzz: $name FAILED; end of its log:"
    tail -n 60 "$work/$name/log"
    return 1
  fi
}
export -f run_one

# Two cores run two fuzzers at a time; each target is single-process.
status=0
printf '%s\n' "${targets[@]}" | xargs -P "$jobs" -I{} bash -c 'run_one "$@"' _ {} "$seconds" "$work" || status=1
if [ "$status" -ne 0 ]; then
  echo "fuzz: failures; reproduce with build-fuzz/fuzz/<name> build-fuzz/artifacts/<name>-crash-..." >&2
  echo "fuzz: then add the input to fuzz/corpus/<name>/ and a regression test (fuzz/README.md)" >&2
fi
exit "$status"
