#!/usr/bin/env bash
# Prepares a device lease (scripts/gpu_check.sh): the GPU machine has no
# package registry and none of our Debian build dependencies, so their
# .deb files are downloaded here into deps/debs, a folder git ignores
# (.git/info/exclude), to be carried with the tree (the device tool's
# `carry: ["deps"]`) and unpacked there (GPA_DEPS_DEBS=deps/debs). A fresh
# checkout lacks them: run this once per session before the lease.
set -euo pipefail
cd "$(dirname "$0")/.."
pkgs="libck-dev libck0 libopenblas-dev libopenblas0 libopenblas0-pthread libopenblas-pthread-dev
      libjansson-dev libjansson4 libgfortran5 libquadmath0"
mkdir -p deps/debs .git/info
grep -qx "deps/" .git/info/exclude 2>/dev/null || echo "deps/" >> .git/info/exclude
cd deps/debs
# shellcheck disable=SC2086
apt-get download $pkgs
ls -l
git -C ../.. status --short --ignored deps | head -n 3
