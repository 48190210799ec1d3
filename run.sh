#!/usr/bin/env bash
# The main job on a fresh Debian machine: install what is missing, build, and run the paired
# decode bench on the built-in default model (extra arguments go to `weft bench`).
set -euo pipefail
cd "$(dirname "$0")"
bash tools/install-deps.sh
bash tools/build.sh
exec ./build/weft bench "$@"
