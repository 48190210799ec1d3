#!/usr/bin/env bash
# Re-records tests/data/golden/golden.json from the current code (an explicit decision: the
# golden values freeze the strict f16 tier bit for bit). Usage: tools/record_golden.sh [build-dir]
set -euo pipefail
cd "$(dirname "$0")/.."
build="${1:-build}"
cmake --build "$build" --target golden_test -j2
rm -f tests/data/golden/golden.json
WEFT_RECORD_GOLDEN=1 "$build/golden_test"
echo "recorded tests/data/golden/golden.json; review the diff before committing"
