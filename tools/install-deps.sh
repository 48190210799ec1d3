#!/usr/bin/env bash
# Installs the Debian packages weft needs to build and test, only those missing. Extra package
# names given as arguments are installed too (the CI sanitizer and fuzzing stages add clang and
# libclang-rt-dev, which the README's commands do not need).
set -euo pipefail
packages=(g++ cmake make nlohmann-json3-dev libcli11-dev libgtest-dev googletest xz-utils libcpp-httplib-dev pkg-config "$@")
missing=()
for p in "${packages[@]}"; do
  dpkg -s "$p" >/dev/null 2>&1 || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  echo "weft: installing ${missing[*]}" >&2
  SUDO=""
  [ "$(id -u)" -ne 0 ] && SUDO="sudo"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${missing[@]}" >/dev/null
fi
