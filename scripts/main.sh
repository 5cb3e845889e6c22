#!/usr/bin/env bash
# The main job: set up, build, and run the workload on the default device
# (CUDA when a GPU and driver are present, else the host backend): the
# language-model training run, gpa-train-lm.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
build=${BUILD_DIR:-build}
# The byte-level language model (examples/train_lm.c, docs/training.md):
# a few minutes on 2 CPU cores by default; --steps N bounds it. (OpenBLAS's
# threads: the library sets them itself, docs/ops.md "BLAS threads".)
if [ -x "$build/examples/gpa-train-lm" ]; then
  exec "$build/examples/gpa-train-lm" "$@"
fi
exec "$build/examples/gpa-demo" "$@"
