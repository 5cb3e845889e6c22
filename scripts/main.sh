#!/usr/bin/env bash
# The main job: set up, build, and run the workload on the default device
# (CUDA when a GPU and driver are present, else the host backend).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
build=${BUILD_DIR:-build}
if [ -x "$build/examples/gpa-train-mlp" ]; then
  exec "$build/examples/gpa-train-mlp" "$@"
fi
exec "$build/examples/gpa-demo" "$@"
