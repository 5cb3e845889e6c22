#!/usr/bin/env bash
# Installs what the build needs from Debian packages (when run as root) and
# configures + builds into ${BUILD_DIR:-build}. Nothing is downloaded any
# other way. Extra arguments go to cmake's configure step.
set -euo pipefail
cd "$(dirname "$0")/.."

pkgs=(cmake make gcc g++ libck-dev libopenblas-dev libjansson-dev valgrind clang libclang-rt-14-dev)
# The bindings' tests (bindings/python, bindings/erlang) and the install
# test (pkg-config) use these; without them those tests are skipped, so they
# are installed when possible but not required. python3-venv: the pip
# install test's fresh environment; python3-torch (1.13, CPU; ~80 MB, about
# 2 minutes to install): gpuactor.torch's tests.
optional=(python3-numpy python3-pytest python3-venv pkgconf python3-torch erlang-dev erlang-eunit elixir)
optional+=(libopenmpi-dev openmpi-bin) # collectives: the MPI module and the comm_mpi test (skipped without)
installed() { dpkg-query -W -f='${Status}' "$1" 2>/dev/null | grep -q "install ok installed"; }
missing=() missing_opt=()
for p in "${pkgs[@]}"; do installed "$p" || missing+=("$p"); done
for p in "${optional[@]}"; do installed "$p" || missing_opt+=("$p"); done
if ((${#missing[@]} + ${#missing_opt[@]})); then
  if [ "$(id -u)" = 0 ]; then
    echo "setup: installing ${missing[*]} ${missing_opt[*]}"
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq
    apt-get install -y -qq "${missing[@]}" >/dev/null
    if ((${#missing_opt[@]})); then
      apt-get install -y -qq "${missing_opt[@]}" >/dev/null ||
        echo "setup: could not install ${missing_opt[*]}: the binding tests will be skipped" >&2
    fi
  elif ((${#missing[@]})); then
    echo "setup: missing Debian packages: ${missing[*]} (run as root to install them)" >&2
    exit 1
  else
    echo "setup: optional packages missing (binding tests skipped): ${missing_opt[*]}" >&2
  fi
fi

build=${BUILD_DIR:-build}
jobs=$(nproc 2>/dev/null || echo 2)
mkdir -p "$build"
cmake -S . -B "$build" -DCMAKE_BUILD_TYPE=${BUILD_TYPE:-RelWithDebInfo} "$@" >"$build/configure.log" 2>&1 || {
  cat "$build/configure.log"; exit 1; }
grep -E "^-- gpuactor:" "$build/configure.log" || true
cmake --build "$build" -j"$jobs" 2>&1 | grep -E "warning|error|Error" || true
cmake --build "$build" -j"$jobs" >/dev/null
