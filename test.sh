#!/usr/bin/env bash
# The test suite on a fresh Debian machine: install what is missing, build, run every test.
set -euo pipefail
cd "$(dirname "$0")"
bash tools/install-deps.sh
bash tools/build.sh
# The llama.cpp peer (node-llama-cpp's prebuilt libraries, pinned in tools/peers/package-lock.json)
# for the interop tests; without npm or the registry those tests skip and say why.
if command -v npm >/dev/null 2>&1 && [ ! -f tools/peers/node_modules/node-llama-cpp/package.json ]; then
  (cd tools/peers && npm ci --no-audit --no-fund --silent) || echo "weft: could not install the llama.cpp peer; its tests will skip" >&2
fi
# The official openai client (pinned in tests/server/package-lock.json) for the `weft serve`
# tests (tests/server_test.cpp); without npm or the registry they skip and say why.
if command -v npm >/dev/null 2>&1 && [ ! -f tests/server/node_modules/openai/package.json ]; then
  (cd tests/server && npm ci --no-audit --no-fund --silent) || echo "weft: could not install the openai client; the server tests will skip" >&2
fi
cd build
ctest --output-on-failure -j"$(nproc)" --timeout 1200
