#!/usr/bin/env bash
# CI stage: the fast tests under AddressSanitizer + UndefinedBehaviorSanitizer, in a Debug build
# in ./build-asan (clang; any UB report fails the test: -fno-sanitize-recover=undefined).
# The slow suites (golden streams, determinism across thread counts, the long-running synth
# and fidelity checks) stay in the Release run of test.sh; the suites here are the ones that
# exercise parsers, loaders, kernels against their scalar twins, and the lab.
set -euo pipefail
cd "$(dirname "$0")/.."

bash tools/install-deps.sh clang libclang-rt-dev
# Debug (no optimisation, assertions on) with line tables only: sanitizer reports still name file
# and line, while full DWARF made the 30-odd statically linked test binaries several GB, and one
# CI run ran out of disk linking them. WEFT_CUDA=OFF: the Release stage compiles and links the
# CUDA backend; the tests here run on the CPU and would only carry its objects.
cmake -S . -B build-asan -DCMAKE_BUILD_TYPE=Debug -DCMAKE_CXX_COMPILER=clang++ -DWEFT_CUDA=OFF \
  "-DCMAKE_CXX_FLAGS=-fsanitize=address,undefined -fno-sanitize-recover=undefined -fno-omit-frame-pointer" \
  "-DCMAKE_CXX_FLAGS_DEBUG=-gline-tables-only" >/dev/null

# The test executables to run (tests/<name>.cpp): fixtures, kernels against their scalar twins,
# hostile input (bad_input_test also runs the weft binary), the tokenizer and the lab. Left to
# the Release run: golden_test and determinism_test (long strict-tier streams whose point is
# bit-identity, not memory safety) and synth_test (writes and reloads large synthetic models).
tests=(fixtures_test bad_input_test tokenizer_test chat_template_test compare_test stats_test matmul_test
       attention_quant_test hadamard_test kv_cache_test sampler_test bench_test fidelity_test
       batch_test gdn_chunked_test quant_blocks_test quant_matmul_test quant_repack_test host_weight_copy_test cpu_ops_parallel_test gguf_test gguf_names_test
       odr_test alignment_test invariants_test streaming_logits_test gguf_model_test weight_memory_test
       server_request_test server_scheduler_test)
cmake --build build-asan -j"$(nproc)" --target weft_cli "${tests[@]}"

# Leaks fail too; halt at the first report so its stack is the last thing in the log.
# (detect_stack_use_after_return=1 would catch more, at a cost in time and memory not yet measured.)
export ASAN_OPTIONS="detect_leaks=1:halt_on_error=1"
export UBSAN_OPTIONS="print_stacktrace=1:halt_on_error=1"
cd build-asan
regex="$(IFS='|'; echo "${tests[*]}")"
ctest --output-on-failure -j"$(nproc)" --timeout 1200 -L "^($regex)\$"
