#!/usr/bin/env bash
# Installs what the build needs from Debian packages (when run as root) and
# configures + builds into ${BUILD_DIR:-build}. Nothing is downloaded any
# other way. Extra arguments go to cmake's configure step.
set -euo pipefail
cd "$(dirname "$0")/.."

pkgs=(cmake make gcc g++ libck-dev libopenblas-dev libjansson-dev)
missing=()
for p in "${pkgs[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
  if [ "$(id -u)" = 0 ]; then
    echo "setup: installing ${missing[*]}"
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq
    apt-get install -y -qq "${missing[@]}" >/dev/null
  else
    echo "setup: missing Debian packages: ${missing[*]} (run as root to install them)" >&2
    exit 1
  fi
fi

build=${BUILD_DIR:-build}
jobs=$(nproc 2>/dev/null || echo 2)
cmake -S . -B "$build" -DCMAKE_BUILD_TYPE=${BUILD_TYPE:-RelWithDebInfo} "$@" >"$build.configure.log" 2>&1 || {
  cat "$build.configure.log"; exit 1; }
grep -E "^-- gpuactor:" "$build.configure.log" || true
cmake --build "$build" -j"$jobs" 2>&1 | grep -E "warning|error|Error" || true
cmake --build "$build" -j"$jobs" >/dev/null
