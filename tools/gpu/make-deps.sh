#!/usr/bin/env bash
# Gathers what a build on the GPU machine needs and that machine lacks (it has CUDA, CMake and
# ninja but none of the Debian -dev packages): the header-only nlohmann/json and CLI11, and the
# googletest sources, copied from this machine's Debian packages into ./.devdeps (git-ignored
# through .git/info/exclude; ~2.5 MiB, well inside the device call's 64 MiB tree limit).
# Then, through the device tool: carry [".devdeps"] and run `bash tools/gpu/check.sh`.
set -euo pipefail
cd "$(dirname "$0")/../.."
bash tools/install-deps.sh >/dev/null
rm -rf .devdeps
mkdir -p .devdeps/include .devdeps/googletest
cp -r /usr/include/nlohmann /usr/include/CLI .devdeps/include/
cp -r /usr/src/googletest/googletest .devdeps/googletest/
rm -rf .devdeps/googletest/googletest/{docs,samples,test}
grep -qx '/.devdeps/' .git/info/exclude 2>/dev/null || echo '/.devdeps/' >> .git/info/exclude
du -sh .devdeps
