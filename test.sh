#!/usr/bin/env bash
# The test suite on a fresh Debian machine: install what is missing, build, run every test.
set -euo pipefail
cd "$(dirname "$0")"
bash tools/install-deps.sh
bash tools/build.sh
cd build
ctest --output-on-failure -j"$(nproc)" --timeout 1200
